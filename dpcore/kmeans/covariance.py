"""Noise covariances for releasing k-means centroids under local (eps, delta)-PDP (Ravi, Scaglione &
Peisert 2021, s.3).

Guarantee: (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X
minus one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.

Facts (gamma = s*(eps, delta)^2 from ``dpcore.mechanisms.gaussian_ratio``):

1. Removing row p of cluster k (size n_k) moves only centroid k, by u_p = (x_p - c_k) / (n_k - 1).
   The Gaussian privacy loss between means m, m' under N(0, Sigma) has "sensitivity"
   sqrt((m - m')' Sigma^-1 (m - m')), so the mechanism is (eps, delta)-PDP iff
   Delta_p' Sigma^+ Delta_p <= gamma for every row p (with Delta_p in the range of Sigma).
2. The trace-optimal Sigma is block diagonal: for SPD Gamma = Sigma^-1, the Schur complement gives
   [Gamma^-1]_kk >= (Gamma_kk)^-1, so replacing Sigma by blockdiag(Gamma_kk^-1) keeps every constraint
   (each touches one block) and does not increase the trace. The problem splits per cluster.
3. Per cluster (unit gamma), the Lagrangian tr(S) + sum_p lam_p (u_p' S^-1 u_p - 1) is minimised by
   S = R_lam^(1/2), R_lam = sum_p lam_p u_p u_p', with value 2 tr(R_lam^(1/2)) - sum lam. Writing lam = t w
   (w in the simplex) and maximising over t: every feasible S has tr(S) >= phi(w)^2, with
   phi(w) = tr(R_w^(1/2)) = ||diag(sqrt w) U||_* (nuclear norm), for ANY such w (weak duality).
4. Certificate: a feasible S (every constraint checked on every row, then S scaled by the largest
   u_p' S^-1 u_p) gives the upper bound tr(S); a dual w the lower bound phi(w)^2.
   ``gap`` = sum_k upper_k / sum_k lower_k - 1 is RELATIVE, so it does not depend on the data's units
   (``absolute_gap`` is the difference); the weights w are published in ``dual_weights`` so that anyone
   can recompute the lower bound from the data.
5. If the u_p of a cluster span r < d dimensions (a feature constant in the cluster, exact linear
   dependencies, all rows equal), the problem lives in that subspace and the centroid is released EXACTLY
   in the other d - r directions: reported in ``rank_deficient`` and ``caveats`` and as a
   ``RankDeficientWarning``, for every local mechanism alike.

Solver: each cluster is solved in its own whitened coordinates y = u W (feature spreads equilibrated,
then the Gram matrix whitened), u = y A: min tr(A A' G^-1) s.t. y_p' G y_p <= 1 with S = A' G^-1 A. The
constraints are then well conditioned whatever the units; the ill-conditioning of the objective (feature
scales 1e-3 to 1e3 give weights spanning 1e12) is diagonalised exactly by the generalised eigenbasis of
(A A', G) in every Newton step. The optimum is supported on at most r(r+1)/2 rows: an active set of
candidate rows (largest norms, largest half-whitened norms, extremes along half-whitened and fixed
pseudo-random directions) is solved by a primal-dual interior-point method (Mehrotra predictor-corrector);
a vectorised pass over all rows evaluates the constraints of the resulting S, and the violated rows join
the active set until upper / lower - 1 <= tol. S is stored by the SVD of its factor A' L^-T (G = L L'),
accurate to eps cond(factor), never by eigendecomposing S itself (eps cond(S)).

Lemma 5 of Ravi et al. (keep the Kd smallest-norm u_p) is wrong: the binding rows are the extreme ones.

White noise (Ravi et al., Thm. 3): Sigma = (Delta^2 / gamma) I with Delta = max_p ||u_p||_2; white per
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
from scipy.linalg import blas, lapack
from threadpoolctl import ThreadpoolController

from dpcore.errors import ParameterError
from dpcore.mechanisms import Calibration, Sampler, gaussian_ratio, snap_to_noise_grid

#: The noise shape: trace-optimal blocks (colored), one isotropic scale, an isotropic scale per cluster.
CovarianceKind = Literal["trace_optimal", "isotropic", "isotropic_per_cluster"]
GUARANTEE = (
    "(eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus "
    "one of its own rows, with the partition held fixed; the noise is calibrated on this dataset."
)
_BLOCK_ROWS = 65536


class RankDeficientWarning(UserWarning):
    """Some cluster's centroid gets no noise in some direction (its rows span fewer than d dimensions)."""


