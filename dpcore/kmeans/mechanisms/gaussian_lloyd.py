"""DP-Lloyd in the L2 ball with Gaussian noise, started from the private summary (``dpcore.kmeans.coreset``).

Guarantee: (eps, delta)-DP for the policy's neighbour relation, one row added or removed (or replaced),
with a public ball: the initialising tree's Gaussian counts and sums and each round's Gaussian counts
(L2 sensitivity 1, replaced sqrt 2) and sums (R, 2R) of rows clipped to the ball, composed exactly
(Gaussian DP) and checked by a PLD accountant (Blum, Dwork, McSherry & Nissim 2005, in L2).
"""

from __future__ import annotations

import numpy as np

from dpcore.kmeans.coreset import GaussianLloydKMeans
from dpcore.kmeans.mechanisms._ball import RADIUS, TREE_DEPTH, capabilities
from dpcore.kmeans.mechanisms._lloyd import NEIGHBOURS
from dpcore.kmeans.registry import KMEANS, N_CLUSTERS
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismSpec, Param

KEY = "gaussian_lloyd"
ROUNDS = Param(
    "rounds",
    "Gaussian Lloyd rounds",
    int,
    1,
    low=1,
    high=10,
    help="Noisy Lloyd rounds after the private start; each takes a share of the budget.",
)


def build(
    epsilon: float, delta: float, bounds: tuple[np.ndarray, np.ndarray], params: dict, random_state: Sampler
) -> GaussianLloydKMeans:
    """The unfitted estimator for these parameters."""
    return GaussianLloydKMeans(
        params["n_clusters"],
        epsilon,
        delta,
        bounds=bounds,
        radius=params["radius"],
        n_iter=params["rounds"],
        depth=params["tree_depth"],
        neighbours=params["neighbours"],
        random_state=random_state,
    )


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="Gaussian DP-Lloyd (L2 ball)",
        definition="approx_dp",
        summary=(
            "Starts from centres found on a private summary of the rows (so they lie where the data are), "
            "then runs rounds of k-means that publish only noisy cluster sizes and noisy sums, with noise "
            "sized for the distance of any row from the data's centre rather than for every feature "
            "separately. It satisfies differential privacy (DP) with a small δ."
        ),
        formula=(
            "Rows clipped to the public ball (centre c, radius R). Start: the LSH summary's weighted "
            "k-means++ with half of μ². Each of T rounds assigns rows to the nearest centre and releases "
            "ñ_k = n_k + N(0, σ_c²) and s̃_k = Σ (x − c) + N(0, σ_s² I); sensitivities 1 and R (replaced "
            "rows: √2 and 2R); new centre c + s̃_k / ñ_k pulled into the ball, kept if ñ_k < √d σ_s / R. "
            "Count : sum shares of μ² per round are 1 : √d. Everything composes exactly as μ-Gaussian DP "
            "with μ² = Σ (Δ/σ)², μ = the analytic Gaussian ratio of (ε, δ); a PLD accountant confirms ε."
        ),
        citation=(
            "Blum, Dwork, McSherry & Nissim 2005 (SuLQ k-means); Chang, Ghazi, Kumar & Manurangsi 2021 "
            "(private start); Balle & Wang 2018; Dong, Roth & Su 2022"
        ),
        params=(N_CLUSTERS, NEIGHBOURS, RADIUS, TREE_DEPTH, ROUNDS),
        color="#8c564b",
        compared_by_default=False,  # one fit per trial: ticked on request
        **capabilities(KEY, build),
    )
)
