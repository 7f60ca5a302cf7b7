"""DP-Lloyd (SuLQ k-means): T rounds of Lloyd with Laplace-noised per-cluster counts and sums.

Blum, Dwork, McSherry & Nissim 2005 (SuLQ k-means) and Lee & Kifer 2016 Alg. 1 (DP-KMEANS); see
docs/mathematics.md. Each round t, with the previous public centres c^(t-1):

    B_k = {x : k = argmin_j ||x - c_j^(t-1)||_2}   (ties go to the lowest index),
    n~_k = |B_k| + Lap(Delta_N / eps_N,t),   s~_k = sum_{x in B_k} x + Lap(Delta_S / eps_S,t)^d,
    c_k^(t) = clip_box(s~_k / n~_k)        (kept at c_k^(t-1) when n~_k < 1: no usable centre).

Geometry. Rows are clipped to the public box [lo, hi] and translated by its centre m = (lo + hi) / 2,
so max_x ||x - m||_1 = sum_i (hi_i - lo_i) / 2 is the smallest possible L1 radius; centres are
translated back. ``noisy_sums_`` are the released sums of these centred rows.

Sensitivities (L1, per round), with h_i = (hi_i - lo_i) / 2:

* unbounded (one row added or removed): counts 1, sums sum_i h_i;
* bounded (one row's value replaced): counts 2, sums 2 sum_i h_i (x leaves one cluster, y joins one).

Budget (Su, Cao, Li, Bertino, Jin, "Differentially private k-means clustering", CODASPY 2016, s.4):
eps / T per round, split between counts and sums in the ratio eps_N : eps_S = cbrt(4 d rho^2) : d with
rho = 0.225 (their analysis minimises the centroid MSE with budget cbrt(4 d rho^2) on the count and 1 on
each of the d coordinate sums; one L1 Laplace on the sum vector with budget d gives the same noise).
diffprivlib's KMeans swaps these two factors when it returns them, so for d >= 5 it spends
eps (1 + d cbrt(4 d rho^2)) / (d + cbrt(4 d rho^2)) > eps (docs/mathematics.md); we do not.
Rounds (:func:`auto_iterations`): Su et al.'s T = clip(eps / eps_m, 2, 7), eps_m = sqrt(500 K^3 / n^2
(d + cbrt(4 d rho^2))^3), raised (never lowered) to eps / eps_r where a round still gives an average
cluster a centre with per-coordinate noise sd <= 4% of the box half-width: Su's eps_m grows as d^1.5 and
kept T = 2 up to eps ~ 26 on the 28-feature Marketing table. It needs n, which is public under bounded
neighbours; under unbounded neighbours n is private, so 2% of eps buys a Laplace count of the rows first
(logged like every other query). Lee & Kifer (2016, s.4) fix T = 5, inside the same range. Initial
centres: Su et al.'s sphere packing in the box (K centres at least 2a apart and a from the faces, a
halved until they fit), drawn from the sampler: data-independent.

Empty cells (:func:`reseed_centres`). In a box whose centre is far from the data (skewed columns), most
packed centres win almost no rows; their noisy centres are pure noise and they stay dead, so the run
degenerates to about one cluster (Marketing: fractional loss ~0.4 = the K = 1 loss, ARI ~0, even at
eps = 10 and even without noise for 1 in 5 inits). Between rounds, a cluster whose noisy count is below
n_min = sqrt(2) b_S / mean(h) (its noisy centre's noise sd would exceed the mean half-width) is moved next
to the centre of the largest noisy cluster, which the next round splits (only while that cluster's
pieces keep >= 8 n_min rows). This reads only released counts, public centres and the sampler:
post-processing, no budget.

Batching (:func:`noisy_lloyd`): every round runs for B independent runs at once (one product C X' for
all assignments, one bincount per coordinate for the counts and sums, one noise call per query); the
estimator calls it with B = 1 and ``Sampler.privatize`` noise, :func:`noisy_lloyd_trials` (the sweep) with
B = eps values x trials and diagnostic noise (2-D rows assigned by :class:`PlanarCells` grid filtering),
so there is one implementation of a round.

Exact accounting: ``budget_log_`` lists one (query, eps) per noisy query, the last entry being eps minus
the math.fsum of the others, so ``math.fsum`` of the log equals ``epsilon`` and ``budget_spent_`` is
``epsilon`` exactly. Every query's noise is calibrated on the eps written in the log.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator

from dpcore.errors import ParameterError
from dpcore.kmeans.cells import PlanarCells
from dpcore.kmeans.schedule import SIZE_SHARE, plan_rounds, su_count_share
from dpcore.mechanisms import Sampler, check_random_state, laplace_scale
from dpcore.metrics import assign
from dpcore.policy import PureDP
from dpcore.validation import check_fitted, check_rows

Neighbours = Literal["unbounded", "bounded"]
SPLIT_FACTOR = 8.0
BATCH_ENTRIES = 4_000_000  # rows x (runs x K) per batched distance block (~32 MB of float64)
BOUNDS_HELP = (
    "DP k-means needs public bounds=(lower, upper) for every feature, entered by the curator from domain "
    "knowledge (e.g. age in [18, 100]); computing them from X would leak the extreme rows. "
    "dpcore.data.prepare can derive them from the data only with the explicit leak flag data_bounds_ok=True."
)


# ---------------------------------------------------------------- public helpers


def sphere_packing_init(n_clusters: int, lower: NDArray, upper: NDArray, rng: np.random.Generator) -> NDArray:
    """K centres uniform in the box shrunk by a, pairwise >= 2a apart (a = min width / 2, halved on failure).

    Su et al. (2016) s.4; depends on the public box and the sampler only, never on the data.
    """
    width = upper - lower
    a = float(np.min(width)) / 2.0
    while True:
        centres = np.empty((n_clusters, lower.size))
        placed, retries = 0, 0
        while placed < n_clusters and retries < 100:
            cand = lower + a + rng.random(lower.size) * (width - 2 * a)
            if placed == 0 or np.min(np.linalg.norm(centres[:placed] - cand, axis=1)) >= 2 * a:
                centres[placed] = cand
                placed, retries = placed + 1, 0
            else:
                retries += 1
        if placed == n_clusters:
            return centres
        a /= 2.0


def check_bounds(bounds: Any, n_features: int) -> tuple[NDArray, NDArray]:
    """Validate public bounds (lo, hi): scalars or arrays of length d, finite, lo < hi everywhere."""
    if bounds is None:
        raise ParameterError(f"bounds are missing. {BOUNDS_HELP}")
    try:
        lo_raw, hi_raw = bounds
        lo = np.broadcast_to(np.asarray(lo_raw, dtype=float), (n_features,)).copy()
        hi = np.broadcast_to(np.asarray(hi_raw, dtype=float), (n_features,)).copy()
    except (TypeError, ValueError) as err:
        raise ParameterError(
            f"bounds must be a pair (lower, upper) of numbers or arrays of length {n_features} ({err})."
        ) from err
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ParameterError("bounds must be finite numbers; enter the public range of every feature.")
    bad = np.flatnonzero(lo >= hi)
    if bad.size:
        raise ParameterError(
            f"bounds need lower < upper for every feature; features {bad.tolist()} have lower >= upper. "
            "Widen the range (a constant feature carries no information: drop it)."
        )
    return lo, hi


def _check_positive_int(name: str, value: Any, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{name} must be a whole number >= 1 (got {value!r}). {hint}")
    return int(value)


NoiseFn = Callable[[NDArray, NDArray], NDArray]
SensitivityFn = Callable[[NDArray], tuple[NDArray, NDArray]]
StatisticsFn = Callable[[NDArray], tuple[NDArray, NDArray]]


def privatized_noise(random_state: Sampler) -> NoiseFn:
    """Laplace noise through ``random_state.privatize`` (snapped to the noise lattice): the release path."""

    def add(values: NDArray, scales: NDArray) -> NDArray:
        return np.stack(
            [random_state.privatize(v, "laplace", float(s)) for v, s in zip(values, scales, strict=True)]
        )

    return add


def diagnostic_noise(random_state: Sampler) -> NoiseFn:
    """values + Laplace(scale_b) for the whole batch in one draw: sweeps only, never released."""
    if random_state.mode != "diagnostic":
        raise ParameterError("batched Lloyd trials are a diagnostic: pass Sampler.diagnostic(seed).")

    def add(values: NDArray, scales: NDArray) -> NDArray:
        return values + random_state.laplace(values.shape, 1.0) * scales.reshape(
            -1, *(1,) * (values.ndim - 1)
        )

    return add


@dataclass(frozen=True)
class LloydBatch:
    """B independent noisy-Lloyd runs of T rounds (centred coordinates; no row of the data)."""

    noisy_counts: NDArray  # (B, T, K)
    noisy_sums: NDArray  # (B, T, K, d)
    centers_history: NDArray  # (B, T + 1, K, d)
    count_sensitivity: NDArray  # (B, T)
    sum_sensitivity: NDArray  # (B, T)


def _scales(sensitivity: NDArray, epsilon: NDArray) -> NDArray:
    scale = sensitivity / epsilon
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ParameterError("epsilon is too small: the Laplace noise scale overflows. Use a larger epsilon.")
    return scale


def noisy_lloyd(
    Xc: NDArray | None,
    init: NDArray,
    eps_rounds: NDArray,
    half: NDArray,
    noise: NoiseFn,
    sensitivities: SensitivityFn,
    rng: np.random.Generator,
    statistics: StatisticsFn | None = None,
) -> LloydBatch:
    """The noisy Lloyd loop (module docstring) for B runs at once: THE implementation of a round.

    Xc (n, d) rows clipped and centred; init (B, K, d) centred; eps_rounds (B, T, 2) per-round eps of
    the counts and the sums; ``sensitivities(centres (B, K, d)) -> (Delta_N (B,), Delta_S (B,))``;
    ``noise(values (B, ...), scales (B,))`` adds Laplace noise of scale_b to run b; ``rng`` draws the
    offsets of :func:`reseed_centres` (between rounds, never after the last); ``statistics(centres)`` ->
    true (counts, sums), default :func:`dpcore.outofcore.kernel.lloyd_statistics` (diagnostic batches of
    2-D rows pass :meth:`PlanarCells.statistics`; out-of-core engines pass their own pass over the table
    and ``Xc = None``).
    """
    b, k, d = init.shape
    T = eps_rounds.shape[1]
    if statistics is None:
        if Xc is None:
            raise TypeError("noisy_lloyd needs the centred rows Xc or a statistics function.")
        from dpcore.outofcore.kernel import lloyd_statistics  # the out-of-core passes' kernel (no cycle)

        rows = Xc

        def statistics(c: NDArray) -> tuple[NDArray, NDArray]:
            return lloyd_statistics(rows, c)

    centres = init.copy()
    history = np.empty((b, T + 1, k, d))
    history[:, 0] = centres
    counts_out, sums_out = np.empty((b, T, k)), np.empty((b, T, k, d))
    sens_n, sens_s = np.empty((b, T)), np.empty((b, T))
    for t in range(T):
        sens_n[:, t], sens_s[:, t] = sensitivities(centres)
        true_n, true_s = statistics(centres)
        counts_out[:, t] = noise(true_n, _scales(sens_n[:, t], eps_rounds[:, t, 0]))
        sums_out[:, t] = noise(true_s, _scales(sens_s[:, t], eps_rounds[:, t, 1]))
        centres = update_centres(centres, counts_out[:, t], sums_out[:, t], half)
        if t < T - 1:
            n_min = informative_count(sens_s[:, t] / eps_rounds[:, t, 1], half)
            centres = reseed_centres(centres, counts_out[:, t], n_min, half, rng)
        history[:, t + 1] = centres
    return LloydBatch(counts_out, sums_out, history, sens_n, sens_s)


@dataclass(frozen=True)
class LloydRelease:
    """Everything a noisy-Lloyd run releases or takes as public input; no row of the data.

    Sums are of the clipped rows translated by the box centre (lower + upper) / 2; ``centers_history[t]``
    are the public centres round t + 1 assigned the rows with (index 0: the data-independent init).
    """

    noisy_counts: NDArray  # (T, K)
    noisy_sums: NDArray  # (T, K, d), centred coordinates
    centers_history: NDArray  # (T + 1, K, d), original units
    lower: NDArray
    upper: NDArray
    epsilon_counts: NDArray  # (T,)
    epsilon_sums: NDArray  # (T,)
    count_sensitivity: NDArray  # (T,)
    sum_sensitivity: NDArray  # (T,)

    @property
    def count_scale(self) -> NDArray:
        return self.count_sensitivity / self.epsilon_counts

    @property
    def sum_scale(self) -> NDArray:
        return self.sum_sensitivity / self.epsilon_sums


# ---------------------------------------------------------------- the shared loop


class NoisyLloydBase(BaseEstimator):
    """Noisy Lloyd loop shared by DP-Lloyd and Blowfish k-means; subclasses set the sensitivities."""

    n_clusters: int
    epsilon: float
    bounds: Any
    n_iter: int | None
    count_share: float | None
    random_state: int | Sampler | None

    # hooks -------------------------------------------------------------
    def _policy(self) -> Any:
        raise TypeError("NoisyLloydBase is abstract: use DPLloydKMeans or BlowfishKMeans.")

    def _rows_are_public(self) -> bool:
        return True

    def _check_extra(self, lower: NDArray, upper: NDArray) -> None:
        """Subclass validation of further parameters (called before any noise is drawn)."""

    def _batch_sensitivities(self, half: NDArray) -> SensitivityFn:
        """centres (B, K, d) -> (Delta_N (B,), Delta_S (B,)) for the next round."""
        raise TypeError("NoisyLloydBase is abstract: use DPLloydKMeans or BlowfishKMeans.")

    # validation --------------------------------------------------------
    def _validate(self, X: ArrayLike) -> tuple[NDArray, NDArray, NDArray, int, float]:
        arr = check_rows(self, X, reset=True)
        return (arr, *self._check_parameters(*arr.shape))

    def _check_parameters(self, n_rows: int, n_features: int) -> tuple[NDArray, NDArray, int, float]:
        """(lower, upper, K, eps) validated for a table of n_rows x n_features (no data read)."""
        policy = self._policy()  # validates epsilon and the neighbour relation / graph
        k = _check_positive_int("n_clusters", self.n_clusters, "Try K = 3.")
        if k > n_rows:
            raise ParameterError(
                f"n_clusters = {k} exceeds the number of rows ({n_rows}); choose a smaller K."
            )
        lower, upper = check_bounds(self.bounds, n_features)
        if self.n_iter is not None:
            _check_positive_int(
                "n_iter", self.n_iter, "Su et al. recommend 2 to 7 rounds; leave None for auto."
            )
        share = self.count_share
        if share is not None and not (isinstance(share, (float, int)) and 0.0 < share < 1.0):
            raise ParameterError(
                f"count_share must be a number strictly between 0 and 1 (got {share!r}); "
                "leave None for Su et al.'s split."
            )
        self._check_extra(lower, upper)
        return lower, upper, k, float(policy.epsilon)

    # fit ---------------------------------------------------------------
    def fit(self, X: ArrayLike, y: object = None) -> NoisyLloydBase:
        """Run T noisy Lloyd rounds on X clipped to the public bounds; returns self."""
        return self._fit(X, check_random_state(self.random_state))

    def _fit(self, X: ArrayLike, random_state: Sampler) -> NoisyLloydBase:
        arr, lower, upper, k, eps = self._validate(X)
        Xc = np.clip(arr, lower, upper) - (lower + upper) / 2.0
        return self._run(arr.shape, lower, upper, k, eps, None, Xc, random_state)

    def fit_statistics(self, n_rows: int, n_features: int, statistics: StatisticsFn) -> NoisyLloydBase:
        """Fit from a statistics oracle instead of rows (out-of-core engines); returns self.

        ``statistics(centres (1, K, d))`` -> (counts (1, K), sums (1, K, d)) of the rows clipped to the
        public bounds and translated by their centre (lower + upper) / 2, each row assigned to its nearest
        centre (ties to the lowest index), centres in those centred coordinates. Same budget, rounds,
        initial centres and noise draws as :meth:`fit` on the same rows.
        """
        random_state = check_random_state(self.random_state)
        lower, upper, k, eps = self._check_parameters(int(n_rows), int(n_features))
        self.n_features_in_ = int(n_features)
        return self._run((int(n_rows), int(n_features)), lower, upper, k, eps, statistics, None, random_state)

    def _run(
        self,
        shape: tuple[int, int],
        lower: NDArray,
        upper: NDArray,
        k: int,
        eps: float,
        statistics: StatisticsFn | None,
        Xc: NDArray | None,
        random_state: Sampler,
    ) -> NoisyLloydBase:
        """The fit given validated parameters and either the centred rows ``Xc`` or ``statistics``."""
        n, d = shape
        policy = self._policy()
        mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0

        share = su_count_share(d) if self.count_share is None else float(self.count_share)
        size_query = self.n_iter is None and not self._rows_are_public()
        noisy_n: float | None = None
        if size_query:
            noisy_n = float(n + random_state.laplace(1, laplace_scale(1.0, eps * SIZE_SHARE))[0])
        T, log, eps_rounds = plan_rounds(
            eps, self.n_iter, n if noisy_n is None else noisy_n, k, d, share, size_query
        )
        init = sphere_packing_init(k, lower, upper, random_state.rng) - mid
        run = noisy_lloyd(
            Xc,
            init[None],
            eps_rounds[None],
            half,
            privatized_noise(random_state),
            self._batch_sensitivities(half),
            random_state.rng,
            statistics,
        )
        counts_out, sums_out, history = run.noisy_counts[0], run.noisy_sums[0], run.centers_history[0]
        sens_n, sens_s = run.count_sensitivity[0], run.sum_sensitivity[0]

        self.bounds_ = (lower, upper)
        self.n_iter_ = T
        self.count_share_ = share
        self.noisy_n_ = noisy_n
        self.noisy_counts_ = counts_out
        self.noisy_sums_ = sums_out
        self.centers_history_ = history + mid
        self.initial_centers_ = self.centers_history_[0].copy()
        self.cluster_centers_ = self.centers_history_[-1].copy()
        self.count_sensitivity_ = sens_n
        self.sum_sensitivity_ = sens_s
        self.budget_log_ = log
        self.budget_spent_ = math.fsum(e for _, e in log)
        self.sampling_mode_ = random_state.mode
        self.policy_ = policy
        self.guarantee_ = policy.guarantee
        return self

    def released_state(self) -> LloydRelease:
        """The released noisy statistics and public inputs, for post-processing (no data access)."""
        T = self.n_iter_
        eps = np.array([e for _, e in self.budget_log_[-2 * T :]]).reshape(T, 2)
        lower, upper = self.bounds_
        return LloydRelease(
            noisy_counts=self.noisy_counts_.copy(),
            noisy_sums=self.noisy_sums_.copy(),
            centers_history=self.centers_history_.copy(),
            lower=lower.copy(),
            upper=upper.copy(),
            epsilon_counts=eps[:, 0].copy(),
            epsilon_sums=eps[:, 1].copy(),
            count_sensitivity=self.count_sensitivity_.copy(),
            sum_sensitivity=self.sum_sensitivity_.copy(),
        )

    def predict(self, X: ArrayLike) -> NDArray[np.intp]:
        """Index of the nearest released centre for each row."""
        check_fitted(self)
        return assign(check_rows(self, X, reset=False), self.cluster_centers_)


def noisy_lloyd_trials(
    estimator: NoisyLloydBase, X: ArrayLike, eps_grid: ArrayLike, trials: int, random_state: Sampler
) -> NDArray:
    """Final centres (E, trials, K, d) of ``trials`` independent fits of ``estimator`` at every eps.

    Same distribution as ``trials`` calls of ``estimator.set_params(epsilon=eps).fit(X)`` (same budget
    plan, init, sensitivities and noise scales), but all runs with the same T go through
    :func:`noisy_lloyd` together, with ``Sampler.diagnostic`` noise drawn at once (never released);
    2-D rows are assigned by :class:`PlanarCells` grid filtering.
    """
    noise = diagnostic_noise(random_state)
    grid = np.asarray(eps_grid, dtype=float).ravel()
    if grid.size == 0 or isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ParameterError("give at least one eps > 0 and trials >= 1 (an integer; 20 is a good default).")
    inits: list[NDArray] = []
    plans: list[tuple[int, NDArray]] = []
    for eps in grid:
        est = type(estimator)(**{**estimator.get_params(deep=False), "epsilon": float(eps)})
        arr, lower, upper, k, e = est._validate(X)
        n, d = arr.shape
        share = su_count_share(d) if est.count_share is None else float(est.count_share)
        size_query = est.n_iter is None and not est._rows_are_public()
        rows = np.full(trials, float(n))
        if size_query:
            rows += random_state.laplace(trials, 1.0) * laplace_scale(1.0, e * SIZE_SHARE)
        for r in rows:
            T, _, eps_rounds = plan_rounds(e, est.n_iter, r, k, d, share, size_query)
            plans.append((T, eps_rounds))
            inits.append(sphere_packing_init(k, lower, upper, random_state.rng))
    mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0
    sensitivities = est._batch_sensitivities(half)
    Xc = np.clip(arr, lower, upper) - mid
    cells = PlanarCells(Xc) if d == 2 else None
    init = np.stack(inits) - mid
    out = np.empty_like(init)
    T_all = np.array([T for T, _ in plans])
    # runs per batch: grid filtering holds (runs x K x cells) box bounds and may compare up to n rows per run
    n_rows = arr.shape[0]
    chunk = max(1, BATCH_ENTRIES // (n_rows * k if cells is None else max(cells.count.size * k, n_rows)))
    for T in np.unique(T_all):
        idx = np.flatnonzero(T_all == T)
        for part in np.array_split(idx, -(-idx.size // chunk)):
            rounds = np.stack([plans[i][1] for i in part])
            run = noisy_lloyd(
                Xc,
                init[part],
                rounds,
                half,
                noise,
                sensitivities,
                random_state.rng,
                None if cells is None else cells.statistics,
            )
            out[part] = run.centers_history[:, -1]
    return (out + mid).reshape(grid.size, trials, k, arr.shape[1])


def informative_count(sum_scale: NDArray, half: NDArray) -> NDArray:
    """n_min = sqrt(2) b_S / mean(h): below it, a noisy centre's per-coordinate noise sd exceeds mean h."""
    return np.maximum(np.sqrt(2.0) * sum_scale / float(np.mean(half)), 1.0)