@dataclass(frozen=True, eq=False)
class NoiseCovariance:
    """Block-diagonal Gaussian noise covariance for K centroids; ``blocks[k]`` is Sigma_k (d x d).

    Stored as the unit shape (gamma = 1): ``bases[k]`` (d x r_k, orthonormal) and ``unit_eigenvalues[k]``
    (r_k), Sigma_k = bases diag(unit_eigenvalues / gamma) bases'. ``centers`` are the TRUE centroids
    (diagnostic only, never a release). ``gap`` is relative: trace / (dual lower bound) - 1, so it does
    not depend on the data's units; ``dual_weights`` (one per row of X, summing to 1 in each noisy cluster;
    colored only) let anyone recompute the lower bound sum_k ||diag(sqrt w) U_k||_*^2 / gamma.
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
    dual_weights: np.ndarray | None = None
    blocks: list[np.ndarray] = field(init=False)
    trace: float = field(init=False)
    guarantee: str = GUARANTEE

    def __post_init__(self) -> None:
        pairs = zip(self.bases, self.unit_eigenvalues, strict=True)
        blocks = [(b * (v / self.gamma)) @ b.T for b, v in pairs]
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "trace", float(sum(v.sum() for v in self.unit_eigenvalues) / self.gamma))

    @property
    def absolute_gap(self) -> float:
        """trace - dual lower bound, in squared data units (the relative ``gap`` times the lower bound)."""
        return self.trace * self.gap / (1.0 + self.gap)

    @property
    def rank_deficient(self) -> list[int]:
        """Clusters whose centroid gets no noise in some direction (their noise spans r_k < d)."""
        d = self.centers.shape[1]
        return [k for k, b in enumerate(self.bases) if b.shape[1] < d]

    @property
    def caveats(self) -> list[str]:
        """Human-readable warnings to show next to a release: every direction released without noise."""
        d = self.centers.shape[1]
        return [_rank_message(k, self.bases[k].shape[1], d) for k in self.rank_deficient]

    def rescaled(
        self, epsilon: float, delta: float, calibration: Calibration | None = None
    ) -> NoiseCovariance:
        """The covariance for another (eps, delta) without re-solving: Sigma scales as 1 / gamma."""
        cal = self.calibration if calibration is None else calibration
        gamma = gaussian_ratio(epsilon, delta, cal) ** 2
        return replace(self, epsilon=float(epsilon), delta=float(delta), calibration=cal, gamma=gamma)

    def sample(self, random_state: Sampler, n_draws: int | None = None) -> np.ndarray:
        """Noise of shape (K, d), or (n_draws, K, d): standard normals drawn by ``random_state``
        times the factor."""
        k, d = self.centers.shape
        n = 1 if n_draws is None else int(n_draws)
        ranks = [b.shape[1] for b in self.bases]
        z = random_state.normal((n, sum(ranks)), 1.0) if sum(ranks) else np.zeros((n, 0))
        out = np.zeros((n, k, d))
        start = 0
        for j, (b, v) in enumerate(zip(self.bases, self.unit_eigenvalues, strict=True)):
            r = ranks[j]
            out[:, j, :] = (z[:, start : start + r] * np.sqrt(v / self.gamma)) @ b.T
            start += r
        return out[0] if n_draws is None else out

    def release(self, random_state: Sampler) -> np.ndarray:
        """Noisy centroids c + N(0, Sigma), rounded to a lattice far below the smallest noise standard
        deviation so that low-order bits of the output carry no trace of c (Mironov 2012)."""
        noisy = self.centers + self.sample(random_state)
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
    if r == 0:
        return (
            f"cluster {k}: all its rows are equal, so removing one does not move its centroid, which is "
            "released exactly (no noise); check the clustering or the selected features."
        )
    return (
        f"cluster {k}: its rows span only {r} of {d} directions around the centroid, so the centroid is "
        f"released exactly (no noise) in the other {d - r}; consider dropping constant or redundant features."
    )


def _warn_exact(cov: NoiseCovariance) -> NoiseCovariance:
    """Emit each caveat as a RankDeficientWarning (the same for every local mechanism); return cov."""
    for message in cov.caveats:
        warnings.warn(message, RankDeficientWarning, stacklevel=3)
    return cov


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
    order = np.argsort(keys, kind="stable")
    grouped = np.take(x, order, axis=0)
    for k, (lo, hi) in enumerate(zip(np.cumsum(counts) - counts, np.cumsum(counts), strict=True)):
        rows = grouped[lo:hi]  # a private copy: transform in place
        centers[k] = rows.mean(axis=0)
        rows -= centers[k]
        rows /= counts[k] - 1
        # A feature constant in the cluster leaves differences at the rounding level of its mean (at most
        # n eps |mean|): make them exactly 0 and the centre exact, so the caveat says it gets no noise.
        level = 2.0 * counts[k] * np.finfo(float).eps * np.abs(centers[k]) / (counts[k] - 1)
        for j in np.flatnonzero(np.einsum("ij,ij->j", rows, rows) <= counts[k] * level**2):
            if np.all(rows[:, j] == rows[0, j]):
                rows[:, j] = 0.0
                centers[k, j] = x[order[lo], j]
        diffs.append(rows)
    if all(not np.any(u) for u in diffs):
        raise ParameterError(
            "every row equals its cluster centroid (constant data): there is nothing to protect or cluster. "
            "Check the selected features."
        )
    return x, lab, centers, counts, diffs


def rounding_margin(eigenvalues: np.ndarray, d: int) -> float:
    """1 + the relative rounding error of u' Sigma^-1 u evaluated from (basis, eigenvalues): to first order
    at most 2 d sqrt(r) eps sqrt(max / min eigenvalue), counted twice (the pass that scaled Sigma, any later
    check), plus 1e-12."""
    cond = math.sqrt(float(eigenvalues.max() / eigenvalues.min())) if eigenvalues.size else 1.0
    return 1.0 + 1e-12 + 4.0 * d * math.sqrt(eigenvalues.size) * np.finfo(float).eps * cond


def _row_quadratic(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """||u_p' w||^2 for every row p, in blocks of rows (no Python loop over rows)."""
    out = np.empty(u.shape[0])
    for start in range(0, u.shape[0], _BLOCK_ROWS):
        z = u[start : start + _BLOCK_ROWS] @ w
        out[start : start + _BLOCK_ROWS] = np.einsum("ij,ij->i", z, z)
    return out


