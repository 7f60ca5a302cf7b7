"""Utility metrics for released k-means centres (docs/mathematics.md).

Every metric here reads the true data: they are diagnostics for the curator, never released.

- WCSS(C) = sum_i min_k ||x_i - c_k||^2 (each row assigned to its nearest released centre).
- Fractional clustering loss = (WCSS(C_released) - WCSS(C_true)) / WCSS(C_true) (Ravi et al. 2021 Fig. 2).
- NICV = WCSS / n on data scaled to [-1, 1]^d (Su et al. 2016).
- Centroid MSE = sum_k ||c~_k - c_k||^2; for c~ = c + N(0, Sigma) its expectation is tr(Sigma).
- Label agreement (share of rows whose nearest-centre index is unchanged) and the adjusted Rand index.
- True vs noisy cluster populations (Ravi et al. 2021 Table 1).

Distances use ||x||^2 - 2 x.c + ||c||^2 after centring X at its mean (which keeps the cancellation
error small), chunked over rows so 1M-row tables stay within memory. The batched forms
(``*_many``) score many centre sets (trials x eps) with one matrix product per chunk.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

from dpcore.errors import ParameterError

_CHUNK_ENTRIES = 4_000_000  # rows x centres per distance block (~32 MB of float64)


def _as_data(X: np.ndarray) -> np.ndarray:
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ParameterError("X must be a non-empty 2-D array (rows x features).")
    if not np.all(np.isfinite(arr)):
        raise ParameterError("X contains NaN or infinite values; handle missing values before scoring.")
    return arr


def _as_centers(centers: np.ndarray, d: int) -> np.ndarray:
    """Centres as an array (..., K, d) with finite entries."""
    arr = np.asarray(centers, dtype=float)
    if arr.ndim < 2 or arr.shape[-1] != d or arr.shape[-2] == 0:
        raise ParameterError(f"centres must have shape (K, {d}) or (..., K, {d}); got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ParameterError("centres contain NaN or infinite values.")
    return arr


def nearest_sets(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For centre sets (T, K, d): nearest-centre index (T, n) and squared distance (T, n); unchecked inputs
    (the one nearest-centre search of the engine; :func:`nearest` validates and reshapes).

    Per chunk of rows one product C X' (T K x rows); the index of the minimum over the short K axis is
    found by K vectorised comparisons with the minimum (ties go to the lowest index), faster than argmin.
    """
    t, k, d = centers.shape
    n = X.shape[0]
    mean = X.mean(axis=0)
    flat = (centers - mean).reshape(t * k, d)
    c_sq = np.einsum("ij,ij->i", flat, flat)[:, None]
    flat *= -2.0
    labels = np.empty((t, n), dtype=np.intp)
    best = np.empty((t, n))
    step = max(1, _CHUNK_ENTRIES // (t * k))
    for start in range(0, n, step):
        rows = slice(start, start + step)
        xc = X[rows] - mean
        dist = flat @ xc.T
        dist += c_sq
        dist = dist.reshape(t, k, -1)
        low, lab = dist.min(axis=1), labels[:, rows]
        for j in range(k - 1, -1, -1):  # downwards: the lowest index of the minimum wins ties
            np.copyto(lab, j, where=dist[:, j] == low)
        low += np.einsum("ij,ij->i", xc, xc)
        best[:, rows] = np.maximum(low, 0.0)
    return labels, best


def nearest(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-centre index and squared distance per row, for centres (K, d) or many sets (..., K, d).

    Returns two arrays of shape (..., n): one batched matrix product per chunk of rows.
    """
    data = _as_data(X)
    c = _as_centers(centers, data.shape[1])
    labels, best = nearest_sets(data, c.reshape(-1, *c.shape[-2:]))
    shape = (*c.shape[:-2], data.shape[0])
    return labels.reshape(shape), best.reshape(shape)


def assign(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Index of the nearest centre for each row: shape (n,) for (K, d) centres, (..., n) for (..., K, d)."""
    return nearest(X, centers)[0]


def wcss(X: np.ndarray, centers: np.ndarray) -> float:
    """Within-cluster sum of squares sum_i min_k ||x_i - c_k||^2 of one centre set (K, d)."""
    return float(wcss_many(X, np.asarray(centers, dtype=float)[None])[0])


def wcss_many(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """WCSS of many centre sets at once: centres (..., K, d) -> array of shape (...)."""
    return nearest(X, centers)[1].sum(axis=-1)


def fractional_loss(X: np.ndarray, centers: np.ndarray, true_centers: np.ndarray) -> float:
    """(WCSS(released) - WCSS(true)) / WCSS(true) (Ravi et al. 2021 Fig. 2); 0 for the true centres."""
    base = wcss(X, true_centers)
    if base <= 0:
        raise ParameterError("the true clustering has WCSS 0 (every row on its centre); loss is undefined.")
    return (wcss(X, centers) - base) / base


def nicv(X: np.ndarray, centers: np.ndarray, bounds: tuple | None = None) -> float:
    """Normalised intra-cluster variance WCSS / n (Su et al.) on data scaled to [-1, 1]^d.

    Pass data already scaled, or ``bounds=(lo, hi)`` (public, per feature or scalar) to map both X
    and the centres affinely onto [-1, 1]^d first.
    """
    data = _as_data(X)
    c = _as_centers(centers, data.shape[1])
    if bounds is not None:
        data, c = scale_to_unit(data, bounds), scale_to_unit(c, bounds)
    return wcss(data, c) / data.shape[0]


def scale_to_unit(values: np.ndarray, bounds: tuple) -> np.ndarray:
    """Affine map of public bounds (lo, hi) onto [-1, 1]: 2 (v - lo) / (hi - lo) - 1."""
    lo, hi = (np.asarray(b, dtype=float) for b in bounds)
    width = hi - lo
    if np.any(width <= 0):
        raise ParameterError("every upper bound must exceed its lower bound; fix the public bounds.")
    return 2.0 * (np.asarray(values, dtype=float) - lo) / width - 1.0


def centroid_mse(noisy: np.ndarray, true: np.ndarray) -> float | np.ndarray:
    """Sum of squared errors sum_k ||c~_k - c_k||^2 over aligned centres; E = tr(Sigma) for Gaussian noise.

    ``noisy`` may carry leading batch axes (..., K, d); the result then has shape (...).
    """
    a = np.asarray(noisy, dtype=float)
    b = np.asarray(true, dtype=float)
    if a.shape[-2:] != b.shape[-2:]:
        raise ParameterError(f"noisy centres {a.shape} and true centres {b.shape} must both be (K, d).")
    out = ((a - b) ** 2).sum(axis=(-2, -1))
    return float(out) if np.ndim(out) == 0 else out


def match_centers(centers: np.ndarray, true_centers: np.ndarray) -> np.ndarray:
    """Reorder ``centers`` so row k is the one matched to true centre k (min total squared distance).

    Needed for mechanisms whose centres carry no cluster identity (DP-Lloyd, Blowfish, MCMC).
    """
    c = np.asarray(centers, dtype=float)
    t = np.asarray(true_centers, dtype=float)
    if c.shape != t.shape:
        raise ParameterError(f"cannot match {c.shape[0]} centres to {t.shape[0]} true centres.")
    cost = ((t[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
    _, cols = linear_sum_assignment(cost)
    return c[cols]


def label_agreement(X: np.ndarray, centers_a: np.ndarray, centers_b: np.ndarray) -> float:
    """Share of rows whose nearest-centre index is the same under centre sets a and b."""
    return float(np.mean(assign(X, centers_a) == assign(X, centers_b)))


def ari(X: np.ndarray, centers_a: np.ndarray, centers_b: np.ndarray) -> float:
    """Adjusted Rand index between the nearest-centre labellings of a and b (sklearn)."""
    return float(adjusted_rand_score(assign(X, centers_a), assign(X, centers_b)))


def ari_many(labels_true: np.ndarray, labels_pred: np.ndarray, n_clusters: int) -> np.ndarray:
    """Adjusted Rand index of one labelling against T labellings (T, n) at once (Hubert & Arabie).

    Same value as ``sklearn.metrics.adjusted_rand_score`` per row; labels must lie in [0, n_clusters).
    """
    truth = np.asarray(labels_true, dtype=np.intp)
    pred = np.atleast_2d(np.asarray(labels_pred, dtype=np.intp))
    t, n = pred.shape
    k = int(n_clusters)
    cells = (np.arange(t)[:, None] * k * k + truth[None, :] * k + pred).ravel()
    table = np.bincount(cells, minlength=t * k * k).reshape(t, k, k).astype(float)

    def pairs(v: np.ndarray) -> np.ndarray:
        return v * (v - 1.0) / 2.0

    sum_comb = pairs(table).sum(axis=(1, 2))
    sum_a = pairs(table.sum(axis=2)).sum(axis=1)
    sum_b = pairs(table.sum(axis=1)).sum(axis=1)
    total = pairs(float(n))
    expected = sum_a * sum_b / total
    max_index = (sum_a + sum_b) / 2.0
    denom = max_index - expected
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(denom == 0, 1.0, (sum_comb - expected) / denom)
    return out


def populations(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Number of rows whose nearest centre is k, for k = 0..K-1."""
    c = np.asarray(centers, dtype=float)
    return np.bincount(assign(X, c), minlength=c.shape[0])


def population_table(
    X: np.ndarray, true_centers: np.ndarray, noisy_centers: np.ndarray, *, match: bool = False
) -> pd.DataFrame:
    """True vs noisy cluster populations (Ravi et al. 2021 Table 1): columns true, noisy, change; index
    cluster.

    ``match=True`` first aligns the noisy centres to the true ones (for DP-Lloyd-type releases).
    """
    noisy = match_centers(noisy_centers, true_centers) if match else np.asarray(noisy_centers, dtype=float)
    true_pop = populations(X, true_centers)
    noisy_pop = populations(X, noisy)
    table = pd.DataFrame(
        {"true": true_pop, "noisy": noisy_pop, "change": noisy_pop - true_pop},
        index=pd.RangeIndex(true_pop.size, name="cluster"),
    )
    return table


def elbow_wcss(X: np.ndarray, ks: list[int] | range, random_state: int = 0) -> np.ndarray:
    """Non-private k-means (k-means++, scikit-learn) WCSS for each K: the elbow diagnostic."""
    from sklearn.cluster import KMeans

    data = _as_data(X)
    out = []
    for k in ks:
        if not 1 <= int(k) <= data.shape[0]:
            raise ParameterError(f"K = {k} must be between 1 and the number of rows ({data.shape[0]}).")
        out.append(KMeans(n_clusters=int(k), n_init=4, random_state=random_state).fit(data).inertia_)
    return np.asarray(out)
