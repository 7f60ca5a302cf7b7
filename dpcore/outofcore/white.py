"""White Gaussian noise on the centroids out of core (Ravi, Scaglione & Peisert 2021, their baseline), and its
per-cluster ablation.

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one of
its own rows with the clustering held fixed (probabilistic DP with the paper's calibration, the (eps, delta)
inequality with the analytic one of Balle & Wang 2018); not DP. Released: c_k + N(0, Sigma_k), Sigma_k =
(Delta_k^2 / gamma) I, Delta_k = max_p ||u_p|| over cluster k (``white_per_cluster``) or over every cluster
(``white``), u_p = (x_p - c_k) / (n_k - 1).

Passes (DuckDB or Spark through Ibis): the clustering and its moments pass
(:func:`dpcore.outofcore.clustering.clustered_shifts`), then one pass for max ||u_p||^2 per cluster; the
noise is drawn once in Python by the release's sampler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import NoiseCovariance, noise_gamma, rounding_margin
from dpcore.kmeans.registry import check_release_sampler
from dpcore.mechanisms import Calibration, Sampler
from dpcore.outofcore.clustering import SAMPLE_ROWS, clustered_shifts, local_output
from dpcore.outofcore.features import TableFeatures, total
from dpcore.registry import MechanismOutput

KEYS = ("white", "white_per_cluster")


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
    epsilon: float,
    delta: float,
    sampler: Sampler,
    calibration: Calibration = "analytic",
    sample_rows: int = SAMPLE_ROWS,
) -> WhiteRun:
    """The ``white`` or ``white_per_cluster`` release on ``features`` (module docstring)."""
    if key not in KEYS:
        raise ParameterError(f"{key!r} is not a white-noise mechanism; choose one of {', '.join(KEYS)}.")
    check_release_sampler(sampler)
    if not delta > 0:
        raise ParameterError("White Gaussian noise is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = noise_gamma(epsilon, delta, calibration)
    shifts = clustered_shifts(features, n_clusters, sampler, sample_rows)
    t, (k, d) = shifts.rows, shifts.centers.shape
    norm2 = total([t[f"u{j}"] * t[f"u{j}"] for j in range(d)])
    out = t.group_by("label").aggregate(m=norm2.max()).to_pandas()
    sens2 = np.zeros(k)
    sens2[out["label"].to_numpy(dtype=np.intp)] = out["m"].to_numpy(dtype=float)
    if not np.any(sens2 > 0):
        raise ParameterError(
            "every row equals its cluster centroid (constant data): there is nothing to protect or cluster. "
            "Check the selected features."
        )
    sens2 *= rounding_margin(np.ones(d), d)
    if key == "white":
        sens2 = np.full(k, sens2.max())
    bases = tuple(np.eye(d) if s > 0 else np.zeros((d, 0)) for s in sens2)  # 0: a constant cluster
    cov = NoiseCovariance(
        kind=key,  # type: ignore[arg-type]
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=0.0,
        centers=shifts.centers,
        counts=shifts.counts.astype(int),
        bases=bases,
        unit_eigenvalues=tuple(np.full(b.shape[1], s) for b, s in zip(bases, sens2, strict=True)),
        cluster_gaps=np.zeros(k),
    )
    return WhiteRun(local_output(key, features, cov, sampler, sample_rows), cov, shifts.centres)
