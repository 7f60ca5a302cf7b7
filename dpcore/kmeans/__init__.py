"""Private k-means centroid release: the estimators, the mechanism registry and the comparison sweep.

``KMEANS`` holds one spec per mechanism (``dpcore.kmeans.mechanisms``: white, white per cluster,
colored, DP-Lloyd, Blowfish, DP-Lloyd + MCMC); ``release_centroids(key, KMeansInputs(...), epsilon=...)``
runs one once; ``sweep`` compares them on diagnostic noise.
"""

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
from dpcore.kmeans.mechanisms import blowfish_gain, local_unavailable
from dpcore.kmeans.registry import (
    KMEANS,
    KMeansInputs,
    centroid_table,
    release_centroids,
    released_centers,
)
from dpcore.kmeans.sweep import diagnostic_draw, noise_covariance, sweep, true_clustering

__all__ = [
    "KMEANS",
    "BlowfishKMeans",
    "ColoredNoiseKMeans",
    "DPLloydKMeans",
    "KMeansInputs",
    "LeeKiferKMeans",
    "LloydRelease",
    "MCMCKMeans",
    "MCMCResult",
    "NoiseCovariance",
    "RankDeficientWarning",
    "WhiteNoiseKMeans",
    "WhitePerClusterKMeans",
    "blowfish_gain",
    "centroid_table",
    "colored_noise_covariance",
    "diagnostic_draw",
    "local_unavailable",
    "mcmc_postprocess",
    "noise_covariance",
    "release_centroids",
    "released_centers",
    "sweep",
    "true_clustering",
    "white_noise_covariance",
    "white_per_cluster_noise_covariance",
]