# ---------------------------------------------------------------- interior point on the active set


def _ipm(
    y: np.ndarray, factor: np.ndarray, gamma0: np.ndarray, tol: float, max_iter: int = 200
) -> tuple[np.ndarray, np.ndarray, int]:
    """Primal-dual interior point (Boyd & Vandenberghe s.11.7) for min tr(W G^-1) s.t. y_p' G y_p <= 1
    (W = factor factor'),
    with Mehrotra's predictor-corrector centring (Nocedal & Wright s.14.2) and a residual line search.

    Newton steps are taken in the basis T with T' G T = I and T' W T = diag(omega) (a generalised
    eigenproblem), where the Hessian of tr(W G^-1) is diagonal: h_ij = omega_i + omega_j on the scaled upper
    triangle of H~ (G moves by G T H~ T' G). Returns (G, multipliers, number of steps taken).
    """
    m, r = y.shape
    iu, ju = np.triu_indices(r)
    sv = np.where(iu == ju, 1.0, math.sqrt(2.0))
    diag_pos = np.flatnonzero(iu == ju)
    nv = iu.size

    def state(g: np.ndarray) -> tuple[np.ndarray, ...] | None:
        chol, info = lapack.dpotrf(g, lower=1)
        if info != 0:
            return None  # g is not numerically positive definite
        # W = a a': the SVD of L^-1 a gives the eigenpairs of L^-1 W L^-T without squaring its condition
        vecs, sing, _ = np.linalg.svd(lapack.dtrtrs(chol, factor, lower=1)[0], full_matrices=False)
        omega = np.maximum(sing**2, (r * np.finfo(float).eps * sing[0]) ** 2)  # rounding level of the SVD
        gt = blas.dtrmm(1.0, chol, vecs, lower=1)  # G T = L V, T = L^-T V: T' G T = I, T' W T = diag(omega)
        yt = y @ gt
        grad = np.zeros(nv)
        grad[diag_pos] = -omega
        return omega, gt, yt[:, iu] * yt[:, ju] * sv, grad, 1.0 - np.einsum("ij,ij->i", yt, yt)

    g = gamma0 / (2.0 * np.einsum("ij,jk,ik->i", y, gamma0, y).max())
    current = state(g)
    if current is None:  # not reached for a positive definite start; the certificate grades any answer
        return g, np.ones(m), 0
    omega, gt, a, grad, s = current
    lam = np.sum(omega) / (m * s)
    steps = 0
    for _ in range(max_iter):
        f = float(np.sum(omega))
        eta = float(s @ lam)
        rdual = grad + a.T @ lam
        if eta <= tol * f and np.linalg.norm(rdual) <= 1e-7 * np.linalg.norm(grad):
            break
        dd = lam / s
        solve = _newton_solver(a, omega[iu] + omega[ju], dd)
        # Mehrotra: affine predictor (target lam s = 0) sets the centring sigma and a 2nd-order correction.
        ds_aff = a @ solve(grad)
        dlam_aff = -lam - dd * ds_aff
        alpha = min(_to_boundary(lam, dlam_aff, 1.0), _to_boundary(s, ds_aff, 1.0))
        target = float((lam + alpha * dlam_aff) @ (s + alpha * ds_aff)) ** 3 / (eta**2 * m)
        # infeasible-start safeguard: complementarity may not outrun dual infeasibility
        target = max(target, min(eta / m, 0.01 * np.linalg.norm(rdual) / np.linalg.norm(grad) * f / m))
        comp = (target - dlam_aff * ds_aff) / s
        dx = solve(-grad - a.T @ comp)
        ds = -(a @ dx)
        dlam = comp - lam - dd * ds
        if not (np.all(np.isfinite(dx)) and np.all(np.isfinite(dlam))):
            break
        dh = np.zeros((r, r))
        dh[iu, ju] = dx / sv
        dh = dh + np.triu(dh, 1).T
        step = min(_to_boundary(lam, dlam, 0.99), _to_boundary(s, ds, 0.99))
        rho = float(np.linalg.eigvalsh(dh)[0])  # G + t G T H~ T' G > 0 iff I + t H~ > 0
        if rho < 0:
            step = min(step, 0.99 / -rho)
        base = math.sqrt(float(np.sum(rdual**2) + np.sum((lam * s - target) ** 2)))
        move = gt @ dh @ gt.T
        for _halving in range(10):  # then round-off floor: the certificate decides what this point is worth
            g_new = g + step * move
            trial = state(g_new)
            lam_new = lam + step * dlam
            if trial is not None:
                _, _, a_new, grad_new, s_new = trial
                res = math.sqrt(
                    float(np.sum((grad_new + a_new.T @ lam_new) ** 2))
                    + float(np.sum((lam_new * s_new - target) ** 2))
                )
                if np.all(s_new > 0) and res <= (1.0 - 0.01 * step) * base:
                    break
            step *= 0.5
        else:
            break
        g, lam, steps = g_new, lam_new, steps + 1
        omega, gt, a, grad, s = trial
    return g, lam, steps


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
class ClusterSolution:
    basis: np.ndarray  # d x r, orthonormal
    eigenvalues: np.ndarray  # r, unit shape (gamma = 1)
    lower: float  # dual lower bound phi^2 on the unit trace
    gap: float  # upper / lower - 1
    dual_rows: np.ndarray  # rows of the cluster carrying the dual weights
    dual_weights: np.ndarray  # w on those rows (sum 1)


