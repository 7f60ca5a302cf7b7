"""Out-of-core scale: DP-Lloyd and colored releases on a large Parquet table, in units of one DuckDB scan.

Run: .venv/bin/python benchmarks/bench_scale.py [--rows 20000000] [--rounds 5] [--stream-rows N]
     [--spark-rows 1000000] [--dir DIR] [--keep]

Generates an n x 10 Parquet table of float32 columns (K = 4 Gaussian blobs in [0, 1]^10, row groups of 1M
rows; in a temporary folder unless --dir), then measures in one process:

* one full DuckDB scan: SUM of every column (the unit; the best of three runs);
* a DP-Lloyd release with T rounds (bounded neighbours, n public; ``dpcore.outofcore.TableFeatures``): the
  feature columns read once from DuckDB into memory (float32: the compact dtype of float32 columns, under
  ``DPCORE_MEMORY_BUDGET``), then T passes of the numpy Lloyd kernel over it; noise in Python. Each round's
  time is printed too, and what is left (the read and the noise);
* a colored release (``dpcore.outofcore.colored``): the clustering (the read, a keyed sample, k-means on
  it), then its passes over the rows in memory (moments and candidate rows; certificate passes only when
  the bound on the other rows does not certify them), the solver and the output;
* streamed (a child process, so that its peak is its own): the same DP-Lloyd release on a table of
  ``--stream-rows`` rows (default: the same table) with ``DPCORE_MEMORY_BUDGET`` below its size, so every
  round streams DuckDB's Arrow batches through the kernel (n by one COUNT), in units of one scan of that
  table; printed as ``stream <x> scans T=<t>, peak <z> GB``;
* Spark local[2] on a ``--spark-rows`` table (0: skip): one DP-Lloyd round (the kernel on the executors by
  ``mapInArrow`` over the feature columns' blocks, cached as raw bytes) against one Spark MLlib KMeans
  iteration (K = 4 on the cached assembled vectors; (time of 1 + 4 iterations - time of 1) / 4, random
  init, tol 0) in the same run, printed as ``spark <r> x mllib``; and the DP-Lloyd release of that table on
  DuckDB and on Spark with the same demo seed (largest difference of a released value).

Scans = time / one scan; "colored" counts the passes beyond the clustering. Peak = the process's maximum
resident set size (generation included). Targets: lloyd <= T + 2 scans, colored <= 4, peak < 2 GB; stream
<= 1.5 (T + 2) scans, peak < 2 GB; spark <= 1.5 x mllib. The last line reads
``lloyd <x> scans T=<t>, colored <y> scans, peak <z> GB``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import ibis
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scale_table import generated_table, one_scan, peak_gb, table_arguments, timed

from dpcore.kmeans.mechanisms.colored import KEY as COLORED
from dpcore.kmeans.mechanisms.dp_lloyd import KEY as DP_LLOYD
from dpcore.kmeans.registry import release_centroids
from dpcore.mechanisms import Sampler
from dpcore.outofcore import TableFeatures, features
from dpcore.outofcore.colored import colored_release
from dpcore.outofcore.kernel import LloydPass

D, K, GROUP = 10, 4, 1_000_000
SEED = 2026  # demo seed: a benchmark, not a privacy release
BOUNDS = {f"x{j}": (0.0, 1.0) for j in range(D)}


def generate(path: Path, rows: int, seed: int = SEED) -> None:
    """n x D float32 rows: K Gaussian blobs (sd 0.08), centres uniform in [0.2, 0.8]^D, by row groups."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, (K, D))
    names = [f"x{j}" for j in range(D)]
    with pq.ParquetWriter(path, pa.schema([(n, pa.float32()) for n in names])) as writer:
        for start in range(0, rows, GROUP):
            m = min(GROUP, rows - start)
            block = (centres[rng.integers(0, K, m)] + rng.normal(0.0, 0.08, (m, D))).astype(np.float32)
            writer.write_table(pa.table({n: block[:, j] for j, n in enumerate(names)}))