def reseed_centres(
    centres: NDArray, noisy_counts: NDArray, n_min: NDArray, half: NDArray, rng: np.random.Generator
) -> NDArray:
    """Split the largest noisy cluster to replace clusters whose noisy count is below n_min (post-processing).

    Run b: a cluster with n~_k < n_min_b carries no usable centre; it moves to the centre of the cluster
    with the largest n~ plus a data-independent offset N(0, (0.01 h)^2) per coordinate, so the next
    round's bisector splits that cluster. At most floor(n~_max / (SPLIT_FACTOR n_min)) - 1 clusters move
    (each piece keeps about 8 n_min rows: noisier pieces lost utility at small eps on Marketing).
    Reads only released counts, public centres and the sampler: no budget.
    """
    rows = np.arange(centres.shape[0])
    big = np.argmax(noisy_counts, axis=1)
    dead = noisy_counts < n_min[:, None]
    dead[rows, big] = False
    dead &= (
        np.cumsum(dead, axis=1) <= (np.floor(noisy_counts[rows, big] / (SPLIT_FACTOR * n_min)) - 1)[:, None]
    )
    offset = rng.normal(size=centres.shape) * (0.01 * half)
    moved = np.clip(centres[rows, big][:, None, :] + offset, -half, half)
    return np.where(dead[..., None], moved, centres)


