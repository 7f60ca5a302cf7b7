"""The clustering the local mechanisms release out of core, and each row's leave-one-out shift.

Ravi, Scaglione & Peisert's (2021) local mechanisms add noise to the true centroids of a clustering held
fixed by their guarantee. Out of core that clustering is k-means on a Bernoulli sample of the rows
(:class:`SamplePass`: the same rows on every path), then one pass (:class:`MomentsPass`) assigns every
row to its nearest sample centre and returns per cluster n_k, the sums, minima and maxima, hence the
true centroids c_k; each row's shift u_p = (x_p - c_k) / (n_k - 1) is computed by the mechanisms' own
passes, chunk by chunk on the rows grouped by cluster (:func:`grouped_chunks`). Every pass is a kernel of
:mod:`dpcore.outofcore.kernel` on the raw feature blocks of the table's feed (read into memory once when it
fits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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
from dpcore.outofcore.kernel import (
    Feed,
    Partial,
    by_columns,
    chunks,
    concatenate,
    first_minima,
    lift,
    lifted_chunks,
    scores,
)
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
        rows, keys = [], []
        for part in chunks(raw):  # cache-sized temporaries
            x = by_columns(self.prepare)(part, None).T
            key = sample_key(x, self.lower, self.upper, self.salt)
            keep = key < self.fraction if self.fraction < 1.0 else np.ones(len(x), dtype=bool)
            rows.append(x[keep])
            keys.append(key[keep])
        return np.ascontiguousarray(np.concatenate(rows)), np.concatenate(keys)


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


def grouped_chunks(raw: NDArray, prepare: Prepare, centres: NDArray) -> Iterator[tuple[NDArray, NDArray]]:
    """A block's rows by :func:`~dpcore.outofcore.kernel.chunks`: per chunk the scaled rows by columns,
    (d, m) float64, grouped by nearest ``centres`` (:func:`~dpcore.outofcore.kernel.nearest_labels`): the
    clusters' columns in cluster order, rows in order within a cluster (a stable sort); and the offsets
    (K + 1,) of the clusters' columns. Each cluster's columns are then one slice."""
    k, d = centres.shape
    lifted = lift(centres[None])
    small = np.min_scalar_type(max(k - 1, 0))  # a stable sort of 8- or 16-bit labels is a radix sort
    for Xa in lifted_chunks(raw, by_columns(prepare), d):
        xt = Xa[:d]
        lab = first_minima(scores(Xa, lifted, k))[0]
        order = np.argsort(lab.astype(small), kind="stable")
        offsets = np.zeros(k + 1, dtype=np.intp)
        np.cumsum(np.bincount(lab, minlength=k), out=offsets[1:])
        yield np.take(xt, order, axis=1), offsets


def chunk_moments(xt: NDArray, offsets: NDArray) -> Partial:
    """Per cluster the count, sums (pairwise, per cluster), minima and maxima of a grouped chunk
    (:func:`grouped_chunks`)."""
    k, d = len(offsets) - 1, xt.shape[0]
    n = np.diff(offsets).astype(float)
    sums, lo, hi = np.zeros((k, d)), np.full((k, d), np.inf), np.full((k, d), -np.inf)
    some = np.flatnonzero(n)
    for c in some:
        sums[c] = xt[:, offsets[c] : offsets[c + 1]].sum(axis=1)
    lo[some] = np.minimum.reduceat(xt, offsets[some], axis=1).T  # one call for every cluster
    hi[some] = np.maximum.reduceat(xt, offsets[some], axis=1).T
    return n, sums, lo, hi


class MomentsPass:
    """Kernel: per cluster of the nearest ``centres`` (ties to the lowest index) the count, sums, minima
    and maxima of a block's scaled rows, chunk by chunk (:func:`grouped_chunks`; combine with
    :func:`combine_moments`)."""

    def __init__(self, prepare: Prepare, centres: NDArray) -> None:
        self.prepare, self.centres = prepare, centres

    def __call__(self, raw: NDArray) -> Partial:
        out: Partial | None = None
        for xt, offsets in grouped_chunks(raw, self.prepare, self.centres):
            part = chunk_moments(xt, offsets)
            out = part if out is None else combine_moments(out, part)
        assert out is not None  # a block has rows
        return out


def combine_moments(a: Partial, b: Partial) -> Partial:
    return a[0] + b[0], a[1] + b[1], np.minimum(a[2], b[2]), np.maximum(a[3], b[3])


def true_centers(moments: Partial) -> tuple[NDArray, NDArray]:
    """The counts n_k and true centroids c_k = sum / n_k of a moments pass's result, exact (the value
    itself) where a feature is constant in the cluster, so those u_p are 0; refuses an empty cluster or
    a single row (no leave-one-out centroid)."""
    n, sums, lo, hi = moments
    k = len(n)
    if np.any(n == 0):
        raise ParameterError(f"A cluster of the sample's clustering got no row of the table; choose K < {k}.")
    if np.any(n < 2):
        raise ParameterError(singleton_message(int(np.flatnonzero(n < 2)[0])))
    centers = sums / n[:, None]
    constant = lo == hi
    centers[constant] = lo[constant]
    return n, centers


def clustered_shifts(
    features: TableFeatures, feed: Feed, k: int, random_state: Sampler, sample_rows: int = SAMPLE_ROWS
) -> Shifts:
    """The clustering (:func:`sample_centres`), one :class:`MomentsPass` under it, and the true centroids
    (:func:`true_centers`)."""
    start = time.perf_counter()
    centres, sample = sample_centres(features, feed, k, random_state, sample_rows)
    timings = {"clustering": time.perf_counter() - start}
    out = feed.reduce(MomentsPass(features.scaling_map, centres), combine_moments)
    assert out is not None  # the sample has rows
    n, centers = true_centers(out)
    timings["moments"] = time.perf_counter() - start - timings["clustering"]
    return Shifts(centres, sample, n, centers, timings)


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
