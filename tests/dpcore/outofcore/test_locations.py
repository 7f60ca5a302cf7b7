"""Location grids out of core: DuckDB (and Spark local) give the in-memory releases bit for bit, the per-user
cap keeps the same uniformly random subset of each user's rows, and bad coordinates are refused as in
memory."""

from __future__ import annotations

from pathlib import Path

import ibis
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcore.errors import DataError
from dpcore.location.contribution import cap_per_user
from dpcore.location.geometry import Region
from dpcore.location.grids import grid_edges
from dpcore.location.registry import LOCATIONS, LocationInputs, keep_per_user
from dpcore.mechanisms import Sampler
from dpcore.outofcore.locations import TableLocations

REGION = Region(30.0, 45.0, -110.0, -85.0)


GRID_KEYS = ("uniform_grid", "adaptive_grid")


def visits(n: int = 4000, seed: int = 5) -> pd.DataFrame:
    """Clustered points, some outside the region (clamped), users with 1 to 12 rows, one duplicate row."""
    rng = np.random.default_rng(seed)
    hubs = np.array([[33.6, -101.2], [40.2, -95.3], [37.0, -88.1]])
    pts = hubs[rng.integers(0, 3, n)] + rng.normal(0, [1.6, 2.5], (n, 2))
    pts[:40, 0] = rng.uniform(45.0, 50.0, 40)  # north of the region
    users = rng.integers(0, 700, n)
    df = pd.DataFrame({"lat": pts[:, 0], "lon": pts[:, 1], "user": [f"u{u}" for u in users]})
    return pd.concat([df, df.iloc[[7]]], ignore_index=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    df = visits()
    path = tmp_path_factory.mktemp("loc") / "visits.parquet"
    df.to_parquet(path, index=False)
    return df, path


def in_memory(df: pd.DataFrame, users: bool) -> LocationInputs:
    users_col = df["user"].to_numpy() if users else None
    return LocationInputs(df["lat"].to_numpy(), df["lon"].to_numpy(), users_col, REGION)


def on_duckdb(path: Path, users: bool) -> TableLocations:
    table = ibis.duckdb.connect().read_parquet(str(path))
    return TableLocations(table, "lat", "lon", "user" if users else None, REGION)


CASES = [
    ("uniform_grid", {"neighbours": "unbounded", "max_per_user": 1}, False),
    ("uniform_grid", {"neighbours": "bounded", "max_per_user": 3}, True),
    ("adaptive_grid", {"neighbours": "unbounded", "max_per_user": 2}, True),
    ("adaptive_grid", {"neighbours": "bounded", "max_per_user": 1}, False),
]


@pytest.mark.parametrize(("key", "params", "users"), CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_grid_release_is_identical_in_memory_and_on_duckdb(data, key, params, users, seed) -> None:
    df, path = data
    spec = LOCATIONS[key]
    a = spec.release(in_memory(df, users), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(seed))
    b = spec.release(
        on_duckdb(path, users), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(seed)
    )
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    assert a.details == b.details and a.diagnostics == b.diagnostics and a.scope == b.scope
    assert b.diagnostics["rows_given"] == len(df)
    if users:  # the cap binds: fewer rows used than given, each user at most m
        assert b.diagnostics["rows_used"] < len(df)


def test_counts_are_the_in_memory_counts_for_every_level(data) -> None:
    df, path = data
    sampler_a, sampler_b = Sampler(9), Sampler(9)
    mem = in_memory(df, True).counted(2, sampler_a).points
    ooc = on_duckdb(path, True).counted(2, sampler_b).points
    assert mem.n == ooc.n
    for m in (1, 7, 40):
        assert np.array_equal(mem.cell_counts(m), ooc.cell_counts(m))
    m2 = np.random.default_rng(0).integers(1, 6, 100)
    leaves = ooc.leaf_counts(10, m2)
    assert np.array_equal(mem.leaf_counts(10, m2), leaves) and leaves.sum() == mem.n


def test_points_on_the_region_edges_and_cell_boundaries_count_as_in_memory(tmp_path: Path) -> None:
    # exactly on the region's max edge (clamped into the last cell), on interior cell edges and outside
    lat = np.array([30.0, 45.0, 37.5, 33.75, 45.0000001, 29.0, 41.25, 41.25])
    lon = np.array([-110.0, -85.0, -97.5, -103.75, -85.0, -120.0, -91.25, -91.25])
    path = tmp_path / "edges.parquet"
    pd.DataFrame({"lat": lat, "lon": lon}).to_parquet(path, index=False)
    mem = LocationInputs(lat, lon, None, REGION).counted(1, Sampler(0)).points
    ooc = TableLocations(ibis.duckdb.connect().read_parquet(str(path)), "lat", "lon", None, REGION)
    points = ooc.counted(1, Sampler(0)).points
    for m in (1, 2, 4, 8, 12):
        assert np.array_equal(mem.cell_counts(m), points.cell_counts(m))
    assert np.array_equal(mem.leaf_counts(4, np.arange(1, 17)), points.leaf_counts(4, np.arange(1, 17)))


def test_points_on_every_grid_edge_fall_in_the_in_memory_cell(tmp_path: Path) -> None:
    """Points on the computed edges of several grids and one ulp either side: where a rounding of
    (v - lo) / (hi - lo) * m decides the cell, the engine must round as numpy does."""
    sides = (3, 7, 11, 13, 29, 97)
    lat_edges = np.concatenate([grid_edges(REGION, m)[0] for m in sides])
    lat = np.concatenate([lat_edges, np.nextafter(lat_edges, 0), np.nextafter(lat_edges, 90)])
    lon = np.full(lat.size, -97.0)
    path = tmp_path / "edges.parquet"
    pd.DataFrame({"lat": lat, "lon": lon}).to_parquet(path, index=False)
    mem = LocationInputs(lat, lon, None, REGION).counted(1, Sampler(0)).points
    ooc = TableLocations(ibis.duckdb.connect().read_parquet(str(path)), "lat", "lon", None, REGION)
    points = ooc.counted(1, Sampler(0)).points
    for m in sides:
        assert np.array_equal(mem.cell_counts(m), points.cell_counts(m)), m


def test_the_cap_keeps_the_same_rows_in_duckdb_as_in_memory(data) -> None:
    """The per-user cap keeps exactly the in-memory rows in DuckDB, with the same sampler draws (the
    over-cap users' (user, rank) pairs are drawn in Python and joined back)."""
    df, path = data
    for seed in (0, 4):
        kept = keep_per_user(in_memory(df, True), 2, Sampler(seed))
        rows, n, group, _ = on_duckdb(path, True)._kept(2, Sampler(seed))
        frame = rows.to_pandas()
        assert n == kept.n == len(frame) and group == 2
        assert sorted(zip(kept.lat, kept.lon, strict=True)) == sorted(zip(frame.la, frame.lo, strict=True))


def test_the_cap_picks_each_of_a_user_s_rows_equally_often_whatever_their_values() -> None:
    """Over fresh draws each of a user's 5 rows is kept 2/5 of the time, the far one among 4 identical
    rows included (a cap keyed on the values alone keeps it about half the time)."""
    rng = np.random.default_rng(11)
    lat, lon = rng.uniform(30, 45, (50, 5)), rng.uniform(-110, -85, (50, 5))
    lat[0, :4], lon[0, :4], lat[0, 4], lon[0, 4] = 35.0, -100.0, 44.0, -86.0
    codes = np.repeat(np.arange(50), 5)
    labels = np.array([f"u{u}" for u in range(50)])
    position = np.tile(np.arange(5), 50)
    hits = np.zeros(5)
    far = 0
    random_state = Sampler(12)
    for _ in range(400):
        kept = cap_per_user(codes, labels, lat.ravel(), lon.ravel(), 2, random_state)
        hits += np.bincount(position[kept], minlength=5)
        far += 4 in kept
    assert hits.sum() == 400 * 50 * 2
    assert stats.chisquare(hits).pvalue > 1e-3
    assert stats.binomtest(far, 400, 0.4).pvalue > 1e-3


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"lat": np.nan}, "missing or infinite"),
        ({"lon": np.inf}, "missing or infinite"),
        ({"lat": None}, "missing or infinite"),
        ({"lat": 91.0}, "latitude must be in"),
        ({"lon": -181.0}, "longitude must be in"),
    ],
)
def test_bad_coordinates_are_refused_as_in_memory(tmp_path: Path, bad: dict, message: str) -> None:
    df = visits(50).astype({"lat": "float64"})
    for col, value in bad.items():
        df[col] = df[col].astype(object)
        df.loc[3, col] = value
    path = tmp_path / "bad.parquet"
    df.astype({"lat": "float64", "lon": "float64"}).to_parquet(path, index=False)
    with pytest.raises(DataError, match=message):
        in_memory(df.astype({"lat": "float64", "lon": "float64"}), False)
    with pytest.raises(DataError, match=message):
        on_duckdb(path, False)


