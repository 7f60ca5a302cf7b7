"""Out-of-core scale: DP-Lloyd and colored releases on a large Parquet table, in units of one DuckDB scan.

Run: .venv/bin/python benchmarks/bench_scale.py [--rows 20000000] [--rounds 5] [--dir DIR] [--keep]

Generates an n x 10 Parquet table (K = 4 Gaussian blobs in [0, 1]^10, row groups of 1M rows; in a
temporary folder unless --dir), then measures in one process:

* one full DuckDB scan: SUM of every column (the unit; the best of three runs);
* a DP-Lloyd release with T rounds (bounded neighbours, n public; ``dpcore.outofcore.TableFeatures``): the
  prepared (filtered, clipped, scaled, centred) rows computed once from the Parquet file into a DuckDB
  temporary table (DuckDB's memory capped at ``features.MEMORY_LIMIT`` meanwhile, the rest spilled to
  disk), n its COUNT, then T passes of per-cluster counts and sums over it; noise in Python. Each round's
  time is printed too, and what is left (the cache, the COUNT and the noise);
* a colored release (``dpcore.outofcore.colored``): the clustering (k-means on a uniform sample of the
  rows), then its passes over the Parquet file (assignment with per-cluster moments; one pass caching
  the rows a norm bound cannot clear; certificate passes over that cache).

Then, on a separate 1M-row table (``--spark-rows``), the same two releases with the same demo seed on DuckDB
and on Spark local[2], printing the largest difference of a released value.

Scans = time / one scan; "colored" counts the passes beyond the clustering. Peak = the process's maximum
resident set size (numpy generation included). Targets: lloyd <= T + 2 scans, colored <= 4, peak < 2 GB.
The last line reads ``lloyd <x> scans T=<t>, colored <y> scans, peak <z> GB``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ibis
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scale_table import generated_table, one_scan, peak_gb, table_arguments, timed

from dpcore.kmeans.registry import release_centroids
from dpcore.mechanisms import Sampler
from dpcore.outofcore import TableFeatures
from dpcore.outofcore.colored import colored_release

D, K, GROUP = 10, 4, 1_000_000
SEED = 2026  # demo seed: a benchmark, not a privacy release


def generate(path: Path, rows: int, seed: int = SEED) -> None:
    """n x D rows: K Gaussian blobs (sd 0.08), centres uniform in [0.2, 0.8]^D, written by row groups."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, (K, D))
    names = [f"x{j}" for j in range(D)]
    with pq.ParquetWriter(path, pa.schema([(n, pa.float64()) for n in names])) as writer:
        for start in range(0, rows, GROUP):
            m = min(GROUP, rows - start)
            block = centres[rng.integers(0, K, m)] + rng.normal(0.0, 0.08, (m, D))
            writer.write_table(pa.table({n: block[:, j] for j, n in enumerate(names)}))


def spark_check(folder: Path, rows: int, rounds: int) -> None:
    """The same DP-Lloyd and colored releases (demo seed) on DuckDB and on Spark local[2] over an n-row
    table: prints the largest difference of a released value (0: identical; sums in another order may
    differ in the last bits)."""
    from dpcore.outofcore.source import connect, read_parquet, spark_session

    path = folder / f"spark-{rows}x{D}.parquet"
    generate(path, rows)
    bounds = {f"x{j}": (0.0, 1.0) for j in range(D)}
    params = {"n_clusters": K, "n_iter": rounds, "neighbours": "bounded"}
    session = spark_session()
    try:
        tables = {}
        for engine in ("duckdb", "spark"):
            feat = TableFeatures.from_bounds(read_parquet(connect(engine, session), [str(path)]), bounds)
            lloyd = release_centroids("dp_lloyd", feat, epsilon=1.0, sampler=Sampler(SEED), params=params)
            colored = colored_release(feat, K, epsilon=1.0, delta=1e-6, sampler=Sampler(SEED))
            tables[engine] = (lloyd.table, colored.output.table)
    finally:
        session.stop()
        path.unlink(missing_ok=True)
    diffs = [
        float(np.abs(a.select_dtypes("number").to_numpy() - b.select_dtypes("number").to_numpy()).max())
        for a, b in zip(tables["duckdb"], tables["spark"], strict=True)
    ]
    print(
        f"Spark local[2] vs DuckDB on {rows:,} rows, demo seed {SEED}: largest difference of a released "
        f"value DP-Lloyd {diffs[0]:.2g}, colored {diffs[1]:.2g}"
    )


class RoundTimer:
    """Seconds of each DP-Lloyd round (one ``TableFeatures.nearest_statistics`` pass) of the releases run
    inside the block: the rest of a release's time is its preparation (the cache and COUNT) and noise."""

    def __init__(self) -> None:
        self.rounds: list[float] = []

    def __enter__(self) -> RoundTimer:
        self._original = original = TableFeatures.nearest_statistics

        def timed_round(feat, *args, **kw):
            seconds, out = timed(original, feat, *args, **kw)
            self.rounds.append(seconds)
            return out

        TableFeatures.nearest_statistics = timed_round  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        TableFeatures.nearest_statistics = self._original  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table_arguments(ap)
    ap.add_argument("--rounds", type=int, default=5, help="DP-Lloyd rounds T")
    ap.add_argument(
        "--spark-rows", type=int, default=1_000_000, help="rows of the Spark-vs-DuckDB check (0: skip it)"
    )
    args = ap.parse_args()
    with generated_table(args, f"scale-{args.rows}x{D}.parquet", generate) as path:
        table = ibis.duckdb.connect().read_parquet(str(path))
        scan = one_scan(table)

        bounds = {f"x{j}": (0.0, 1.0) for j in range(D)}
        feat = TableFeatures.from_bounds(table, bounds)
        params = {"n_clusters": K, "n_iter": args.rounds, "neighbours": "bounded"}
        with RoundTimer() as rounds:
            t_lloyd, _ = timed(
                release_centroids, "dp_lloyd", feat, epsilon=1.0, sampler=Sampler(SEED), params=params
            )
        t_rounds = sum(rounds.rounds)
        print(
            f"DP-Lloyd release, T = {args.rounds}: {t_lloyd:.2f} s = {t_lloyd / scan:.2f} scans: "
            f"{(t_lloyd - t_rounds) / scan:.2f} scans outside the rounds (cache, COUNT, noise), "
            f"rounds {', '.join(f'{r / scan:.2f}' for r in rounds.rounds)} scans"
        )

        t_colored, out = timed(colored_release, feat, K, epsilon=1.0, delta=1e-6, sampler=Sampler(SEED))
        t_cluster = out.timings["clustering"]
        passes = t_colored - t_cluster
        print(
            f"colored release: clustering {t_cluster:.2f} s ({t_cluster / scan:.2f} scans), then "
            f"{passes:.2f} s = {passes / scan:.2f} scans in {out.passes} passes; gap {out.covariance.gap:.2e}"
        )
        peak = peak_gb()  # before Spark
        if args.spark_rows:
            spark_check(path.parent, args.spark_rows, args.rounds)
        lloyd, colored = t_lloyd / scan, passes / scan
        print(f"lloyd {lloyd:.2f} scans T={args.rounds}, colored {colored:.2f} scans, peak {peak:.2f} GB")


if __name__ == "__main__":
    main()