def _whiten(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cluster's own coordinates: (cols, w, a) with y = u[:, cols] w of covariance ~ I, u[:, cols] = y a.

    ``cols`` are the columns that vary in the cluster (the others are exactly 0). They are divided by
    their norms before the Gram eigendecomposition, so units do not matter; if the equilibrated Gram
    matrix is numerically singular (eigenvalue ratio < 1e-10) an SVD gives the span, with numpy's
    matrix_rank tolerance, and y is the projection onto it.
    """
    n = u.shape[0]
    gram = u.T @ u
    norms = np.sqrt(np.diag(gram))
    if not (np.all(np.isfinite(gram)) and np.all((norms == 0) | (norms > 1e-150))):  # over/underflow
        scale = np.abs(u).max(axis=0)
        cols, w, a = _whiten(u / np.where(scale > 0, scale, 1.0))
        return cols, w / scale[cols, None], a * scale[cols]
    cols = np.flatnonzero(norms > 0)
    if cols.size == 0:
        return cols, np.zeros((0, 0)), np.zeros((0, 0))
    norms = norms[cols]
    ev, vecs = linalg.eigh(gram[np.ix_(cols, cols)] / np.outer(norms, norms), check_finite=False)
    if ev[0] > 1e-10 * ev[-1]:
        return cols, vecs / (norms[:, None] * np.sqrt(ev)), (vecs * np.sqrt(ev)).T * norms
    _, sing, vt = linalg.svd(u[:, cols] / norms, full_matrices=False, check_finite=False)
    rank = int(np.sum(sing > sing[0] * max(n, cols.size) * np.finfo(float).eps))
    return cols, vt[:rank].T / (norms[:, None] * sing[:rank]), sing[:rank, None] * vt[:rank] * norms


def _initial_candidates(u: np.ndarray, z: np.ndarray, r: int) -> np.ndarray:
    """Rows likely to bind, from ``z`` = [y root, y R]' (rows: half-whitened coordinates, the start point's
    metric, then pseudo-random directions; columns: rows of u): the largest ||u_p|| (the trace's
    directions) and ||y_p root||, and the extremes along every direction of z."""
    n = u.shape[0]
    k = min(n, 8 * r + 16)
    half = k if r * (r + 1) // 2 > 2 * k else min(n, 3 * k)  # more while the Newton system stays small
    picks = [
        np.argpartition(-np.einsum("ij,ij->i", u, u), k - 1)[:k],
        np.argpartition(-np.einsum("ij,ij->j", z[:r], z[:r]), half - 1)[:half],
        z.argmax(axis=1),
        z.argmin(axis=1),
    ]
    return np.unique(np.concatenate(picks))


def _shape(g: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal eigenvectors and eigenvalues of a' G^-1 a, from the SVD of its factor R^-1 a (G = R R'):
    accurate to eps cond(R^-1 a), not eps cond(a' G^-1 a) as an eigendecomposition of the product."""
    chol = linalg.cholesky(g, lower=True, check_finite=False)
    factor = linalg.solve_triangular(chol, a, lower=True, check_finite=False)
    _, sing, vt = linalg.svd(factor, full_matrices=False, check_finite=False)
    return vt.T, sing**2


