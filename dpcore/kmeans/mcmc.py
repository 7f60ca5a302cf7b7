"""Lee & Kifer 2016 post-processing of DP-Lloyd: MCMC over synthetic datasets.

Input: only what DP-Lloyd released (noisy counts n~ and sums s~ of all T rounds) and its public inputs
(box, data-independent initial centres, the centres each round assigned with, per-query eps and
sensitivities): a ``LloydRelease``. No data access, so no extra budget (post-processing).

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
costs O(T d) (no recomputation over the dataset). Independent chains (a comparison's trials) step
together: one step of C chains is the same handful of numpy calls over (C, 2T, d + 1) arrays, so 20
chains cost about 3 times one chain, not 20 times (:func:`mcmc_postprocess_many`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.base import clone
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.lloyd import (
    DPLloydKMeans,
    LloydRelease,
    Neighbours,
    NoisyLloydBase,
)
from dpcore.mechanisms import Sampler, check_random_state
from dpcore.metrics import nearest_sets

CHUNK = 4096
CHAIN_ENTRIES = 8_000_000  # numbers of chain state (points x their row) per group of chains (~64 MB)
MAX_STEPS = 100_000  # chain length limit (Lee & Kifer use 30,000; 1M steps took 27 s per chain)
Progress = Callable[[float, str], None]


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
    """Counts >= 0 and sums with one total each across rounds (Lee & Kifer 2016 s.3.2)."""
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
    return nearest_sets(Z * h, centres * h)[0].T


def _log_q(Z: NDArray, mix_centres: NDArray, log_w: NDArray, variance: float) -> NDArray:
    """log of the GMM proposal density (up to the constant shared by every point), in chunks of rows
    of at most ``CHAIN_ENTRIES`` / 8 (point, component) terms."""
    flat = mix_centres.reshape(-1, Z.shape[1])
    flat_sq, weights = np.einsum("ij,ij->i", flat, flat), log_w.ravel()[None]
    out = np.empty(Z.shape[0])
    step = max(1, CHAIN_ENTRIES // (8 * flat.shape[0]))
    for start in range(0, Z.shape[0], step):
        z = Z[start : start + step]
        sq = np.einsum("ij,ij->i", z, z)[:, None] - 2.0 * z @ flat.T + flat_sq
        terms = weights - np.maximum(sq, 0.0) / (2.0 * variance)
        top = terms.max(axis=1, keepdims=True)  # finite: some component of every round has weight > 0
        out[start : start + step] = (top + np.log(np.exp(terms - top).sum(axis=1, keepdims=True)))[:, 0]
    return out


@dataclass(frozen=True)
class _Chain:
    """One chain's fixed inputs in the scaled space z = (x - mid) / h (see the module docstring)."""

    state: LloydRelease
    mid: NDArray  # (d,)
    h: NDArray  # (d,)
    counts: NDArray  # (T, K) consistent counts
    sums: NDArray  # (T, K, d) consistent sums
    n_points: int
    targets: NDArray  # (T * K, d + 1) residual rows: (s^_k(t) / h, n^_k(t))
    weights: NDArray  # (T, d + 1) Laplace weights h / b_S,t and 1 / b_N,t
    assign_centres: NDArray  # (T, K, d) round t assigns with c(t-1)
    mix: NDArray  # (T, K, d) proposal mixture centres c_k(t)
    log_w: NDArray  # (T, K) log mixture weights

    @property
    def rounds(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def of(cls, released: LloydRelease | NoisyLloydBase) -> _Chain:
        state = released.released_state() if isinstance(released, NoisyLloydBase) else released
        if not isinstance(state, LloydRelease):
            raise ParameterError("mcmc_postprocess takes a fitted DPLloydKMeans or its released_state().")
        mid, h = (state.lower + state.upper) / 2.0, (state.upper - state.lower) / 2.0
        T, K = state.noisy_counts.shape
        counts, sums, total_n = consistent_statistics(state)
        # |s - h * S_z| / b = sum_i (h_i / b) |s_i / h_i - S_z,i|. Each point carries an extra coordinate 1,
        # so the residual R[t*K + k] = (s^_k(t) / h - S_z, n^_k(t) - N) holds sums and counts.
        targets = np.concatenate((sums / h, counts[..., None]), axis=-1).reshape(T * K, h.size + 1)
        weights = np.concatenate((h[None, :] / state.sum_scale[:, None], 1.0 / state.count_scale[:, None]), 1)
        mix = np.clip(sums / np.maximum(counts, 1e-12)[..., None] / h, -1.0, 1.0)
        with np.errstate(divide="ignore"):
            log_w = np.log(counts / counts.sum(axis=1, keepdims=True)) - np.log(T)
        return cls(
            state,
            mid,
            h,
            counts,
            sums,
            max(round(total_n), K),
            targets,
            weights,
            (state.centers_history[:T] - mid) / h,
            mix,
            log_w,
        )

    def start(self, proposal_variance: float) -> tuple[NDArray, NDArray, NDArray, NDArray, float]:
        """D(0) = round(n^_k(T)) points at c_k(T): points (N, d + 1), their rows (N, T), log q (N,),
        residuals (T * K, d + 1) and log-likelihood."""
        T, K, d = self.mix.shape
        Z = np.repeat(self.mix[-1], _largest_remainder(self.counts[-1], self.n_points), axis=0)
        Z = np.concatenate((Z, np.ones((self.n_points, 1))), axis=1)
        rows = _assign(Z[:, :d], self.assign_centres, self.h) + np.arange(T) * K
        R = self.targets.copy()
        for t in range(T):
            np.subtract.at(R, rows[:, t], Z)
        loglik = -float((np.abs(R).reshape(T, K, d + 1) * self.weights[:, None, :]).sum())
        return Z, rows, _log_q(Z[:, :d], self.mix, self.log_w, proposal_variance), R, loglik

    def proposals(
        self, m: int, proposal_variance: float, rng: np.random.Generator
    ) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray]:
        """m proposals from the GMM q (with a 1 appended), their rows (m, T), log q, picks and log u."""
        T, K, d = self.mix.shape
        flat_p = np.exp(self.log_w.ravel())
        comp = rng.choice(flat_p.size, size=m, p=flat_p / flat_p.sum())
        noise = rng.normal(0.0, np.sqrt(proposal_variance), (m, d))
        prop = np.clip(self.mix.reshape(-1, d)[comp] + noise, -1.0, 1.0)
        rows = _assign(prop, self.assign_centres, self.h) + np.arange(T) * K
        log_q = _log_q(prop, self.mix, self.log_w, proposal_variance)
        picks = rng.integers(0, self.n_points, size=m)
        log_u = np.log(rng.random(m))
        return np.concatenate((prop, np.ones((m, 1))), axis=1), rows, log_q, picks, log_u


