"""DPT by passes over DuckDB: the same release as in memory with the same demo seed, in two scans, for
blocks that cut the stream inside persons' rows, with a trip column and naive times in a stated zone."""

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
    ("key", "trip", "tz"),
    [("dpt", None, "UTC"), ("dpt", "trip", "Europe/Paris"), ("markov_grid", None, "UTC")],
)
def test_the_engine_release_is_the_in_memory_release(
    tmp_path: Path, fixes: pd.DataFrame, key: str, trip: str | None, tz: str
) -> None:
    table = fixes.copy()
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
    )
    params = TRAJECTORIES[key].validate_params({"max_trips": 1, "max_fixes": 30})
    spec = TRAJECTORIES[key]
    a = spec.release(memory, epsilon=1.0, delta=0.0, params=params, sampler=Sampler(5))
    b = spec.release(engine, epsilon=1.0, delta=0.0, params=params, sampler=Sampler(5))
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.diagnostics == b.diagnostics and a.details == b.details
    assert a.diagnostics["trips_over_cap"] > 0  # the cap's draws were replayed
    assert engine.scans == 2
