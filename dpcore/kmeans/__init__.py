"""Private k-means centroid release (MECHANISMS.md s.3)."""

from dpcore.kmeans.covariance import (
    NoiseCovariance,
    RankDeficientWarning,
    colored_noise_covariance,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.kmeans.local import ColoredNoiseKMeans, WhiteNoiseKMeans, WhitePerClusterKMeans

__all__ = [
    "ColoredNoiseKMeans",
    "NoiseCovariance",
    "RankDeficientWarning",
    "WhiteNoiseKMeans",
    "WhitePerClusterKMeans",
    "colored_noise_covariance",
    "white_noise_covariance",
    "white_per_cluster_noise_covariance",
]