def update_centres(prev: NDArray, noisy_counts: NDArray, noisy_sums: NDArray, half: NDArray) -> NDArray:
    """c_k = clip(s~_k / n~_k) to the centred box; a cluster with n~_k < 1 keeps its previous centre.

    Batched: prev and noisy_sums (..., K, d), noisy_counts (..., K)."""
    ok = noisy_counts >= 1.0
    ratio = noisy_sums / np.where(ok, noisy_counts, 1.0)[..., None]
    return np.where(ok[..., None], np.clip(ratio, -half, half), prev)


class DPLloydKMeans(NoisyLloydBase):
    """DP-Lloyd k-means (Lee & Kifer 2016 Alg. 1; Blum et al. 2005 SuLQ): eps-DP for rows added or removed
    (``neighbours="unbounded"``) or for one row's value replaced (``"bounded"``), given public bounds.

    Parameters: n_clusters K; epsilon (total, exactly spent); bounds (lo, hi) public, scalars or length-d
    arrays; n_iter T (None: auto_iterations); count_share (None: Su et al.'s split); neighbours;
    random_state (None: secure sampling for releases; an int: labelled demo mode; a Sampler: as given);
    private_size: with bounded neighbours and auto T, still spend SIZE_SHARE of eps on a Laplace count of
    the rows (sensitivity 1, a row added or removed) to choose T, as under unbounded neighbours: for a
    release per user, whose bounded relation replaces a person's rows by any number of others, so the row
    count is private. Fitted: cluster_centers_, noisy_counts_ (T, K), noisy_sums_ (T, K, d, centred rows),
    centers_history_ (T + 1, K, d), n_iter_, budget_log_, budget_spent_ (== epsilon), guarantee_,
    bounds_, sampling_mode_, noisy_n_ (auto T with a private row count only).

    >>> import numpy as np
    >>> X = np.array([[0.1, 0.2], [0.2, 0.1], [0.8, 0.9], [0.9, 0.8]] * 100)
    >>> est = DPLloydKMeans(n_clusters=2, epsilon=1.0, bounds=(0.0, 1.0), n_iter=3).fit(X)
    >>> est.cluster_centers_.shape, est.budget_spent_, est.sampling_mode_
    ((2, 2), 1.0, 'secure')
    """

    def __init__(
        self,
        n_clusters: int = 3,
        epsilon: float = 1.0,
        bounds: Any = None,
        n_iter: int | None = None,
        count_share: float | None = None,
        neighbours: Neighbours = "unbounded",
        random_state: int | Sampler | None = None,
        private_size: bool = False,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.bounds = bounds
        self.n_iter = n_iter
        self.count_share = count_share
        self.neighbours = neighbours
        self.random_state = random_state
        self.private_size = private_size

    def _policy(self) -> PureDP:
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float, np.number)):
            raise ParameterError(f"epsilon must be a number > 0 (got {self.epsilon!r}). Try epsilon = 1.0.")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ParameterError(f"epsilon must be a finite number > 0 (got {self.epsilon!r}). Try 1.0.")
        if self.neighbours not in ("unbounded", "bounded"):
            raise ParameterError(f"neighbours must be 'unbounded' or 'bounded' (got {self.neighbours!r}).")
        return PureDP(float(self.epsilon), neighbours=self.neighbours)

    def _rows_are_public(self) -> bool:
        return self.neighbours == "bounded" and not self.private_size

    def _batch_sensitivities(self, half: NDArray) -> SensitivityFn:
        """Unbounded: (1, sum h); bounded: (2, 2 sum h), h the box half-widths (no centre dependence)."""
        factor = 2.0 if self.neighbours == "bounded" else 1.0
        total = factor * float(np.sum(half))

        def fixed(centres: NDArray) -> tuple[NDArray, NDArray]:
            return np.full(centres.shape[0], factor), np.full(centres.shape[0], total)

        return fixed
