"""White Gaussian noise on the centroids (Ravi, Scaglione & Peisert 2021, their baseline).

Guarantee: a local (eps, delta) bound for THIS dataset only (neighbours: X and X minus one of its own rows,
clustering held fixed): probabilistic differential privacy (PDP) with the paper's calibration, the weaker
(eps, delta) inequality with the analytic one (Balle & Wang 2018); not differential privacy.
Sigma = (Delta^2 / gamma) I
for every centroid, Delta = max_p ||u_p||_2, u_p = (x_p - c_k) / (n_k - 1).
"""

from __future__ import annotations

from dpcore.kmeans.covariance import white_noise_covariance
from dpcore.kmeans.mechanisms._gaussian import capabilities
from dpcore.kmeans.registry import KMEANS
from dpcore.registry import MechanismSpec

KEY = "white"


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="White Gaussian",
        definition="local_pdp",
        summary=(
            "Adds random noise of the same size in every direction to each true cluster centre, sized "
            "for the largest shift that removing any one row of this dataset could cause. It protects "
            "only this dataset's own rows, with a local (ε, δ) guarantee calibrated on the data "
            "(probabilistic differential privacy, PDP, with the paper's calibration): weaker than "
            "differential privacy."
        ),
        formula=(
            "Released: c_k + N(0, Σ) for every centroid c_k, with Σ = (Δ² / γ) I, Δ = max over rows p of "
            "‖u_p‖₂, u_p = (x_p − c_k) / (n_k − 1) the shift of centroid k when row p of cluster k is "
            "removed, and γ = s*(ε, δ)² from the Gaussian calibration (analytic: Balle & Wang 2018)."
        ),
        citation="Ravi, Scaglione & Peisert 2021; PDP: Machanavajjhala et al. 2008",
        color="#1f77b4",
        **capabilities(KEY, white_noise_covariance, per_cluster=False),
    )
)
