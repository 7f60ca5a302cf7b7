"""DP-Lloyd (SuLQ k-means): T rounds of Lloyd with Laplace-noised per-cluster counts and sums.

Seed 001 ("Case study: K-means", Blum, Dwork, McSherry, Nissim: SuLQ, PODS 2005) and seed 003 Alg. 1
(DP-KMEANS); MECHANISMS.md s.3.4. Each round t, with the previous public centres c^(t-1):

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
eps (1 + d cbrt(4 d rho^2)) / (d + cbrt(4 d rho^2)) > eps (MECHANISMS.md s.3.4); we do not.
Rounds: Su et al.'s rule T = clip(eps / eps_m, 2, 7) with eps_m = sqrt(500 K^3 / n^2 (d + cbrt(4 d
rho^2))^3). It needs n, which is public under bounded neighbours; under unbounded neighbours n is private,
so 2% of eps buys a Laplace count of the rows first (logged like every other query). Lee & Kifer
(seed 003 s.4) fix T = 5, inside the same range. Initial centres: Su et al.'s sphere packing in the box
(K centres at least 2a apart and a from the faces, a halved until they fit), drawn from the sampler:
data-independent.

Exact accounting: ``budget_log_`` lists one (query, eps) per noisy query, the last entry being eps minus
the math.fsum of the others, so ``math.fsum`` of the log equals ``epsilon`` and ``budget_spent_`` is
``epsilon`` exactly. Every query's noise is calibrated on the eps written in the log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator

from dpcore.errors import ParameterError
from dpcore.mechanisms import Sampler, laplace_scale
from dpcore.policy import PureDP

Neighbours = Literal["unbounded", "bounded"]
SU_RHO = 0.225
SIZE_SHARE = 0.02
MIN_ITER, MAX_ITER = 2, 7
BOUNDS_HELP = (
    "DP k-means needs public bounds=(lower, upper) for every feature, entered by the curator from domain "
    "knowledge (e.g. age in [18, 100]); computing them from X would leak the extreme rows. "
    "dpcore.data.prepare can derive them from the data only with the explicit leak flag data_bounds_ok=True."
)


# ---------------------------------------------------------------- public helpers


def su_count_share(n_features: int, rho: float = SU_RHO) -> float:
    """Share of each round's eps spent on the counts: cbrt(4 d rho^2) / (cbrt(4 d rho^2) + d) (Su et al.)."""
    c = float(np.cbrt(4.0 * n_features * rho**2))
    return c / (c + n_features)


def su_iterations(
    epsilon: float, n_rows: float, n_clusters: int, n_features: int, rho: float = SU_RHO
) -> int:
    """Su et al.'s rounds: clip(eps / eps_m, 2, 7), eps_m = sqrt(500 K^3 / n^2 (d + cbrt(4 d rho^2))^3)."""
    c = float(np.cbrt(4.0 * n_features * rho**2))
    eps_m = math.sqrt(500.0 * n_clusters**3 / max(n_rows, 1.0) ** 2 * (n_features + c) ** 3)
    return int(min(max(epsilon / eps_m, MIN_ITER), MAX_ITER))


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


def budget_schedule(epsilon: float, names: list[str], shares: list[float]) -> list[tuple[str, float]]:
    """(name, eps * share) entries whose math.fsum is exactly eps.

    All but the last entry are rounded to multiples of q = ulp(eps), so every partial sum is an exact
    multiple of q below eps and the last entry eps - fsum(others) is exact too.
    """
    q = math.ulp(epsilon)
    head = [(n, round(epsilon * s / q) * q) for n, s in zip(names[:-1], shares[:-1], strict=True)]
    return [*head, (names[-1], epsilon - math.fsum(e for _, e in head))]


