"""Lee & Kifer post-processing of DP-Lloyd: MCMC over synthetic datasets (seed 003 s.3; MECHANISMS s.3.6).

Input: only what DP-Lloyd released (noisy counts n~ and sums s~ of all T rounds) and its public inputs
(box, data-independent initial centres, the centres each round assigned with, per-query eps and
sensitivities): a ``LloydRelease``. No data access, so no extra budget (post-processing, seed 001/004).

1. Consistency (s.3.2): one total N^ = inverse-variance weighted mean of the T noisy totals; each round's
   counts are projected (Euclidean) onto {n >= 0, sum_k n_k = N^}; each round's sums are shifted equally
   across clusters so that all rounds share the weighted-mean total sum.
2. Target (s.3.3): pi(D) = exp(-sum_t sum_k [||s^_k(t) - S_k(D, c(t-1))||_1 / b_S,t
   + |n^_k(t) - N_k(D, c(t-1))| / b_N,t]): the exact Laplace likelihood with the released scales
   b = Delta / eps (the paper takes eps_S = eps_N).
3. Chain: data scaled to [-1, 1]^d (z = (x - mid) / h); D(0) puts round(n^_k(T)) points at c_k(T). Each step
   replaces a uniformly chosen point by x' from the GMM proposal q(x) = (1/T) sum_t sum_k w_k(t) N(x; c_k(t),
   delta I), w_k(t) = n^_k(t) / N^ (delta = 0.001 in the paper), projected onto our public domain (the box
   [-1, 1]^d: DP-Lloyd here bounds rows by the box, where the paper's DP-KMEANS uses the unit L1 ball), and
   accepts with min(1, pi(D') q(x) / (pi(D) q(x'))). The best-scoring dataset is kept.
4. Non-private k-means (k-means++, 10 restarts) on the best dataset, in the original units.

Speed: proposals, their mixture densities and their assignments in all T rounds are drawn and computed
in vectorised chunks up front; a step then touches two (T x d) rows of the running per-round sums, so it
costs O(T d) with a fixed handful of numpy calls (no recomputation over the dataset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import logsumexp
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.lloyd import (
    DPLloydKMeans,
    LloydRelease,
    Neighbours,
    NoisyLloydBase,
    make_sampler,
    nearest_many,
)
from dpcore.mechanisms import Sampler

CHUNK = 4096


@dataclass(frozen=True)
class MCMCResult:
    """Output of ``mcmc_postprocess``: released centres plus the chain's diagnostics (all post-processing)."""

    cluster_centers: NDArray  # (K, d) original units
    synthetic_data: NDArray  # (N^, d) the best-scoring synthetic dataset, original units
    consistent_counts: NDArray  # (T, K)
    consistent_sums: NDArray  # (T, K, d) centred coordinates
    initial_log_likelihood: float
    best_log_likelihood: float
    acceptance_rate: float
    n_steps: int
    sampling_mode: str


