"""DP-Lloyd (SuLQ k-means with Su et al. 2016's budget split and rounds): ``dpcore.kmeans.lloyd``.

Guarantee: eps-DP for the policy's neighbour relation, unbounded (one row added or removed) or bounded
(one row's value replaced), with public bounds. Each of T rounds releases n_k + Lap(Delta_N / eps_N) and
sum_{x in B_k} x + Lap(Delta_S / eps_S)^d on rows clipped to the bounds (Blum, Dwork, McSherry & Nissim
2005; Lee & Kifer 2016, Alg. 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.kmeans.mechanisms._lloyd import (
    N_ITER,
    NEIGHBOURS,
    batched_trial,
    fit_release,
    neighbour_relation,
    rounds,
)
from dpcore.kmeans.registry import KMEANS, METRICS, N_CLUSTERS, KMeansInputs, centroid_output
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

KEY = "dp_lloyd"


def build(
    epsilon: float, bounds: tuple[np.ndarray, np.ndarray], params: dict, random_state: Sampler
) -> DPLloydKMeans:
    """The unfitted estimator, calibrated for ``params["neighbours"]``."""
    return DPLloydKMeans(
        params["n_clusters"],
        epsilon,
        bounds=bounds,
        n_iter=rounds(params),
        neighbours=params["neighbours"],
        random_state=random_state,
    )


def release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, random_state: Sampler
) -> MechanismOutput:
    """DP-Lloyd fitted once: its final centres."""
    est, details = fit_release(
        KEY, build, inputs, epsilon=epsilon, delta=delta, params=params, random_state=random_state
    )
    details["neighbours"] = params["neighbours"]
    return centroid_output(KEY, inputs, est.cluster_centers_, details)


def trial(inputs: KMeansInputs, eps_grid: np.ndarray, trials: int, **kw: Any) -> np.ndarray:
    """Diagnostic noisy centres (E, trials, K, d), matched to the true centres."""
    return batched_trial(KEY, build, inputs, eps_grid, trials, **kw)


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="DP-Lloyd (SuLQ)",
        definition="pure_dp",
        summary=(
            "Runs a few rounds of k-means in which each round publishes only noisy cluster sizes and "
            "noisy sums of the rows (clipped to your public bounds), so the centres satisfy differential "
            "privacy (DP): they barely depend on any one person's row."
        ),
        formula=(
            "T rounds (2 to 7 by Su et al.'s rule unless set); round t assigns the clipped rows to the "
            "nearest public centre and releases ñ_k = n_k + Lap(Δ_N / ε_N) and s̃_k = Σ x + Lap(Δ_S / ε_S)^d; "
            "the new centre is s̃_k / ñ_k. Unbounded neighbours: Δ_N = 1, Δ_S = Σ_i h_i (h_i half the width "
            "of feature i's bounds); bounded: twice both. Budget ε / T per round, split between counts and "
            "sums as ∛(4dρ²) : d with ρ = 0.225. SuLQ = the sub-linear queries framework."
        ),
        citation=(
            "Blum, Dwork, McSherry & Nissim 2005 (SuLQ k-means); Su, Cao, Li, Bertino & Jin 2016 (budget "
            "split, rounds); Lee & Kifer 2016 (Algorithm 1)"
        ),
        release=release,
        params=(N_CLUSTERS, N_ITER, NEIGHBOURS),
        trial=trial,
        metrics=METRICS,
        relation=neighbour_relation,
        background_cost=1.0,
        out_of_core=release,  # fit_release runs the Lloyd passes of a LloydSource (dpcore.outofcore)
        color="#2ca02c",
        presented=True,
    )
)