def _check_positive_int(name: str, value: Any, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{name} must be a whole number >= 1 (got {value!r}). {hint}")
    return int(value)


def make_sampler(random_state: int | Sampler | None) -> Sampler:
    """None: secure sampling; an int: a labelled demo seed; a Sampler: used as given."""
    if isinstance(random_state, Sampler):
        return random_state
    return Sampler(seed=random_state)


def nearest(X: NDArray, centres: NDArray) -> NDArray[np.intp]:
    """Index of the nearest centre (squared L2; ties go to the lowest index)."""
    d2 = (X * X).sum(axis=1)[:, None] - 2.0 * X @ centres.T + (centres * centres).sum(axis=1)[None, :]
    return np.argmin(d2, axis=1)


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

    def _sensitivities(self, prev_centred: NDArray, half: NDArray) -> tuple[float, float]:
        raise TypeError("NoisyLloydBase is abstract: use DPLloydKMeans or BlowfishKMeans.")

    # validation --------------------------------------------------------
    def _validate(self, X: ArrayLike) -> tuple[NDArray, NDArray, NDArray, int, float]:
        policy = self._policy()  # validates epsilon and the neighbour relation / graph
        arr = np.asarray(X, dtype=float)
        if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
            raise ParameterError(f"X must be a non-empty 2-D table of numbers (got shape {arr.shape}).")
        if not np.all(np.isfinite(arr)):
            raise ParameterError(
                "X contains missing or infinite values; drop or impute them first "
                "(dpcore.data.handle_missing) before running DP k-means."
            )
        k = _check_positive_int("n_clusters", self.n_clusters, "Try K = 3.")
        if k > arr.shape[0]:
            raise ParameterError(
                f"n_clusters = {k} exceeds the number of rows ({arr.shape[0]}); choose a smaller K."
            )
        lower, upper = check_bounds(self.bounds, arr.shape[1])
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
        return arr, lower, upper, k, float(policy.epsilon)

    # fit ---------------------------------------------------------------
    def fit(self, X: ArrayLike, y: object = None) -> NoisyLloydBase:
        """Run T noisy Lloyd rounds on X clipped to the public bounds; returns self."""
        return self._fit(X, make_sampler(self.random_state))

    def _fit(self, X: ArrayLike, sampler: Sampler) -> NoisyLloydBase:
        arr, lower, upper, k, eps = self._validate(X)
        n, d = arr.shape
        policy = self._policy()
        mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0
        Xc = np.clip(arr, lower, upper) - mid

        share = su_count_share(d) if self.count_share is None else float(self.count_share)
        log: list[tuple[str, float]] = []
        noisy_n: float | None = None
        if self.n_iter is not None:
            T = int(self.n_iter)
        elif self._rows_are_public():
            T = su_iterations(eps, n, k, d)
        else:
            size_eps = eps * SIZE_SHARE
            noisy_n = float(n + sampler.laplace(1, laplace_scale(1.0, size_eps))[0])
            T = su_iterations(eps, max(noisy_n, 1.0), k, d)
            log.append(("row count (sets the number of rounds)", size_eps))

        loop_share = 1.0 - (SIZE_SHARE if noisy_n is not None else 0.0)
        names = [name for name, _ in log]
        shares = [SIZE_SHARE] if noisy_n is not None else []
        for t in range(1, T + 1):
            names += [f"iteration {t} counts", f"iteration {t} sums"]
            shares += [loop_share / T * share, loop_share / T * (1.0 - share)]
        log = budget_schedule(eps, names, shares)
        eps_rounds = np.array([e for _, e in log[len(log) - 2 * T :]]).reshape(T, 2)

        centres = sphere_packing_init(k, lower, upper, sampler.rng) - mid
        history = np.empty((T + 1, k, d))
        history[0] = centres
        counts_out, sums_out = np.empty((T, k)), np.empty((T, k, d))
        sens_n, sens_s = np.empty(T), np.empty(T)
        for t in range(T):
            sens_n[t], sens_s[t] = self._sensitivities(centres, half)
            labels = nearest(Xc, centres)
            true_n = np.bincount(labels, minlength=k).astype(float)
            true_s = np.stack([np.bincount(labels, weights=Xc[:, j], minlength=k) for j in range(d)], axis=1)
            counts_out[t] = sampler.privatize(true_n, "laplace", laplace_scale(sens_n[t], eps_rounds[t, 0]))
            sums_out[t] = sampler.privatize(true_s, "laplace", laplace_scale(sens_s[t], eps_rounds[t, 1]))
            centres = update_centres(centres, counts_out[t], sums_out[t], half)
            history[t + 1] = centres

        self.bounds_ = (lower, upper)
        self.n_features_in_ = d
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
        self.sampling_mode_ = sampler.mode
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
        if not hasattr(self, "cluster_centers_"):
            raise ParameterError("this estimator is not fitted yet: call fit(X) first.")
        arr = np.asarray(X, dtype=float)
        if arr.ndim != 2 or arr.shape[1] != self.n_features_in_:
            raise ParameterError(f"X must have {self.n_features_in_} columns (got shape {arr.shape}).")
        return nearest(arr, self.cluster_centers_)


def update_centres(prev: NDArray, noisy_counts: NDArray, noisy_sums: NDArray, half: NDArray) -> NDArray:
    """c_k = clip(s~_k / n~_k) to the centred box; a cluster with n~_k < 1 keeps its previous centre."""
    ok = noisy_counts >= 1.0
    new = prev.copy()
    new[ok] = np.clip(noisy_sums[ok] / noisy_counts[ok, None], -half, half)
    return new


class DPLloydKMeans(NoisyLloydBase):
    """DP-Lloyd k-means (seed 003 Alg. 1, seed 001 SuLQ case study): eps-DP for rows added or removed
    (``neighbours="unbounded"``) or for one row's value replaced (``"bounded"``), given public bounds.

    Parameters: n_clusters K; epsilon (total, exactly spent); bounds (lo, hi) public, scalars or length-d
    arrays; n_iter T (None: Su et al.'s rule); count_share (None: Su et al.'s split); neighbours;
    random_state (None: secure sampling for releases; an int: labelled demo mode; a Sampler: as given).
    Fitted: cluster_centers_, noisy_counts_ (T, K), noisy_sums_ (T, K, d, centred rows),
    centers_history_ (T + 1, K, d), n_iter_, budget_log_, budget_spent_ (== epsilon), guarantee_,
    bounds_, sampling_mode_, noisy_n_ (unbounded auto-T only).
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
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.bounds = bounds
        self.n_iter = n_iter
        self.count_share = count_share
        self.neighbours = neighbours
        self.random_state = random_state

    def _policy(self) -> PureDP:
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float, np.number)):
            raise ParameterError(f"epsilon must be a number > 0 (got {self.epsilon!r}). Try epsilon = 1.0.")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ParameterError(f"epsilon must be a finite number > 0 (got {self.epsilon!r}). Try 1.0.")
        if self.neighbours not in ("unbounded", "bounded"):
            raise ParameterError(f"neighbours must be 'unbounded' or 'bounded' (got {self.neighbours!r}).")
        return PureDP(float(self.epsilon), neighbours=self.neighbours)

    def _rows_are_public(self) -> bool:
        return self.neighbours == "bounded"

    def _sensitivities(self, prev_centred: NDArray, half: NDArray) -> tuple[float, float]:
        """Unbounded: (1, sum h); bounded: (2, 2 sum h), h the half-widths of the box."""
        factor = 2.0 if self.neighbours == "bounded" else 1.0
        return factor, factor * float(np.sum(half))