def _simplex_projection(v: NDArray, total: float) -> NDArray:
    """Euclidean projection of v onto {w >= 0, sum w = total} (sort-based, Held et al. 1974)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    idx = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1), 0.0)


def consistent_statistics(release: LloydRelease) -> tuple[NDArray, NDArray, float]:
    """Counts >= 0 with one total across rounds, sums with one total across rounds (seed 003 s.3.2)."""
    counts, sums = release.noisy_counts, release.noisy_sums
    w_n = 1.0 / release.count_scale**2
    total_n = max(float(np.sum(w_n * counts.sum(axis=1)) / np.sum(w_n)), 1.0)
    w_s = 1.0 / release.sum_scale**2
    total_s = (w_s[:, None] * sums.sum(axis=1)).sum(axis=0) / np.sum(w_s)
    k = counts.shape[1]
    new_counts = np.array([_simplex_projection(c, total_n) for c in counts])
    new_sums = sums + (total_s - sums.sum(axis=1))[:, None, :] / k
    return new_counts, new_sums, total_n


def _largest_remainder(weights: NDArray, total: int) -> NDArray[np.intp]:
    raw = weights / weights.sum() * total
    out = np.floor(raw).astype(np.intp)
    out[np.argsort(raw - out)[::-1][: total - out.sum()]] += 1
    return out


def _assign(Z: NDArray, centres: NDArray, h: NDArray) -> NDArray[np.intp]:
    """(m, T) nearest centre of each z in every round, distances in original units (z h vs c h)."""
    return nearest_many(Z * h, centres * h).T


def _log_q(Z: NDArray, mix_centres: NDArray, log_w: NDArray, variance: float) -> NDArray:
    """log of the GMM proposal density (up to the constant shared by every point)."""
    flat = mix_centres.reshape(-1, Z.shape[1])
    sq = np.einsum("ij,ij->i", Z, Z)[:, None] - 2.0 * Z @ flat.T + np.einsum("ij,ij->i", flat, flat)
    return logsumexp(log_w.ravel()[None] - np.maximum(sq, 0.0) / (2.0 * variance), axis=1)


def mcmc_postprocess(
    released: LloydRelease | NoisyLloydBase,
    n_steps: int = 30_000,
    proposal_variance: float = 0.001,
    random_state: int | Sampler | None = None,
) -> MCMCResult:
    """Lee & Kifer's MCMC post-processing of a DP-Lloyd release; spends no budget and reads no data."""
    state = released.released_state() if isinstance(released, NoisyLloydBase) else released
    if not isinstance(state, LloydRelease):
        raise ParameterError("mcmc_postprocess takes a fitted DPLloydKMeans or its released_state().")
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise ParameterError(f"n_steps must be a whole number >= 0 (got {n_steps!r}); the paper uses 30000.")
    if not (isinstance(proposal_variance, (int, float)) and 0 < proposal_variance < np.inf):
        raise ParameterError(
            f"proposal_variance must be > 0 (got {proposal_variance!r}); the paper uses 0.001."
        )
    sampler = make_sampler(random_state)
    rng = sampler.rng

    lower, upper = state.lower, state.upper
    mid, h = (lower + upper) / 2.0, (upper - lower) / 2.0
    T, K = state.noisy_counts.shape
    counts, sums, total_n = consistent_statistics(state)
    n_points = max(round(total_n), K)

    # Scaled space: |s - h * S_z| / b = sum_i (h_i / b) |s_i / h_i - S_z,i|. Each point carries an extra
    # coordinate 1, so the residual R[t*K + k] = (s^_k(t) / h - S_z, n^_k(t) - N) holds sums and counts.
    d = lower.size
    targets = np.concatenate((sums / h, counts[..., None]), axis=-1).reshape(T * K, d + 1)
    weights = np.concatenate(
        (h[None, :] / state.sum_scale[:, None], 1.0 / state.count_scale[:, None]), axis=1
    )
    assign_centres = (state.centers_history[:T] - mid) / h  # round t assigns with c(t-1)
    mix = np.clip(sums / np.maximum(counts, 1e-12)[..., None] / h, -1.0, 1.0)  # c_k(t), scaled
    with np.errstate(divide="ignore"):
        log_w = np.log(counts / counts.sum(axis=1, keepdims=True)) - np.log(T)
    offsets = np.arange(T) * K

    # initial state: round(n^_k(T)) points at c_k(T)
    Z = np.repeat(mix[-1], _largest_remainder(counts[-1], n_points), axis=0)
    Z = np.concatenate((Z, np.ones((n_points, 1))), axis=1)
    rows = _assign(Z[:, :d], assign_centres, h) + offsets  # (N, T) flat residual rows
    logq_cur = _log_q(Z[:, :d], mix, log_w, proposal_variance).tolist()
    R = targets.copy()
    for t in range(T):
        np.subtract.at(R, rows[:, t], Z)
    loglik = -float((np.abs(R).reshape(T, K, d + 1) * weights[:, None, :]).sum())
    initial, best = loglik, loglik
    Z_best, pending = Z.copy(), []

    weights2 = np.concatenate((weights, weights)).ravel()
    flat_p = np.exp(log_w.ravel())
    flat_p /= flat_p.sum()
    accepted = 0
    for start in range(0, n_steps, CHUNK):
        m = min(CHUNK, n_steps - start)
        comp = rng.choice(flat_p.size, size=m, p=flat_p)
        noise = rng.normal(0.0, np.sqrt(proposal_variance), (m, d))
        prop = np.clip(mix.reshape(-1, d)[comp] + noise, -1.0, 1.0)
        rows_prop = _assign(prop, assign_centres, h) + offsets
        logq_prop = _log_q(prop, mix, log_w, proposal_variance)
        prop = np.concatenate((prop, np.ones((m, 1))), axis=1)
        picks = rng.integers(0, n_points, size=m).tolist()
        log_u = np.log(rng.random(m)).tolist()
        logq_list = logq_prop.tolist()
        for s in range(m):
            p = picks[s]
            x, xn, ia, ib = Z[p], prop[s], rows[p], rows_prop[s]
            same = (ia == ib)[:, None]
            old = R[np.concatenate((ia, ib))]  # rows a then rows b of every round
            # x leaves row a (and xn joins it when a == b); xn joins row b when a != b
            new = old + np.concatenate((x - same * xn, (same - 1.0) * xn))
            delta = float((np.abs(old) - np.abs(new)).ravel() @ weights2)
            if log_u[s] < delta + logq_cur[p] - logq_list[s]:
                R[ia] += x
                R[ib] -= xn
                Z[p] = xn
                rows[p] = ib
                logq_cur[p] = logq_list[s]
                loglik += delta
                accepted += 1
                pending.append((p, xn))
                if loglik > best:
                    best = loglik
                    for q, row in pending:
                        Z_best[q] = row
                    pending.clear()

    Z_best = Z_best[:, :d]
    data = Z_best * h  # centred original units
    seed = int(rng.integers(0, 2**31 - 1))
    km = KMeans(n_clusters=K, n_init=10, random_state=seed).fit(data)
    return MCMCResult(
        cluster_centers=np.clip(km.cluster_centers_, -h, h) + mid,
        synthetic_data=data + mid,
        consistent_counts=counts,
        consistent_sums=sums,
        initial_log_likelihood=initial,
        best_log_likelihood=best,
        acceptance_rate=accepted / n_steps if n_steps else 0.0,
        n_steps=int(n_steps),
        sampling_mode=sampler.mode,
    )


