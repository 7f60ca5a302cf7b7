"""The clustering the local mechanisms release out of core, and each row's leave-one-out shift.

Ravi, Scaglione & Peisert's (2021) local mechanisms add noise to the true centroids of a clustering held
fixed by their guarantee. Out of core that clustering is k-means on a Bernoulli sample of the rows
(:class:`SamplePass`: the same rows on every path), then one pass (:class:`MomentsPass`) assigns every
row to its nearest sample centre and returns per cluster n_k, the sums, minima and maxima, hence the
true centroids c_k; each row's shift u_p = (x_p - c_k) / (n_k - 1) (:func:`shifts`) is computed by the
mechanisms' own passes. Every pass is a kernel of :mod:`dpcore.outofcore.kernel` on the raw feature
blocks of the table's feed (read into memory once when it fits).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import NoiseCovariance, singleton_message
from dpcore.kmeans.registry import centroid_output
from dpcore.mechanisms import Sampler
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.kernel import Feed, Partial, concatenate, nearest_labels
from dpcore.registry import MechanismOutput

SAMPLE_ROWS = 100_000
KEY_SCALE = 65536.0  # the sample key's multipliers lie in [2^16, 2^17)
Prepare = Callable[[NDArray], NDArray]


@dataclass
class Shifts:
    """A clustering of the table (``centres``: k-means centres of the ``sample``, public inputs of the
    assignment); per cluster the ``counts`` n_k and true ``centers`` c_k; seconds per stage in
    ``timings``."""

    centres: NDArray
    sample: NDArray
    counts: NDArray
    centers: NDArray
    timings: dict[str, float] = field(default_factory=dict)


def sample_key(x: NDArray, lower: NDArray, upper: NDArray, salt: NDArray) -> NDArray:
    """frac(sum_j z_j s_j), z_j = (x_j - lower_j) / (upper_j - lower_j) (1 for a zero span), summed left
    to right: a row's sample key, a function of its values and the salt only."""
    span = np.where(upper > lower, upper - lower, 1.0)
    t = (x[:, 0] - lower[0]) / span[0] * salt[0]
    for j in range(1, x.shape[1]):
        t = t + (x[:, j] - lower[j]) / span[j] * salt[j]
    return t - np.floor(t)


class SamplePass:
    """Kernel: the scaled rows of a block whose :func:`sample_key` is below ``fraction`` (every row when it
    is 1), with their keys."""

    def __init__(self, prepare: Prepare, lower: NDArray, upper: NDArray, salt: NDArray, fraction: float):
        self.prepare, self.lower, self.upper, self.salt, self.fraction = prepare, lower, upper, salt, fraction

    def __call__(self, raw: NDArray) -> Partial:
        x = self.prepare(raw)
        key = sample_key(x, self.lower, self.upper, self.salt)
        keep = key < self.fraction if self.fraction < 1.0 else np.ones(len(x), dtype=bool)
        return np.ascontiguousarray(x[keep]), key[keep]


def keyed_sample(feed: Feed, prepare: Prepare, lower: NDArray, upper: NDArray, salt: NDArray,
                 fraction: float) -> NDArray:
    """The rows of ``feed`` (scaled by ``prepare`` into [lower, upper]) whose key is below ``fraction``,
    ordered by key (stable): a Bernoulli sample whose membership and order depend only on each row's
    values and the salt, so every engine and memory keep the same rows in the same order."""
    out = feed.reduce(SamplePass(prepare, lower, upper, salt, fraction), concatenate)
    if out is None:
        return np.empty((0, len(lower)))
    rows, keys = out
    return rows[np.argsort(keys, kind="stable")]


def sample_centres(
    features: TableFeatures, feed: Feed, k: int, random_state: Sampler, sample_rows: int = SAMPLE_ROWS
) -> tuple[NDArray, NDArray]:
    """k-means centres (K, d) of a Bernoulli sample of about ``sample_rows`` scaled rows
    (:func:`keyed_sample`, salted and seeded from the sampler), and the sample; the local guarantee holds
    with this clustering fixed. Every path draws the same sample in the same order, so the same seed gives
    the same centres."""
    seed = int(random_state.rng.integers(2**31 - 1))
    salt = KEY_SCALE * (1.0 + random_state.rng.random(features.n_features))
    fraction = min(1.0, sample_rows / max(feed.n, 1))
    X = keyed_sample(feed, features.scaling_map, features.lower, features.upper, salt, fraction)
    if X.shape[0] < 2 * k:
        raise ParameterError(f"The table has too few rows ({X.shape[0]}) for K = {k} clusters.")
    centres = KMeans(k, n_init=4, random_state=seed).fit(X).cluster_centers_
    return centres, X


