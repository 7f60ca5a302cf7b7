"""Noise covariances for releasing k-means centroids under local (eps, delta)-PDP (seed 000, s.3).

Guarantee: (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X
minus one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.

Facts (MECHANISMS.md s.3.1-3.3; gamma = s*(eps, delta)^2 from ``dpcore.mechanisms.gaussian_ratio``):

1. Removing row p of cluster k (size n_k) moves only centroid k, by u_p = (x_p - c_k) / (n_k - 1).
   The Gaussian privacy loss between means m, m' under N(0, Sigma) has "sensitivity"
   sqrt((m - m')' Sigma^-1 (m - m')), so the mechanism is (eps, delta)-PDP iff
   Delta_p' Sigma^+ Delta_p <= gamma for every row p (with Delta_p in the range of Sigma).
2. The trace-optimal Sigma is block diagonal: for SPD Gamma = Sigma^-1, the Schur complement gives
   [Gamma^-1]_kk >= (Gamma_kk)^-1, so replacing Sigma by blockdiag(Gamma_kk^-1) keeps every constraint
   (each touches one block) and does not increase the trace. The problem splits per cluster.
3. Per cluster, Lagrangian tr(S) + sum_p lam_p (u_p' S^-1 u_p - gamma) is minimised by S = R_lam^(1/2),
   R_lam = sum_p lam_p u_p u_p', with value 2 tr(R_lam^(1/2)) - gamma sum lam. Writing lam = t w (w in the
   simplex) and maximising over t: dual value phi(w)^2 / gamma with phi(w) = tr(R_w^(1/2)) (concave),
   attained by Sigma_k = (phi / gamma) R_w^(1/2), whose trace is phi^2 / gamma.
4. Certificate: u_p' Sigma_k^-1 u_p = gamma g_p / phi with g_p = u_p' R_w^(-1/2) u_p, and
   sum_p w_p g_p = phi, so 1 + tau := max_p g_p / phi >= 1. Scaling Sigma_k by (1 + tau) satisfies every
   constraint by construction; its trace (1 + tau) phi^2 / gamma is within a factor (1 + tau) of the dual
   lower bound phi^2 / gamma, so tau bounds the relative optimality gap of cluster k, and
   ``gap`` = sum_k upper_k / sum_k lower_k - 1 (<= max_k tau_k) bounds the total one.
5. If the u_p of a cluster span r < d dimensions, the problem lives in that subspace (basis from an SVD,
   pseudo-inverse) and the centroid is released EXACTLY in the other d - r directions (reported in
   ``rank_deficient`` and as a ``RankDeficientWarning``).

Solver (fast): the optimum is supported on at most r(r+1)/2 rows. An active set of candidate rows
(largest norms, extremes along principal and fixed pseudo-random directions, largest u' C^(-1/2) u) is
solved exactly by a primal-dual interior-point method (Mehrotra predictor-corrector) on
Gamma = Sigma^-1 (linear constraints u_p' Gamma u_p <= 1, objective tr(Gamma^-1), Newton system in the
eigenbasis of Gamma where the Hessian of the objective is diagonal); the multipliers give w, a vectorised
pass over all rows computes g_p, and the rows with the largest g_p join the active set until tau <= tol.

Lemma 5 of seed 000 (keep the Kd smallest-norm u_p) is wrong: the binding rows are the extreme ones.

White noise (seed 000, Thm. 3): Sigma = (Delta^2 / gamma) I with Delta = max_p ||u_p||_2; white per
cluster uses Delta_k = max over cluster k (an ablation isolating the gain of per-cluster scaling).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from threadpoolctl import ThreadpoolController

from dpcore.errors import ParameterError
from dpcore.mechanisms import Calibration, Sampler, gaussian_ratio, snap_to_noise_grid

CovarianceKind = Literal["colored", "white", "white_per_cluster"]
GUARANTEE = (
    "(eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus "
    "one of its own rows, with the partition held fixed; the noise is calibrated on this dataset."
)
_SAFETY = 1.0 + 1e-12  # absorbs rounding between the certificate pass and later re-checks
_BLOCK_ROWS = 65536


class RankDeficientWarning(UserWarning):
    """Some cluster's leave-one-out differences span fewer than d dimensions."""


