"""DPT by passes on Spark: a batch job with --engine spark gives the dashboard's in-memory release (demo
seed) over several person ranges whose blocks cut inside persons' rows, with a trip column and naive times
read in a stated zone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpcore.data import fingerprint, load_table
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan
from dpcore.policy import PureDP
from dpcore.releases import make_release
from dpcore.trajectory import outofcore
from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns
from dpcore.trajectory.prepare import parse_times
from dpcore.trajectory.registry import TrajectoryInputs, scope_of
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips

pytestmark = pytest.mark.spark


def test_a_spark_batch_job_releases_the_dashboard_s_trips(tmp_path: Path, spark, monkeypatch) -> None:
    """Three passes over four person ranges (the cap's keys drawn on the driver in the persons' order and
    handed to the ranges), the same table as in memory, debited once; the session's zone is left as it was."""
    table = road_trips(40, seed=4)
    table["time"] = table.time.dt.tz_convert("Europe/Paris").dt.strftime("%Y-%m-%d %H:%M:%S.%f")  # naive
    path = tmp_path / "fixes.parquet"
    table.to_parquet(path)
    loaded = load_table(path.read_bytes(), filename=path.name)
    steps = (
        TrajectoryColumns("person", "time", "lat", "lon", "trip", "Europe/Paris"),
        PublicTripLimits.of(DEFAULT_REGION, 1200.0, 70.0),
    )
    plan = ReleasePlan(
        "trajectory",
        "dpt",
        1.0,
        PureDP(1.0),
        "fixes",
        fingerprint(loaded),
        params={"max_trips": 1, "max_fixes": 30},
        preparation=steps,
        scope=scope_of(1, 30),
        mode="demo",
        seed=3,
    )
    times = parse_times(loaded.time, "Europe/Paris")
    memory = TrajectoryInputs(
        loaded.person.to_numpy(), times, loaded.lat.to_numpy(), loaded.lon.to_numpy(), loaded.trip.to_numpy(),
        DEFAULT_REGION,
    )
    dash_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash_ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(dash_ledger, plan, memory, request_id="dash", user="u", artifacts_dir=tmp_path / "d")

    passes: list[tuple[str, list]] = []
    run = outofcore.SparkTrajectories._run

    def recorded(self, frame, job):
        self.block_rows = 700  # blocks cut inside the ranges
        out = run(self, frame, job)
        passes.append((type(job).__name__, out))
        return out

    monkeypatch.setattr(outofcore.SparkTrajectories, "_run", recorded)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    coalesce = "spark.sql.adaptive.coalescePartitions.enabled"  # else small data is one range
    spark.conf.set(coalesce, "false")
    try:
        batch = run_plan(
            dash.manifest,
            path,
            ledger=ledger,
            artifacts_dir=tmp_path / "b",
            user="u",
            engine="spark",
            spark=spark,
        )
    finally:
        spark.conf.unset(coalesce)
    pd.testing.assert_frame_equal(batch.table, dash.table)
    assert ledger.budget(plan.account).epsilon_spent == 1.0
    assert [name for name, _ in passes] == ["_KeyCount", "_OwnSystems", "_GramCounts"]
    assert sum(n > 0 for _, n in passes[0][1]) >= 2  # keys for two ranges at least
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
