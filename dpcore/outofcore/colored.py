"""The colored-noise release out of core: a clustering, then a few passes over the table.

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one
of its own rows with the clustering held fixed (Ravi, Scaglione & Peisert 2021; probabilistic DP with
their calibration, the (eps, delta) inequality with the analytic one of Balle & Wang 2018); not DP.
Released: c_k + N(0, Sigma_k), Sigma_k trace-optimal subject to u_p' Sigma_k^+ u_p <= gamma for every row p
of cluster k, u_p = (x_p - c_k) / (n_k - 1).

Passes (DuckDB or Spark through Ibis; the rows never come to Python, only the sample and the few
rows the certificates name):

0. clustering: k-means on a Bernoulli sample of about ``sample_rows`` rows (public centres m_k), the
   rows whose salted key of their own values falls below the sampling fraction (the same in every engine);
1. assignment and moments: each row to its nearest m_k; per cluster n_k, sum x, min and max per
   feature, giving the true centroids c_k (exact where a feature is constant in the cluster);
2. certificates: the exact solver of ``dpcore.kmeans.covariance`` runs in memory on the sample's rows of
   each cluster (as u_p with the table's c_k and n_k); a pass computes every row's u_p' Sigma_k^+ u_p
   (and, when Sigma_k has rank < d, the part of u_p outside its span) and returns the rows above
   1 + tol / 2 and the near-binding ones above ``NEAR`` (at most ``ADDED`` per cluster, largest first,
   so each cluster's largest value is among them); if any is above, they join the solver's rows and
   the solver runs again (at most ``max_certificates`` passes). In a full-rank cluster a row is only
   scored where the bound ||F_k||_2^2 (||x_p - m_k|| + ||m_k - c_k||)^2 / (n_k - 1)^2, Sigma_k^+ =
   F_k F_k', exceeds ``NEAR`` (:func:`_cuts`): the first pass reads the table once to cache the rows
   near that cut (the engine spills beyond its memory cap), the later ones read only those. The final
   Sigma_k is scaled by the largest constraint value over ALL rows (times the solver's rounding margin),
   so every row's constraint holds whatever rows the solver saw; the solver's dual weights on its rows
   give the lower bound, hence the reported optimality gap.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import ibis
import ibis.expr.types as ir
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
from dpcore.outofcore.clustering import (
    SAMPLE_ROWS,
    Shifts,
    centred_shifts,
    clustered_shifts,
    joined,
    labelled,
    local_output,
)
from dpcore.outofcore.features import TableFeatures, cached, const, total
from dpcore.registry import MechanismOutput

KEY = "colored"
ADDED = 1024  # violating rows per cluster fetched by a certificate pass
POOL = 2048  # sample rows per cluster the solver starts from
NEAR = 0.9  # rows with u' Sigma^+ u above this (of 1) are returned by a certificate pass
BOUND_MARGIN = 1e-6  # relative rounding allowance of the bound that skips a row's quadratic form
LOOSE = 0.9  # the first certificate pass caches the rows with r2 above this times its cuts


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


def _top_rows(t: ir.Table, score: ir.FloatingValue, keep: ir.BooleanValue, per_cluster: int) -> ir.Table:
    """The rows with ``keep``, at most ``per_cluster`` of each cluster, largest ``score`` first."""
    s = t.mutate(score=score).filter(keep)
    rank = ibis.row_number().over(group_by=s.label, order_by=ibis.desc(s.score))
    return s.mutate(rank=rank).filter(ibis._.rank < per_cluster)


def _quadratic(t: ir.Table, factors: list[NDArray], name: str) -> ir.Table:
    """``t`` with column ``name`` = ||u' F_label||^2 for per-cluster factors F_k (d x r_k, zero-padded to
    the largest r): the factors joined per cluster, the projections as columns, then their squares."""
    d, r_max = factors[0].shape[0], max(f.shape[1] for f in factors)
    if r_max == 0:
        return t.mutate(**{name: const(0.0)})
    padded = [np.pad(f, ((0, 0), (0, r_max - f.shape[1]))) for f in factors]
    names = {(j, col): f"f{j}_{col}" for j in range(d) for col in range(r_max)}
    t = joined(t, {v: np.array([f[j, col] for f in padded]) for (j, col), v in names.items()})
    proj = {f"p{col}": total([t[f"u{j}"] * t[names[j, col]] for j in range(d)]) for col in range(r_max)}
    t = t.mutate(**proj).drop(*names.values())
    return t.mutate(**{name: total([t[p] * t[p] for p in proj])}).drop(*proj)


def _with_radius(t: ir.Table, centres: NDArray) -> ir.Table:
    """The labelled rows ``t`` with r2 = ||x - m_label||^2, m the clustering's centres (K, d)."""
    d = centres.shape[1]
    t = joined(t, {f"m{j}": centres[:, j] for j in range(d)})
    diff = [t[f"x{j}"] - t[f"m{j}"] for j in range(d)]
    return t.mutate(r2=total([v * v for v in diff])).drop(*[f"m{j}" for j in range(d)])