class MomentsPass:
    """Kernel: per cluster of the nearest ``centres`` (ties to the lowest index) the count, sums, minima
    and maxima of a block's scaled rows (combine with :func:`combine_moments`)."""

    def __init__(self, prepare: Prepare, centres: NDArray) -> None:
        self.prepare, self.centres = prepare, centres

    def __call__(self, raw: NDArray) -> Partial:
        x = self.prepare(raw)
        k, d = self.centres.shape
        lab = nearest_labels(x, self.centres[None])[0]
        n = np.bincount(lab, minlength=k).astype(float)
        sums = np.stack([np.bincount(lab, weights=x[:, j], minlength=k) for j in range(d)], axis=1)
        lo, hi = np.full((k, d), np.inf), np.full((k, d), -np.inf)
        for c in np.flatnonzero(n):
            rows = x[lab == c]
            lo[c], hi[c] = rows.min(axis=0), rows.max(axis=0)
        return n, sums, lo, hi


def combine_moments(a: Partial, b: Partial) -> Partial:
    return a[0] + b[0], a[1] + b[1], np.minimum(a[2], b[2]), np.maximum(a[3], b[3])


def clustered_shifts(
    features: TableFeatures, feed: Feed, k: int, random_state: Sampler, sample_rows: int = SAMPLE_ROWS
) -> Shifts:
    """The clustering (:func:`sample_centres`), one :class:`MomentsPass` under it, and the true centroids:
    c_k = sum / n_k, exact (the value itself) where a feature is constant in the cluster, so those u_p
    are 0."""
    start = time.perf_counter()
    centres, sample = sample_centres(features, feed, k, random_state, sample_rows)
    timings = {"clustering": time.perf_counter() - start}
    out = feed.reduce(MomentsPass(features.scaling_map, centres), combine_moments)
    assert out is not None  # the sample has rows
    n, sums, lo, hi = out
    timings["moments"] = time.perf_counter() - start - timings["clustering"]
    if np.any(n == 0):
        raise ParameterError(f"A cluster of the sample's clustering got no row of the table; choose K < {k}.")
    if np.any(n < 2):
        raise ParameterError(singleton_message(int(np.flatnonzero(n < 2)[0])))
    centers = sums / n[:, None]
    constant = lo == hi
    centers[constant] = lo[constant]
    return Shifts(centres, sample, n, centers, timings)


def shifts(x: NDArray, labels: NDArray, centers: NDArray, counts: NDArray) -> NDArray:
    """u_p = (x_p - c_label) / (n_label - 1) for the rows x (m, d) of clusters ``labels``."""
    return (x - centers[labels]) / (counts[labels] - 1.0)[:, None]


def local_output(
    key: str, features: TableFeatures, cov: NoiseCovariance, random_state: Sampler, sample_rows: int
) -> MechanismOutput:
    """A local mechanism's release from its covariance: c_k + N(0, Sigma_k) drawn once by ``random_state``,
    the table and details as in memory plus how the clustering was made."""
    k, d = cov.centers.shape
    details: dict[str, Any] = {
        "n_clusters": k,
        "n_features": d,
        "calibration": cov.calibration,
        "clustering": (
            f"k-means on a Bernoulli sample of about {sample_rows:,} rows, then every row assigned to the "
            "nearest of its centres (held fixed by the guarantee)"
        ),
    }
    if cov.caveats:
        details["caveats"] = list(cov.caveats)
    return centroid_output(
        key,
        features,  # type: ignore[arg-type]
        cov.release(random_state),
        details,
        {"true_centers": cov.centers, "noise_trace": cov.trace, "optimality_gap": cov.gap},
    )
