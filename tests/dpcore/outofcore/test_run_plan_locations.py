"""``run-plan`` on a location plan: the density grids, mean positions and hotspots re-run on the whole table
out of core, with the dashboard's rows dropped, columns, per-user cap and public region, give the
dashboard's release (the grids byte for byte; the means and hotspots up to the engine's rounding)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import fingerprint, load_table
from dpcore.errors import ParameterError
from dpcore.ledger import Ledger
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region
from dpcore.location.plan_steps import LocationColumns, PublicRegion, read_location_steps
from dpcore.location.registry import LocationInputs
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan
from dpcore.policy import GeoIndistinguishability, Policy, PureDP
from dpcore.releases import make_release
from dpcore.steps import DropMissing, PrepStep
from tests.dpcore.outofcore.test_location_aggregates import RTOL, assert_close
from tests.dpcore.outofcore.test_locations import visits
from tests.dpcore.outofcore.test_run_plan import cli

# bounds that :g would round (24.396308 -> 24.3963): the plan must carry them exactly
REGION = Region(24.396308, 49.384358, -124.848974, -66.885444)


def visits_source(tmp_path: Path, rows: int) -> tuple[pd.DataFrame, Path]:
    """``visits(rows)`` with the dashboard's column names and ``Latitude`` missing on rows 3 and 11 (dropped
    by the plan's drop step), written as ``visits.parquet``; the table and its path."""
    df = visits(rows).rename(columns={"lat": "Latitude", "lon": "Longitude", "user": "person id"})
    df.loc[[3, 11], "Latitude"] = np.nan
    path = tmp_path / "visits.parquet"
    df.to_parquet(path, index=False)
    return df, path


@pytest.fixture
def source(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    return visits_source(tmp_path, 3000)


def location_plan(
    path: Path,
    mechanism: str,
    steps: tuple[PrepStep, ...] | None = None,
    m: int = 2,
    neighbours: str = "unbounded",
    params: dict | None = None,
    policy: Policy | None = None,
) -> ReleasePlan:
    if steps is None:
        steps = (
            DropMissing(("Latitude",), 2),
            LocationColumns("Latitude", "Longitude", "person id"),
            PublicRegion.of(REGION),
        )
    return ReleasePlan(
        domain="location",
        mechanism=mechanism,
        epsilon=1.0,
        policy=policy or PureDP(1.0),
        dataset_name="visits",
        fingerprint=fingerprint(load_table(path)),
        params={**({"neighbours": neighbours} if params is None else params), "max_per_user": m},
        preparation=steps,
        mode="demo",
        seed=21,
        scope=scope_sentence(True, m),
    )


def dashboard(df: pd.DataFrame, plan: ReleasePlan, tmp_path: Path):
    clean = df.dropna(subset=["Latitude"])
    inputs = LocationInputs(
        clean["Latitude"].to_numpy(),
        clean["Longitude"].to_numpy(),
        clean["person id"].astype(str).to_numpy(),
        REGION,
    )
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    return make_release(
        ledger,
        plan,
        inputs,
        request_id="dash-loc",
        user="u",
        artifacts_dir=tmp_path / "dash",
        name="location",
    )


def test_the_steps_round_trip_exactly() -> None:
    steps = [LocationColumns('lat "deg"', "lon, deg", None), PublicRegion.of(REGION)]
    assert read_location_steps(steps) == ('lat "deg"', "lon, deg", None, REGION)
    assert "24.396308" in steps[1].text
    with pytest.raises(ParameterError, match="Locations page"):
        read_location_steps([PublicRegion(24.3963, 49.3844, -124.849, -66.8854)])


@pytest.mark.parametrize("mechanism", ["uniform_grid", "adaptive_grid"])
def test_run_plan_gives_the_dashboard_s_grid(source, tmp_path: Path, mechanism: str) -> None:
    df, path = source
    plan = location_plan(path, mechanism)
    dash = dashboard(df, plan, tmp_path)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dash.manifest))
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out", "--user", "batch")
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    record = Ledger(url).release_by_request("dash-loc")
    from dpcore.artifacts import load_artifacts

    files = load_artifacts(record.artifact_path)
    csv = next(k for k in files if k.endswith(".csv"))
    assert files[csv] == dash.files[csv]  # the same noisy counts, byte for byte (demo seed)
    assert Ledger(url).budget(plan.account).epsilon_spent == 1.0