def _cuts(factors: list[NDArray], centres: NDArray, centers: NDArray, counts: NDArray) -> NDArray:
    """Per cluster the r2 (:func:`_with_radius`) a row needs for a certificate pass to score it: in a
    cluster whose factor F_k (Sigma_k^+ = F_k F_k') has full rank d, a row is scored when r2 > rho_k^2 /
    (1 + M), rho_k = sqrt(NEAR / (1 + M)) (n_k - 1) / s_k - (1 + M) g_k, s_k = ||F_k||_2, g_k = ||m_k -
    c_k||, M = BOUND_MARGIN (every row when rho_k <= 0: the cut is -1); in a cluster of lower rank every
    row (the part of u outside the span needs every row). Only r2 and the label are read to leave a row out.

    Exactly, q = ||u' F_k||^2 <= s_k^2 ||u||^2 and ||u|| (n_k - 1) = ||x - c_k|| <= ||x - m_k|| + g_k. With
    rounding (unit e = 2^-53; the engine's u columns are the inputs of the form): each computed projection
    p_c is within d e ||u|| ||F_c|| of the exact one (Cauchy-Schwarz), so the computed q <= (1 + (d + 1)
    e)(1 + d e sqrt(d))^2 s_k^2 ||u||^2; u_j is one subtraction and one division, so ||u|| <= (1 + 2e)
    ||x - c_k|| / (n_k - 1); ||x - m_k||^2 <= r2 / ((1 - d e)(1 - e)^2) for the computed r2; numpy's s_k
    (an SVD, backward stable) and g_k carry relative errors of a few d e. For d < 10^4 all these factors
    are within 1 + 1e-9, far inside 1 + M, so r2 <= rho_k^2 / (1 + M) gives ||x - m_k|| <= (1 + 1e-9)
    rho_k / sqrt(1 + M), ||x - c_k|| <= (1 + 1e-9) sqrt(NEAR) (n_k - 1) / (s_k (1 + M)) and a computed
    q <= NEAR: the row is neither near-binding nor violating (NEAR < 1 <= 1 + tol / 2), and the pass
    returns the same rows as one scoring every row."""
    d = centres.shape[1]
    cut = np.full(len(factors), -1.0)
    for c, f in enumerate(factors):
        if f.shape[1] == d:
            gap = float(np.linalg.norm(centres[c] - centers[c]))
            rho = math.sqrt(NEAR / (1.0 + BOUND_MARGIN)) * (counts[c] - 1.0) / np.linalg.norm(f, 2)
            rho -= (1.0 + BOUND_MARGIN) * gap
            cut[c] = rho * rho / (1.0 + BOUND_MARGIN) if rho > 0 else -1.0
    return cut


def _above(rows: ir.Table, cut: NDArray) -> ir.Table:
    """The labelled ``rows`` with r2 above their cluster's ``cut`` (:func:`_cuts`)."""
    t = joined(rows, {"cut": cut})
    return t.filter(t.r2 > t.cut).drop("cut")


def _candidates(rows: ir.Table, cut: NDArray, centers: NDArray, counts: NDArray) -> ir.Table:
    """The labelled ``rows`` with r2 above their cluster's ``cut`` (:func:`_cuts`), with their shifts u."""
    return centred_shifts(_above(rows, cut), centers, counts)


