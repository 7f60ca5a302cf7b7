"""Private k-means centroid release (MECHANISMS.md s.3)."""

from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.covariance import (
    NoiseCovariance,
    RankDeficientWarning,
    colored_noise_covariance,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.kmeans.lloyd import DPLloydKMeans, LloydRelease
from dpcore.kmeans.local import ColoredNoiseKMeans, WhiteNoiseKMeans, WhitePerClusterKMeans
from dpcore.kmeans.mcmc import LeeKiferKMeans, MCMCKMeans, MCMCResult, mcmc_postprocess
from dpcore.kmeans.sweep import diagnostic_draw, local_unavailable, mechanism_guarantee, true_clustering

__all__ = [
    "BlowfishKMeans",
    "ColoredNoiseKMeans",
    "DPLloydKMeans",
    "LeeKiferKMeans",
    "LloydRelease",
    "MCMCKMeans",
    "MCMCResult",
    "NoiseCovariance",
    "RankDeficientWarning",
    "WhiteNoiseKMeans",
    "WhitePerClusterKMeans",
    "colored_noise_covariance",
    "diagnostic_draw",
    "local_unavailable",
    "mcmc_postprocess",
    "mechanism_guarantee",
    "true_clustering",
    "white_noise_covariance",
    "white_per_cluster_noise_covariance",
]
