"""White Gaussian noise scaled per cluster: an ablation of Ravi, Scaglione & Peisert 2021's white noise.

Guarantee: (eps, delta)-probabilistic differential privacy (PDP) for THIS dataset only (neighbours: X and
X minus one of its own rows, clustering held fixed); not differential privacy.
Sigma_k = (Delta_k^2 / gamma) I, Delta_k = max over the rows p of cluster k of ||u_p||_2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.kmeans.mechanisms._gaussian import PARAMS, local_release, local_trial
from dpcore.kmeans.registry import KMEANS, KMeansInputs
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

KEY = "white_per_cluster"


def release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, sampler: Sampler
) -> MechanismOutput:
    """The centroids of ``inputs.labels`` plus white Gaussian noise scaled per cluster, once."""
    return local_release(KEY, inputs, epsilon=epsilon, delta=delta, params=params, sampler=sampler)


def trial(inputs: KMeansInputs, eps_grid: np.ndarray, trials: int, **kw: Any) -> np.ndarray:
    """Diagnostic noisy centres (E, trials, K, d)."""
    return local_trial(KEY, inputs, eps_grid, trials, **kw)


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="White Gaussian per cluster",
        definition="local_pdp",
        summary=(
            "Like white Gaussian noise, but each cluster's centre gets noise sized for its own rows only, "
            "so tight clusters get less noise. Same local guarantee, probabilistic differential privacy "
            "(PDP) for this dataset only: weaker than differential privacy."
        ),
        formula=(
            "Released: c_k + N(0, Σ_k) with Σ_k = (Δ_k² / γ) I, Δ_k = max over the rows p of cluster k of "
            "‖u_p‖₂, u_p = (x_p − c_k) / (n_k − 1), and γ = s*(ε, δ)² from the Gaussian calibration."
        ),
        citation="Ravi, Scaglione & Peisert 2021 (white noise, here scaled per cluster)",
        release=release,
        params=PARAMS,
        needs_delta=True,
        trial=trial,
    )
)
