"""The colored-noise release out of core: a clustering, then a few passes over the table.

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one
of its own rows with the clustering held fixed (Ravi, Scaglione & Peisert 2021; probabilistic DP with
their calibration, the (eps, delta) inequality with the analytic one of Balle & Wang 2018); not DP.
Released: c_k + N(0, Sigma_k), Sigma_k trace-optimal subject to u_p' Sigma_k^+ u_p <= gamma for every row p
of cluster k, u_p = (x_p - c_k) / (n_k - 1).

Passes (kernels of :mod:`dpcore.outofcore.kernel` over the table's feed, read into memory once when it
fits; only the sample and the few rows the certificates name are kept):

0. clustering: k-means on a Bernoulli sample of about ``sample_rows`` rows (public centres m_k), the
   rows whose salted key of their own values falls below the sampling fraction (the same on every path);
1. assignment and moments: each row to its nearest m_k; per cluster n_k, sum x, min and max per
   feature, giving the true centroids c_k (exact where a feature is constant in the cluster);
2. certificates: the exact solver of ``dpcore.kmeans.covariance`` runs in memory on the sample's rows of
   each cluster (as u_p with the table's c_k and n_k); a pass (:class:`CertificatePass`) computes every
   row's u_p' Sigma_k^+ u_p (and, when Sigma_k has rank < d, the part of u_p outside its span), the
   largest per cluster, and returns the rows above 1 + tol / 2 and the near-binding ones above ``NEAR``
   (at most ``ADDED`` per cluster, largest first); if any is above, they join the solver's rows and the
   solver runs again (at most ``max_certificates`` passes). The final Sigma_k is scaled by the largest
   constraint value over ALL rows (times the solver's rounding margin), so every row's constraint holds
   whatever rows the solver saw; the solver's dual weights on its rows give the lower bound, hence the
   reported optimality gap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    NoiseCovariance,
    noise_gamma,
    rounding_margin,
    solve_cluster,
    threadpools,
)
from dpcore.kmeans.registry import check_release_sampler
from dpcore.mechanisms import Calibration, Sampler
from dpcore.outofcore.clustering import SAMPLE_ROWS, Prepare, Shifts, clustered_shifts, local_output, shifts
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.kernel import Feed, Partial, nearest_labels
from dpcore.registry import MechanismOutput

ADDED = 1024  # violating rows per cluster fetched by a certificate pass
POOL = 2048  # sample rows per cluster the solver starts from
NEAR = 0.9  # rows with u' Sigma^+ u above this (of 1) are returned by a certificate pass


@dataclass
class ColoredRun:
    """One out-of-core colored release: the output, its covariance, the clustering centres (public inputs
    of the assignment), the number of passes after the clustering and the seconds spent per stage."""

    output: MechanismOutput
    covariance: NoiseCovariance
    centres: NDArray
    passes: int
    timings: dict[str, float] = field(default_factory=dict)


def _outermost(v: NDArray, m: int) -> NDArray:
    """The ``m`` rows of ``v`` farthest out in its own whitened coordinates (largest v' C^+ v, C = v'v):
    the sample rows that can bind; the interior ones cannot (certificates add any the sample lacks)."""
    if v.shape[0] <= m:
        return v
    ev, vecs = np.linalg.eigh(v.T @ v)
    keep = ev > max(float(ev.max()), 0.0) * 1e-12
    z = v @ (vecs[:, keep] / np.sqrt(ev[keep]))
    return v[np.argpartition(-np.einsum("ij,ij->i", z, z), m - 1)[:m]]


def _top(label: NDArray, score: NDArray, per_cluster: int) -> NDArray:
    """Indices of at most ``per_cluster`` rows of each cluster, largest ``score`` first (ties in order)."""
    ranked = np.lexsort((-score, label))  # by cluster, then largest score first; stable
    first = np.searchsorted(label[ranked], label[ranked], side="left")
    return ranked[np.arange(len(ranked)) - first < per_cluster]


class CertificatePass:
    """Kernel of a certificate pass: for a block's rows (scaled by ``prepare``, labelled by the clustering
    ``centres``) the shifts u, q = ||u' F_k||^2 (Sigma_k^+ = F_k F_k') and, where ``bases`` has rank < d,
    whether u leaves span(Sigma_k); returns per cluster the largest q (inf for a row outside) and the
    rows that are bad (outside, or q > 1 + tol / 2) or near-binding (q > NEAR), at most ``ADDED`` per
    cluster, largest first: (worst, label, q, bad, outside, x). Combine with :func:`combine_found`."""

    def __init__(self, prepare: Prepare, centres: NDArray, centers: NDArray, counts: NDArray,
                 factors: list[NDArray], bases: list[NDArray], tol: float) -> None:
        self.prepare, self.centres, self.centers, self.counts = prepare, centres, centers, counts
        self.factors, self.bases, self.tol = factors, bases, tol

    def __call__(self, raw: NDArray) -> Partial:
        x = self.prepare(raw)
        k, d = self.centers.shape
        lab = nearest_labels(x, self.centres[None])[0]
        u = shifts(x, lab, self.centers, self.counts)
        rows = np.arange(len(x))
        # every cluster's form on every row (one product each), then each row's own cluster's value
        q = np.stack([np.einsum("ij,ij->i", p, p) for p in (u @ f for f in self.factors)])[lab, rows]
        outside = np.zeros(len(x), dtype=bool)
        if any(b.shape[1] < d for b in self.bases):  # a row outside span(Sigma_k) has no noise at all
            norm2 = np.einsum("ij,ij->i", u, u)
            inside = np.stack([np.einsum("ij,ij->i", p, p) for p in (u @ b for b in self.bases)])[lab, rows]
            deficient = np.array([b.shape[1] < d for b in self.bases])[lab]
            outside = deficient & (norm2 - inside > 1e-9 * norm2)
        score = np.where(outside, np.inf, q)
        worst = np.full(k, -np.inf)
        np.maximum.at(worst, lab, score)
        bad = outside | (q > 1.0 + self.tol / 2)
        pick = np.flatnonzero(bad | (q > NEAR))
        pick = pick[_top(lab[pick], score[pick], ADDED)]
        return worst, lab[pick], q[pick], bad[pick], outside[pick], np.ascontiguousarray(x[pick])


def combine_found(a: Partial, b: Partial) -> Partial:
    """Two certificate partials: the larger worst per cluster, the rows of both trimmed to ``ADDED`` per
    cluster, largest first (ties: a's rows first)."""
    rest = [np.concatenate([x, y]) for x, y in zip(a[1:], b[1:], strict=True)]
    lab, q, _, outside = rest[:4]
    keep = _top(lab, np.where(outside, np.inf, q), ADDED)
    return (np.maximum(a[0], b[0]), *(r[keep] for r in rest))


def _certified(
    features: TableFeatures, feed: Feed, clustering: Shifts, tol: float, max_certificates: int
) -> tuple[list[NDArray], list[NDArray], list[float], int]:
    """The solver and its certificate passes (module docstring, 2.) over ``feed`` under ``clustering``:
    per cluster the basis of Sigma_k, its eigenvalues scaled to hold on every row, the solver's lower
    bound; and the number of passes (the moments pass included)."""
    timings, m_centres, sample = clustering.timings, clustering.centres, clustering.sample
    n, centers = clustering.counts, clustering.centers
    k, d = m_centres.shape
    passes = 1

    # the exact solver starts on the sample's rows of each cluster; certificate passes add the table's
    s_label = nearest_labels(sample, m_centres[None])[0]
    pool = {c: _outermost(sample[s_label == c] - centers[c], POOL) + centers[c] for c in range(k)}

    bases: list[NDArray] = []
    eigs: list[NDArray] = []
    lowers: list[float] = []
    for attempt in range(1, max_certificates + 1):
        mark = time.perf_counter()
        with threadpools().limit(limits=1, user_api="blas"):  # small dense algebra, as in memory
            sols = [solve_cluster((pool[c] - centers[c]) / (n[c] - 1), tol) for c in range(k)]
        timings["solver"] = timings.get("solver", 0.0) + time.perf_counter() - mark
        factors = [s.basis / np.sqrt(s.eigenvalues) if s.eigenvalues.size else s.basis for s in sols]
        mark = time.perf_counter()
        certificate = CertificatePass(
            features.scaling_map, m_centres, centers, n, factors, [s.basis for s in sols], tol
        )
        found = feed.reduce(certificate, combine_found)
        assert found is not None  # the clustering has rows
        worst, f_label, _, f_bad, f_outside, f_x = found
        timings["certificates"] = timings.get("certificates", 0.0) + time.perf_counter() - mark
        passes += 1
        bases, lowers = [s.basis for s in sols], [s.lower for s in sols]
        # scaled by the largest constraint value of ALL rows: feasible whatever rows the solver saw
        eigs = [
            s.eigenvalues * max(1.0, float(w) * rounding_margin(s.eigenvalues, d))
            for s, w in zip(sols, np.maximum(worst, 0.0), strict=True)
        ]
        if not f_bad.any():
            break
        if attempt == max_certificates:
            if f_outside.any():
                raise ParameterError(
                    f"Rows of the table lie outside the colored noise's span after {max_certificates} "
                    "certificate passes; run it with more passes (max_certificates)."
                )
            break  # feasible by the scaling above; the gap says how far from the optimum
        for c in range(k):
            pool[c] = np.unique(np.vstack([pool[c], f_x[f_label == c]]), axis=0)
    return bases, eigs, lowers, passes


def colored_release(
    features: TableFeatures,
    n_clusters: int,
    *,
    key: str,
    epsilon: float,
    delta: float,
    random_state: int | Sampler | None = None,
    calibration: Calibration = "analytic",
    tol: float = 1e-6,
    sample_rows: int = SAMPLE_ROWS,
    max_certificates: int = 3,
) -> ColoredRun:
    """The release of colored-noise mechanism ``key`` on ``features`` (module docstring): one clustering,
    then 1 + up to ``max_certificates`` passes; noise drawn once by ``random_state`` (secure, or a labelled
    demo seed)."""
    random_state = check_release_sampler(random_state)
    if not delta > 0:
        raise ParameterError("The colored mechanism is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = noise_gamma(epsilon, delta, calibration)
    start = time.perf_counter()
    with features.feed() as feed:
        clustering = clustered_shifts(features, feed, n_clusters, random_state, sample_rows)
        bases, eigs, lowers, passes = _certified(features, feed, clustering, tol, max_certificates)
    timings, m_centres = clustering.timings, clustering.centres
    centers, n = clustering.centers, clustering.counts
    upper = [float(e.sum()) for e in eigs]
    lower = sum(lowers)
    gaps = [up / lo - 1.0 if lo > 0 else 0.0 for up, lo in zip(upper, lowers, strict=True)]
    cov = NoiseCovariance(
        kind="trace_optimal",
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=sum(upper) / lower - 1.0 if lower > 0 else 0.0,
        centers=centers,
        counts=n.astype(int),
        bases=tuple(bases),
        unit_eigenvalues=tuple(eigs),
        cluster_gaps=np.array(gaps),
    )
    output = local_output(key, features, cov, random_state, sample_rows)
    timings["total"] = time.perf_counter() - start
    return ColoredRun(output, cov, m_centres, passes, timings)
