"""dpcore: differentially private release of k-means centroids, locations and trajectories.

The engine behind the dashboard; it never imports Streamlit and works the same from a notebook. The
estimators follow scikit-learn's conventions (parameters in ``__init__``, ``fit`` returns self, fitted
attributes end in ``_``, one ``random_state``: None for secure sampling, an int only for a labelled demo);
:func:`release` runs one registered mechanism once, by key. Names load on first use, so ``import dpcore``
stays light.

>>> import numpy as np
>>> import dpcore
>>> X = np.array([[0.1, 0.2], [0.15, 0.1], [0.9, 0.8], [0.85, 0.95]] * 50)
>>> model = dpcore.DPLloydKMeans(n_clusters=2, epsilon=1.0, bounds=(0.0, 1.0), random_state=0).fit(X)
>>> model.cluster_centers_.shape, model.sampling_mode_
((2, 2), 'demo')
>>> inputs = dpcore.KMeansInputs(X, lower=np.zeros(2), upper=np.ones(2))
>>> out = dpcore.release("dp_lloyd", inputs, epsilon=1.0, params={"n_clusters": 2})  # secure sampling
>>> len(out.table)
2
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # k-means estimators
    "DPLloydKMeans": "dpcore.kmeans.lloyd",
    "BlowfishKMeans": "dpcore.kmeans.blowfish",
    "LeeKiferKMeans": "dpcore.kmeans.mcmc",
    "GaussianLloydKMeans": "dpcore.kmeans.coreset",
    "LSHCoresetKMeans": "dpcore.kmeans.coreset",
    "WhiteNoiseKMeans": "dpcore.kmeans.local",
    "WhitePerClusterKMeans": "dpcore.kmeans.local",
    "ColoredNoiseKMeans": "dpcore.kmeans.local",
    # location and trajectory estimators
    "PlanarLaplace": "dpcore.location.laplace",
    "PriLocation": "dpcore.location.prilocation",
    "DPT": "dpcore.trajectory.dpt",
    # one release of a registered mechanism, and its inputs
    "release": "dpcore.registry",
    "KMeansInputs": "dpcore.kmeans.registry",
    "LocationInputs": "dpcore.location.registry",
    "TrajectoryInputs": "dpcore.trajectory.registry",
    "Region": "dpcore.location.geometry",
    # randomness
    "Sampler": "dpcore.mechanisms",
    "check_random_state": "dpcore.mechanisms",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
