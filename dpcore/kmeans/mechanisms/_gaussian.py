"""Shared by the local Gaussian mechanisms (white, white per cluster, colored): release, trial, capabilities.

Each adds N(0, Sigma) to the centroids of the curator's clustering, Sigma calibrated on this dataset's own
rows (Ravi, Scaglione & Peisert 2021): (eps, delta)-probabilistic differential privacy (PDP) for this
dataset only, between X and X minus one of its own rows with the clustering held fixed; not DP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import NoiseCovariance, singleton_message
from dpcore.kmeans.noise_cache import Solver, noise_shape
from dpcore.kmeans.registry import (
    KMEANS,
    METRICS,
    N_CLUSTERS,
    KMeansInputs,
    centroid_output,
    check_release_sampler,
)
from dpcore.mechanisms import CALIBRATIONS, Sampler
from dpcore.registry import Calibration, MechanismOutput, Param

CALIBRATION = Param(
    "calibration",
    "Gaussian calibration",
    str,
    "analytic",
    choices=tuple(CALIBRATIONS),
    help="'analytic' (Balle & Wang 2018) gives the smallest noise that meets (ε, δ) exactly.",
    choice_label={
        "analytic": "Analytic Gaussian (Balle & Wang 2018, exact; default)",
        "paper": "Paper (Ravi, Scaglione & Peisert 2021)",
        "classic": "Classic (Dwork-Roth; every ε < 1 only)",
    }.__getitem__,
)
PARAMS = (N_CLUSTERS, CALIBRATION)
Progress = Callable[[float, str], None]


def calibration(params: Mapping[str, Any]) -> Calibration:
    """Ravi et al. 2021's probabilistic DP (PDP: the privacy loss exceeds ε with probability at most δ)
    holds with their own calibration; the analytic (Balle & Wang 2018) and classic ones meet the (ε, δ)
    inequality only, which is weaker than PDP; all only for this dataset, the clustering held fixed."""
    name = params["calibration"]
    if name == "paper":
        return Calibration(name, "probabilistic differential privacy (PDP)")
    bound = f"an (ε, δ) indistinguishability bound ({name} Gaussian calibration; weaker than PDP)"
    return Calibration(name, bound)


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


def local_covariance(
    key: str, solve: Solver, inputs: KMeansInputs, epsilon: float, delta: float, params: Mapping[str, Any]
) -> NoiseCovariance:
    """The covariance of mechanism ``key`` on ``inputs``' clustering at (eps, delta): ``solve``'s shape,
    solved once per (X, labels) and rescaled (:func:`dpcore.kmeans.noise_cache.noise_shape`)."""
    labels = _clustering(key, inputs, params["n_clusters"])
    return noise_shape(solve, inputs.X, labels, float(epsilon), float(delta), params["calibration"])


def local_release(
    key: str,
    inputs: KMeansInputs,
    *,
    epsilon: float,
    delta: float,
    params: dict,
    random_state: Sampler,
) -> MechanismOutput:
    """True centroids of ``inputs.labels`` + N(0, Sigma) once, snapped to the noise lattice."""
    random_state = check_release_sampler(random_state)
    if delta is None or not delta > 0:
        raise ParameterError(
            f"{KMEANS[key].label} is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6, well below 1/n)."
        )
    cov = KMEANS[key].covariance(inputs, float(epsilon), float(delta), params)
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


def local_out_of_core(
    key: str,
    per_cluster: bool | None,
    table: Any,
    *,
    epsilon: float,
    delta: float,
    params: dict,
    random_state: Sampler,
) -> MechanismOutput:
    """The release of ``key`` by passes over an out-of-core table (``dpcore.outofcore``): colored noise for
    ``per_cluster`` None, else white noise scaled over every cluster or per cluster."""
    kw = {"epsilon": epsilon, "delta": delta, "calibration": params["calibration"]}
    kw["random_state"] = random_state
    if per_cluster is None:
        from dpcore.outofcore.colored import colored_release

        return colored_release(table, params["n_clusters"], key=key, **kw).output
    from dpcore.outofcore.white import white_release

    return white_release(table, key, params["n_clusters"], per_cluster=per_cluster, **kw).output


def capabilities(key: str, solve: Solver, per_cluster: bool | None) -> dict[str, Any]:
    """What every local Gaussian mechanism declares: release, trial and metrics, calibration, covariance
    (the ellipses) and its out-of-core release (:func:`local_out_of_core`)."""
    return {
        "release": partial(local_release, key),
        "params": PARAMS,
        "needs_delta": True,
        "trial": partial(local_trial, key),
        "metrics": METRICS,
        "calibration": calibration,
        "covariance": partial(local_covariance, key, solve),
        "out_of_core": partial(local_out_of_core, key, per_cluster),
    }


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
    base = KMEANS[key].covariance(inputs, float(eps_grid[0]), delta, params)
    out = np.empty((len(eps_grid), trials, *base.centers.shape))
    for i, eps in enumerate(eps_grid):
        progress(i / len(eps_grid), f"{KMEANS[key].label}: noise at ε = {eps:.3g}")
        scaled = base.rescaled(float(eps), delta, params["calibration"])
        out[i] = base.centers + scaled.sample(random_state, n_draws=trials)
    return out