class LeeKiferKMeans(DPLloydKMeans):
    """DP-Lloyd followed by Lee & Kifer's MCMC post-processing (seed 003): the guarantee of DP-Lloyd,
    eps-DP for rows added or removed (or replaced, ``neighbours="bounded"``), since the chain reads only
    the release. Parameters of DPLloydKMeans plus ``n_steps`` and ``proposal_variance``.
    Fitted as DPLloydKMeans, with ``cluster_centers_`` from the chain, ``dp_lloyd_centers_`` (the plain
    DP-Lloyd answer) and ``mcmc_`` (the MCMCResult).
    """

    def __init__(
        self,
        n_clusters: int = 3,
        epsilon: float = 1.0,
        bounds: object = None,
        n_iter: int | None = None,
        count_share: float | None = None,
        neighbours: Neighbours = "unbounded",
        n_steps: int = 30_000,
        proposal_variance: float = 0.001,
        random_state: int | Sampler | None = None,
    ) -> None:
        super().__init__(n_clusters, epsilon, bounds, n_iter, count_share, neighbours, random_state)
        self.n_steps = n_steps
        self.proposal_variance = proposal_variance

    def fit(self, X: object, y: object = None) -> LeeKiferKMeans:
        """DP-Lloyd on X, then the chain on its release; one sampler, drawn from in sequence."""
        sampler = make_sampler(self.random_state)
        self._fit(X, sampler)  # type: ignore[arg-type]
        self.mcmc_ = mcmc_postprocess(self.released_state(), self.n_steps, self.proposal_variance, sampler)
        self.dp_lloyd_centers_ = self.cluster_centers_
        self.cluster_centers_ = self.mcmc_.cluster_centers
        return self


MCMCKMeans = LeeKiferKMeans