@pytest.mark.parametrize("missing", [None, np.nan], ids=["null text id", "NaN numeric id"])
def test_rows_without_a_user_id_are_refused_as_in_memory(tmp_path: Path, missing: object) -> None:
    """Per user, a row without a user id is refused out of core as in memory (it is not one more user)."""
    df = visits(50)
    if missing is not None:  # numeric user ids, one NaN
        df["user"] = np.arange(len(df), dtype=float) % 7
    df.loc[[3, 8], "user"] = missing
    path = tmp_path / "no-user.parquet"
    df.to_parquet(path, index=False)
    message = "2 row\\(s\\) have no user id; drop or fill those rows first"
    with pytest.raises(DataError, match=message):
        LocationInputs(df["lat"].to_numpy(), df["lon"].to_numpy(), df["user"].to_numpy(), REGION).counted(
            1, Sampler(1)
        )
    with pytest.raises(DataError, match=message):
        on_duckdb(path, True)
    on_duckdb(path, False)  # without the user column (per location) the same rows are fine


def test_every_grid_mechanism_declares_its_out_of_core_release() -> None:
    assert all(LOCATIONS[k].out_of_core is not None for k in GRID_KEYS)


@pytest.mark.spark
def test_spark_gives_the_duckdb_grid(data, spark) -> None:
    df, path = data
    from dpcore.outofcore.source import connect, read_parquet

    table = read_parquet(connect("spark", spark), [str(path)])
    inputs = TableLocations(table, "lat", "lon", "user", REGION)
    params = {"neighbours": "unbounded", "max_per_user": 2}
    spec = LOCATIONS["adaptive_grid"]
    a = spec.release(in_memory(df, True), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(3))
    b = spec.release(inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(3))
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
