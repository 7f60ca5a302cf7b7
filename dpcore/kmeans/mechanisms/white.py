"""White Gaussian noise on the centroids (Ravi, Scaglione & Peisert 2021, their baseline).

Guarantee: (eps, delta)-probabilistic differential privacy (PDP) for THIS dataset only (neighbours: X and
X minus one of its own rows, clustering held fixed); not differential privacy. Sigma = (Delta^2 / gamma) I
for every centroid, Delta = max_p ||u_p||_2, u_p = (x_p - c_k) / (n_k - 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.kmeans.mechanisms._gaussian import PARAMS, local_release, local_trial
from dpcore.kmeans.registry import KMEANS, KMeansInputs
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

KEY = "white"


def release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, sampler: Sampler
) -> MechanismOutput:
    """The centroids of ``inputs.labels`` plus white Gaussian noise, once."""
    return local_release(KEY, inputs, epsilon=epsilon, delta=delta, params=params, sampler=sampler)


def trial(inputs: KMeansInputs, eps_grid: np.ndarray, trials: int, **kw: Any) -> np.ndarray:
    """Diagnostic noisy centres (E, trials, K, d)."""
    return local_trial(KEY, inputs, eps_grid, trials, **kw)


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="White Gaussian",
        definition="local_pdp",
        summary=(
            "Adds random noise of the same size in every direction to each true cluster centre, sized "
            "for the largest shift that removing any one row of this dataset could cause. It protects "
            "only this dataset's own rows, under probabilistic differential privacy (PDP) calibrated on "
            "the data: weaker than differential privacy."
        ),
        formula=(
            "Released: c_k + N(0, Σ) for every centroid c_k, with Σ = (Δ² / γ) I, Δ = max over rows p of "
            "‖u_p‖₂, u_p = (x_p − c_k) / (n_k − 1) the shift of centroid k when row p of cluster k is "
            "removed, and γ = s*(ε, δ)² from the Gaussian calibration (analytic: Balle & Wang 2018)."
        ),
        citation="Ravi, Scaglione & Peisert 2021; PDP: Machanavajjhala et al. 2008",
        release=release,
        params=PARAMS,
        needs_delta=True,
        trial=trial,
    )
)
