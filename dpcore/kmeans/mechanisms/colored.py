"""Colored Gaussian noise with the trace-optimal covariance (Ravi, Scaglione & Peisert 2021).

Guarantee: a local (eps, delta) bound for THIS dataset only (neighbours: X and X minus one of its own rows,
clustering held fixed): probabilistic differential privacy (PDP) with the paper's calibration, the weaker
(eps, delta) inequality with the analytic one (Balle & Wang 2018); not differential privacy.
Sigma = blockdiag(Sigma_k)
minimises tr(Sigma) subject to u_p' Sigma_k^+ u_p <= gamma for every row p of cluster k, solved exactly
with a certificate (``dpcore.kmeans.covariance``), not the paper's closed form.
"""

from __future__ import annotations

from dpcore.kmeans.covariance import colored_noise_covariance
from dpcore.kmeans.mechanisms._gaussian import capabilities
from dpcore.kmeans.registry import KMEANS
from dpcore.registry import MechanismSpec

KEY = "colored"


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="Colored Gaussian (optimal)",
        definition="local_pdp",
        summary=(
            "Adds random noise shaped to each cluster (more along the directions in which its rows "
            "spread, less elsewhere): the least total noise that still protects every row of this "
            "dataset. Local (ε, δ) guarantee for this dataset only (probabilistic "
            "differential privacy, PDP, with the paper's calibration): weaker than differential privacy."
        ),
        formula=(
            "Released: c_k + N(0, Σ_k), where Σ = blockdiag(Σ_1, …, Σ_K) minimises the total variance "
            "tr(Σ) subject to u_pᵀ Σ_k⁺ u_p ≤ γ for every row p of cluster k, u_p = (x_p − c_k) / (n_k − 1), "
            "γ = s*(ε, δ)². Solved exactly per cluster (dual, active set, interior point); the reported "
            "optimality gap certifies how close tr(Σ) is to the optimum."
        ),
        citation="Ravi, Scaglione & Peisert 2021; analytic calibration: Balle & Wang 2018",
        color="#d62728",
        **capabilities(KEY, colored_noise_covariance, per_cluster=None),
    )
)
