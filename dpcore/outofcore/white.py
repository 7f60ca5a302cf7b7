"""White Gaussian noise on the centroids out of core (Ravi, Scaglione & Peisert 2021, their baseline), and its
per-cluster ablation.

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one of
its own rows with the clustering held fixed (probabilistic DP with the paper's calibration, the (eps, delta)
inequality with the analytic one of Balle & Wang 2018); not DP. Released: c_k + N(0, Sigma_k), Sigma_k =
(Delta_k^2 / gamma) I, Delta_k = max_p ||u_p|| over cluster k (``per_cluster``) or over every cluster,
u_p = (x_p - c_k) / (n_k - 1).

Passes (kernels of :mod:`dpcore.outofcore.kernel` over the table's feed): the clustering and its moments
pass (:func:`dpcore.outofcore.clustering.clustered_shifts`), then one pass for max ||u_p||^2 per cluster
(:class:`MaxShiftPass`); the noise is drawn once in Python by the release's sampler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import NoiseCovariance, noise_gamma, rounding_margin
from dpcore.kmeans.registry import check_release_sampler
from dpcore.mechanisms import Calibration, Sampler
from dpcore.outofcore.clustering import SAMPLE_ROWS, Prepare, clustered_shifts, grouped_chunks, local_output
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.kernel import Partial, maximum
from dpcore.registry import MechanismOutput


class MaxShiftPass:
    """Kernel: per cluster of the nearest ``centres`` the largest ||u_p||^2 of a block's rows (-inf for
    none), u_p = (x_p - c_k) / (n_k - 1) the shift to the cluster's true centroid, chunk by chunk
    (:func:`~dpcore.outofcore.clustering.grouped_chunks`)."""

    def __init__(self, prepare: Prepare, centres: NDArray, centers: NDArray, counts: NDArray) -> None:
        self.prepare, self.centres, self.centers, self.counts = prepare, centres, centers, counts

    def __call__(self, raw: NDArray) -> Partial:
        out = np.full(len(self.centers), -np.inf)
        for xt, offsets in grouped_chunks(raw, self.prepare, self.centres):
            for c in np.flatnonzero(np.diff(offsets)):
                u = xt[:, offsets[c] : offsets[c + 1]] - self.centers[c][:, None]
                u /= self.counts[c] - 1.0
                out[c] = max(out[c], float(np.einsum("ij,ij->j", u, u).max()))
        return (out,)


@dataclass
class WhiteRun:
    """One out-of-core white-noise release: the output, its covariance and the clustering centres."""

    output: MechanismOutput
    covariance: NoiseCovariance
    centres: NDArray


def white_release(
    features: TableFeatures,
    key: str,
    n_clusters: int,
    *,
    per_cluster: bool,
    epsilon: float,
    delta: float,
    random_state: int | Sampler | None = None,
    calibration: Calibration = "analytic",
    sample_rows: int = SAMPLE_ROWS,
) -> WhiteRun:
    """The release of white-noise mechanism ``key`` on ``features`` (module docstring): Delta_k per cluster
    with ``per_cluster``, else the largest over every cluster."""
    random_state = check_release_sampler(random_state)
    if not delta > 0:
        raise ParameterError("White Gaussian noise is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = noise_gamma(epsilon, delta, calibration)
    with features.feed() as feed:
        clustering = clustered_shifts(features, feed, n_clusters, random_state, sample_rows)
        k, d = clustering.centers.shape
        found = feed.reduce(
            MaxShiftPass(features.scaling_map, clustering.centres, clustering.centers, clustering.counts),
            maximum,
        )
    assert found is not None  # the clustering has rows
    sens2 = np.maximum(found[0], 0.0)
    if not np.any(sens2 > 0):
        raise ParameterError(
            "every row equals its cluster centroid (constant data): there is nothing to protect or cluster. "
            "Check the selected features."
        )
    sens2 *= rounding_margin(np.ones(d), d)
    if not per_cluster:
        sens2 = np.full(k, sens2.max())
    bases = tuple(np.eye(d) if s > 0 else np.zeros((d, 0)) for s in sens2)  # 0: a constant cluster
    cov = NoiseCovariance(
        kind="isotropic_per_cluster" if per_cluster else "isotropic",
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=0.0,
        centers=clustering.centers,
        counts=clustering.counts.astype(int),
        bases=bases,
        unit_eigenvalues=tuple(np.full(b.shape[1], s) for b, s in zip(bases, sens2, strict=True)),
        cluster_gaps=np.zeros(k),
    )
    return WhiteRun(local_output(key, features, cov, random_state, sample_rows), cov, clustering.centres)