def test_mechanisms_that_read_rows_in_memory_and_old_plans_are_refused(source, tmp_path: Path) -> None:
    _, path = source
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    pri = location_plan(path, "prilocation", params={"hs_m": 300_000.0, "n_clusters": 5, "grid_size": 10})
    with pytest.raises(ParameterError, match="reads the rows in memory and the table has 2,999 rows"):
        run_plan(pri.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path, user="u", memory_rows=100)
    old = (PublicRegion(24.3963, 49.3844, -124.849, -66.8854),)  # no columns: a plan made before them
    plan = location_plan(path, "uniform_grid", steps=old)
    ledger.set_budget(plan.account, epsilon=5.0)
    with pytest.raises(ParameterError, match="location columns"):
        run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path, user="u")
    assert ledger.budget(plan.account).epsilon_spent == 0.0


#: The aggregate location mechanisms with the parameters of their plans.
AGGREGATES = {
    "dp_mean": {"neighbours": "bounded"},
    "blowfish_mean": {"theta_m": 50_000.0},
    "dp_hotspots": {"hotspot_k": 4, "neighbours": "unbounded"},
    "blowfish_hotspots": {"hotspot_k": 4, "theta_m": 50_000.0},
}


@pytest.mark.parametrize("mechanism", [*AGGREGATES, "uniform_grid", "adaptive_grid"])
def test_batch_jobs_offer_the_grids_means_and_hotspots(source, mechanism: str) -> None:
    _, path = source
    assert batch_refusal(location_plan(path, mechanism, params=AGGREGATES.get(mechanism))) is None


def test_batch_jobs_refuse_planar_laplace_and_prilocation_only_above_the_memory_limit(source) -> None:
    _, path = source
    kept = (LocationColumns("Latitude", "Longitude", "person id"), PublicRegion.of(REGION))  # no row dropped
    geo_policy = GeoIndistinguishability(0.001, 1000.0)
    geo = location_plan(path, "planar_laplace", kept, params={"radius_m": 1000.0}, policy=geo_policy)
    pri_params = {"hs_m": 300_000.0, "n_clusters": 5, "grid_size": 10}
    pri = location_plan(path, "prilocation", kept, params=pri_params)
    for plan in (geo, pri):
        assert batch_refusal(plan) is None and batch_refusal(plan, rows=3000) is None
        assert "reads the rows in memory" in str(batch_refusal(plan, rows=10**9))
        dropping = replace(plan, preparation=location_plan(path, "uniform_grid").preparation)
        assert batch_refusal(dropping, rows=10**9) is None  # the job counts the rows left, then decides


@pytest.mark.parametrize("mechanism", list(AGGREGATES))
def test_run_plan_gives_the_dashboard_s_mean_and_hotspots(source, tmp_path: Path, mechanism: str) -> None:
    """The whole table out of core: the dashboard's released table and published details up to the
    engine's rounding (1e-9 relative), one debit of the plan's eps under the dashboard's request id."""
    df, path = source
    plan = location_plan(path, mechanism, params=AGGREGATES[mechanism])
    dash = dashboard(df, plan, tmp_path)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    batch = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert batch.record.request_id == "dash-loc" and not batch.replayed
    assert list(batch.table.columns) == list(dash.table.columns)
    for col in dash.table.columns:
        np.testing.assert_allclose(batch.table[col], dash.table[col], rtol=RTOL, atol=0.0, err_msg=col)
    assert_close(dash.manifest["details"], batch.manifest["details"])
    assert batch.manifest["details"]["max_per_user"] == 2
    assert ledger.budget(plan.account).epsilon_spent == 1.0