@dataclass(frozen=True, eq=False)
class NoiseCovariance:
    """Block-diagonal Gaussian noise covariance for K centroids; ``blocks[k]`` is Sigma_k (d x d).

    Stored as the unit shape (gamma = 1): ``bases[k]`` (d x r_k, orthonormal) and ``unit_eigenvalues[k]``
    (r_k), Sigma_k = bases diag(unit_eigenvalues / gamma) bases'. ``centers`` are the TRUE centroids
    (diagnostic only, never a release).
    """

    kind: CovarianceKind
    epsilon: float
    delta: float
    calibration: Calibration
    gamma: float
    gap: float
    centers: np.ndarray
    counts: np.ndarray
    bases: tuple[np.ndarray, ...]
    unit_eigenvalues: tuple[np.ndarray, ...]
    cluster_gaps: np.ndarray
    rank_deficient: list[int]
    blocks: list[np.ndarray] = field(init=False)
    trace: float = field(init=False)
    guarantee: str = GUARANTEE

    def __post_init__(self) -> None:
        pairs = zip(self.bases, self.unit_eigenvalues, strict=True)
        blocks = [(b * (v / self.gamma)) @ b.T for b, v in pairs]
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "trace", float(sum(v.sum() for v in self.unit_eigenvalues) / self.gamma))

    @property
    def caveats(self) -> list[str]:
        """Human-readable warnings to show next to a release."""
        return [_rank_message(k, self.bases[k].shape[1], self.centers.shape[1]) for k in self.rank_deficient]

    def rescaled(
        self, epsilon: float, delta: float, calibration: Calibration | None = None
    ) -> NoiseCovariance:
        """The covariance for another (eps, delta) without re-solving: Sigma scales as 1 / gamma."""
        cal = self.calibration if calibration is None else calibration
        gamma = gaussian_ratio(epsilon, delta, cal) ** 2
        return replace(self, epsilon=float(epsilon), delta=float(delta), calibration=cal, gamma=gamma)

    def sample(self, sampler: Sampler, n_draws: int | None = None) -> np.ndarray:
        """Noise of shape (K, d), or (n_draws, K, d): standard normals from ``sampler`` times the factor."""
        k, d = self.centers.shape
        n = 1 if n_draws is None else int(n_draws)
        ranks = [b.shape[1] for b in self.bases]
        z = sampler.normal((n, sum(ranks)), 1.0) if sum(ranks) else np.zeros((n, 0))
        out = np.zeros((n, k, d))
        start = 0
        for j, (b, v) in enumerate(zip(self.bases, self.unit_eigenvalues, strict=True)):
            r = ranks[j]
            out[:, j, :] = (z[:, start : start + r] * np.sqrt(v / self.gamma)) @ b.T
            start += r
        return out[0] if n_draws is None else out

    def release(self, sampler: Sampler) -> np.ndarray:
        """Noisy centroids c + N(0, Sigma), rounded to a lattice far below the smallest noise standard
        deviation so that low-order bits of the output carry no trace of c (Mironov 2012)."""
        noisy = self.centers + self.sample(sampler)
        positive = [float(v.min()) for v in self.unit_eigenvalues if v.size]
        if not positive:
            return noisy
        return snap_to_noise_grid(noisy, math.sqrt(min(positive) / self.gamma))

    def max_constraint(self, X: np.ndarray, labels: np.ndarray) -> float:
        """max_p Delta_p' Sigma^+ Delta_p / gamma over the rows of (X, labels); <= 1 means feasible."""
        diffs = _leave_one_out(X, labels)[4]
        worst = 0.0
        for b, v, u in zip(self.bases, self.unit_eigenvalues, diffs, strict=True):
            if b.shape[1]:
                worst = max(worst, float(_row_quadratic(u, b / np.sqrt(v)).max()))
        return worst


def _rank_message(k: int, r: int, d: int) -> str:
    return (
        f"cluster {k}: its rows span only {r} of {d} directions around the centroid, so the centroid is "
        f"released exactly (no noise) in the other {d - r}; consider dropping constant or redundant features."
    )


# ---------------------------------------------------------------- inputs


def singleton_message(cluster: int) -> str:
    """Why the local mechanisms refuse a clustering where ``cluster`` has one row, and the fix."""
    return (
        f"cluster {cluster} has a single row: its leave-one-out centroid is undefined. "
        "Choose a smaller K (or merge that cluster)."
    )


