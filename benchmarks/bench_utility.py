"""Utility of the DP k-means mechanisms: normalised k-means loss (cost / n) against the non-private floor.

Run: .venv/bin/python benchmarks/bench_utility.py [--runs 10] [--datasets synth-k16,synth-k64,digits,s1]

Datasets (public bounds given with each, never read from the data):
- synth-k16, synth-k64: the distribution of Google's clustering demo (google/differential-privacy,
  learning/clustering/demo/data_generation.py), regenerated here: k centres uniform in the ball of radius
  0.99, n / k rows per centre with N(0, (1 / (100 sqrt d))^2) per coordinate, rows scaled into the unit
  ball; 20,000 x 100. Public: radius 1 (the generator's), box [-1, 1]^d.
- digits: scikit-learn's 8 x 8 digits (1,797 x 64, pixel values 0..16), k = 10; public box [0, 16]^64,
  radius 0 (half the box's diagonal).
- s1: a 2-D mixture like the S1 set of Fränti & Virmajoki 2006 (5,000 rows, 15 Gaussian clusters),
  k = 15; public box [0, 1]^2, radius 0.

Each mechanism runs ``--runs`` times per eps (0.5, 1, 2; delta = 1e-6 for the Gaussian ones) with
diagnostic noise. One line per dataset and eps: our best DP mechanism's mean loss (and its name), box
DP-Lloyd's, the non-private floor (scikit-learn k-means, 10 starts) and best / DP-Lloyd. The last line is
``synth-k16 eps=1 best <loss> (<name>), floor <floor>``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from dpcore.kmeans.mechanisms import dp_lloyd, gaussian_lloyd, lsh_coreset
from dpcore.kmeans.registry import KMEANS
from dpcore.mechanisms import Sampler

EPS = (0.5, 1.0, 2.0)
DELTA = 1e-6
MECHANISMS = (dp_lloyd.KEY, gaussian_lloyd.KEY, lsh_coreset.KEY)
MODULES = dict(zip(MECHANISMS, (dp_lloyd, gaussian_lloyd, lsh_coreset), strict=True))


def ball(n: int, d: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    """n points uniform in the d-ball of ``radius`` (direction Gaussian, radius u^(1/d))."""
    g = rng.normal(size=(n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True) * (radius * rng.random(n) ** (1.0 / d))[:, None]


def google_synthetic(n: int, d: int, k: int, rng: np.random.Generator, ratio: float = 100.0) -> np.ndarray:
    """Google's demo distribution: centres in the ball of radius 1 - 1/ratio, Gaussian clusters of sd
    1 / (ratio sqrt d) per coordinate, n // k rows each (the rest in the last), rows scaled into the ball."""
    centres = ball(k, d, 1.0 - 1.0 / ratio, rng)
    sizes = np.full(k, n // k)
    sizes[-1] += n % k
    x = np.repeat(centres, sizes, axis=0) + rng.normal(0.0, 1.0 / (ratio * np.sqrt(d)), (n, d))
    return x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))


def s1_like(rng: np.random.Generator, n: int = 5000, k: int = 15) -> np.ndarray:
    """15 Gaussian clusters in the unit square (sd 0.03, centres in [0.1, 0.9]^2), clipped to it."""
    centres = rng.uniform(0.1, 0.9, (k, 2))
    return np.clip(centres[rng.integers(0, k, n)] + rng.normal(0.0, 0.03, (n, 2)), 0.0, 1.0)


def datasets(names: list[str]) -> dict[str, tuple[np.ndarray, int, tuple[np.ndarray, np.ndarray], float]]:
    """name -> (X, k, public bounds, public radius or 0)."""
    rng = np.random.default_rng(2021)
    out = {}
    for name in names:
        if name.startswith("synth-k"):
            k = int(name.removeprefix("synth-k"))
            out[name] = (
                google_synthetic(20_000, 100, k, rng),
                k,
                (np.full(100, -1.0), np.full(100, 1.0)),
                1.0,
            )
        elif name == "digits":
            X = load_digits().data.astype(float)
            out[name] = (X, 10, (np.zeros(64), np.full(64, 16.0)), 0.0)
        elif name == "s1":
            out[name] = (s1_like(rng), 15, (np.zeros(2), np.ones(2)), 0.0)
        else:
            raise SystemExit(f"unknown dataset {name!r}: choose from synth-k16, synth-k64, digits, s1")
    return out


def loss(X: np.ndarray, centres: np.ndarray) -> float:
    """Normalised k-means loss: mean squared distance to the nearest centre."""
    d2 = (X * X).sum(1)[:, None] - 2 * X @ centres.T + (centres * centres).sum(1)[None, :]
    return float(np.maximum(d2.min(axis=1), 0).mean())


def fitter(key: str, k: int, bounds: tuple, radius: float) -> Callable[[float, Sampler], object]:
    """eps, random_state -> the unfitted estimator of registry mechanism ``key`` (default parameters)."""
    params = KMEANS[key].validate_params({"n_clusters": k})
    if not KMEANS[key].needs_delta:  # DP-Lloyd: Laplace noise, no ball
        return lambda eps, s: dp_lloyd.build(eps, bounds, params, s)
    params["radius"] = radius
    return lambda eps, s: MODULES[key].build(eps, DELTA, bounds, params, s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--datasets", default="synth-k16,synth-k64,digits,s1")
    args = parser.parse_args()
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    start = time.perf_counter()
    last = None
    for name, (X, k, bounds, radius) in datasets(names).items():
        floor = KMeans(k, n_init=10, random_state=0).fit(X).inertia_ / X.shape[0]
        for eps in EPS:
            means = {}
            for i, key in enumerate(MECHANISMS):
                make = fitter(key, k, bounds, radius)
                random_state = Sampler.diagnostic(1000 * i + int(eps * 10))
                means[key] = float(
                    np.mean(
                        [loss(X, make(eps, random_state).fit(X).cluster_centers_) for _ in range(args.runs)]
                    )
                )
            best = min(means, key=means.__getitem__)
            base = means[dp_lloyd.KEY]
            print(
                f"{name:10s} eps={eps:g}  best {means[best]:.4g} ({best})  dp_lloyd {base:.4g}  "
                f"floor {floor:.4g}  best/dp_lloyd {means[best] / base:.3f}  "
                + "  ".join(f"{m} {v:.4g}" for m, v in means.items() if m not in (best, dp_lloyd.KEY)),
                flush=True,
            )
            if name == "synth-k16" and eps == 1.0:
                last = f"synth-k16 eps=1 best {means[best]:.4g} ({best}), floor {floor:.4g}"
    print(f"({args.runs} runs per mechanism and eps; {time.perf_counter() - start:.0f} s)")
    if last is not None:
        print(last)


if __name__ == "__main__":
    main()
