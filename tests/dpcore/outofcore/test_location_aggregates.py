"""The mean positions and hotspots out of core: the kernels fed by DuckDB (and Spark local) give the
in-memory release on the same rows and demo seed, bit for bit when the engine hands the rows in the
in-memory order (no per-user cap), else up to the rounding of another order of sums (1e-9 relative here),
with the same counts, sensitivities and budget log, wherever the points lie (Blowfish-safe map)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ibis
import numpy as np
import pandas as pd
import pytest

from dpcore.location.geometry import PlaneMap
from dpcore.location.registry import LOCATIONS, LocationInputs, keep_per_user
from dpcore.mechanisms import Sampler
from dpcore.outofcore import kernel
from dpcore.outofcore.locations import TableLocations
from dpcore.outofcore.plane import Forward
from tests.dpcore.outofcore.test_locations import REGION, in_memory, visits

RTOL = 1e-9

#: Points the map must send where numpy does: poles, the antimeridian, the far hemisphere (folded), the
#: antipode and the centre of the region (h = 0), its corners, and points far outside in every direction.
CENTRE = REGION.centre
ODD = np.array(
    [
        [90.0, 0.0],
        [-90.0, 0.0],
        [89.9, -179.9],
        [0.0, 180.0],
        [0.0, -180.0],
        [-CENTRE[0], CENTRE[1] + 180.0],
        [CENTRE[0], CENTRE[1]],
        [REGION.lat_min, REGION.lon_min],
        [REGION.lat_max, REGION.lon_max],
        [-33.9, 151.2],
        [51.5, -0.1],
        [37.5, -60.0],
        [37.5, -140.0],
        [10.0, -97.5],
        [70.0, -97.5],
    ]
)


def with_odd_points(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the ODD points added, each a visit of a user who also has ordinary rows."""
    odd = pd.DataFrame({"lat": ODD[:, 0], "lon": ODD[:, 1], "user": [f"u{i}" for i in range(len(ODD))]})
    return pd.concat([df, odd], ignore_index=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    df = with_odd_points(visits(3000, seed=8))
    path = tmp_path_factory.mktemp("agg") / "visits.parquet"
    df.to_parquet(path, index=False)
    return df, path


def on_duckdb(path: Path, users: bool) -> TableLocations:
    table = ibis.duckdb.connect().read_parquet(str(path))
    return TableLocations(table, "lat", "lon", "user" if users else None, REGION)


def assert_close(a: Any, b: Any, path: str = "") -> None:
    """Equal structures: text, whole numbers and flags exactly, floats to RTOL (relative)."""
    if isinstance(a, Mapping):
        assert isinstance(b, Mapping) and set(a) == set(b), path
        for key in a:
            assert_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert isinstance(b, float) and math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0), (path, a, b)
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def assert_same_release(a: Any, b: Any) -> None:
    """Two MechanismOutputs of one location release: table, details, diagnostics and scope."""
    assert list(a.table.columns) == list(b.table.columns)
    for col in a.table.columns:
        x, y = a.table[col].to_numpy(), b.table[col].to_numpy()
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(y, x, rtol=RTOL, atol=0.0, err_msg=col)
        else:
            assert np.array_equal(x, y), col
    assert_close(a.details, b.details)
    assert a.diagnostics == b.diagnostics and a.scope == b.scope


AGGREGATE_KEYS = ("dp_mean", "blowfish_mean", "dp_hotspots", "blowfish_hotspots")
PARAMS = {
    "dp_mean": [{"neighbours": "bounded"}],
    "blowfish_mean": [{"theta_m": 50_000.0}],
    "dp_hotspots": [{"hotspot_k": 5, "neighbours": "unbounded"}, {"hotspot_k": 5, "neighbours": "bounded"}],
    "blowfish_hotspots": [{"hotspot_k": 5, "theta_m": 80_000.0}],
}
CASES = [(key, p) for key in AGGREGATE_KEYS for p in PARAMS[key]]


