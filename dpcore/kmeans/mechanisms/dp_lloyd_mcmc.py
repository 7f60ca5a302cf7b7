"""DP-Lloyd followed by Lee & Kifer 2016's MCMC post-processing (``dpcore.kmeans.mcmc``).

Guarantee: that of DP-Lloyd, eps-DP for the policy's neighbour relation (one row added or removed, or one
row's value replaced), since the chain reads only DP-Lloyd's released counts and sums: no extra budget.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from dpcore.errors import ParameterError
from dpcore.kmeans.mcmc import MAX_STEPS, LeeKiferKMeans
from dpcore.kmeans.mechanisms._lloyd import (
    N_ITER,
    NEIGHBOURS,
    fit_release,
    match_all,
    neighbour_relation,
    rounds,
)
from dpcore.kmeans.registry import KMEANS, METRICS, N_CLUSTERS, KMeansInputs, centroid_output
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec, Param

KEY = "dp_lloyd_mcmc"
MCMC_STEPS = Param(
    "mcmc_steps",
    "MCMC chain length",
    int,
    30_000,
    low=1,
    high=MAX_STEPS,
    help="Lee & Kifer use 30,000 steps; fewer run faster.",
)
MAX_CHAINS = 100  # diagnostic chains per eps (the comparison's trials for this mechanism)
CHAINS = Param(
    "mcmc_chains",
    "MCMC chains per ε",
    int,
    1,
    low=1,
    high=MAX_CHAINS,
    help="DP-Lloyd + MCMC's own trial count: more chains, a steadier curve, a longer run.",
)
DEGENERATE = (
    "the synthetic data the MCMC search settled on had fewer distinct points than K, so some released "
    "centres stand for no synthetic point. A longer chain or a smaller K may help."
)


class _LeeKifer(LeeKiferKMeans):
    """``LeeKiferKMeans`` whose fit turns scikit-learn's convergence warning (expected: the chain may settle
    on fewer distinct synthetic points than K) into ``degenerate_``; other warnings pass through."""

    def fit(self, X: object, y: object = None) -> _LeeKifer:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            super().fit(X, y)
        self.degenerate_ = _convergence_warnings(caught) > 0
        return self


def _convergence_warnings(caught: list[warnings.WarningMessage]) -> int:
    """How many of ``caught`` are scikit-learn's convergence warnings (one per k-means fit on fewer distinct
    synthetic points than K); every other warning is issued again."""
    count = 0
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            count += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return count


def build(
    epsilon: float, bounds: tuple[np.ndarray, np.ndarray], params: dict, random_state: Sampler
) -> _LeeKifer:
    """The unfitted estimator, calibrated for ``params["neighbours"]``."""
    return _LeeKifer(
        params["n_clusters"],
        epsilon,
        bounds=bounds,
        n_iter=rounds(params),
        n_steps=params["mcmc_steps"],
        neighbours=params["neighbours"],
        random_state=random_state,
    )


def release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, random_state: Sampler
) -> MechanismOutput:
    """DP-Lloyd fitted once, then the chain on its release: the chain's centres."""
    est, details = fit_release(
        KEY, build, inputs, epsilon=epsilon, delta=delta, params=params, random_state=random_state
    )
    details.update(
        neighbours=params["neighbours"],
        mcmc_steps=int(params["mcmc_steps"]),
        mcmc_acceptance_rate=float(est.mcmc_.acceptance_rate),
    )
    if est.degenerate_:
        details["caveats"] = [DEGENERATE[0].upper() + DEGENERATE[1:]]
    return centroid_output(KEY, inputs, est.cluster_centers_, details)


def trial(
    inputs: KMeansInputs,
    eps_grid: np.ndarray,
    trials: int,
    *,
    params: dict,
    random_state: Sampler,
    progress: Callable[[float, str], None],
    **_: Any,
) -> np.ndarray:
    """Diagnostic centres (E, trials, K, d): one chain per (eps, trial), stepped together in groups of
    bounded memory (``LeeKiferKMeans.fit_trials``), matched to the true centres; trials <= ``MAX_CHAINS``."""
    label = KMEANS[KEY].label
    if trials > MAX_CHAINS:
        raise ParameterError(
            f"{label} runs at most {MAX_CHAINS} diagnostic chains per ε (got {trials}); ask for fewer."
        )
    est = build(float(eps_grid[0]), inputs.require_bounds(label), params, random_state)
    progress(0.0, f"{label}: {len(eps_grid) * trials} chains, stepped together")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = est.fit_trials(inputs.X, eps_grid, trials, progress)
    degenerate = _convergence_warnings(caught)
    if degenerate:
        runs = len(eps_grid) * trials
        warnings.warn(f"{label}: in {degenerate} of {runs} diagnostic runs, {DEGENERATE}", stacklevel=2)
    return match_all(out, inputs.true_centers())


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="DP-Lloyd + MCMC",
        definition="pure_dp",
        summary=(
            "Runs DP-Lloyd, then improves its centres by searching for synthetic data that agrees with "
            "everything DP-Lloyd published, by Markov chain Monte Carlo (MCMC). The search reads only "
            "the published numbers, so it costs no extra privacy budget."
        ),
        formula=(
            "Metropolis-Hastings over synthetic datasets Z whose likelihood is the Laplace density of "
            "DP-Lloyd's released counts and sums given Z (every round); the best Z found is clustered by "
            "k-means. Post-processing of an ε-DP release: no data access, no extra ε."
        ),
        citation="Lee & Kifer 2016; DP-Lloyd as cited for it",
        release=release,
        params=(N_CLUSTERS, N_ITER, NEIGHBOURS, MCMC_STEPS),
        trial=trial,
        metrics=METRICS,
        trials=CHAINS,
        relation=neighbour_relation,
        background_cost=2000.0,  # one chain of 30,000 steps: a comparison with one runs in the background
        color="#ff7f0e",
    )
)
