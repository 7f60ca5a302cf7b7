"""The colored-noise release out of core: a clustering, then one pass over the table (more only when it
cannot certify every row).

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one
of its own rows with the clustering held fixed (Ravi, Scaglione & Peisert 2021; probabilistic DP with
their calibration, the (eps, delta) inequality with the analytic one of Balle & Wang 2018); not DP.
Released: c_k + N(0, Sigma_k), Sigma_k trace-optimal subject to u_p' Sigma_k^+ u_p <= gamma for every row p
of cluster k, u_p = (x_p - c_k) / (n_k - 1).

Passes (kernels of :mod:`dpcore.outofcore.kernel` over the table's feed, read into memory once when it
fits; only the sample and the few rows the passes name are kept):

0. clustering: k-means on a Bernoulli sample of about ``sample_rows`` rows (public centres m_k), the
   rows whose salted key of their own values falls below the sampling fraction (the same on every path);
   per cluster of the sample its mean s_k and a shape F~_k, from the exact solver on the sample's rows
   (:func:`_sample_shapes`);
1. moments and candidates (:class:`CandidatesPass`): each row to its nearest m_k; per cluster n_k, sum x,
   min and max per feature, giving the true centroids c_k (exact where a feature is constant in the
   cluster), and the ``CANDIDATES`` rows of largest score ||F~_k' (x - s_k)||^2, the rows likely to bind;
   every other row of the cluster scores at most tau_k, the smallest kept score;
2. certificate: the exact solver of ``dpcore.kmeans.covariance`` runs in memory on the sample's outermost
   rows and the candidates (as u_p with the table's c_k and n_k); every candidate's u_p' Sigma_k^+ u_p is
   computed, and every other row's is bounded above by the largest value of the form over the ellipsoid
   ||F~_k' (x - s_k)||^2 <= tau_k (:func:`_outside_bound`, with rounding margins). When no candidate is
   above 1 + tol / 2 and each bound times the rounding margin is at most 1, every row is certified
   without another pass. Otherwise certificate passes (:class:`CertificatePass`) compute every row's
   value (and, when Sigma_k has rank < d, the part of u_p outside its span), the largest per cluster, and
   return the rows above 1 + tol / 2 and the near-binding ones above ``NEAR`` (at most ``ADDED`` per
   cluster, largest first); if any is above, they join the solver's rows and the solver runs again (at
   most ``max_certificates`` passes).

The final Sigma_k is scaled by max(1, w_k x the solver's rounding margin), w_k the largest constraint value
over ALL rows of the cluster (when the bound certifies the rows outside the candidates, they cannot change
this factor, so w_k over the candidates gives the same one), so every row's constraint holds whatever rows
the solver saw; the solver's dual weights on its rows give the lower bound, hence the reported optimality
gap.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    ClusterSolution,
    NoiseCovariance,
    noise_gamma,
    rounding_margin,
    solve_cluster,
    threadpools,
)
from dpcore.kmeans.registry import check_release_sampler
from dpcore.mechanisms import Calibration, Sampler
from dpcore.outofcore.clustering import (
    SAMPLE_ROWS,
    Prepare,
    chunk_moments,
    combine_moments,
    grouped_chunks,
    local_output,
    sample_centres,
    true_centers,
)
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.kernel import Feed, Partial, nearest_labels
from dpcore.registry import MechanismOutput

ADDED = 1024  # violating rows per cluster fetched by a certificate pass
CANDIDATES = 16384  # outermost table rows per cluster fetched by the moments pass
POOL = 2048  # sample rows per cluster the solver starts from
NEAR = 0.9  # rows with u' Sigma^+ u above this (of 1) are returned by a certificate pass


@dataclass
class ColoredRun:
    """One out-of-core colored release: the output, its covariance, the clustering centres (public inputs
    of the assignment), the number of passes after the clustering and the seconds spent per stage
    (``read`` into memory, ``clustering`` with the sample's shapes, ``moments`` the pass with the candidates,
    ``solver``, ``certificates`` when a pass was needed, ``close`` of the feed, ``output``, ``total``)."""

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


class TopRows:
    """A block's rows kept chunk by chunk: at most ``limit`` per cluster, the largest scores (ties: the
    earlier row), each with its columns (shaped as the no-row arrays ``empty``: e.g. q, flags, the row x).
    Only rows scoring above ``floor`` (per cluster; default -inf) enter. Trimmed to ``limit`` (a partition,
    rows kept in their order) whenever a cluster holds twice as many; then a row needs a score above the
    smallest kept to enter (it could not be kept otherwise)."""

    def __init__(self, k: int, limit: int, empty: tuple[NDArray, ...], floor: NDArray | None = None) -> None:
        self.limit, self.empty = limit, empty
        self.parts: list[list[tuple[NDArray, ...]]] = [[] for _ in range(k)]
        self.held = np.zeros(k, dtype=np.intp)
        self.floor = np.full(k, -np.inf) if floor is None else np.array(floor, dtype=float)

    def add(self, c: int, score: NDArray, *columns: NDArray) -> None:
        """Rows of cluster ``c`` (in the rows' order) with their ``score`` and columns."""
        keep = score > self.floor[c]
        if not keep.any():
            return
        self.parts[c].append((score[keep], *(col[keep] for col in columns)))
        self.held[c] += int(np.count_nonzero(keep))
        if self.held[c] > 2 * self.limit:
            self._trim(c)

    def _trim(self, c: int) -> None:
        joined = [np.concatenate(a) for a in zip(*self.parts[c], strict=True)]
        score = joined[0]
        if score.size > self.limit:
            floor = np.partition(score, score.size - self.limit)[score.size - self.limit]
            keep = score > floor
            keep[np.flatnonzero(score == floor)[: self.limit - int(np.count_nonzero(keep))]] = True
            joined = [a[keep] for a in joined]
            self.floor[c] = floor
        self.parts[c] = [tuple(joined)]
        self.held[c] = joined[0].size

    def rows(self) -> Partial:
        """(label, score, *columns) of the kept rows, cluster by cluster, largest score first."""
        kept = []
        for c in np.flatnonzero(self.held):
            self._trim(c)
            part = self.parts[c][0]
            order = np.argsort(-part[0], kind="stable")
            kept.append(tuple(a[order] for a in part))
        label = np.repeat(np.arange(len(self.parts)), self.held)
        score = np.concatenate([np.zeros(0), *(p[0] for p in kept)])
        columns = (np.concatenate([e, *(p[j + 1] for p in kept)]) for j, e in enumerate(self.empty))
        return label, score, *columns


def combine_top(a: Partial, b: Partial, limit: int) -> Partial:
    """Two partials (label, score, *columns) of kept rows: both trimmed to ``limit`` per cluster, largest
    score first (ties: a's rows first)."""
    rest = [np.concatenate([x, y]) for x, y in zip(a, b, strict=True)]
    return tuple(r[_top(rest[0], rest[1], limit)] for r in rest)


class CandidatesPass:
    """Kernel of the moments pass (:func:`~dpcore.outofcore.clustering.chunk_moments`: the true centroids)
    that also keeps each cluster's outermost rows, those scoring above the :class:`Shape`'s floor by its
    form ||F' (x - s)||^2 (at most ``CANDIDATES``, the largest): the rows likely to bind. Returns (n,
    sums, minima, maxima, label, score, x); combine with :func:`combine_candidates`."""

    def __init__(self, prepare: Prepare, centres: NDArray, shapes: list[Shape]) -> None:
        self.prepare, self.centres = prepare, centres
        self.means = np.stack([s.mean for s in shapes])
        self.factors = [s.factor for s in shapes]
        self.floors = np.array([s.floor for s in shapes])

    def __call__(self, raw: NDArray) -> Partial:
        k, d = self.means.shape
        moments: Partial | None = None
        top = TopRows(k, CANDIDATES, (np.zeros((0, d)),), self.floors)
        for xt, offsets in grouped_chunks(raw, self.prepare, self.centres):
            part = chunk_moments(xt, offsets)
            moments = part if moments is None else combine_moments(moments, part)
            for c in np.flatnonzero(np.diff(offsets)):
                rows = xt[:, offsets[c] : offsets[c + 1]]
                z = self.factors[c].T @ (rows - self.means[c][:, None])
                top.add(c, np.einsum("ij,ij->j", z, z), rows.T)
        assert moments is not None  # a block has rows
        return *moments, *top.rows()


def combine_candidates(a: Partial, b: Partial) -> Partial:
    return *combine_moments(a[:4], b[:4]), *combine_top(a[4:], b[4:], CANDIDATES)


def constraint_values(
    rows: NDArray, center: NDArray, count: float, factor: NDArray, basis: NDArray
) -> tuple[NDArray, NDArray]:
    """For the rows (d, m) of one cluster (columns): q = ||F' u||^2 (Sigma^+ = F F', u = (x - c) / (n - 1),
    computed in this order) and whether u leaves span(Sigma) (``basis`` of rank < d; such a row gets no
    noise at all)."""
    u = rows - center[:, None]
    u /= count - 1.0
    z = factor.T @ u
    q = np.einsum("ij,ij->j", z, z)
    outside = np.zeros(len(q), dtype=bool)
    if basis.shape[1] < len(center):
        norm2 = np.einsum("ij,ij->j", u, u)
        p = basis.T @ u
        outside = norm2 - np.einsum("ij,ij->j", p, p) > 1e-9 * norm2
    return q, outside


class CertificatePass:
    """Kernel of a certificate pass: for a block's rows (scaled by ``prepare``, labelled by the clustering
    ``centres``, by chunks: :func:`~dpcore.outofcore.clustering.grouped_chunks`) the values q and flags
    of :func:`constraint_values`; returns per cluster the largest q (inf for a row outside) and the rows
    that are bad (outside, or q > 1 + tol / 2) or near-binding (q > NEAR), at most ``ADDED`` per cluster,
    largest first: (worst, label, q, bad, outside, x). Combine with :func:`combine_found`."""

    def __init__(self, prepare: Prepare, centres: NDArray, centers: NDArray, counts: NDArray,
                 factors: list[NDArray], bases: list[NDArray], tol: float) -> None:
        self.prepare, self.centres, self.centers, self.counts = prepare, centres, centers, counts
        self.factors, self.bases, self.tol = factors, bases, tol

    def __call__(self, raw: NDArray) -> Partial:
        k, d = self.centers.shape
        worst = np.full(k, -np.inf)
        empty = (np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), np.zeros((0, d)))
        top = TopRows(k, ADDED, empty)
        for xt, offsets in grouped_chunks(raw, self.prepare, self.centres):
            for c in np.flatnonzero(np.diff(offsets)):
                rows = xt[:, offsets[c] : offsets[c + 1]]
                q, outside = constraint_values(rows, self.centers[c], self.counts[c], self.factors[c],
                                               self.bases[c])
                score = np.where(outside, np.inf, q)
                worst[c] = max(worst[c], float(score.max()))
                bad = outside | (q > 1.0 + self.tol / 2)
                pick = bad | (q > NEAR)
                if pick.any():
                    top.add(c, score[pick], q[pick], bad[pick], outside[pick], rows.T[pick])
        label, _, *found = top.rows()
        return worst, label, *found