@pytest.mark.parametrize(("key", "params"), CASES)
@pytest.mark.parametrize(("users", "m"), [(False, 1), (True, 3)])
def test_release_in_memory_and_on_duckdb_agree(data, key: str, params: dict, users: bool, m: int) -> None:
    df, path = data
    spec, params = LOCATIONS[key], {**params, "max_per_user": m}
    a = spec.release(in_memory(df, users), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(4))
    b = spec.release(on_duckdb(path, users), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(4))
    assert_same_release(a, b)
    assert b.diagnostics["rows_given"] == len(df)
    if users:  # the cap binds and the noise is for a person with m rows
        assert b.diagnostics["rows_used"] < len(df) and b.details["max_per_user"] == m
    if key.endswith("hotspots"):
        assert b.details["n_iter"] >= 2 and len(b.details["budget_log_per_location"]) >= 4
    elif key == "dp_mean" and users:  # a person's number of rows is private: n is a noisy count
        assert b.table["n"].iloc[0] != b.diagnostics["rows_used"] and b.details["n"].startswith("noisy count")
    else:
        assert b.table["n"].iloc[0] == b.diagnostics["rows_used"]


def test_counts_sums_and_labels_of_every_round_agree(data) -> None:
    """The statistics a DP-Lloyd round reads (random public centres, some on the far side of B) and the
    mapped sums: bit for bit without users (the odd points included: poles, antimeridian, antipode),
    with the kept rows' count and the same cluster sizes with users (the join's order), sums to RTOL."""
    df, path = data
    rng = np.random.default_rng(3)
    for users, exact in ((False, True), (True, False)):
        mem = in_memory(df, users).projected(2, Sampler(7)).points
        ooc = on_duckdb(path, users).projected(2, Sampler(7)).points
        assert mem.n == ooc.n == ooc.feed.n and isinstance(ooc.feed, kernel.MemoryFeed)
        lower, upper = mem.bounds
        mid = (lower + upper) / 2.0
        Xc = np.clip(mem.X, lower, upper) - mid
        pairs = [(ooc.sums(), mem.sums())]
        for k in (1, 2, 5, 9):
            centres = rng.uniform(lower - mid, upper - mid, (2, k, 2))
            counts, sums = kernel.fit_statistics(ooc.feed, Forward(ooc.plane), lower, upper)(centres)
            n_mem, s_mem = kernel.lloyd_statistics(Xc, centres)
            assert np.array_equal(counts, n_mem) and (counts.sum(axis=1) == mem.n).all()
            pairs.append((sums, s_mem))
        for got, want in pairs:
            if exact:
                assert np.array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)


def test_hotspot_centres_sit_on_the_clusters_out_of_core(data) -> None:
    """Utility: at a large eps the released hotspots (DuckDB) land near the three hubs of the data."""
    _, path = data
    params = {"hotspot_k": 3, "neighbours": "unbounded", "max_per_user": 1}
    out = LOCATIONS["dp_hotspots"].release(
        on_duckdb(path, False), epsilon=50.0, delta=0.0, params=params, random_state=Sampler(1)
    )
    hubs = np.array([[33.6, -101.2], [40.2, -95.3], [37.0, -88.1]])
    got = out.table[["lat", "lon"]].to_numpy()
    nearest = np.abs(got[:, None, :] - hubs[None]).sum(axis=2).min(axis=0)
    assert nearest.max() < 3.0, got


def test_every_aggregate_mechanism_declares_its_out_of_core_release() -> None:
    assert all(LOCATIONS[k].out_of_core is not None for k in AGGREGATE_KEYS)


@pytest.mark.spark
def test_spark_gives_the_in_memory_mean_and_hotspots(data, spark) -> None:
    df, path = data
    from dpcore.outofcore.source import connect, read_parquet

    inputs = TableLocations(read_parquet(connect("spark", spark), [str(path)]), "lat", "lon", "user", REGION)
    for key, params in (
        ("blowfish_mean", {"theta_m": 50_000.0, "max_per_user": 2}),
        ("blowfish_hotspots", {"hotspot_k": 4, "theta_m": 80_000.0, "max_per_user": 2}),
    ):
        spec = LOCATIONS[key]
        a = spec.release(in_memory(df, True), epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
        b = spec.release(inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(5))
        assert_same_release(a, b)


def test_the_in_memory_input_is_the_mapped_kept_rows(data) -> None:
    """LocationInputs.projected maps exactly the rows keep_per_user keeps (one code path for both)."""
    df, _ = data
    inputs: LocationInputs = in_memory(df, True)
    kept = inputs.projected(2, Sampler(2))
    rows = keep_per_user(inputs, 2, Sampler(2))
    x, y = PlaneMap.of(REGION).forward(rows.lat, rows.lon)
    assert kept.n == rows.n and kept.group == 2 and kept.scope == rows.scope
    assert np.array_equal(kept.points.X, np.column_stack([x, y]))
