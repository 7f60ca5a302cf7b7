"""Cache of the local mechanisms' noise shapes: one solve per (solver, data, clustering).

The covariance of white, white-per-cluster and colored noise only rescales with
gamma = s*(eps, delta)^2 (Ravi, Scaglione & Peisert 2021), so its shape is solved once per clustering and
``NoiseCovariance.rescaled`` gives every (eps, delta, calibration). The cache is keyed by the solver and a
SHA-256 of X and the labels, holds the last few shapes, and is safe to share between threads (app
sessions). Each local mechanism's spec names its solver (its ``covariance`` capability).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from dpcore.kmeans.covariance import NoiseCovariance
from dpcore.kmeans.registry import KMeansInputs
from dpcore.mechanisms import Calibration

__all__ = ["Solver", "noise_shape"]

#: ``solve(X, labels, epsilon, delta, calibration)``: a covariance, e.g. ``white_noise_covariance``.
Solver = Callable[[np.ndarray, np.ndarray, float, float, Calibration], NoiseCovariance]
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
    solve: Solver,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
) -> NoiseCovariance:
    """``solve``'s covariance at (eps, delta); its shape is solved once per (solver, X, labels), cached."""
    inputs = KMeansInputs(X, labels)
    name = f"{solve.__module__}.{solve.__qualname__}"
    cache_key = (name, _fingerprint(inputs.X, inputs.require_labels(name)))
    with _LOCK:
        base = _SHAPES.get(cache_key)
        if base is not None:
            _SHAPES.move_to_end(cache_key)
    if base is None:
        base = solve(inputs.X, inputs.labels, epsilon, delta, calibration)
        with _LOCK:
            _SHAPES[cache_key] = base
            while len(_SHAPES) > _CACHE_SIZE:
                _SHAPES.popitem(last=False)
    return base.rescaled(epsilon, delta, calibration)