def _check_chain_args(n_steps: object, proposal_variance: object) -> None:
    whole = not isinstance(n_steps, bool) and isinstance(n_steps, (int, np.integer))
    if not whole or not 0 <= n_steps <= MAX_STEPS:
        raise ParameterError(
            f"n_steps must be a whole number from 0 to {MAX_STEPS:,} (got {n_steps!r}); the paper uses 30000."
        )
    if not (isinstance(proposal_variance, (int, float)) and 0 < proposal_variance < np.inf):
        raise ParameterError(
            f"proposal_variance must be > 0 (got {proposal_variance!r}); the paper uses 0.001."
        )


def mcmc_postprocess(
    released: LloydRelease | NoisyLloydBase,
    n_steps: int = 30_000,
    proposal_variance: float = 0.001,
    random_state: int | Sampler | None = None,
) -> MCMCResult:
    """Lee & Kifer's MCMC post-processing of a DP-Lloyd release; spends no budget and reads no data."""
    return mcmc_postprocess_many([released], n_steps, proposal_variance, random_state)[0]


def mcmc_postprocess_many(
    releases: Sequence[LloydRelease | NoisyLloydBase],
    n_steps: int = 30_000,
    proposal_variance: float = 0.001,
    random_state: int | Sampler | None = None,
    progress: Progress | None = None,
) -> list[MCMCResult]:
    """One independent chain per release (same K and d), stepped together in groups: each step is a
    handful of numpy calls over every chain of a group at once, so C chains cost little more than one.
    Post-processing of each release alone (no data, no budget). ``progress(fraction, message)`` is called
    every ``CHUNK`` steps; an exception it raises stops the chains (e.g. a cancelled diagnostic).

    One sampler, drawn from chain after chain of a group per chunk of steps, group after group: a single
    chain draws exactly what it would draw alone. Groups hold at most ``CHAIN_ENTRIES`` numbers of chain
    state (at least one chain), so memory stays bounded whatever the number of chains and points.
    """
    return list(_run_chains(releases, n_steps, proposal_variance, random_state, progress))


