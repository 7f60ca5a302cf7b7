"""One private summary, then k-means++ on it: the LSH prefix tree coreset (``dpcore.kmeans.coreset``).

Guarantee: (eps, delta)-DP for the policy's neighbour relation, one row added or removed (or replaced),
with a public ball: Gaussian level counts (L2 sensitivity 1, replaced sqrt 2) and leaf sums (R, 2R) of
rows clipped to the ball, composed exactly (Gaussian DP) and checked by a PLD accountant; the clustering
of the summary is post-processing (Chang, Ghazi, Kumar & Manurangsi 2021).
"""

from __future__ import annotations

import numpy as np

from dpcore.kmeans.coreset import LSHCoresetKMeans
from dpcore.kmeans.mechanisms._ball import RADIUS, TREE_DEPTH, capabilities
from dpcore.kmeans.mechanisms._lloyd import NEIGHBOURS
from dpcore.kmeans.registry import KMEANS, N_CLUSTERS
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismSpec

KEY = "lsh_coreset"


def build(
    epsilon: float, delta: float, bounds: tuple[np.ndarray, np.ndarray], params: dict, random_state: Sampler
) -> LSHCoresetKMeans:
    """The unfitted estimator for these parameters."""
    return LSHCoresetKMeans(
        params["n_clusters"],
        epsilon,
        delta,
        bounds=bounds,
        radius=params["radius"],
        depth=params["tree_depth"],
        neighbours=params["neighbours"],
        random_state=random_state,
    )


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="Private summary + k-means++",
        definition="approx_dp",
        summary=(
            "Builds one private summary of the rows, a few hundred weighted points found by splitting "
            "the data with random cuts and publishing only noisy counts and noisy sums of each part, then "
            "clusters that summary without looking at the rows again. It satisfies differential privacy "
            "(DP) with a small δ; best in many dimensions."
        ),
        formula=(
            "Rows clipped to the public ball (centre c = midpoint of the bounds, radius R). Level l of the "
            "tree splits each branching node by a public random hyperplane; the counts of the new nodes get "
            "N(0, σ_c²) (sensitivity 1), a node branches if its count ≥ 3m and is kept if ≥ m, "
            "m = max(1, min(10 √d σ_s / R, ñ / 2K)). The leaves' sums get N(0, σ_s² I) (sensitivity R; "
            "replaced rows: √2 and 2R). Weighted k-means++ on the leaves' means. The (L + 1) count "
            "releases and the sum release compose exactly as μ-Gaussian DP with μ² = Σ (Δ/σ)², "
            "μ = the analytic Gaussian ratio of (ε, δ); a PLD accountant confirms ε at δ."
        ),
        citation=(
            "Chang, Ghazi, Kumar & Manurangsi 2021 (LSH coreset); Balle & Wang 2018 (analytic Gaussian); "
            "Dong, Roth & Su 2022 (exact composition); Arthur & Vassilvitskii 2007 (k-means++)"
        ),
        params=(N_CLUSTERS, NEIGHBOURS, RADIUS, TREE_DEPTH),
        color="#e377c2",
        compared_by_default=False,  # one fit per trial: ticked on request
        **capabilities(KEY, build),
    )
)