class RoundTimer:
    """Seconds of each DP-Lloyd round (one pass of the Lloyd kernel over the feed) of the releases run
    inside the block: the rest of a release's time is reading the rows and the noise."""

    def __init__(self) -> None:
        self.rounds: list[float] = []

    def __enter__(self) -> RoundTimer:
        self._original = original = features.fit_statistics

        def timed_statistics(*args, **kw):
            statistics = original(*args, **kw)

            def one_round(centres):
                seconds, out = timed(statistics, centres)
                self.rounds.append(seconds)
                return out

            return one_round

        features.fit_statistics = timed_statistics
        return self

    def __exit__(self, *exc: object) -> None:
        features.fit_statistics = self._original


def lloyd(table, rounds: int) -> tuple[float, list[float]]:
    """Seconds of a DP-Lloyd release of T rounds on ``table``, and of each round."""
    feat = TableFeatures.from_bounds(table, BOUNDS)
    params = {"n_clusters": K, "n_iter": rounds, "neighbours": "bounded"}
    with RoundTimer() as timer:
        t, _ = timed(
            release_centroids, DP_LLOYD, feat, epsilon=1.0, random_state=Sampler(SEED), params=params
        )
    return t, timer.rounds


def stream_only(path: Path, rounds: int) -> None:
    """The child of the streamed measurement: one scan, then DP-Lloyd with every round streamed."""
    table = ibis.duckdb.connect().read_parquet(str(path))
    scan = one_scan(table)
    t, per_round = lloyd(table, rounds)
    print(
        f"streamed DP-Lloyd, T = {rounds}: {t:.2f} s = {t / scan:.2f} scans: rounds "
        f"{', '.join(f'{r / scan:.2f}' for r in per_round)} scans"
    )
    print(f"stream {t / scan:.2f} scans T={rounds}, peak {peak_gb():.2f} GB", flush=True)