def _run_chains(
    releases: Sequence[LloydRelease | NoisyLloydBase],
    n_steps: int,
    proposal_variance: float,
    random_state: int | Sampler | None,
    progress: Progress | None,
) -> Iterator[MCMCResult]:
    """:func:`mcmc_postprocess_many` one result at a time (a caller keeping only the centres lets each
    group's synthetic datasets go)."""
    chains = [_Chain.of(r) for r in releases]
    _check_chain_args(n_steps, proposal_variance)
    if not chains:
        return
    K, d = chains[0].mix.shape[1:]
    if any(c.mix.shape[1:] != (K, d) for c in chains):
        raise ParameterError("the releases of one batch of chains must share K and the number of features.")
    random_state = check_random_state(random_state)
    T, N = max(c.rounds for c in chains), max(c.n_points for c in chains)
    size = max(1, CHAIN_ENTRIES // (max(N, CHUNK) * (d + T + 2)))
    starts = range(0, len(chains), size)
    report = progress or (lambda _f, _m: None)
    for g, start in enumerate(starts):

        def part(fraction: float, message: str, g: int = g) -> None:
            report((g + fraction) / len(starts), message)

        yield from _run_group(chains[start : start + size], n_steps, proposal_variance, random_state, part)


def _run_group(
    chains: list[_Chain], n_steps: int, proposal_variance: float, random_state: Sampler, report: Progress
) -> list[MCMCResult]:
    """The chains of one group stepped together (see :func:`mcmc_postprocess_many`)."""
    K, d = chains[0].mix.shape[1:]
    rng = random_state.rng
    C, T, N = len(chains), max(c.rounds for c in chains), max(c.n_points for c in chains)
    # The running state of every chain, padded to T rounds and N points and flattened. Point i of chain c
    # is row c * N + i of S: (z, 1 | its residual row in each round | log q(z)); residual row r of chain
    # c is row c * T * K + r of R (rounds a chain does not have get zero-weight rows of their own).
    L = d + 1 + T + 1
    S, R, W = np.zeros((C * N, L)), np.zeros((C * T * K, d + 1)), np.zeros((C, T, d + 1))
    base = (np.arange(C) * T * K)[:, None] + np.arange(T) * K  # (C, T) first row of each round
    S[:, d + 1 : -1] = np.repeat(base, N, axis=0)
    loglik = np.empty(C)
    for c, chain in enumerate(chains):
        Tc, at = chain.rounds, slice(c * N, c * N + chain.n_points)
        Z_c, rows_c, S[at, -1], R_c, loglik[c] = chain.start(proposal_variance)
        S[at, : d + 1], S[at, d + 1 : d + 1 + Tc] = Z_c, rows_c + c * T * K
        R[c * T * K : c * T * K + Tc * K] = R_c
        W[c, :Tc] = chain.weights
    initial, best = loglik.copy(), loglik.copy()
    S_best, best_step = S.copy(), np.full(C, -1)
    accepted = np.zeros(C, dtype=np.intp)

    # per chunk: the proposals packed like S, their rows as integers, log u + log q(z') per step
    props = np.empty((CHUNK, C, L))
    rows_prop = np.broadcast_to(base, (CHUNK, C, T)).copy()
    picks, threshold = np.zeros((CHUNK, C), dtype=np.intp), np.empty((CHUNK, C))
    # per step: rows a then rows b of every round, their residuals before then after the move, the move
    both, olds_news = np.empty((C, 2 * T), dtype=np.intp), np.empty((C, 4 * T, d + 1))
    old, new, move = olds_news[:, : 2 * T], olds_news[:, 2 * T :], np.empty((C, 2 * T, d + 1))
    signed = np.concatenate((W, W, -W, -W), axis=1)  # delta = sum |old| w - |new| w
    for start in range(0, n_steps, CHUNK):
        m = min(CHUNK, n_steps - start)
        for c, chain in enumerate(chains):
            z, rows_c, logq_c, picks_c, log_u = chain.proposals(m, proposal_variance, rng)
            rows_prop[:m, c, : chain.rounds] = rows_c + c * T * K
            props[:m, c, : d + 1], props[:m, c, d + 1 : -1], props[:m, c, -1] = z, rows_prop[:m, c], logq_c
            picks[:m, c], threshold[:m, c] = picks_c + c * N, log_u + logq_c
        moves: list[tuple[int, NDArray, NDArray, NDArray]] = []
        for s in range(m):
            p, ib, prop = picks[s], rows_prop[s], props[s]
            cur = S.take(p, axis=0)
            ia, x, xn = cur[:, d + 1 : -1].astype(np.intp), cur[:, : d + 1], prop[:, : d + 1]
            both[:, :T], both[:, T:] = ia, ib
            np.take(R, both, axis=0, out=old, mode="clip")
            # x leaves row a (and xn joins it when a == b); xn joins row b when a != b
            same = (ia == ib)[..., None] * xn[:, None]
            np.subtract(x[:, None], same, out=move[:, :T])
            np.subtract(same, xn[:, None], out=move[:, T:])
            np.add(old, move, out=new)
            delta = np.einsum("cij,cij->c", np.abs(olds_news), signed)
            accept = threshold[s] < delta + cur[:, -1]
            ok = np.flatnonzero(accept)
            if ok.size == 0:
                continue
            moves.append((s, ok, p[ok], cur[ok]))
            # rows b first: a row shared by a and b holds both moves in its a copy, none in its b copy
            R[both[ok, T:]] = new[ok, T:]
            R[both[ok, :T]] = new[ok, :T]
            S[p[ok]] = prop[ok]
            np.add(loglik, delta, out=loglik, where=accept)
            accepted += accept
            better = loglik > best
            np.copyto(best, loglik, where=better)
            np.copyto(best_step, start + s, where=better)
        _keep_best(S, S_best, best_step, start, moves)
        report((start + m) / n_steps, f"MCMC: {start + m:,} of {n_steps:,} steps, {C} chain(s)")

    results = []
    for c, chain in enumerate(chains):
        data = S_best[c * N : c * N + chain.n_points, :d] * chain.h  # centred original units
        seed = int(rng.integers(0, 2**31 - 1))
        km = KMeans(n_clusters=K, n_init=10, random_state=seed).fit(data)
        results.append(
            MCMCResult(
                cluster_centers=np.clip(km.cluster_centers_, -chain.h, chain.h) + chain.mid,
                synthetic_data=data + chain.mid,
                consistent_counts=chain.counts,
                consistent_sums=chain.sums,
                initial_log_likelihood=float(initial[c]),
                best_log_likelihood=float(best[c]),
                acceptance_rate=float(accepted[c]) / n_steps if n_steps else 0.0,
                n_steps=int(n_steps),
                sampling_mode=random_state.mode,
            )
        )
    return results


def _keep_best(S: NDArray, S_best: NDArray, best_step: NDArray, start: int, moves: list) -> None:
    """After a chunk of steps from ``start``: chain c's points in S_best become those at its best step, for
    each chain whose best moved in the chunk: its current points with every later move undone (a point
    moved after the best gets back the value it had before its first such move). ``moves``: (step,
    chains, point rows, previous values) for each step with an acceptance, in order."""
    improved = best_step >= start
    if not improved.any():
        return
    rows = np.repeat(improved, S.shape[0] // best_step.size)
    S_best[rows] = S[rows]
    steps = np.concatenate([np.full(ok.size, s) for s, ok, _, _ in moves])
    chains = np.concatenate([ok for _, ok, _, _ in moves])
    points = np.concatenate([pa for _, _, pa, _ in moves])
    previous = np.concatenate([old for _, _, _, old in moves])
    later = improved[chains] & (start + steps > best_step[chains])
    first = np.unique(points[later], return_index=True)[1]  # the first later move of each point
    S_best[points[later][first]] = previous[later][first]


class LeeKiferKMeans(DPLloydKMeans):
    """DP-Lloyd followed by Lee & Kifer 2016's MCMC post-processing: the guarantee of DP-Lloyd,
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
        _check_chain_args(self.n_steps, self.proposal_variance)
        random_state = check_random_state(self.random_state)
        self._fit(X, random_state)  # type: ignore[arg-type]
        self.mcmc_ = mcmc_postprocess(
            self.released_state(), self.n_steps, self.proposal_variance, random_state
        )
        self.dp_lloyd_centers_ = self.cluster_centers_
        self.cluster_centers_ = self.mcmc_.cluster_centers
        return self

    def fit_trials(
        self, X: object, eps_grid: Sequence[float], trials: int, progress: Progress | None = None
    ) -> NDArray:
        """Centres (E, trials, K, d) of ``trials`` independent fits at each eps of ``eps_grid``, as
        ``fit`` gives them one by one, with every chain stepped together (:func:`mcmc_postprocess_many`).
        A diagnostic path: the estimator itself is left unfitted. ``progress`` as in the batch."""
        _check_chain_args(self.n_steps, self.proposal_variance)
        random_state = check_random_state(self.random_state)
        releases = []
        for eps in eps_grid:
            lloyd = clone(self).set_params(epsilon=float(eps), random_state=random_state)
            releases += [lloyd._fit(X, random_state).released_state() for _ in range(trials)]  # type: ignore[arg-type]
        results = _run_chains(releases, self.n_steps, self.proposal_variance, random_state, progress)
        centres = np.stack([r.cluster_centers for r in results])
        return centres.reshape(len(eps_grid), trials, *centres.shape[1:])


MCMCKMeans = LeeKiferKMeans
