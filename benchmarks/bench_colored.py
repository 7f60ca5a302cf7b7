"""Speed of the colored-noise covariance solver against scikit-learn KMeans, in one process.

Target (MECHANISMS 3.3 task): colored covariance to gap <= 1e-6 costs no more than
KMeans(n_clusters=8, n_init=1).fit on the same 200k x 10 data (ratio <= 1), and 1M x 20, K = 10 end to
end (KMeans fit + covariance) under 10 s. Run: .venv/bin/python benchmarks/bench_colored.py
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from dpcore.kmeans import colored_noise_covariance


def _data(n: int, d: int, k: int, seed: int) -> np.ndarray:
    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=1.5, random_state=seed)
    return x


def compare(n: int = 200_000, d: int = 10, k: int = 8, seed: int = 0) -> None:
    x = _data(n, d, k, seed)
    t0 = time.perf_counter()
    km = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(x)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    cov = colored_noise_covariance(x, km.labels_, 1.0, 1e-5)
    t_cov = time.perf_counter() - t0
    print(
        f"n={n} d={d} K={k}  sklearn_fit={t_fit:.3f}s  covariance={t_cov:.3f}s  "
        f"ratio={t_cov / t_fit:.2f}  gap={cov.gap:.2e}"
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
    end_to_end()
