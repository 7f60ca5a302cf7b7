"""DPT by passes over DuckDB: the same release as in memory with the same demo seed, in one or two scans, for
blocks that cut the stream inside persons' rows, with a trip column and naive times in a stated zone; a
table not stored in order is found out as it streams and read again sorted, with the same release."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from dpcore.mechanisms import Sampler
from dpcore.trajectory.outofcore import TrajectoryTable
from dpcore.trajectory.prepare import parse_times
from dpcore.trajectory.registry import TRAJECTORIES, TrajectoryInputs
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips


@pytest.fixture(scope="module")
def fixes() -> pd.DataFrame:
    return road_trips(200, seed=4)


@pytest.mark.parametrize(
    ("key", "trip", "tz", "cache", "order"),
    [
        ("dpt", None, "UTC", 0, "stored"),
        ("dpt", "trip", "Europe/Paris", 0, "stored"),
        ("markov_grid", None, "UTC", 10**8, "stored"),
        ("dpt", None, "UTC", 0, "shuffled"),
        ("dpt", "trip", "Europe/Paris", 10**8, "first person last"),
    ],
)
def test_the_engine_release_is_the_in_memory_release(
    tmp_path: Path, fixes: pd.DataFrame, key: str, trip: str | None, tz: str, cache: int, order: str
) -> None:
    """Two scans without a cache of pass 1's trips (the second replays the cap's keys), one with; one more
    when the rows are not stored by person, trip and time. Moving the first person's rows last breaks
    that order only in the last batch, after the cap has drawn keys: the sampler is put back."""
    table = fixes.copy()
    if order == "shuffled":
        table = table.sample(frac=1.0, random_state=0)
    elif order == "first person last":
        first = table.person == table.person.min()
        table = pd.concat([table[~first], table[first]])
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if tz == "UTC" else "%Y-%m-%d %H:%M:%S.%f"  # naive: read in tz
    table["time"] = table.time.dt.strftime(fmt)
    path = tmp_path / "fixes.parquet"
    table.to_parquet(path)
    memory = TrajectoryInputs(
        table.person.to_numpy(),
        parse_times(table.time, tz),
        table.lat.to_numpy(),
        table.lon.to_numpy(),
        None if trip is None else table.trip.to_numpy(),
        DEFAULT_REGION,
    )
    columns = {"person": "person", "time": "time", "lat": "lat", "lon": "lon", "trip": trip}
    engine = TrajectoryTable(
        duckdb.connect(),
        f"read_parquet('{path}')",
        columns,
        DEFAULT_REGION,
        tz=tz,
        batch_rows=700,
        block_rows=2500,
        cache_bytes=cache,
    )
    params = TRAJECTORIES[key].validate_params({"max_trips": 1, "max_fixes": 30})
    spec = TRAJECTORIES[key]
    a = spec.release(memory, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
    b = spec.release(engine, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.diagnostics == b.diagnostics and a.details == b.details
    assert a.diagnostics["trips_over_cap"] > 0  # the cap's draws were replayed
    assert engine.scans == (1 if cache else 2) + (order != "stored")


def test_a_batch_job_releases_the_dashboard_s_trips(tmp_path: Path, fixes: pd.DataFrame) -> None:
    """run-plan on the Parquet file gives the page's release (demo seed) byte for byte, debited once."""
    from dpcore.data import fingerprint, load_table
    from dpcore.ledger import Ledger
    from dpcore.outofcore.run_plan import run_plan
    from dpcore.plan import ReleasePlan
    from dpcore.policy import PureDP
    from dpcore.releases import make_release
    from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns
    from dpcore.trajectory.registry import scope_of

    table = fixes.copy()
    table["time"] = table.time.dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    path = tmp_path / "fixes.parquet"
    table.to_parquet(path)
    loaded = load_table(path.read_bytes(), filename=path.name)
    steps = (
        TrajectoryColumns("person", "time", "lat", "lon", None),
        PublicTripLimits.of(DEFAULT_REGION, 1200.0, 70.0),
    )
    plan = ReleasePlan(
        "trajectory",
        "dpt",
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
    memory = TrajectoryInputs(
        loaded.person.to_numpy(),
        parse_times(loaded.time),
        loaded.lat.to_numpy(),
        loaded.lon.to_numpy(),
        None,
        DEFAULT_REGION,
    )
    dash_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash_ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(
        dash_ledger, plan, memory, request_id="dash-traj", user="u", artifacts_dir=tmp_path / "d"
    )
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    batch = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "b", user="batch")
    pd.testing.assert_frame_equal(batch.table, dash.table)
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def test_the_stored_order_check_is_the_engine_s_varchar_order() -> None:
    """Person text in code-point order (DuckDB sorts VARCHAR by UTF-8 bytes), then trip, then time; ties
    are in order; the row before a batch counts."""
    import pyarrow as pa

    from dpcore.trajectory.outofcore import _sorted_after

    people = ["B", "a", "a", "é", "é", "😀"]
    rows = duckdb.sql("SELECT * FROM (VALUES ('😀'), ('é'), ('a'), ('B')) v(p) ORDER BY p").fetchall()
    assert [r[0] for r in rows] == sorted(set(people))  # the engine's order is Python's str order

    def batch(p, t, us):
        return pa.RecordBatch.from_pydict({"p": p, "t": t, "us": us})

    keys = ["p", "t", "us"]
    assert _sorted_after(batch(people, ["2", "1", "1", "0", "0", "0"], [9, 5, 5, 1, 2, 0]), keys, None)
    assert not _sorted_after(batch(["a", "a"], ["1", "0"], [0, 9]), keys, None)  # trip text back
    assert not _sorted_after(batch(["a", "a"], ["1", "1"], [9, 8]), keys, None)  # time back
    assert not _sorted_after(batch(["a", "B"], ["1", "1"], [0, 1]), keys, None)  # "B" < "a"
    assert _sorted_after(batch(["a", "b"], ["1", "0"], [9, 0]), keys, ("a", "0", 9))
    assert not _sorted_after(batch(["a", "b"], ["1", "0"], [9, 0]), keys, ("a", "1", 10))
    assert _sorted_after(batch(["a"], ["1"], [0]), ["p", "us"], ("a", -1))