def combine_found(a: Partial, b: Partial) -> Partial:
    """Two certificate partials: the larger worst per cluster, the rows of both trimmed to ``ADDED`` per
    cluster, largest first (ties: a's rows first)."""
    scored = [(p[1], np.where(p[4], np.inf, p[2]), *p[2:]) for p in (a, b)]
    label, _, *rest = combine_top(*scored, ADDED)
    return np.maximum(a[0], b[0]), label, *rest


@dataclass(frozen=True)
class Shape:
    """A full-rank quadratic form of one cluster, ||F' (x - mean)||^2 with F = basis / root (``basis``
    orthonormal d x d, ``root`` > 0): its inverse F'^-1 = basis diag(root) is exact up to rounding; the
    moments pass keeps the rows scoring above ``floor``."""

    mean: NDArray
    basis: NDArray
    root: NDArray
    floor: float = -np.inf

    @property
    def factor(self) -> NDArray:
        return self.basis / self.root


def _sample_shapes(
    sample: NDArray, label: NDArray, k: int, fraction: float
) -> tuple[list[Shape], dict[int, NDArray]]:
    """Per cluster of the sample (rows ``label``led by the clustering, a ``fraction`` of the table): the
    :class:`Shape` of its covariance C around its mean (x' C^-1 x; exact where a feature is constant; the
    identity when C is singular), whose largest values are the table's rows likely to bind (the
    trace-optimal Sigma has the covariance's shape for elliptical data), with the floor above which about
    ``CANDIDATES`` / 2 of the table's rows are expected to score (above which fraction x CANDIDATES / 2
    of the sample's rows score; -inf when that is all of them); and the solver's starting pool (the
    sample's ``POOL`` outermost rows)."""
    d = sample.shape[1]
    shapes, pool = [], {}
    for c in range(k):
        rows = sample[label == c]
        mean = rows.mean(axis=0) if len(rows) else np.zeros(d)
        if len(rows):
            constant = rows.min(axis=0) == rows.max(axis=0)
            mean[constant] = rows[0, constant]
        pool[c] = _outermost(rows - mean, POOL) + mean
        basis, root = np.eye(d), np.ones(d)
        if len(rows) > d:
            ev, vecs = np.linalg.eigh(np.cov(rows.T))
            if ev.min() > ev.max() * 1e-12:
                basis, root = vecs, np.sqrt(ev)
        z = (rows - mean) @ (basis / root)
        score = np.einsum("ij,ij->i", z, z)
        above = int(fraction * CANDIDATES / 2)
        floor = float(np.partition(score, len(score) - above - 1)[len(score) - above - 1]) if (
            0 < above < len(score)) else -np.inf
        shapes.append(Shape(mean, basis, root, floor))
    return shapes, pool


