"""Speed and accuracy of the colored-noise covariance solver, in one process.

Targets: the colored covariance to a relative gap <= 1e-6 costs no more than
KMeans(n_clusters=8, n_init=1).fit on the same 200k x 10 data (ratio <= 1); 1M x 20, K = 10 end to end
(KMeans fit + covariance) under 10 s; and the same gap on badly scaled data (raw breast cancer, K = 3).
Fit and solve alternate in each repeat so that both see the same machine load; medians are printed.
Run: .venv/bin/python benchmarks/bench_colored.py
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, make_blobs

from dpcore.kmeans import RankDeficientWarning, colored_noise_covariance

T = TypeVar("T")


def _data(n: int, d: int, k: int, seed: int) -> np.ndarray:
    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=1.5, random_state=seed)
    return x


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def compare(n: int = 200_000, d: int = 10, k: int = 8, seed: int = 0, repeats: int = 7) -> None:
    x = _data(n, d, k, seed)
    fits, solves, ratios = [], [], []
    for _ in range(repeats):
        km, t_fit = _timed(lambda: KMeans(n_clusters=k, n_init=1, random_state=seed).fit(x))
        cov, t_cov = _timed(lambda: colored_noise_covariance(x, km.labels_, 1.0, 1e-5))  # noqa: B023
        fits.append(t_fit)
        solves.append(t_cov)
        ratios.append(t_cov / t_fit)
    print(
        f"n={n} d={d} K={k}  sklearn_fit={statistics.median(fits):.3f}s  "
        f"covariance={statistics.median(solves):.3f}s  ratio={statistics.median(ratios):.2f} "
        f"(median of {repeats}; target <= 1)  gap={cov.gap:.2e}"
    )


def raw_breast_cancer(repeats: int = 5) -> None:
    """Features from ~1e-3 (fractal dimension) to ~1e3 (area): the badly scaled case."""
    x = load_breast_cancer().data
    labels = KMeans(n_clusters=3, random_state=0, n_init=1).fit(x).labels_
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficientWarning)
        for _ in range(repeats):
            cov, t = _timed(lambda: colored_noise_covariance(x, labels, 1.0, 1e-5))
            times.append(t)
    print(
        f"raw breast cancer n={x.shape[0]} d={x.shape[1]} K=3: covariance={statistics.median(times):.3f}s  "
        f"gap={cov.gap:.2e} (relative; target <= 1e-6)  absolute gap={cov.absolute_gap:.3e} "
        f"of trace {cov.trace:.6e}"
    )


def end_to_end(n: int = 1_000_000, d: int = 20, k: int = 10, seed: int = 1) -> None:
    x = _data(n, d, k, seed)
    t0 = time.perf_counter()
    km = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(x)
    t_fit = time.perf_counter() - t0
    cov = colored_noise_covariance(x, km.labels_, 1.0, 1e-5)
    total = time.perf_counter() - t0
    print(
        f"end-to-end n={n} d={d} K={k}: {total:.2f}s (kmeans {t_fit:.2f}s, covariance {total - t_fit:.2f}s; "
        f"target < 10 s)  gap={cov.gap:.2e}"
    )


if __name__ == "__main__":
    compare()
    raw_breast_cancer()
    end_to_end()
