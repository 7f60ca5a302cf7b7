"""Out-of-core location releases (grids, mean positions, hotspots) on a large Parquet table of locations.

Run: .venv/bin/python benchmarks/bench_locations.py [--rows 20000000] [--dir DIR] [--keep]

Generates an n-row Parquet table (lat, lon uniform over the contiguous US, a user id with 10 rows per user on
average; row groups of 1M rows), then measures in one process, in units of one full DuckDB scan (SUM of the
three columns, the best of three runs):

* validation of the coordinates (one aggregate);
* per location (no user column) and per user (at most 3 locations each: a window over each user's rows by
  the salted key, and one GROUP BY for the number of rows kept), every mechanism whose spec declares an
  out-of-core release, with its default parameters: today the uniform grid (one count pass) and the
  adaptive grid (two, one per level), with the noisy count of n (unbounded neighbours); the DP and Blowfish
  mean positions (the kept rows mapped to metres, one aggregate of n and two sums); the DP and Blowfish
  hotspots (K = 8: the mapped rows cached once when they fit, then one GROUP BY pass per DP-Lloyd round);
  noise in Python.

Peak = the process's maximum resident set size (generation included). The last line reads
``<label> <per location> / <per user>; ... scans per location / per user; peak <z> GB``, one entry per
mechanism in registration order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ibis
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scale_table import generated_table, one_scan, peak_gb, table_arguments, timed

from dpcore.location.geometry import Region
from dpcore.location.registry import LOCATIONS
from dpcore.mechanisms import Sampler
from dpcore.outofcore.locations import TableLocations

GROUP = 1_000_000
SEED = 2026  # demo seed: a benchmark, not a privacy release
REGION = Region(24.0, 50.0, -125.0, -66.0)
#: Every location mechanism whose spec declares an out-of-core release.
KEYS = tuple(key for key, spec in LOCATIONS.items() if spec.out_of_core is not None)


def generate(path: Path, rows: int, seed: int = SEED) -> None:
    rng = np.random.default_rng(seed)
    schema = pa.schema([("lat", pa.float64()), ("lon", pa.float64()), ("user", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, GROUP):
            m = min(GROUP, rows - start)
            lat, lon = rng.uniform(25.0, 49.0, m), rng.uniform(-124.0, -67.0, m)
            writer.write_table(
                pa.table({"lat": lat, "lon": lon, "user": rng.integers(0, max(rows // 10, 1), m)})
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table_arguments(ap)
    args = ap.parse_args()
    with generated_table(args, f"grids-{args.rows}.parquet", generate) as path:
        table = ibis.duckdb.connect().read_parquet(str(path))
        scan = one_scan(table)
        ratios: dict[tuple[str, str], float] = {}
        for who, column in (("per location", None), ("per user", "user")):
            t_valid, inputs = timed(TableLocations, table, "lat", "lon", column, REGION)
            print(f"{who}: validation {t_valid:.2f} s = {t_valid / scan:.2f} scans")
            for key in KEYS:
                spec = LOCATIONS[key]
                params = {p.name: p.default for p in spec.params} | {"max_per_user": 3}
                run = spec.out_of_core
                t, out = timed(run, inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(SEED))
                ratios[who, key] = t / scan
                rows = len(out.table)
                print(f"{who}: {spec.label}: {t:.2f} s = {t / scan:.2f} scans, {rows:,} rows released")
        peak = peak_gb()
        parts = [
            f"{LOCATIONS[k].label} {ratios['per location', k]:.2f} / {ratios['per user', k]:.2f}"
            for k in KEYS
        ]
        print(f"{'; '.join(parts)} scans per location / per user; peak {peak:.2f} GB")


if __name__ == "__main__":
    main()
