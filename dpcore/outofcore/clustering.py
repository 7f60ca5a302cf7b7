"""The clustering the local mechanisms release out of core, and each row's leave-one-out shift.

Ravi, Scaglione & Peisert's (2021) local mechanisms add noise to the true centroids of a clustering held
fixed by their guarantee. Out of core (DuckDB or Spark through Ibis) that clustering is k-means on a
Bernoulli sample of the rows (:func:`keyed_sample`: the same rows in every engine), then one pass assigns
every row to its nearest sample centre and returns per cluster n_k, the sums, minima and maxima, hence
the true centroids c_k; each row's shift u_p = (x_p - c_k) / (n_k - 1) is then an expression the
mechanisms' passes read (:func:`clustered_shifts`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
from numpy.typing import NDArray
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import NoiseCovariance, singleton_message
from dpcore.kmeans.registry import centroid_output
from dpcore.mechanisms import Sampler
from dpcore.outofcore.features import TableFeatures, const, nearest_label, total
from dpcore.registry import MechanismOutput

SAMPLE_ROWS = 100_000
KEY_SCALE = 65536.0  # the sample key's multipliers lie in [2^16, 2^17)


@dataclass
class Shifts:
    """A clustering of the table (``centres``: k-means centres of the ``sample``, public inputs of the
    assignment) and ``rows``: scaled x0..x{d-1}, ``label`` and the shifts u0..u{d-1}; per cluster the
    ``counts`` n_k and true ``centers`` c_k; seconds per stage in ``timings``."""

    centres: NDArray
    sample: NDArray
    rows: ir.Table
    counts: NDArray
    centers: NDArray
    timings: dict[str, float] = field(default_factory=dict)


def clustered_shifts(
    features: TableFeatures, k: int, sampler: Sampler, sample_rows: int = SAMPLE_ROWS
) -> Shifts:
    """The clustering (:func:`sample_centres`), one pass of :func:`moments` under it, and the shifts: c_k =
    sum / n_k, exact (the value itself) where a feature is constant in the cluster, so those u_p are 0."""
    start = time.perf_counter()
    centres, sample = sample_centres(features, k, sampler, sample_rows)
    timings = {"clustering": time.perf_counter() - start}
    d = centres.shape[1]
    t = labelled(features, centres)
    mom = moments(t, k, d)
    timings["moments"] = time.perf_counter() - start - timings["clustering"]
    n = mom["n"]
    centers = mom["sums"] / n[:, None]
    constant = mom["lo"] == mom["hi"]
    centers[constant] = mom["lo"][constant]
    return Shifts(centres, sample, centred_shifts(t, centers, n), n, centers, timings)


def sample_centres(
    features: TableFeatures, k: int, sampler: Sampler, sample_rows: int = SAMPLE_ROWS
) -> tuple[NDArray, NDArray]:
    """k-means centres (K, d) of a Bernoulli sample of about ``sample_rows`` scaled rows
    (:func:`keyed_sample`, salted and seeded from the sampler), and the sample; the local guarantee holds
    with this clustering fixed. Every engine draws the same sample in the same order, so the same seed
    gives the same centres."""
    n = features.n_rows()
    seed = int(sampler.rng.integers(2**31 - 1))
    salt = KEY_SCALE * (1.0 + sampler.rng.random(features.n_features))
    rows = features.rows
    scaled = rows.select(**{f"x{j}": x for j, x in enumerate(features.scaled(rows))})
    X = keyed_sample(scaled, features.lower, features.upper, salt, min(1.0, sample_rows / n))
    if X.shape[0] < 2 * k:
        raise ParameterError(f"The table has too few rows ({X.shape[0]}) for K = {k} clusters.")
    centres = KMeans(k, n_init=4, random_state=seed).fit(X).cluster_centers_
    return centres, X


def keyed_sample(t: ir.Table, lower: NDArray, upper: NDArray, salt: NDArray, fraction: float) -> NDArray:
    """The rows of ``t`` (x0..x{d-1} in [lower, upper]) whose key frac(sum_j z_j s_j), z_j = (x_j - lower_j)
    / (upper_j - lower_j) and s the ``salt``, is below ``fraction`` (all rows when it is 1), ordered by key.

    A Bernoulli sample whose membership and order depend only on each row's values and the salt: DuckDB,
    Spark and numpy compute the key with the same operations, bit for bit, so they keep the same rows in
    the same order (an engine's own sampling and scan order differ). Equal rows share a key."""
    d = len(salt)
    span = np.where(upper > lower, upper - lower, 1.0)
    z = [(t[f"x{j}"] - const(lower[j])) / const(span[j]) * const(salt[j]) for j in range(d)]
    x = total(z)
    keyed = t.mutate(key=x - x.floor().cast("float64"))
    if fraction < 1.0:
        keyed = keyed.filter(keyed.key < const(fraction))
    return keyed.order_by("key").drop("key").to_pandas().to_numpy(dtype=float)


def labelled(features: TableFeatures, centres: NDArray) -> ir.Table:
    """Scaled rows x0..x{d-1} with ``label``, the nearest centre (ties to the lowest index)."""
    rows = features.rows
    return nearest_label(rows.select(**{f"x{j}": x for j, x in enumerate(features.scaled(rows))}), centres)


def joined(t: ir.Table, columns: dict[str, NDArray]) -> ir.Table:
    """``t`` with per-cluster constants as columns: ``columns[name][label]`` (a K-row table joined on the
    label, so each row reads its cluster's values without a CASE per value)."""
    k = len(next(iter(columns.values())))
    values = {n: np.asarray(v, dtype=float) for n, v in columns.items()}
    consts = ibis.memtable({"label": np.arange(k, dtype=np.int64), **values})
    return t.join(consts, "label")


def moments(t: ir.Table, k: int, d: int) -> dict[str, NDArray]:
    """Pass 1: per cluster n, sums, min and max per feature (true centroids; constant features)."""
    aggs: dict[str, Any] = {"n": t.count()}
    for j in range(d):
        aggs[f"s{j}"] = t[f"x{j}"].sum()
        aggs[f"lo{j}"] = t[f"x{j}"].min()
        aggs[f"hi{j}"] = t[f"x{j}"].max()
    out = t.group_by("label").aggregate(**aggs).to_pandas().sort_values("label")
    if len(out) < k:
        raise ParameterError(f"A cluster of the sample's clustering got no row of the table; choose K < {k}.")
    n = out["n"].to_numpy(dtype=float)
    if np.any(n < 2):
        raise ParameterError(singleton_message(int(np.flatnonzero(n < 2)[0])))
    col = lambda p: out[[f"{p}{j}" for j in range(d)]].to_numpy(dtype=float)  # noqa: E731
    return {"n": n, "sums": col("s"), "lo": col("lo"), "hi": col("hi")}


def centred_shifts(t: ir.Table, centers: NDArray, counts: NDArray) -> ir.Table:
    """``t`` with u0..u{d-1}: u_j = (x_j - c_label,j) / (n_label - 1)."""
    d = centers.shape[1]
    t = joined(t, {"size": counts - 1.0, **{f"c{j}": centers[:, j] for j in range(d)}})
    u = {f"u{j}": (t[f"x{j}"] - t[f"c{j}"]) / t.size for j in range(d)}
    return t.mutate(**u).drop("size", *[f"c{j}" for j in range(d)])


def local_output(
    key: str, features: TableFeatures, cov: NoiseCovariance, sampler: Sampler, sample_rows: int
) -> MechanismOutput:
    """A local mechanism's release from its covariance: c_k + N(0, Sigma_k) drawn once by ``sampler``, the
    table and details as in memory plus how the clustering was made."""
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
        cov.release(sampler),
        details,
        {"true_centers": cov.centers, "noise_trace": cov.trace, "optimality_gap": cov.gap},
    )
