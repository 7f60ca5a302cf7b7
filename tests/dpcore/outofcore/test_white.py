"""White Gaussian noise out of core (Ravi, Scaglione & Peisert 2021): under the clustering it used, the
covariance is the in-memory one (largest leave-one-out shift, over all clusters or per cluster), every row's
constraint holds, a batch job releases it, and bad input is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import white_noise_covariance, white_per_cluster_noise_covariance
from dpcore.kmeans.registry import release_centroids
from dpcore.ledger import Ledger
from dpcore.mechanisms import Sampler
from dpcore.metrics import nearest_sets
from dpcore.outofcore.run_plan import run_plan
from dpcore.outofcore.white import white_release
from tests.dpcore.outofcore.test_clustering import colored_case, table
from tests.dpcore.outofcore.test_run_plan import approx_plan, dashboard_release

IN_MEMORY = {"white": white_noise_covariance, "white_per_cluster": white_per_cluster_noise_covariance}


@pytest.mark.parametrize("key", ["white", "white_per_cluster"])
@pytest.mark.parametrize("sample_rows", [6000, 300])
def test_white_out_of_core_is_the_in_memory_covariance_of_its_clustering(
    tmp_path: Path, key, sample_rows
) -> None:
    feat, inputs = colored_case(tmp_path)
    per_cluster = key == "white_per_cluster"
    run = white_release(
        feat,
        key,
        3,
        per_cluster=per_cluster,
        epsilon=1.0,
        delta=1e-6,
        random_state=4,
        sample_rows=sample_rows,
    )
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    mem = IN_MEMORY[key](inputs.X, labels, 1.0, 1e-6)
    np.testing.assert_allclose(run.covariance.centers, mem.centers, rtol=0, atol=1e-12)
    for got, want in zip(run.covariance.unit_eigenvalues, mem.unit_eigenvalues, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0  # every row's shift is covered
    assert run.output.table.columns[0] == "cluster" and len(run.output.table) == 3
    if key == "white":
        assert len({float(e[0]) for e in run.covariance.unit_eigenvalues}) == 1  # one sphere for all


def test_white_out_of_core_refusals(tmp_path: Path) -> None:
    feat, _ = colored_case(tmp_path)
    with pytest.raises(ParameterError, match="δ > 0"):
        white_release(feat, "white", 3, per_cluster=False, epsilon=1.0, delta=0.0, random_state=1)
    with pytest.raises(ParameterError, match="secure sampling"):
        white_release(
            feat, "white", 3, per_cluster=False, epsilon=1.0, delta=1e-6, random_state=Sampler.diagnostic(1)
        )


def test_the_registry_releases_white_from_a_table_and_a_batch_job_from_a_plan(tmp_path: Path) -> None:
    feat, _ = colored_case(tmp_path)
    params = {"n_clusters": 3, "calibration": "analytic"}
    out = release_centroids(
        "white_per_cluster", feat, epsilon=1.0, delta=1e-6, random_state=Sampler(2), params=params
    )
    assert len(out.table) == 3 and "clustering" in out.details
    df = table(2000)
    path = tmp_path / "people.parquet"
    df.to_parquet(path, index=False)
    manifest, _ = dashboard_release(tmp_path, df)
    plan = approx_plan(manifest, "white")
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0, delta=1e-3)
    rel = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="u")
    assert len(rel.table) == 3 and rel.manifest["is_local"] and rel.manifest["mechanism"] == "white"
    status = ledger.budget(plan.account)
    assert status.epsilon_spent == 1.0 and status.delta_spent == 1e-6