def _certified(
    shifts: Shifts, rows: ir.Table, tol: float, max_certificates: int, stack: contextlib.ExitStack
) -> tuple[list[NDArray], list[NDArray], list[float], int]:
    """The solver and its certificate passes (module docstring, 2.) over the labelled ``rows`` (with r2)
    of the clustering ``shifts``: per cluster the basis of Sigma_k, its eigenvalues scaled to hold on every
    row, the solver's lower bound; and the number of passes (the moments pass included).

    The first pass caches the outer rows, r2 above ``LOOSE`` times its cuts (the floor; kept in ``stack``),
    and scores them; a later pass scores them again when its own cuts are at or above the floor (the rows
    left out cannot be scored then), otherwise the table's rows."""
    timings, m_centres, sample = shifts.timings, shifts.centres, shifts.sample
    n, centers = shifts.counts, shifts.centers
    k, d = m_centres.shape
    xs = [f"x{j}" for j in range(d)]
    passes = 1

    # the exact solver starts on the sample's rows of each cluster; certificate passes add the table's
    s_label = np.argmin(((sample[:, None, :] - m_centres[None]) ** 2).sum(axis=2), axis=1)
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
        cut = _cuts(factors, m_centres, centers, n)
        if attempt == 1:
            mark = time.perf_counter()
            floor = np.where(cut > 0, LOOSE * cut, -1.0)
            outer = stack.enter_context(cached(_above(rows, floor)))
            outer.count().execute()  # built now: timed apart from the certificates
            timings["outer rows"] = time.perf_counter() - mark
        scope = outer if np.all(cut >= floor) else rows
        c_t = _quadratic(_candidates(scope, cut, centers, n), factors, "q")
        outside: ir.BooleanValue = ibis.literal(False)
        if any(s.basis.shape[1] < d for s in sols):  # a row outside span(Sigma_k) has no noise at all
            c_t = _quadratic(c_t, [s.basis for s in sols], "inside")
            c_t = c_t.mutate(norm2=total([c_t[f"u{j}"] * c_t[f"u{j}"] for j in range(d)]))
            outside = c_t.norm2 - c_t.inside > 1e-9 * c_t.norm2  # ||u||^2 - ||B'u||^2, B orthonormal
        c_t = c_t.mutate(outside=outside)
        c_t = c_t.mutate(bad=c_t.outside | (c_t.q > 1.0 + tol / 2))
        # the solver leaves its own rows at q <= 1 and the binding ones at ~1, so the rows with
        # q > NEAR hold each cluster's largest q (ranked first); the others are feasible with room. The
        # near-binding ones join the solver's rows with the violators: the next solve may make them bind.
        score = ibis.cases((c_t.outside, const(np.inf)), else_=c_t.q)
        near = _top_rows(c_t, score, c_t.bad | (c_t.q > NEAR), ADDED)
        mark = time.perf_counter()
        found = near.select("label", "q", "bad", "outside", *xs).to_pandas()
        timings["certificates"] = timings.get("certificates", 0.0) + time.perf_counter() - mark
        passes += 1
        worst = found.groupby("label").q.max().reindex(range(k), fill_value=0.0).to_numpy(dtype=float)
        added = found[found["bad"].astype(bool)]
        bases, lowers = [s.basis for s in sols], [s.lower for s in sols]
        # scaled by the largest constraint value of ALL rows: feasible whatever rows the solver saw
        eigs = [
            s.eigenvalues * max(1.0, float(w) * rounding_margin(s.eigenvalues, d))
            for s, w in zip(sols, worst, strict=True)
        ]
        if added.empty:
            break
        if attempt == max_certificates:
            if found["outside"].astype(bool).any():
                raise ParameterError(
                    f"Rows of the table lie outside the colored noise's span after {max_certificates} "
                    "certificate passes; run it with more passes (max_certificates)."
                )
            break  # feasible by the scaling above; the gap says how far from the optimum
        for c in range(k):
            new = found.loc[found.label == c, xs].to_numpy(dtype=float)
            pool[c] = np.unique(np.vstack([pool[c], new]), axis=0)
    return bases, eigs, lowers, passes


def colored_release(
    features: TableFeatures,
    n_clusters: int,
    *,
    epsilon: float,
    delta: float,
    sampler: Sampler,
    calibration: Calibration = "analytic",
    tol: float = 1e-6,
    sample_rows: int = SAMPLE_ROWS,
    max_certificates: int = 3,
) -> ColoredRun:
    """The colored release on ``features`` (module docstring): one clustering, then 1 + up to
    ``max_certificates`` passes; noise drawn once by ``sampler`` (secure, or a labelled demo seed)."""
    check_release_sampler(sampler)
    if not delta > 0:
        raise ParameterError("The colored mechanism is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = noise_gamma(epsilon, delta, calibration)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        shifts = clustered_shifts(features, n_clusters, sampler, sample_rows)
        rows = _with_radius(labelled(features, shifts.centres), shifts.centres)
        bases, eigs, lowers, passes = _certified(shifts, rows, tol, max_certificates, stack)
    timings, m_centres, centers, n = shifts.timings, shifts.centres, shifts.centers, shifts.counts
    upper = [float(e.sum()) for e in eigs]
    lower = sum(lowers)
    gaps = [up / lo - 1.0 if lo > 0 else 0.0 for up, lo in zip(upper, lowers, strict=True)]
    cov = NoiseCovariance(
        kind="colored",
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
    output = local_output(KEY, features, cov, sampler, sample_rows)
    timings["total"] = time.perf_counter() - start
    return ColoredRun(output, cov, m_centres, passes, timings)