def _outside_bound(sol: ClusterSolution, center: NDArray, count: float, shape: Shape, tau: float) -> float:
    """An upper bound of q = u' Sigma^+ u (Sigma from ``sol``, u = (x - c) / (n - 1)) over every x with
    computed ||F~' (x - s)||^2 <= tau (``shape``); inf when Sigma has rank < d.

    With y = F~' (x - s), ||y||^2 <= tau rho~ (rho~: the rounding margin of the computed form) and x - s =
    F~'^-1 y, so F' u = M y + a, M = F' F~'^-1 / (n - 1), a = F' (s - c) / (n - 1), and q <= (||a|| +
    sqrt(tau rho~) ||M||_2)^2 (triangle inequality), times both forms' rounding margins."""
    d = len(center)
    if sol.eigenvalues.size < d:
        return np.inf
    factor = sol.basis / np.sqrt(sol.eigenvalues)
    m = factor.T @ (shape.basis * shape.root) / (count - 1.0)
    a = factor.T @ (shape.mean - center) / (count - 1.0)
    rho = rounding_margin(shape.root**2, d)
    radius = math.sqrt(max(tau, 0.0) * rho)
    bound = (float(np.linalg.norm(a)) + radius * float(np.linalg.norm(m, 2))) ** 2
    return bound * rho * rounding_margin(sol.eigenvalues, d)


