"""Shared by the noisy-Lloyd mechanisms (DP-Lloyd, Blowfish k-means, DP-Lloyd + MCMC): release and trial.

Each builds its estimator with ``build(epsilon, bounds, params, random_state)``; a release fits it once with
the sampler it is given (on ``inputs.X``, or through ``inputs.fit_lloyd`` when the inputs are a
:class:`LloydSource`, e.g. a table in an out-of-core engine), a trial runs every (eps, trial) fit as one
batch with diagnostic noise (:func:`dpcore.kmeans.lloyd.noisy_lloyd_trials`) and matches the centres to
the true ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpcore.accounts import Relation
from dpcore.errors import ParameterError
from dpcore.kmeans.lloyd import NoisyLloydBase, noisy_lloyd_trials
from dpcore.kmeans.registry import KMEANS, KMeansInputs, check_release_sampler
from dpcore.mechanisms import Sampler
from dpcore.metrics import match_centers
from dpcore.policy import NEIGHBOURS as POLICY_NEIGHBOURS
from dpcore.registry import Param


def policy_neighbours(policy: Any) -> str:
    """The neighbour relation the noise is calibrated for: the policy's if bounded, else unbounded."""
    return "bounded" if getattr(policy, "neighbours", "") == "bounded" else "unbounded"


def neighbour_relation(params: Mapping[str, Any], policy: Any = None) -> Relation:
    """The relation a release calibrated for ``params["neighbours"]`` protects (whatever the policy)."""
    return Relation("dp", params["neighbours"])


N_ITER = Param(
    "n_iter",
    "Lloyd rounds",
    int,
    0,
    low=0,
    high=20,
    help="0 = automatic: Su et al.'s rule picks 2 to 7 rounds from ε, K, n and the number of features.",
    zero="automatic (Su et al.'s rule: 2 to 7 rounds from ε, K, n and the number of features)",
)
NEIGHBOURS = Param(
    "neighbours",
    "Neighbour relation",
    str,
    "unbounded",
    choices=("unbounded", "bounded"),
    help="Take it from the privacy policy: 'unbounded' (one row added or removed) or 'bounded' (replaced).",
    from_policy=policy_neighbours,
    choice_label=POLICY_NEIGHBOURS.__getitem__,
)
Build = Callable[[float, tuple[np.ndarray, np.ndarray], dict, Sampler], NoisyLloydBase]


@runtime_checkable
class LloydSource(Protocol):
    """Inputs that fit a noisy-Lloyd estimator by their own passes over the rows (out-of-core tables)."""

    def require_bounds(self, label: str) -> tuple[np.ndarray, np.ndarray]: ...

    def fit_lloyd(self, estimator: NoisyLloydBase) -> NoisyLloydBase: ...


def rounds(params: dict) -> int | None:
    """The estimators' n_iter: None (automatic) for 0."""
    return int(params["n_iter"]) or None


def fit_release(
    key: str,
    build: Build,
    inputs: KMeansInputs | LloydSource,
    *,
    epsilon: float,
    delta: float,
    params: dict,
    random_state: Sampler,
) -> tuple[Any, dict[str, Any]]:
    """The estimator fitted once on ``inputs`` and the manifest details every noisy-Lloyd run shares."""
    label = KMEANS[key].label
    random_state = check_release_sampler(random_state)
    if delta:
        raise ParameterError(f"{label} is pure ε noise (Laplace) and spends no δ: pass δ = 0.")
    est = build(float(epsilon), inputs.require_bounds(label), params, random_state)
    est = inputs.fit_lloyd(est) if isinstance(inputs, LloydSource) else est.fit(inputs.X)
    details = {
        "n_clusters": int(params["n_clusters"]),
        "n_features": int(est.n_features_in_),
        "n_iter": int(est.n_iter_),
        "budget_log": [(q, float(e)) for q, e in est.budget_log_],
        "budget_spent": float(est.budget_spent_),
    }
    return est, details


def match_all(centers: np.ndarray, true_centers: np.ndarray) -> np.ndarray:
    """(E, T, K, d) centre sets, each reordered so row k is the one matched to true centre k."""
    return np.stack([[match_centers(c, true_centers) for c in row] for row in centers])


def batched_trial(
    key: str,
    build: Build,
    inputs: KMeansInputs,
    eps_grid: np.ndarray,
    trials: int,
    *,
    params: dict,
    random_state: Sampler,
    progress: Callable[[float, str], None],
    **_: Any,
) -> np.ndarray:
    """Noisy centres (E, trials, K, d) of every (eps, trial) fit, one batch, diagnostic noise."""
    label = KMEANS[key].label
    est = build(float(eps_grid[0]), inputs.require_bounds(label), params, random_state)
    progress(0.0, f"{label}: {len(eps_grid)} ε × {trials} trials, batched")
    return match_all(noisy_lloyd_trials(est, inputs.X, eps_grid, trials, random_state), inputs.true_centers())
