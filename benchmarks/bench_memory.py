"""Peak memory of the comparisons (k-means sweep, location sweep) against the 1 GB target.

Each case runs in its own subprocess; its peak resident set size is read from ``ru_maxrss`` of the child
(Linux: KiB) and printed with the ratio to the 1 GB target. The baseline is the same child that only
imports dpcore and builds the data (what the comparison adds is the difference).

Cases (synthetic blobs, 3 features, K = 4, public bounds [-10, 10]): the k-means comparison at the page's
defaults (white, white per cluster, colored, DP-Lloyd, Blowfish; 11 eps from 0.1 to 10; 20 trials) in one
engine call on 25k, 100k, 400k and 930k rows; 500 trials (the page's maximum) on 5k rows; DP-Lloyd + MCMC
with 100 chains per eps (the page's maximum) over 3 eps on 25k rows (500 steps per chain: the memory
does not grow with the steps); the location comparison (planar Laplace, mean positions, hotspots; 11 eps,
50 trials: the maximum) on 930k rows.

Measured on a loaded 2-core machine (peak RSS before the chunking -> after): 25k rows 1261 -> 301 MB,
100k 4420 -> 310 MB, 400k (11 GB reported) -> 345 MB, 930k (about 26 GB reported) -> 393 MB, 500 trials on 5k
rows 5477 -> 308 MB, MCMC 2399 -> 434 MB, location comparison on 930k rows 12096 -> 493 MB.

    .venv/bin/python benchmarks/bench_memory.py            # every case
    .venv/bin/python benchmarks/bench_memory.py 25k 500t   # some cases
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

TARGET_MB = 1024.0
EPS = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0]
CASES: dict[str, tuple[str, int, int, str]] = {  # name: (kind, rows, trials, what)
    "25k": ("kmeans", 25_000, 20, "k-means comparison, page defaults, 25k rows"),
    "100k": ("kmeans", 100_000, 20, "k-means comparison, page defaults, 100k rows"),
    "400k": ("kmeans", 400_000, 20, "k-means comparison, page defaults, 400k rows"),
    "930k": ("kmeans", 930_000, 20, "k-means comparison, page defaults, 930k rows"),
    "500t": ("kmeans", 5_000, 500, "k-means comparison, 500 trials, 5k rows"),
    "mcmc": ("mcmc", 25_000, 100, "DP-Lloyd + MCMC, 100 chains x 3 eps, 25k rows"),
    "loc": ("location", 930_000, 50, "location comparison, 50 trials x 11 eps, 930k rows"),
}


def _blobs(rows: int):
    import numpy as np

    rng = np.random.default_rng(0)
    centres = np.array([[-5.0, -5.0, 0.0], [5.0, -5.0, 2.0], [-5.0, 5.0, -2.0], [5.0, 5.0, 0.0]])
    labels = rng.integers(0, 4, rows)
    X = np.clip(centres[labels] + rng.normal(size=(rows, 3)), -10.0, 10.0)
    return X, labels


def child(name: str) -> None:
    """Run one case (or its baseline, ``name + ':base'``) and print peak RSS in MB and the seconds."""
    import numpy as np

    case, _, base = name.partition(":")
    kind, rows, trials, _ = CASES[case]
    X, labels = _blobs(rows)
    t0 = time.perf_counter()
    if base:
        pass
    elif kind == "kmeans":
        from dpcore.kmeans import KMEANS, sweep
        from dpcore.policy import FullDomainGraph

        graph = FullDomainGraph()
        defaults = [k for k, s in KMEANS.items() if s.compared_by_default]  # the page's
        sweep(X, labels, defaults, EPS, trials, 1e-6, bounds=(-10.0, 10.0), graph=graph, random_state=0)
    elif kind == "mcmc":
        from dpcore.kmeans import sweep
        from dpcore.kmeans.mechanisms import dp_lloyd_mcmc

        eps = [0.5, 1.0, 2.0]
        sweep(
            X,
            labels,
            [dp_lloyd_mcmc.KEY],
            eps,
            trials,
            0.0,
            bounds=(-10.0, 10.0),
            random_state=0,
            mcmc_steps=500,
        )
    else:
        from dpcore.location.geometry import Region
        from dpcore.location.sweep import location_sweep

        lat, lon = 35.0 + X[:, 0], -100.0 + 2.0 * X[:, 1]
        users = np.arange(rows)
        mechs = ["planar_laplace", "blowfish_mean", "dp_mean", "dp_hotspots"]
        location_sweep(lat, lon, users, mechs, EPS, trials, region=Region(24.0, 50.0, -125.0, -66.0))
    seconds = time.perf_counter() - t0
    print(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0:.1f} {seconds:.2f}")


def _run(arg: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, __file__, "--child", arg], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{arg} failed:\n{out.stderr[-2000:]}")
    mb, seconds = out.stdout.split()[-2:]
    return float(mb), float(seconds)


def main(names: list[str]) -> None:
    print(f"{'case':58s} {'peak MB':>9s} {'added MB':>9s} {'/ 1 GB':>7s} {'seconds':>8s}", flush=True)
    for name in names or list(CASES):
        peak, seconds = _run(name)
        base, _ = _run(name + ":base")
        row = f"{CASES[name][3]:58s} {peak:9.0f} {peak - base:9.0f} {peak / TARGET_MB:7.2f} {seconds:8.1f}"
        print(row, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main(sys.argv[1:])
