"""Cache of the local mechanisms' noise shapes: one solve per (mechanism, data, clustering).

The covariance of white, white-per-cluster and colored noise only rescales with
gamma = s*(eps, delta)^2 (Ravi, Scaglione & Peisert 2021), so its shape is solved once per clustering and
``NoiseCovariance.rescaled`` gives every (eps, delta, calibration). The cache is keyed by a SHA-256 of X
and the labels, holds the last few shapes, and is safe to share between threads (app sessions).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    NoiseCovariance,
    colored_noise_covariance,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.kmeans.registry import KMeansInputs
from dpcore.mechanisms import Calibration

__all__ = ["COVARIANCES", "noise_shape"]

COVARIANCES = {
    "white": white_noise_covariance,
    "white_per_cluster": white_per_cluster_noise_covariance,
    "colored": colored_noise_covariance,
}
_SHAPES: OrderedDict[tuple[str, str], NoiseCovariance] = OrderedDict()
_CACHE_SIZE = 12
_LOCK = threading.Lock()


def _fingerprint(X: np.ndarray, labels: np.ndarray) -> str:
    """SHA-256 of X (C-contiguous), the labels and the shape, read in place (no copy of the table)."""
    h = hashlib.sha256(memoryview(np.ascontiguousarray(X)))
    h.update(memoryview(np.ascontiguousarray(labels, dtype=np.int64)))
    h.update(str(X.shape).encode())
    return h.hexdigest()


def noise_shape(
    key: str,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
) -> NoiseCovariance:
    """A local mechanism's covariance at (eps, delta); its shape is solved once per (X, labels), cached."""
    if key not in COVARIANCES:
        raise ParameterError(f"{key!r} has no Gaussian covariance; use one of {sorted(COVARIANCES)}.")
    inputs = KMeansInputs(X, labels)
    cache_key = (key, _fingerprint(inputs.X, inputs.require_labels(key)))
    with _LOCK:
        base = _SHAPES.get(cache_key)
        if base is not None:
            _SHAPES.move_to_end(cache_key)
    if base is None:
        base = COVARIANCES[key](inputs.X, inputs.labels, epsilon, delta, calibration)
        with _LOCK:
            _SHAPES[cache_key] = base
            while len(_SHAPES) > _CACHE_SIZE:
                _SHAPES.popitem(last=False)
    return base.rescaled(epsilon, delta, calibration)