def solve_cluster(u: np.ndarray, tol: float, max_rounds: int = 60) -> ClusterSolution:
    """Trace-optimal Sigma (unit gamma) for one cluster's u_p, with relative gap <= tol when reached.

    Works in the cluster's whitened coordinates y (u = y a): min tr(a a' G^-1) s.t. y_p' G y_p <= 1, whose
    constraints are well conditioned whatever the units; Sigma = a' G^-1 a.
    """
    n, d = u.shape
    cols, w, a = _whiten(u)
    r = w.shape[1]
    if r == 0:
        return ClusterSolution(np.zeros((d, 0)), np.zeros(0), 0.0, 0.0, np.zeros(0, int), np.zeros(0))
    uc = u if cols.size == d else u[:, cols]
    # Start near the central path: there G ~ sqrt(weight / mu) along the eigenvectors of weight = a a'.
    vecs, sing, _ = linalg.svd(a, full_matrices=False, check_finite=False)
    root = vecs * np.maximum(sing / sing[0], 1e-8) ** 0.5
    rng = np.random.default_rng(0)
    z = np.hstack([w @ root, w @ rng.standard_normal((r, r // 2 + 1))]).T @ uc.T  # one pass, C-contiguous
    if r == 1:  # y_p are scalars: G = 1 / max y_p^2 (= 1 below) is optimal, the extreme row is the dual
        cand = np.array([int(np.argmax(z[0] ** 2))])
    else:
        cand = _initial_candidates(uc, z, r)
    yc = uc[cand] @ w
    top = math.sqrt(float(np.einsum("ij,ij->i", yc, yc).max()))
    w, a = w / top, a * top  # max over the candidates of ||y_p|| = 1
    start = root @ root.T
    g_mat, lam = start, np.ones(cand.size)
    ipm_tol = tol * 0.1
    upper: tuple[float, np.ndarray, np.ndarray] = (math.inf, np.eye(r), np.ones(r))
    lower: tuple[float, np.ndarray, np.ndarray] = (0.0, cand, lam / lam.size)
    for _ in range(max_rounds):
        yc = uc[cand] @ w
        if r > 1:
            warm, lam, steps = _ipm(yc, a, g_mat, ipm_tol)
            if steps == 0:  # the previous answer is too far from the new central path: start afresh
                warm, lam, steps = _ipm(yc, a, start, ipm_tol)
            g_mat = warm
        dual = np.maximum(lam, 0.0) / np.maximum(lam, 0.0).sum()
        phi = linalg.svd((yc * np.sqrt(dual)[:, None]) @ a, compute_uv=False, check_finite=False).sum()
        if phi**2 > lower[0]:
            lower = (phi**2, cand, dual)
        basis, eig = _shape(g_mat, a)
        quad = _row_quadratic(uc, basis / np.sqrt(eig))
        worst = float(quad.max())
        if eig.sum() * worst < upper[0]:
            upper = (float(eig.sum()) * worst, basis, eig * worst)
        if upper[0] <= (1.0 + tol) * lower[0]:
            break
        quad[cand] = -np.inf
        n_add = min(n - cand.size, max(r * (r + 1) // 2, 16))
        fresh = np.argpartition(-quad, n_add - 1)[:n_add] if n_add > 0 else cand[:0]
        fresh = fresh[quad[fresh] > 1.0 + tol / 2]
        if fresh.size == 0:
            ipm_tol *= 1e-2
            if ipm_tol < 1e-15:
                break
            continue
        cand = np.union1d(cand, fresh)
    full = np.zeros((d, r))
    full[cols] = upper[1]
    keep = lower[2] > 0
    eig = upper[2] * rounding_margin(upper[2], d)
    gap = float(eig.sum()) / lower[0] - 1.0
    return ClusterSolution(full, eig, lower[0], gap, lower[1][keep], lower[2][keep])


# ---------------------------------------------------------------- public API


@functools.cache
def threadpools() -> ThreadpoolController:
    """The loaded thread pools, scanned once (a scan costs milliseconds: a tenth of a solve)."""
    return ThreadpoolController()


def noise_gamma(epsilon: float, delta: float, calibration: Calibration) -> float:
    """gamma = s*(eps, delta)^2, the Gaussian calibration's ratio squared: Sigma scales as 1 / gamma."""
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
    """Trace-optimal colored Gaussian covariance (Ravi, Scaglione & Peisert 2021, s.3.2, solved exactly with
    a certificate; not their Lemma 5).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed. Every constraint Delta_p' Sigma^+ Delta_p <= gamma
    holds by construction; ``gap`` <= tol certifies optimality of the total trace.
    """
    gamma = noise_gamma(epsilon, delta, calibration)
    if not (0 < tol < 1):
        raise ParameterError(f"tol must be in (0, 1) (got {tol!r}); the default 1e-6 is a good choice.")
    _, lab, centers, counts, diffs = _leave_one_out(X, labels)
    # Thin (n x d) @ (d x r) products and small dense algebra: BLAS threads only add overhead here.
    with threadpools().limit(limits=1, user_api="blas"):
        sols = [solve_cluster(u, tol) for u in diffs]
    dual = np.zeros(lab.size)
    for k, sol in enumerate(sols):
        dual[np.flatnonzero(lab == k)[sol.dual_rows]] = sol.dual_weights
    lower = sum(s.lower for s in sols)
    upper = sum(float(s.eigenvalues.sum()) for s in sols)
    return _warn_exact(
        NoiseCovariance(
            kind="trace_optimal",
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
            dual_weights=dual,
        )
    )


def _white(
    kind: CovarianceKind,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration,
) -> NoiseCovariance:
    gamma = noise_gamma(epsilon, delta, calibration)
    _, _, centers, counts, diffs = _leave_one_out(X, labels)
    k, d = centers.shape
    sens2 = np.array([float(np.einsum("ij,ij->i", u, u).max()) for u in diffs])
    sens2 *= rounding_margin(np.ones(d), d)
    if kind == "isotropic":
        sens2 = np.full(k, sens2.max())
    bases = tuple(np.eye(d) if s > 0 else np.zeros((d, 0)) for s in sens2)  # 0: a constant cluster
    return _warn_exact(
        NoiseCovariance(
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
        )
    )


def white_noise_covariance(
    X: np.ndarray, labels: np.ndarray, epsilon: float, delta: float, calibration: Calibration = "analytic"
) -> NoiseCovariance:
    """White Gaussian (Ravi, Scaglione & Peisert 2021, Thm. 3): Sigma = (Delta^2 / gamma) I with Delta the
    largest ||u_p|| over all clusters.

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed. ``gap`` is 0: the closed form is exact.
    """
    return _white("isotropic", X, labels, epsilon, delta, calibration)


def white_per_cluster_noise_covariance(
    X: np.ndarray, labels: np.ndarray, epsilon: float, delta: float, calibration: Calibration = "analytic"
) -> NoiseCovariance:
    """White per cluster (an ablation of Ravi et al.'s white noise): Sigma_k = (Delta_k^2 / gamma) I, Delta_k
    the largest ||u_p|| in cluster k (0 if its rows are all equal: then released exactly, with a caveat).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed.
    """
    return _white("isotropic_per_cluster", X, labels, epsilon, delta, calibration)
