"""Shared by the local Gaussian mechanisms (white, white per cluster, colored): release and trial.

Each adds N(0, Sigma) to the centroids of the curator's clustering, Sigma calibrated on this dataset's own
rows (Ravi, Scaglione & Peisert 2021): (eps, delta)-probabilistic differential privacy (PDP) for this
dataset only, between X and X minus one of its own rows with the clustering held fixed; not DP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import singleton_message
from dpcore.kmeans.noise_cache import noise_shape
from dpcore.kmeans.registry import KMEANS, N_CLUSTERS, KMeansInputs, centroid_output, check_release_sampler
from dpcore.mechanisms import CALIBRATIONS, Sampler
from dpcore.registry import MechanismOutput, Param

CALIBRATION = Param(
    "calibration",
    "Gaussian calibration",
    str,
    "analytic",
    choices=tuple(CALIBRATIONS),
    help="'analytic' (Balle & Wang 2018) gives the smallest noise that meets (ε, δ) exactly.",
)
PARAMS = (N_CLUSTERS, CALIBRATION)
Progress = Callable[[float, str], None]


def local_unavailable(labels: np.ndarray) -> str | None:
    """Why the local mechanisms refuse this clustering (a one-row cluster), or None."""
    single = np.flatnonzero(np.bincount(np.asarray(labels, dtype=np.intp)) == 1)
    return singleton_message(int(single[0])) if single.size else None


def _clustering(key: str, inputs: KMeansInputs, n_clusters: int) -> np.ndarray:
    label = KMEANS[key].label
    labels = inputs.require_labels(label)
    k = int(labels.max()) + 1
    if k != n_clusters:
        raise ParameterError(
            f"{label}: the clustering passed has {k} clusters but K = {n_clusters}; cluster with K first."
        )
    return labels


@runtime_checkable
class LocalSource(Protocol):
    """Inputs that run a local mechanism by their own passes over the rows (out-of-core tables)."""

    def local_release(
        self, key: str, *, epsilon: float, delta: float, params: dict, random_state: Sampler
    ) -> MechanismOutput: ...


def local_release(
    key: str,
    inputs: KMeansInputs | LocalSource,
    *,
    epsilon: float,
    delta: float,
    params: dict,
    random_state: Sampler,
) -> MechanismOutput:
    """True centroids of ``inputs.labels`` + N(0, Sigma) once, snapped to the noise lattice (a
    :class:`LocalSource` runs its own passes)."""
    random_state = check_release_sampler(random_state)
    if isinstance(inputs, LocalSource):
        return inputs.local_release(
            key, epsilon=epsilon, delta=delta, params=params, random_state=random_state
        )
    labels = _clustering(key, inputs, params["n_clusters"])
    if delta is None or not delta > 0:
        raise ParameterError(
            f"{KMEANS[key].label} is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6, well below 1/n)."
        )
    cov = noise_shape(key, inputs.X, labels, float(epsilon), float(delta), params["calibration"])
    details: dict = {
        "n_clusters": int(cov.centers.shape[0]),
        "n_features": int(cov.centers.shape[1]),
        "calibration": params["calibration"],
    }
    if cov.caveats:
        details["caveats"] = list(cov.caveats)
    return centroid_output(
        key,
        inputs,
        cov.release(random_state),
        details,
        {
            "true_centers": cov.centers,
            "noise_trace": cov.trace,
            "optimality_gap": cov.gap,
            "covariance": list(cov.blocks),
        },
    )


def local_trial(
    key: str,
    inputs: KMeansInputs,
    eps_grid: np.ndarray,
    trials: int,
    *,
    delta: float,
    params: dict,
    random_state: Sampler,
    progress: Progress,
) -> np.ndarray:
    """Noisy centres (E, trials, K, d): the true centres + every trial's noise drawn at once per eps."""
    labels = _clustering(key, inputs, params["n_clusters"])
    calibration = params["calibration"]
    base = noise_shape(key, inputs.X, labels, float(eps_grid[0]), delta, calibration)
    out = np.empty((len(eps_grid), trials, *base.centers.shape))
    for i, eps in enumerate(eps_grid):
        progress(i / len(eps_grid), f"{KMEANS[key].label}: noise at ε = {eps:.3g}")
        out[i] = base.centers + base.rescaled(float(eps), delta, calibration).sample(
            random_state, n_draws=trials
        )
    return out