def _leave_one_out(
    X: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Validate; return X, labels, centers (K, d), counts (K), and u_p = (x_p - c_k)/(n_k - 1) per cluster."""
    try:
        x = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"X must be a numeric array (rows x features): {err}.") from err
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ParameterError(f"X must be a 2-D array with at least one row and one column (got {x.shape}).")
    if not np.isfinite(x).all():
        raise ParameterError("X contains NaN or infinite values; drop or impute them before clustering.")
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.shape[0] != x.shape[0]:
        raise ParameterError(f"labels must be a 1-D array with one label per row of X ({x.shape[0]}).")
    if not np.issubdtype(lab.dtype, np.integer):
        integral = (
            np.issubdtype(lab.dtype, np.floating)
            and np.all(np.isfinite(lab))
            and np.all(lab == np.round(lab))
        )
        if not integral:
            raise ParameterError("labels must be integers 0..K-1 (one cluster index per row).")
        lab = lab.astype(np.int64)
    if lab.min() < 0:
        raise ParameterError(
            "labels must be integers 0..K-1; negative labels (noise points) are not allowed."
        )
    counts = np.bincount(lab)
    if counts.size < 1:
        raise ParameterError("need at least one cluster (K >= 1).")
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ParameterError(
            f"labels must use every cluster index 0..{counts.size - 1}; cluster(s) {empty.tolist()} are "
            "empty. Relabel the clusters consecutively or choose a smaller K."
        )
    single = np.flatnonzero(counts == 1)
    if single.size:
        raise ParameterError(singleton_message(int(single[0])))
    diffs = []
    centers = np.empty((counts.size, x.shape[1]))
    # Stable counting (radix) sort on 16-bit labels, then one gather: rows grouped by cluster.
    keys = lab.astype(np.uint16) if counts.size <= 65536 else lab
    grouped = np.take(x, np.argsort(keys, kind="stable"), axis=0)
    for k, (lo, hi) in enumerate(zip(np.cumsum(counts) - counts, np.cumsum(counts), strict=True)):
        rows = grouped[lo:hi]  # a private copy: transform in place
        centers[k] = rows.mean(axis=0)
        rows -= centers[k]
        rows /= counts[k] - 1
        diffs.append(rows)
    if all(not np.any(u) for u in diffs):
        raise ParameterError(
            "every row equals its cluster centroid (constant data): there is nothing to protect or cluster. "
            "Check the selected features."
        )
    return x, lab, centers, counts, diffs


def _row_quadratic(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """||u_p' w||^2 for every row p, in blocks of rows (no Python loop over rows)."""
    out = np.empty(u.shape[0])
    for start in range(0, u.shape[0], _BLOCK_ROWS):
        z = u[start : start + _BLOCK_ROWS] @ w
        out[start : start + _BLOCK_ROWS] = np.einsum("ij,ij->i", z, z)
    return out


# ---------------------------------------------------------------- interior point on the active set


def _ipm(y: np.ndarray, gamma0: np.ndarray, tol: float, max_iter: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Primal-dual interior point (Boyd & Vandenberghe s.11.7) for min tr(G^-1) s.t. y_p' G y_p <= 1,
    with Mehrotra's predictor-corrector centring (Nocedal & Wright s.14.2) and a residual line search.

    Newton steps are taken in the eigenbasis of G, where the Hessian of tr(G^-1) is diagonal:
    h_ij = (nu_i + nu_j) / (nu_i^2 nu_j^2) on the scaled upper triangle. Returns (G, multipliers).
    """
    m, r = y.shape
    iu, ju = np.triu_indices(r)
    sv = np.where(iu == ju, 1.0, math.sqrt(2.0))
    diag_pos = np.flatnonzero(iu == ju)
    nv = iu.size

    def state(nu_: np.ndarray, vecs_: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        yt = y @ vecs_
        grad = np.zeros(nv)
        grad[diag_pos] = -1.0 / nu_**2
        return yt[:, iu] * yt[:, ju] * sv, grad, 1.0 - np.einsum("ij,j->i", yt**2, nu_)

    nu, vecs = np.linalg.eigh(gamma0 / (2.0 * np.einsum("ij,jk,ik->i", y, gamma0, y).max()))
    a, grad, s = state(nu, vecs)
    lam = np.sum(1.0 / nu) / (m * s)
    for _ in range(max_iter):
        f = float(np.sum(1.0 / nu))
        eta = float(s @ lam)
        rdual = grad + a.T @ lam
        if eta <= tol * f and np.linalg.norm(rdual) <= 1e-7 * np.linalg.norm(grad):
            break
        dd = lam / s
        solve = _newton_solver(a, (nu[iu] + nu[ju]) / (nu[iu] ** 2 * nu[ju] ** 2), dd)
        # Mehrotra: affine predictor (target lam s = 0) sets the centring sigma and a 2nd-order correction.
        ds_aff = a @ solve(grad)
        dlam_aff = -lam - dd * ds_aff
        alpha = min(_to_boundary(lam, dlam_aff, 1.0), _to_boundary(s, ds_aff, 1.0))
        target = float((lam + alpha * dlam_aff) @ (s + alpha * ds_aff)) ** 3 / (eta**2 * m)
        comp = (target - dlam_aff * ds_aff) / s
        dx = solve(-grad - a.T @ comp)
        ds = -(a @ dx)
        dlam = comp - lam - dd * ds
        if not (np.all(np.isfinite(dx)) and np.all(np.isfinite(dlam))):
            break
        dg = np.zeros((r, r))
        dg[iu, ju] = dx / sv
        dg = dg + np.triu(dg, 1).T
        step = min(_to_boundary(lam, dlam, 0.99), _to_boundary(s, ds, 0.99))
        rho = float(np.linalg.eigvalsh(dg / np.sqrt(np.outer(nu, nu)))[0])
        if rho < 0:
            step = min(step, 0.99 / -rho)
        base = math.sqrt(float(np.sum(rdual**2) + np.sum((lam * s - target) ** 2)))
        while step >= 1e-3:  # below: round-off floor, the certificate pass decides what this point is worth
            nu_new, rot = np.linalg.eigh(np.diag(nu) + step * dg)
            lam_new = lam + step * dlam
            if nu_new[0] > 0:
                vecs_new = vecs @ rot
                a_new, grad_new, s_new = state(nu_new, vecs_new)
                res = math.sqrt(
                    float(
                        np.sum((grad_new + a_new.T @ lam_new) ** 2) + np.sum((lam_new * s_new - target) ** 2)
                    )
                )
                if np.all(s_new > 0) and res <= (1.0 - 0.01 * step) * base:
                    break
            step *= 0.5
        else:
            break
        nu, vecs, lam, a, grad, s = nu_new, vecs_new, lam_new, a_new, grad_new, s_new
    return (vecs * nu) @ vecs.T, lam


def _to_boundary(v: np.ndarray, dv: np.ndarray, fraction: float) -> float:
    """Largest step <= 1 (times ``fraction``) keeping v + step dv > 0."""
    neg = dv < 0
    return min(1.0, fraction * float(np.min(-v[neg] / dv[neg]))) if neg.any() else 1.0


def _newton_solver(a: np.ndarray, h: np.ndarray, dd: np.ndarray):
    """Solve (diag(h) + a' diag(dd) a) x = b, factored once (Woodbury when a has fewer rows than columns)."""
    m, nv = a.shape
    if m >= nv:
        hess = (a.T * dd) @ a
        hess[np.diag_indices(nv)] += h
        factor = _cho(hess)
        return lambda b: _cho_apply(factor, hess, b)
    ah = a / h
    small = ah @ a.T
    small[np.diag_indices(m)] += 1.0 / dd
    factor = _cho(small)
    return lambda b: b / h - ah.T @ _cho_apply(factor, small, a @ (b / h))


def _cho(mat: np.ndarray) -> np.ndarray | None:
    """Upper Cholesky factor (raw LAPACK: the wrappers' overhead dominates at this size), None if not PD."""
    factor, info = lapack.dpotrf(mat)
    return factor if info == 0 else None


def _cho_apply(factor: np.ndarray | None, mat: np.ndarray, b: np.ndarray) -> np.ndarray:
    if factor is None:
        return linalg.lstsq(mat, b, check_finite=False)[0]
    return lapack.dpotrs(factor, b)[0]


# ---------------------------------------------------------------- one cluster


@dataclass(frozen=True)
class _ClusterSolution:
    basis: np.ndarray  # d x r, orthonormal
    eigenvalues: np.ndarray  # r, unit shape (gamma = 1)
    lower: float  # dual lower bound phi^2 on the unit trace
    gap: float  # tau: upper / lower - 1


def _subspace(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Orthonormal basis q (d x r) of the span of the rows of u (numerical rank as numpy's matrix_rank),
    with the eigendecomposition (ev, vecs) of the Gram matrix of y = u q."""
    n, d = u.shape
    ev, vecs = linalg.eigh(u.T @ u)
    if ev[-1] <= 0.0:
        return np.zeros((d, 0)), ev[:0], vecs[:, :0]
    if ev[0] > 1e-10 * ev[-1]:
        return np.eye(d), ev, vecs
    _, sing, vt = linalg.svd(u, full_matrices=False)
    rank = int(np.sum(sing > sing[0] * max(n, d) * np.finfo(float).eps))
    return vt[:rank].T, sing[:rank][::-1] ** 2, np.eye(rank)[:, ::-1]


def _initial_candidates(
    y: np.ndarray, norms: np.ndarray, ev: np.ndarray, vecs: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Rows likely to bind: largest norms, largest u' C^(-1/2) u, extremes along principal/random axes.

    ``norms`` are the squared row norms of y and (ev, vecs) the eigendecomposition of C = y'y.
    """
    n, r = y.shape
    k = min(n, 8 * r + 16)
    proj = np.hstack([vecs, rng.standard_normal((r, r // 2 + 1))]).T @ y.T  # C-contiguous rows
    whitened = np.einsum("ij,i->j", proj[:r] ** 2, 1.0 / np.sqrt(np.maximum(ev, ev[-1] * 1e-300)))
    picks = [
        np.argpartition(-norms, k - 1)[:k],
        np.argpartition(-whitened, k - 1)[:k],
        proj.argmax(axis=1),
        proj.argmin(axis=1),
    ]
    return np.unique(np.concatenate(picks))


def _solve_cluster(u: np.ndarray, tol: float, max_rounds: int = 60) -> _ClusterSolution:
    """Trace-optimal Sigma (unit gamma) for one cluster's u_p, with certificate tau <= tol when reached."""
    q, gram_ev, gram_vecs = _subspace(u)
    r = q.shape[1]
    if r == 0:
        return _ClusterSolution(q, np.zeros(0), 0.0, 0.0)
    y = u if r == u.shape[1] else u @ q  # full rank: q is the identity
    norms = np.einsum("ij,ij->i", y, y)
    scale2 = float(norms.max())
    if r == 1:
        return _ClusterSolution(q, np.array([scale2 * _SAFETY]), scale2, 0.0)
    unit = 1.0 / math.sqrt(scale2)  # the IPM works on y / max_p ||y_p|| (rows of norm <= 1)
    n = y.shape[0]
    cand = _initial_candidates(y, norms, gram_ev, gram_vecs, np.random.default_rng(0))
    gamma0 = None
    ipm_tol = tol * 1e-2
    best: tuple[float, np.ndarray, np.ndarray, float] | None = None
    for _ in range(max_rounds):
        yc = y[cand] * unit
        if gamma0 is None:
            ev, vecs = linalg.eigh(yc.T @ yc / len(cand))
            gamma0 = (vecs / np.sqrt(np.maximum(ev, ev[-1] * 1e-12))) @ vecs.T
        g_mat, lam = _ipm(yc, gamma0, ipm_tol)
        gamma0 = g_mat
        w = np.maximum(lam, 0.0) / np.maximum(lam, 0.0).sum()
        mu, vecs = linalg.eigh((yc.T * w) @ yc)
        if mu[0] <= mu[-1] * 1e-14:
            g = np.full(n, np.inf)
            tau = math.inf
        else:
            phi = float(np.sum(np.sqrt(mu)))
            g = _row_quadratic(y, vecs * (unit / mu**0.25)) / phi
            tau = max(float(g.max()) - 1.0, 0.0)
            if best is None or tau < best[0]:
                best = (tau, mu, vecs, phi)
        if tau <= tol:
            break
        g[cand] = -np.inf
        n_add = min(n - cand.size, max(r * (r + 1) // 2, 16))
        fresh = np.argpartition(-g, n_add - 1)[:n_add] if n_add > 0 else cand[:0]
        fresh = fresh[g[fresh] > 1.0 + tol / 2]
        if fresh.size == 0:
            ipm_tol *= 1e-2
            if ipm_tol < 1e-15:
                break
            continue
        cand = np.union1d(cand, fresh)
    if best is None:
        # Degenerate numerics: fall back to the feasible white shape inside the subspace.
        return _ClusterSolution(q, np.full(r, scale2 * _SAFETY), scale2, float(r - 1))
    tau, mu, vecs, phi = best
    eig = scale2 * (1.0 + tau) * phi * np.sqrt(mu) * _SAFETY
    return _ClusterSolution(q @ vecs, eig, scale2 * phi**2, tau)


# ---------------------------------------------------------------- public API


@functools.cache
def _threadpools() -> ThreadpoolController:
    """The loaded thread pools, scanned once (a scan costs milliseconds: a tenth of a solve)."""
    return ThreadpoolController()


def _gamma(epsilon: float, delta: float, calibration: Calibration) -> float:
    return gaussian_ratio(epsilon, delta, calibration) ** 2


def colored_noise_covariance(
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
    *,
    tol: float = 1e-6,
) -> NoiseCovariance:
    """Trace-optimal colored Gaussian covariance (seed 000 s.3.2, solved exactly; not Lemma 5).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed. Every constraint Delta_p' Sigma^+ Delta_p <= gamma
    holds by construction; ``gap`` <= tol certifies optimality of the total trace.
    """
    gamma = _gamma(epsilon, delta, calibration)
    if not (0 < tol < 1):
        raise ParameterError(f"tol must be in (0, 1) (got {tol!r}); the default 1e-6 is a good choice.")
    _, _, centers, counts, diffs = _leave_one_out(X, labels)
    # Thin (n x d) @ (d x d) products and small dense algebra: BLAS threads only add overhead here.
    with _threadpools().limit(limits=1, user_api="blas"):
        sols = [_solve_cluster(u, tol) for u in diffs]
    d = centers.shape[1]
    deficient = [k for k, s in enumerate(sols) if s.basis.shape[1] < d]
    for k in deficient:
        warnings.warn(_rank_message(k, sols[k].basis.shape[1], d), RankDeficientWarning, stacklevel=2)
    lower = sum(s.lower for s in sols)
    upper = sum(float(s.eigenvalues.sum()) for s in sols)
    return NoiseCovariance(
        kind="colored",
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=upper / lower - 1.0 if lower > 0 else 0.0,
        centers=centers,
        counts=counts,
        bases=tuple(s.basis for s in sols),
        unit_eigenvalues=tuple(s.eigenvalues for s in sols),
        cluster_gaps=np.array([s.gap for s in sols]),
        rank_deficient=deficient,
    )


def _white(
    kind: CovarianceKind,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration,
) -> NoiseCovariance:
    gamma = _gamma(epsilon, delta, calibration)
    _, _, centers, counts, diffs = _leave_one_out(X, labels)
    k, d = centers.shape
    sens2 = np.array([float(np.einsum("ij,ij->i", u, u).max()) for u in diffs]) * _SAFETY
    if kind == "white":
        sens2 = np.full(k, sens2.max())
    bases = tuple(np.eye(d) if s > 0 else np.zeros((d, 0)) for s in sens2)
    return NoiseCovariance(
        kind=kind,
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=0.0,
        centers=centers,
        counts=counts,
        bases=bases,
        unit_eigenvalues=tuple(np.full(b.shape[1], s) for b, s in zip(bases, sens2, strict=True)),
        cluster_gaps=np.zeros(k),
        rank_deficient=[],
    )


def white_noise_covariance(
    X: np.ndarray, labels: np.ndarray, epsilon: float, delta: float, calibration: Calibration = "analytic"
) -> NoiseCovariance:
    """White Gaussian (seed 000 Thm. 3): Sigma = (Delta^2 / gamma) I, Delta = max_p ||u_p||_2.

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed. ``gap`` is 0: the closed form is exact.
    """
    return _white("white", X, labels, epsilon, delta, calibration)


def white_per_cluster_noise_covariance(
    X: np.ndarray, labels: np.ndarray, epsilon: float, delta: float, calibration: Calibration = "analytic"
) -> NoiseCovariance:
    """White per cluster (ablation, MECHANISMS 3.2): Sigma_k = (Delta_k^2 / gamma) I, Delta_k = max over k.

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed.
    """
    return _white("white_per_cluster", X, labels, epsilon, delta, calibration)