def streamed(path: Path, rounds: int) -> str:
    """Run :func:`stream_only` in a child process with a memory budget below the table's size; its lines."""
    budget = max(1, path.stat().st_size // 4)
    env = {**os.environ, "DPCORE_MEMORY_BUDGET": str(budget)}
    cmd = [sys.executable, __file__, "--stream-only", str(path), "--rounds", str(rounds)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return out.strip()


def spark_round(folder: Path, rows: int, rounds: int) -> float:
    """On an n-row table: one DP-Lloyd round on Spark against one MLlib KMeans iteration on the same cached
    data (prints both), and the DuckDB and Spark DP-Lloyd releases with the same demo seed; the ratio."""
    from pyspark.ml.clustering import KMeans as SparkKMeans
    from pyspark.ml.feature import VectorAssembler

    from dpcore.outofcore.feeds import open_feed
    from dpcore.outofcore.source import connect, read_parquet, spark_session

    path = folder / f"spark-{rows}x{D}.parquet"
    generate(path, rows)
    session = spark_session()
    try:
        feat = TableFeatures.from_bounds(read_parquet(connect("spark", session), [str(path)]), BOUNDS)
        lower, upper = feat.bounds
        centres = np.random.default_rng(SEED).uniform(-0.5, 0.5, (1, K, D))
        with open_feed(feat.raw(), 0, feat.dtype) as feed:
            feed.reduce(LloydPass(feat.scaling_map, lower, upper, centres))  # warm: Python workers started
            ours = min(
                timed(feed.reduce, LloydPass(feat.scaling_map, lower, upper, centres))[0] for _ in range(3)
            )
        frame = session.read.parquet(str(path))
        vectors = VectorAssembler(inputCols=list(BOUNDS), outputCol="features").transform(frame)
        vectors = vectors.select("features").cache()
        vectors.count()

        def mllib(iterations: int) -> float:
            model = SparkKMeans(k=K, maxIter=iterations, initMode="random", seed=1, tol=0.0)
            start = time.perf_counter()
            model.fit(vectors)
            return time.perf_counter() - start

        mllib(1)  # warm
        one = min(mllib(1) for _ in range(2))
        five = min(mllib(5) for _ in range(2))
        per_iteration = max((five - one) / 4, 1e-9)
        vectors.unpersist()
        print(
            f"Spark local[2], {rows:,} rows: one DP-Lloyd round {ours:.2f} s, one MLlib KMeans iteration "
            f"{per_iteration:.2f} s (1 iteration {one:.2f} s, 5 iterations {five:.2f} s)"
        )
        params = {"n_clusters": K, "n_iter": rounds, "neighbours": "bounded"}
        spark = release_centroids(DP_LLOYD, feat, epsilon=1.0, random_state=Sampler(SEED), params=params)
        duck_feat = TableFeatures.from_bounds(read_parquet(connect("duckdb"), [str(path)]), BOUNDS)
        duck = release_centroids(
            DP_LLOYD, duck_feat, epsilon=1.0, random_state=Sampler(SEED), params=params
        )
        a, b = (r.table.select_dtypes("number").to_numpy() for r in (spark, duck))
        print(
            f"DP-Lloyd on Spark vs DuckDB, demo seed {SEED}: largest difference of a released value "
            f"{np.abs(a - b).max():.2g}"
        )
    finally:
        session.stop()
        path.unlink(missing_ok=True)
    return ours / per_iteration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table_arguments(ap)
    ap.add_argument("--rounds", type=int, default=5, help="DP-Lloyd rounds T")
    ap.add_argument("--stream-rows", type=int, help="rows of the streamed table (default --rows; 0: skip)")
    ap.add_argument("--spark-rows", type=int, default=1_000_000, help="rows of the Spark table (0: skip)")
    ap.add_argument("--stream-only", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stream_only:
        stream_only(args.stream_only, args.rounds)
        return
    with generated_table(args, f"scale-{args.rows}x{D}.parquet", generate) as path:
        table = ibis.duckdb.connect().read_parquet(str(path))
        scan = one_scan(table)
        t_lloyd, rounds = lloyd(table, args.rounds)
        t_rounds = sum(rounds)
        print(
            f"DP-Lloyd release, T = {args.rounds}: {t_lloyd:.2f} s = {t_lloyd / scan:.2f} scans: "
            f"{(t_lloyd - t_rounds) / scan:.2f} scans outside the rounds (read into memory, noise), "
            f"rounds {', '.join(f'{r / scan:.2f}' for r in rounds)} scans"
        )
        feat = TableFeatures.from_bounds(table, BOUNDS)
        kw = {"key": COLORED, "epsilon": 1.0, "delta": 1e-6, "random_state": Sampler(SEED)}
        t_colored, out = timed(colored_release, feat, K, **kw)
        t_cluster = out.timings["read"] + out.timings["clustering"]
        passes = t_colored - t_cluster
        print(
            f"colored release: clustering {t_cluster:.2f} s ({t_cluster / scan:.2f} scans, the read "
            f"included), then {passes:.2f} s = {passes / scan:.2f} scans in {out.passes} passes; gap "
            f"{out.covariance.gap:.2e}"
        )
        peak = peak_gb()
        if args.stream_rows is None or args.stream_rows == args.rows:
            print(streamed(path, args.rounds))
        elif args.stream_rows:
            stream_args = argparse.Namespace(rows=args.stream_rows, dir=args.dir, keep=args.keep)
            with generated_table(stream_args, f"scale-{args.stream_rows}x{D}.parquet", generate) as big:
                print(streamed(big, args.rounds))
        if args.spark_rows:
            ratio = spark_round(path.parent, args.spark_rows, args.rounds)
            print(f"spark {ratio:.2f} x mllib")
        lloyd_scans, colored_scans = t_lloyd / scan, passes / scan
        print(f"lloyd {lloyd_scans:.2f} scans T={args.rounds}, colored {colored_scans:.2f} scans, ", end="")
        print(f"peak {peak:.2f} GB")


if __name__ == "__main__":
    main()