def _bounded_worst(
    sols: list[ClusterSolution], factors: list[NDArray], centers: NDArray, counts: NDArray,
    shapes: list[Shape], candidates: Partial, tol: float,
) -> NDArray | None:
    """The largest constraint value per cluster over the candidates (module docstring, 2.), when they and
    the bound on every other row certify the solution: no candidate above 1 + tol / 2 or outside the
    span, and every bound times the rounding margin at most 1; else None (a certificate pass decides)."""
    label, score, x = candidates
    k, d = centers.shape
    worst = np.full(k, -np.inf)
    for c in range(k):
        mine = label == c
        kept = int(np.count_nonzero(mine))
        if kept:
            q, outside = constraint_values(x[mine].T, centers[c], counts[c], factors[c], sols[c].basis)
            if outside.any() or q.max() > 1.0 + tol / 2:
                return None
            worst[c] = q.max()
        if counts[c] > kept:  # the other rows score at most the floor, or the smallest kept when trimmed
            tau = float(score[mine].min()) if kept == CANDIDATES else shapes[c].floor
            bound = _outside_bound(sols[c], centers[c], counts[c], shapes[c], tau)
            if not bound * rounding_margin(sols[c].eigenvalues, d) <= 1.0:
                return None
    return worst


def _certified(
    features: TableFeatures, feed: Feed, centres: NDArray, counts: NDArray, centers: NDArray,
    pool: dict[int, NDArray], shapes: list[Shape], candidates: Partial, tol: float, max_certificates: int,
    timings: dict[str, float],
) -> tuple[list[NDArray], list[NDArray], list[float], int]:
    """The solver on ``pool`` and its certificate (module docstring, 2.) under the clustering ``centres``:
    per cluster the basis of Sigma_k, its eigenvalues scaled to hold on every row, the solver's lower
    bound; and the number of certificate passes (0 when the candidates and the bound certify)."""
    n, (k, d) = counts, centers.shape

    def solve() -> tuple[list[ClusterSolution], list[NDArray]]:
        mark = time.perf_counter()
        with threadpools().limit(limits=1, user_api="blas"):  # small dense algebra, as in memory
            sols = [solve_cluster((pool[c] - centers[c]) / (n[c] - 1), tol) for c in range(k)]
        timings["solver"] = timings.get("solver", 0.0) + time.perf_counter() - mark
        return sols, [s.basis / np.sqrt(s.eigenvalues) if s.eigenvalues.size else s.basis for s in sols]

    sols, factors = solve()
    worst = _bounded_worst(sols, factors, centers, n, shapes, candidates, tol)
    passes = 0
    while worst is None:
        mark = time.perf_counter()
        certificate = CertificatePass(
            features.scaling_map, centres, centers, n, factors, [s.basis for s in sols], tol
        )
        found = feed.reduce(certificate, combine_found)
        assert found is not None  # the clustering has rows
        all_rows, f_label, _, f_bad, f_outside, f_x = found
        timings["certificates"] = timings.get("certificates", 0.0) + time.perf_counter() - mark
        passes += 1
        if not f_bad.any():
            worst = all_rows
        elif passes == max_certificates:
            if f_outside.any():
                raise ParameterError(
                    f"Rows of the table lie outside the colored noise's span after {max_certificates} "
                    "certificate passes; run it with more passes (max_certificates)."
                )
            worst = all_rows  # feasible by the scaling below; the gap says how far from the optimum
        else:
            for c in range(k):
                pool[c] = np.unique(np.vstack([pool[c], f_x[f_label == c]]), axis=0)
            sols, factors = solve()
    # scaled by the largest constraint value of ALL rows: feasible whatever rows the solver saw
    eigs = [
        s.eigenvalues * max(1.0, float(w) * rounding_margin(s.eigenvalues, d))
        for s, w in zip(sols, np.maximum(worst, 0.0), strict=True)
    ]
    return [s.basis for s in sols], eigs, [s.lower for s in sols], passes


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
    then one pass, and up to ``max_certificates`` certificate passes when it cannot certify every row;
    noise drawn once by ``random_state`` (secure, or a labelled demo seed)."""
    random_state = check_release_sampler(random_state)
    if not delta > 0:
        raise ParameterError("The colored mechanism is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = noise_gamma(epsilon, delta, calibration)
    start = time.perf_counter()
    with features.feed() as feed:
        timings = {"read": time.perf_counter() - start}
        mark = time.perf_counter()
        m_centres, sample = sample_centres(features, feed, n_clusters, random_state, sample_rows)
        k = len(m_centres)
        label = nearest_labels(sample, m_centres[None])[0]
        shapes, pool = _sample_shapes(sample, label, k, len(sample) / max(feed.n, 1))
        timings["clustering"] = time.perf_counter() - mark
        mark = time.perf_counter()
        moments = CandidatesPass(features.scaling_map, m_centres, shapes)
        found = feed.reduce(moments, combine_candidates)
        assert found is not None  # the sample has rows
        n, centers = true_centers(found[:4])
        c_label, _, c_x = candidates = found[4:]
        for c in range(k):  # the table's outermost rows join the sample's
            pool[c] = np.vstack([pool[c], c_x[c_label == c]])  # repeated rows are repeated constraints
        timings["moments"] = time.perf_counter() - mark
        bases, eigs, lowers, passes = _certified(
            features, feed, m_centres, n, centers, pool, shapes, candidates, tol, max_certificates, timings
        )
        mark = time.perf_counter()
    timings["close"] = time.perf_counter() - mark  # the feed released
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
    mark = time.perf_counter()
    output = local_output(key, features, cov, random_state, sample_rows)
    timings["output"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - start
    return ColoredRun(output, cov, m_centres, 1 + passes, timings)
