"""Shared by the Gaussian L2-ball mechanisms (private LSH coreset, Gaussian DP-Lloyd): release and trial.

Each builds its estimator with ``build(epsilon, delta, bounds, params, random_state)``; a release fits it once
with the sampler it is given (on ``inputs.X``, or by passes over the feed of a :class:`FeedSource`, e.g. a
table in an out-of-core engine) and publishes its centres with the exact Gaussian accounting in the manifest
(:meth:`dpcore.kmeans.gaussian_accounting.GaussianSpend.details`); a trial fits it once per (eps, trial)
with diagnostic noise and matches the centres to the true ones.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpcore.errors import ParameterError
from dpcore.kmeans.coreset import MAX_DEPTH
from dpcore.kmeans.mechanisms._lloyd import match_all, neighbour_relation
from dpcore.kmeans.registry import KMEANS, METRICS, KMeansInputs, centroid_output, check_release_sampler
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, Param

RADIUS = Param(
    "radius",
    "Public radius of the data",
    float,
    0.0,
    low=0.0,
    high=1e12,
    help="Every row lies within this distance of the centre of the public bounds (in the feature space); "
    "rows farther out are pulled in. 0 = half the diagonal of the bounds box, which always holds.",
    zero="half the diagonal of the public bounds box (holds for every row inside the bounds)",
)
TREE_DEPTH = Param(
    "tree_depth",
    "Summary tree depth",
    int,
    20,
    low=1,
    high=MAX_DEPTH,
    help="Levels of random splits of the private summary (Chang et al. use 20).",
)



@runtime_checkable
class FeedSource(Protocol):
    """Inputs read by passes over a feed of raw row blocks (``dpcore.outofcore.features.TableFeatures``):
    ``feed()`` opens it, ``scaling_map`` maps a raw block to the feature space."""

    scaling_map: Any
    n_features: int

    def require_bounds(self, label: str) -> tuple[np.ndarray, np.ndarray]: ...

    def feed(self) -> AbstractContextManager[Any]: ...


Build = Callable[[float, float, tuple[np.ndarray, np.ndarray], dict, Sampler], Any]
FEW_CENTRES = (
    "the private summary had only {m} distinct points, fewer than K = {k}: some released centres repeat. "
    "A larger ε or a smaller K may help."
)


def ball_release(
    key: str,
    build: Build,
    inputs: KMeansInputs | FeedSource,
    *,
    epsilon: float,
    delta: float,
    params: dict,
    random_state: Sampler,
) -> MechanismOutput:
    """The estimator fitted once on every row; its centres, the spend and the tree's public shape."""
    label = KMEANS[key].label
    random_state = check_release_sampler(random_state)
    if not delta > 0:
        raise ParameterError(f"{label} adds Gaussian noise: give δ > 0 (e.g. 1e-6, below 1/n).")
    est = build(float(epsilon), float(delta), inputs.require_bounds(label), params, random_state)
    if isinstance(inputs, FeedSource):
        with inputs.feed() as feed:
            est.fit_feed(feed, inputs.scaling_map, inputs.n_features)
    else:
        est.fit(inputs.X)
    spend = est.spend_
    details: dict[str, Any] = {
        "n_clusters": int(params["n_clusters"]),
        "n_features": int(est.n_features_in_),
        "neighbours": params["neighbours"],
        "ball": f"centre = midpoint of the public bounds, radius = {est.radius_:.6g}",
        "summary_tree_levels": int(est.tree_levels_),
        "summary_points": int(est.coreset_.shape[0]),
        "gaussian_accounting": spend.details(),
        "budget_spent": float(spend.epsilon),
        "delta_spent": float(spend.delta),
    }
    if est.distinct_centres_ < est.n_clusters:
        note = FEW_CENTRES.format(m=est.distinct_centres_, k=est.n_clusters)
        details["caveats"] = [note[0].upper() + note[1:]]
    return centroid_output(key, inputs, est.cluster_centers_, details)


def ball_trial(
    key: str,
    build: Build,
    inputs: KMeansInputs,
    eps_grid: np.ndarray,
    trials: int,
    *,
    delta: float,
    params: dict,
    random_state: Sampler,
    progress: Callable[[float, str], None],
    **_: Any,
) -> np.ndarray:
    """Diagnostic centres (E, trials, K, d): one fit per (eps, trial), matched to the true centres."""
    label = KMEANS[key].label
    bounds = inputs.require_bounds(label)
    runs = len(eps_grid) * trials
    out = []
    for i, eps in enumerate(eps_grid):
        progress(i / len(eps_grid), f"{label}: {runs} fits, ε = {float(eps):g}")
        est = build(float(eps), float(delta), bounds, params, random_state)
        out.append([est.fit(inputs.X).cluster_centers_ for _ in range(trials)])
    return match_all(np.asarray(out), inputs.true_centers())


def capabilities(key: str, build: Build) -> dict[str, Any]:
    """What both L2-ball mechanisms declare: release (in memory and over a :class:`FeedSource`), trial,
    metrics, the neighbour relation of their parameters, background cost."""
    release = partial(ball_release, key, build)
    return {
        "release": release,
        "needs_delta": True,
        "trial": partial(ball_trial, key, build),
        "metrics": METRICS,
        "relation": neighbour_relation,
        "background_cost": 1.0,
        "out_of_core": release,
    }
