"""DPT by passes on Spark: the same release as in memory (and so as on DuckDB) with the same demo seed, over
several person ranges whose blocks cut inside persons' rows, with a trip column and naive times read in a
stated zone; a batch job with --engine spark gives the dashboard's release."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpcore.mechanisms import Sampler
from dpcore.trajectory.outofcore import SparkTrajectories
from dpcore.trajectory.prepare import parse_times
from dpcore.trajectory.registry import TRAJECTORIES, TrajectoryInputs
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def fixes() -> pd.DataFrame:
    return road_trips(120, seed=4)


def test_the_spark_release_is_the_in_memory_release(tmp_path: Path, fixes: pd.DataFrame, spark) -> None:
    """Three passes over two person ranges; the cap's keys drawn on the driver, in the persons' order."""
    table = fixes.copy()
    table["time"] = table.time.dt.tz_convert("Europe/Paris").dt.strftime("%Y-%m-%d %H:%M:%S.%f")  # naive
    path = tmp_path / "fixes.parquet"
    table.to_parquet(path)
    memory = TrajectoryInputs(
        table.person.to_numpy(),
        parse_times(table.time, "Europe/Paris"),
        table.lat.to_numpy(),
        table.lon.to_numpy(),
        table.trip.to_numpy(),
        DEFAULT_REGION,
    )
    columns = {"person": "person", "time": "time", "lat": "lat", "lon": "lon", "trip": "trip"}
    frame = spark.read.parquet(str(path))
    engine = SparkTrajectories(
        frame, columns, DEFAULT_REGION, tz="Europe/Paris", block_rows=2500, partitions=2
    )
    spec = TRAJECTORIES["dpt"]
    params = spec.validate_params({"max_trips": 1, "max_fixes": 30})
    a = spec.release(memory, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
    b = spec.release(engine, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.diagnostics == b.diagnostics and a.details == b.details
    assert a.diagnostics["trips_over_cap"] > 0  # keys were drawn and handed to the partitions
    assert engine.scans == 3
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"  # the zone was the release's only


def test_a_spark_batch_job_releases_the_dashboard_s_trips(tmp_path: Path, fixes: pd.DataFrame, spark) -> None:
    """run-plan --engine spark on the Parquet file gives the page's release (demo seed), debited once."""
    from dpcore.data import fingerprint, load_table
    from dpcore.ledger import Ledger
    from dpcore.outofcore.run_plan import run_plan
    from dpcore.plan import ReleasePlan
    from dpcore.policy import PureDP
    from dpcore.report import make_release
    from dpcore.trajectory.plan_steps import columns_step, limits_step
    from dpcore.trajectory.registry import scope_of

    table = fixes[fixes.person < "p000040"].copy()  # 40 persons
    table["time"] = table.time.dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    path = tmp_path / "fixes.parquet"
    table.to_parquet(path)
    loaded = load_table(path.read_bytes(), filename=path.name)
    steps = (columns_step("person", "time", "lat", "lon", None), limits_step(DEFAULT_REGION, 1200.0, 70.0))
    plan = ReleasePlan(
        "trajectory",
        "markov_grid",
        1.0,
        PureDP(1.0),
        "fixes",
        fingerprint(loaded),
        params={"max_trips": 2, "max_fixes": 30},
        preparation=steps,
        scope=scope_of(2, 30),
        mode="demo",
        seed=3,
    )
    times = parse_times(loaded.time)
    memory = TrajectoryInputs(
        loaded.person.to_numpy(), times, loaded.lat.to_numpy(), loaded.lon.to_numpy(), None, DEFAULT_REGION
    )
    dash_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash_ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(dash_ledger, plan, memory, request_id="dash", user="u", artifacts_dir=tmp_path / "d")
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    batch = run_plan(
        dash.manifest,
        path,
        ledger=ledger,
        artifacts_dir=tmp_path / "b",
        user="u",
        engine="spark",
        spark=spark,
    )
    pd.testing.assert_frame_equal(batch.table, dash.table)
    assert ledger.budget(plan.account).epsilon_spent == 1.0
