"""White Gaussian noise scaled per cluster: an ablation of Ravi, Scaglione & Peisert 2021's white noise.

Guarantee: a local (eps, delta) bound for THIS dataset only (neighbours: X and X minus one of its own rows,
clustering held fixed): probabilistic differential privacy (PDP) with the paper's calibration, the weaker
(eps, delta) inequality with the analytic one (Balle & Wang 2018); not differential privacy.
Sigma_k = (Delta_k^2 / gamma) I, Delta_k = max over the rows p of cluster k of ||u_p||_2.
"""

from __future__ import annotations

from dpcore.kmeans.covariance import white_per_cluster_noise_covariance
from dpcore.kmeans.mechanisms._gaussian import capabilities
from dpcore.kmeans.registry import KMEANS
from dpcore.registry import MechanismSpec

KEY = "white_per_cluster"


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="White Gaussian per cluster",
        definition="local_pdp",
        summary=(
            "Like white Gaussian noise, but each cluster's centre gets noise sized for its own rows only, "
            "so tight clusters get less noise. Same local (ε, δ) guarantee for this dataset only "
            "(probabilistic differential privacy, PDP, with the paper's calibration): weaker than "
            "differential privacy."
        ),
        formula=(
            "Released: c_k + N(0, Σ_k) with Σ_k = (Δ_k² / γ) I, Δ_k = max over the rows p of cluster k of "
            "‖u_p‖₂, u_p = (x_p − c_k) / (n_k − 1), and γ = s*(ε, δ)² from the Gaussian calibration."
        ),
        citation="Ravi, Scaglione & Peisert 2021 (white noise, here scaled per cluster)",
        color="#17becf",
        **capabilities(KEY, white_per_cluster_noise_covariance, per_cluster=True),
    )
)
