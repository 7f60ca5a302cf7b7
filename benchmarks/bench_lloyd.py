"""DP-Lloyd vs diffprivlib's KMeans (NICV), MCMC post-processing vs DP-Lloyd (WCSS), chain speed.

Run: .venv/bin/python benchmarks/bench_lloyd.py [--trials 20] [--mcmc-trials 6]

NICV = WCSS / n on data scaled to [-1, 1]^d (Su et al. 2016). Both DP methods get the same public
bounds [-1, 1]^d. diffprivlib is a baseline only (it overspends for d >= 5: docs/mathematics.md), so its
numbers on the 26-feature Marketing table are at a larger effective epsilon than ours.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans

from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.kmeans.mcmc import mcmc_postprocess
from dpcore.mechanisms import Sampler

SAMPLE = Path(__file__).resolve().parents[1] / "dpcore" / "samples" / "marketing_campaign.csv"


def diffprivlib_kmeans() -> type:
    """diffprivlib 0.6 imports names scikit-learn 1.9 removed from sklearn.tree._tree; restore them."""
    import sklearn.tree._tree as tree

    for name, value in (("DOUBLE", np.float64), ("DTYPE", np.float32)):
        if not hasattr(tree, name):
            setattr(tree, name, value)
    from diffprivlib.models import KMeans as DPLibKMeans

    return DPLibKMeans


def marketing() -> np.ndarray:
    df = pd.read_csv(SAMPLE, sep=";").drop(columns=["ID"])
    df = df.dropna(subset=["Income"])
    for col in ("Education", "Marital_Status"):
        df[col] = df[col].astype("category").cat.codes
    dates = pd.to_datetime(df["Dt_Customer"], dayfirst=True)
    df["Dt_Customer"] = (dates - dates.min()).dt.days
    X = df.to_numpy(dtype=float)
    X = X[:, X.max(axis=0) > X.min(axis=0)]  # Z_CostContact, Z_Revenue are constant
    lo, hi = X.min(axis=0), X.max(axis=0)  # benchmark only: bounds from the data
    return 2 * (X - lo) / (hi - lo) - 1


def blobs(n: int = 5000, d: int = 2, k: int = 4, seed: int = 0, spread: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-0.7, 0.7, (k, d))
    return np.clip(centres[rng.integers(0, k, n)] + rng.normal(0, spread, (n, d)), -1, 1)


def wcss(X: np.ndarray, centres: np.ndarray) -> float:
    d2 = (X * X).sum(1)[:, None] - 2 * X @ centres.T + (centres * centres).sum(1)[None, :]
    return float(np.maximum(d2.min(axis=1), 0).sum())


def compare_with_diffprivlib(datasets: dict[str, tuple[np.ndarray, int]], trials: int) -> None:
    DPLib = diffprivlib_kmeans()
    print(f"\nNICV (median over {trials} trials; lower is better; ratio = ours / diffprivlib)")
    print(f"{'data':<22}{'eps':>6}{'ours':>10}{'diffprivlib':>13}{'ratio':>8}{'T ours':>8}{'T dpl':>7}")
    for name, (X, k) in datasets.items():
        n, d = X.shape
        lo, hi = -np.ones(d), np.ones(d)
        for eps in (0.25, 0.5, 1.0):
            ours, theirs, t_ours, t_dpl = [], [], [], []
            for seed in range(trials):
                est = DPLloydKMeans(k, eps, (lo, hi), random_state=Sampler.diagnostic(seed)).fit(X)
                ours.append(wcss(X, est.cluster_centers_) / n)
                t_ours.append(est.n_iter_)
                dpl = DPLib(n_clusters=k, epsilon=eps, bounds=(lo, hi), random_state=seed).fit(X)
                theirs.append(wcss(X, dpl.cluster_centers_) / n)
                t_dpl.append(dpl.n_iter_)
            a, b = float(np.median(ours)), float(np.median(theirs))
            print(
                f"{name:<22}{eps:>6}{a:>10.4f}{b:>13.4f}{a / b:>8.3f}"
                f"{np.median(t_ours):>8.0f}{np.median(t_dpl):>7.0f}"
            )
        km = KMeans(k, n_init=10, random_state=0).fit(X)
        print(f"{name:<22}{'inf':>6}{wcss(X, km.cluster_centers_) / n:>10.4f}   (non-private k-means)")


def compare_mcmc(datasets: dict[str, tuple[np.ndarray, int]], trials: int) -> None:
    print(f"\nWCSS, MCMC post-processing vs DP-Lloyd (median over {trials} trials, 30,000 steps)")
    print(f"{'data':<22}{'eps':>6}{'T':>6}{'DP-Lloyd':>11}{'MCMC':>11}{'ratio':>8}{'MCMC wins':>11}")
    for name, (X, k) in datasets.items():
        d = X.shape[1]
        for eps in (0.1, 0.25, 0.5):
            for n_iter in (5, None):
                plain, post = [], []
                for seed in range(trials):
                    random_state = Sampler.diagnostic(1000 + seed)
                    est = DPLloydKMeans(
                        k, eps, (-np.ones(d), np.ones(d)), n_iter=n_iter, random_state=random_state
                    )
                    est.fit(X)
                    res = mcmc_postprocess(est.released_state(), random_state=random_state)
                    plain.append(wcss(X, est.cluster_centers_))
                    post.append(wcss(X, res.cluster_centers))
                a, b = float(np.median(plain)), float(np.median(post))
                wins = int(np.sum(np.array(post) < np.array(plain)))
                label = "5" if n_iter else "auto"
                print(f"{name:<22}{eps:>6}{label:>6}{a:>11.1f}{b:>11.1f}{b / a:>8.3f}{wins:>8}/{trials}")


def chain_speed(datasets: dict[str, tuple[np.ndarray, int]]) -> None:
    print("\nChain speed: default chain (30,000 steps, T = 5) vs the 5 s target and vs sklearn KMeans")
    for name, (X, k) in datasets.items():
        d = X.shape[1]
        est = DPLloydKMeans(
            k, 0.5, (-np.ones(d), np.ones(d)), n_iter=5, random_state=Sampler.diagnostic(0)
        ).fit(X)
        state = est.released_state()
        KMeans(k, n_init=10, random_state=0).fit(X)  # warm-up (thread pools, imports)
        t0 = time.perf_counter()
        KMeans(k, n_init=10, random_state=0).fit(X)
        base = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        mcmc_postprocess(state, random_state=Sampler.diagnostic(0))
        chain, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"{name:<22} n={X.shape[0]} d={d}: chain {chain:.2f} s ({chain / 5.0:.2f} x the 5 s target, "
            f"{chain / 30000 * 1e6:.0f} us/step, CPU {cpu:.2f} s), sklearn KMeans(n_init=10) {base:.2f} s, "
            f"ratio {chain / base:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--mcmc-trials", type=int, default=6)
    args = parser.parse_args()
    datasets = {
        "marketing (d=26, K=4)": (marketing(), 4),
        "blobs (d=2, K=4)": (blobs(), 4),
        "blobs (d=5, K=4)": (blobs(d=5, seed=1), 4),
    }
    compare_with_diffprivlib(datasets, args.trials)
    chain_speed(datasets)
    compare_mcmc(datasets, args.mcmc_trials)


if __name__ == "__main__":
    main()
