"""Location sweep benchmark: 100k points, every mechanism with a trial (its declared default parameters), 6
eps values, 3 trials, plus the figures.

Run: .venv/bin/python benchmarks/bench_location.py
Prints the seconds of the sweep and of the figures (target: under 5 s together), the median errors, and
the ratio against a baseline run in the same process (a single planar Laplace pass over the points). The
sweep's CPU seconds (all threads) are printed too: a loaded machine inflates wall-clock seconds, not CPU.
Per-mechanism seconds come from the sweep's progress callback (the hotspots' non-private k-means baseline
is computed once, inside the first hotspot mechanism).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd

from dpcore.location.geometry import Region
from dpcore.location.laplace import planar_laplace
from dpcore.location.sweep import comparable, location_sweep
from dpcore.mechanisms import Sampler
from dpcore.plots.location import error_vs_eps, true_vs_released

US = Region(24.0, 50.0, -125.0, -66.0)


def main() -> None:
    df = pd.read_csv("dpcore/samples/us_airports.csv")
    df = df[US.contains(df.latitude, df.longitude)]
    rng = np.random.default_rng(0)
    n = 100_000
    pick = rng.integers(0, len(df), n)
    # 100k synthetic visits: airports jittered by ~5 km, 10,000 users of 10 visits each.
    lat = np.clip(df.latitude.to_numpy()[pick] + rng.normal(0, 0.05, n), US.lat_min, US.lat_max)
    lon = np.clip(df.longitude.to_numpy()[pick] + rng.normal(0, 0.05, n), US.lon_min, US.lon_max)
    users = np.repeat(np.arange(n // 10), 10)

    t0 = time.perf_counter()
    planar_laplace(lat, lon, 0.01, Sampler.diagnostic(0))
    base = time.perf_counter() - t0

    marks: list[tuple[str, float, float]] = []

    def mark(_fraction: float, text: str) -> None:
        marks.append((text.split(":")[0].rstrip("."), time.perf_counter(), time.process_time()))

    t0, c0 = time.perf_counter(), time.process_time()
    sweep = location_sweep(
        lat, lon, users, comparable(), [0.1, 0.2, 0.5, 1.0, 2.0, 5.0], 3, region=US, progress=mark
    )
    t_sweep, c_sweep = time.perf_counter() - t0, time.process_time() - c0
    starts = [m for i, m in enumerate(marks) if i == 0 or m[0] != marks[i - 1][0]]  # ends with "done"
    parts = [(a[0], b[1] - a[1], b[2] - a[2]) for a, b in itertools.pairwise(starts)]
    t0 = time.perf_counter()
    figs = [error_vs_eps(sweep), true_vs_released(lat[:5000], lon[:5000], lat[:5000], lon[:5000])]
    t_fig = time.perf_counter() - t0
    print(sweep.groupby(["mechanism", "epsilon"]).value.median().unstack().round(4).to_string())
    for label, wall, cpu in parts:
        print(f"  {label:46s} wall {wall:5.2f} s, CPU {cpu:5.2f} s")
    print(f"baseline planar Laplace pass on {n} points: {base:.3f} s")
    print(
        f"sweep ({len(sweep)} runs): {t_sweep:.2f} s ({t_sweep / base:.0f}x baseline; CPU {c_sweep:.2f} s, "
        f"which the machine's load does not inflate); figures: {t_fig:.2f} s"
    )
    print(f"total {t_sweep + t_fig:.2f} s (target < 5 s), {len(figs)} figures")


if __name__ == "__main__":
    main()
