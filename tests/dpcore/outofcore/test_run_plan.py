"""``python -m dpcore run-plan``: a saved plan re-run on the full table as a batch job, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.errors import DataError, ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import kmeans_steps, run_plan
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import ApproxDP, PureDP
from dpcore.releases import make_release
from dpcore.steps import DropMissing, PrepStep
from tests.dpcore.outofcore.test_clustering import BOUNDS, table
from tests.paths import ROOT


def kmeans_plan(
    mechanism: str,
    fingerprint: str,
    preparation: tuple[PrepStep, ...],
    params: dict | None = None,
    seed: int | None = None,
) -> ReleasePlan:
    """A pure eps-1 plan of ``mechanism`` (3 clusters unless ``params`` say otherwise) on the ``people``
    table; a demo plan with ``seed``, else a secure one."""
    return ReleasePlan(
        domain="kmeans",
        mechanism=mechanism,
        epsilon=1.0,
        policy=PureDP(1.0),
        dataset_name="people",
        fingerprint=fingerprint,
        params={"n_clusters": 3} if params is None else params,
        preparation=preparation,
        mode="secure" if seed is None else "demo",
        seed=seed,
    )


def dashboard_release(
    tmp_path: Path,
    df: pd.DataFrame,
    mode: str = "demo",
    *,
    mechanism: str = "dp_lloyd",
    params: dict | None = None,
    seed: int = 7,
    request_id: str = "dash-1",
) -> tuple[dict, object]:
    """A release of ``mechanism`` (3 clusters unless ``params`` say otherwise; ``seed`` in demo mode) made as
    the dashboard makes it (in memory) on a ledger of its own under ``request_id``; its manifest and it."""
    cleaning = [DropMissing(("a",), int(df["a"].isna().sum()))]
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    steps = preparation_steps(cleaning, prep)
    plan = kmeans_plan(mechanism, prep.fingerprint, steps, params, seed if mode == "demo" else None)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dashboard.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    rel = make_release(
        ledger,
        plan,
        KMeansInputs.from_prepared(prep),
        request_id=request_id,
        user="u",
        artifacts_dir=tmp_path / "dash-artifacts",
        name="kmeans",
    )
    return rel.manifest, rel


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dpcore", "run-plan", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


def people_table(rows: int) -> pd.DataFrame:
    """``table(rows)`` with ``a`` missing on rows 4 and 9, the rows :func:`dashboard_release`'s drop step
    removes."""
    df = table(rows)
    df.loc[[4, 9], "a"] = np.nan
    return df


def people_source(tmp_path: Path, rows: int, parts: bool = False) -> tuple[pd.DataFrame, Path]:
    """:func:`people_table` written as ``people.parquet``, or with ``parts`` as a ``people`` folder of two
    Parquet parts (its halves); the table and the path a job reads."""
    df = people_table(rows)
    if not parts:
        path = tmp_path / "people.parquet"
        df.to_parquet(path, index=False)
        return df, path
    folder = tmp_path / "people"
    folder.mkdir()
    df.iloc[: rows // 2].to_parquet(folder / "part-0.parquet", index=False)
    df.iloc[rows // 2 :].to_parquet(folder / "part-1.parquet", index=False)
    return df, folder


def approx_plan(manifest: dict, mechanism: str) -> ReleasePlan:
    """A demo (eps 1, delta 1e-6) plan of ``mechanism`` with 3 clusters on the table and preparation of the
    release ``manifest``."""
    base = ReleasePlan.from_manifest(manifest)
    return ReleasePlan(
        domain="kmeans",
        mechanism=mechanism,
        epsilon=1.0,
        delta=1e-6,
        policy=ApproxDP(1.0, 1e-6),
        dataset_name="people",
        fingerprint=base.fingerprint,
        params={"n_clusters": 3},
        preparation=base.preparation,
        mode="demo",
        seed=3,
    )


def imputed_plan(df: pd.DataFrame, mechanism: str, params: dict) -> ReleasePlan:
    """A demo plan of ``mechanism`` on ``df`` whose preparation fills missing values with medians read from
    the data (a batch job cannot replay it)."""
    imputed = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="median")
    return kmeans_plan(mechanism, imputed.fingerprint, preparation_steps([], imputed), params, seed=1)


@pytest.fixture
def source(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    return people_source(tmp_path, 2000)


def test_run_plan_releases_the_dashboard_s_release_once_with_the_same_files(source, tmp_path: Path) -> None:
    df, path = source
    manifest, dash = dashboard_release(tmp_path, df)
    plan_file = tmp_path / "plan-manifest.json"
    plan_file.write_text(json.dumps(manifest))
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    plan = ReleasePlan.from_manifest(manifest)
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out", "--user", "batch")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("released: request dash-1")
    ledger = Ledger(url)
    status = ledger.budget(plan.account)
    assert status is not None and status.epsilon_spent == 1.0
    record = ledger.release_by_request("dash-1")
    assert record is not None and record.user == "batch" and record.dataset_fingerprint == plan.fingerprint
    # the same files, with the same released numbers (demo seed): only time and user differ
    from dpcore.artifacts import load_artifacts

    batch_files = load_artifacts(record.artifact_path)
    assert sorted(batch_files) == sorted(dash.files)
    csv = next(k for k in batch_files if k.endswith(".csv"))
    assert batch_files[csv] == dash.files[csv]
    batch_manifest = json.loads(batch_files[csv.replace(".csv", "-manifest.json")])
    for key in ("time", "user"):
        batch_manifest.pop(key), manifest.pop(key)
    assert batch_manifest == json.loads(json.dumps(manifest))
    # the same request again spends nothing
    again = cli(*args)
    assert again.returncode == 0 and again.stdout.startswith("already released (nothing spent)")
    assert Ledger(url).budget(plan.account).epsilon_spent == 1.0


def test_run_plan_refuses_another_table_and_spends_nothing(source, tmp_path: Path) -> None:
    df, path = source
    manifest, _ = dashboard_release(tmp_path, df)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"manifest": manifest, "data": []}))  # the .json bundle works too
    other = tmp_path / "other.parquet"
    df.assign(b=df["b"] + 1e-9).to_parquet(other, index=False)
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    plan = ReleasePlan.from_manifest(manifest)
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    out = cli(plan_file, "--source", other, "--ledger", url, "--artifacts", tmp_path / "batch")
    assert out.returncode == 2
    assert "fingerprint" in out.stderr and "not the table the plan was made on" in out.stderr
    assert "Traceback" not in out.stderr
    assert Ledger(url).budget(plan.account).epsilon_spent == 0.0
    missing = cli(tmp_path / "nope.json", "--source", path, "--ledger", url)
    assert missing.returncode == 2 and "Cannot read the plan" in missing.stderr


def test_a_plan_without_request_id_gets_one_from_its_key(source, tmp_path: Path) -> None:
    df, path = source
    manifest, _ = dashboard_release(tmp_path, df, mode="secure")
    plan = ReleasePlan.from_manifest(manifest)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    kw = {"ledger": ledger, "artifacts_dir": tmp_path / "batch", "user": "batch"}
    first = run_plan(plan.to_manifest(), path, **kw)
    again = run_plan(plan.to_manifest(), path, **kw)
    assert first.record.request_id == f"plan-{plan.key[:32]}" and again.replayed
    assert first.manifest["sampling_mode"] == "secure"
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def test_preparation_that_cannot_be_replayed_is_refused(source, tmp_path: Path) -> None:
    df, path = source
    manifest, _ = dashboard_release(tmp_path, df)
    plan = ReleasePlan.from_manifest(manifest)
    assert kmeans_steps(plan) == (BOUNDS, "minmax", ["a"])
    mcmc = kmeans_plan("dp_lloyd_mcmc", plan.fingerprint, plan.preparation)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    with pytest.raises(ParameterError, match="reads the rows in memory and the table has 1,998 rows"):
        run_plan(mcmc.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path, user="u", memory_rows=100)
    demo = imputed_plan(df, "dp_lloyd", {"n_clusters": 3})
    assert demo.fingerprint == plan.fingerprint
    with pytest.raises(ParameterError, match="read values from the data"):
        run_plan(demo.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path, user="u")
    with pytest.raises(DataError, match="No file or folder"):
        run_plan(manifest, tmp_path / "x.parquet", ledger=ledger, artifacts_dir=tmp_path, user="u")


@pytest.mark.spark
@pytest.mark.slow
def test_run_plan_on_spark_gives_the_dashboard_s_release(source, tmp_path: Path, spark) -> None:
    df, path = source
    manifest, dash = dashboard_release(tmp_path, df)
    plan = ReleasePlan.from_manifest(manifest)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    rel = run_plan(
        manifest, path, ledger=ledger, artifacts_dir=tmp_path / "batch", user="u", engine="spark", spark=spark
    )
    pd.testing.assert_frame_equal(rel.table, dash.table, check_exact=True)
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def test_run_plan_releases_a_colored_plan_out_of_core(source, tmp_path: Path) -> None:
    df, path = source
    manifest, _ = dashboard_release(tmp_path, df)
    plan = approx_plan(manifest, "colored")
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0, delta=1e-3)
    rel = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="u")
    assert len(rel.table) == 3 and "clustering" in rel.manifest["details"]
    assert rel.manifest["is_local"] and rel.manifest["demo"]
    status = ledger.budget(plan.account)
    assert status.epsilon_spent == 1.0 and status.delta_spent == 1e-6
