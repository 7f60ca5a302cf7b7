"""Helpers of the K-means page: cached calls into dpcore, policy checks and the released-centroid table.

Nothing here computes privacy or utility: clustering, noise, metrics and figures come from dpcore.
Cached functions are keyed by :func:`data_key` (the prepared data's table fingerprint, features,
scaling and public bounds) and the parameters; arrays are passed as ``_X``/``_labels`` (not hashed).
The sweep is memoised in session state rather than ``st.cache_data`` because it reports progress to
an ``st.progress`` bar: element updates made inside a cached function would be replayed on cache hits.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from dpcore import kmeans
from dpcore.data import PreparedData
from dpcore.kmeans import KMEANS, KMeansInputs, blowfish_gain, centroid_table, noise_shape, sweep
from dpcore.kmeans.blowfish import sensitivity_gain_bound
from dpcore.kmeans.lloyd import Neighbours
from dpcore.metrics import assign, elbow_wcss, population_table
from dpcore.policy import Policy

__all__ = [
    "CALIBRATIONS",
    "DEFAULT_MECHANISMS",
    "EPS_OPTIONS",
    "Draw",
    "SweepParams",
    "SweepResult",
    "blowfish_gain_text",
    "data_key",
    "diagnostic_draw",
    "elbow",
    "policy_neighbours",
    "release_table",
    "run_sweep",
    "true_clustering",
]

EPS_OPTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0)
DEFAULT_MECHANISMS: tuple[str, ...] = ("white", "white_per_cluster", "colored", "dp_lloyd", "blowfish")
CALIBRATIONS: dict[str, str] = {
    "analytic": "Analytic Gaussian (Balle & Wang 2018, exact; default)",
    "paper": "Paper (Ravi, Scaglione & Peisert 2021)",
    "classic": "Classic (Dwork-Roth; every ε < 1 only)",
}
DIAGNOSTIC_SEED = 0  # diagnostic noise only (Sampler.diagnostic): never used for a release
SWEEPS_KEY = "km_sweeps"
_SWEEP_MEMO = 4


def data_key(prep: PreparedData) -> str:
    """Cache key of the prepared features: table fingerprint, features, scaling, bounds and size."""
    return json.dumps(
        {
            "fingerprint": prep.fingerprint,
            "features": list(prep.feature_names),
            "scaling": prep.scaling,
            "lower": np.asarray(prep.lower).tolist(),
            "upper": np.asarray(prep.upper).tolist(),
            "center": np.asarray(prep.center).tolist(),
            "scale": np.asarray(prep.scale).tolist(),
            "n": prep.n_samples,
        },
        sort_keys=True,
    )


@st.cache_data(show_spinner="Elbow: non-private k-means for each K...", max_entries=16)
def elbow(key: str, _X: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    """``dpcore.metrics.elbow_wcss`` for ``ks`` (non-private diagnostic), cached per data key."""
    return elbow_wcss(_X, list(ks))


@st.cache_data(show_spinner="Fitting the non-private clustering...", max_entries=16)
def true_clustering(key: str, _X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``dpcore.kmeans.true_clustering`` (k-means++, 10 inits, seed 0): labels and TRUE centroids, cached."""
    return kmeans.true_clustering(_X, k, random_state=DIAGNOSTIC_SEED, n_init=10)


def policy_neighbours(policy: Policy) -> Neighbours:
    """The neighbour relation DP-Lloyd is calibrated for: the policy's if bounded, else unbounded."""
    return "bounded" if getattr(policy, "neighbours", "") == "bounded" else "unbounded"


@st.cache_data(show_spinner="Measuring Blowfish's sensitivity gain...", max_entries=16)
def blowfish_gain_text(
    key: str, _X: np.ndarray, _bounds: tuple[np.ndarray, np.ndarray], k: int, graph: Any, epsilon: float
) -> str:
    """Blowfish's noise against bounded DP in words: the graph's public ceiling and one diagnostic run."""
    head = (
        f"Noise of Blowfish with the {graph.label} graph, compared with bounded differential privacy "
        "(DP: one row's value replaced by any other): "
    )
    ceiling = sensitivity_gain_bound(graph, *_bounds)
    if ceiling < 1.005:
        return head + (
            "the same, so no gain over bounded DP here. A partition or distance-threshold graph protects "
            "less and adds less noise."
        )
    gains = blowfish_gain(_X, k, epsilon, _bounds, graph, seed=DIAGNOSTIC_SEED)
    low, high = float(gains.min()), float(gains.max())
    if high < 1.005:
        run = "it gave no gain over bounded DP here"
    elif high < 1.005 * low:
        run = f"it added {high:.3g} times less noise in every round"
    else:
        run = f"it added {low:.3g} to {high:.3g} times less noise, depending on the round"
    return head + (
        f"the noise on the cluster sums can be up to {ceiling:.3g} times smaller with this graph; in a "
        f"diagnostic run at ε = {epsilon:g}, {run}."
    )


# ---------------------------------------------------------------- sweep


@dataclass(frozen=True)
class SweepParams:
    """Everything that defines a comparison (with the data key): hashable, used as the memo key."""

    k: int
    mechanisms: tuple[str, ...]
    eps: tuple[float, ...]
    trials: int
    delta: float
    calibration: str
    graph: Any = None
    mcmc_steps: int = 30000
    neighbours: str = "unbounded"
    seed: int = DIAGNOSTIC_SEED

    def key(self) -> str:
        """Plain-JSON identity (survives Streamlit reloading this module while the app runs)."""
        fields = {**self.__dict__, "graph": None if self.graph is None else self.graph.to_dict()}
        return json.dumps(fields, sort_keys=True)


@dataclass(frozen=True)
class SweepResult:
    """A finished comparison: its data key, parameters, tidy table and warnings raised on the way."""

    key: str
    params: SweepParams
    frame: pd.DataFrame
    notes: tuple[str, ...] = field(default=())


def run_sweep(
    key: str,
    prep: PreparedData,
    labels: np.ndarray,
    params: SweepParams,
    progress: Callable[[float, str], None],
) -> SweepResult:
    """``dpcore.kmeans.sweep.sweep`` memoised in session state by (data key, params)."""
    import warnings

    memo: OrderedDict[tuple[str, str], SweepResult] = st.session_state.setdefault(SWEEPS_KEY, OrderedDict())
    memo_key = (key, params.key())
    hit = memo.get(memo_key)
    if hit is not None:
        memo.move_to_end(memo_key)
        return hit
    needs_bounds = any(KMEANS[m].is_dp for m in params.mechanisms)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = sweep(
            prep.X,
            labels,
            list(params.mechanisms),
            list(params.eps),
            trials=params.trials,
            delta=params.delta,
            calibration=params.calibration,  # type: ignore[arg-type]
            bounds=(prep.lower, prep.upper) if needs_bounds else None,
            graph=params.graph if "blowfish" in params.mechanisms else None,
            seed=params.seed,
            progress=progress,
            mcmc_steps=params.mcmc_steps,
            neighbours=params.neighbours,  # type: ignore[arg-type]
        )
    notes = tuple(dict.fromkeys(str(w.message) for w in caught))
    result = SweepResult(key, params, frame, notes)
    memo[memo_key] = result
    while len(memo) > _SWEEP_MEMO:
        memo.popitem(last=False)
    return result


# ---------------------------------------------------------------- one diagnostic draw per (mechanism, eps)


@dataclass(frozen=True)
class Draw:
    """One diagnostic draw of a mechanism (never released): centres matched to the true ones."""

    noisy_centers: np.ndarray
    noisy_labels: np.ndarray
    populations: pd.DataFrame
    covariance: list[np.ndarray] | None
    noise_trace: float | None
    gap: float | None
    caveats: tuple[str, ...]


@st.cache_data(show_spinner="Drawing diagnostic noise...", max_entries=64)
def diagnostic_draw(
    key: str,
    _X: np.ndarray,
    _labels: np.ndarray,
    _bounds: tuple[np.ndarray, np.ndarray],
    k: int,
    mechanism: str,
    epsilon: float,
    delta: float,
    calibration: str,
    graph: Any,
    mcmc_steps: int,
    neighbours: str = "unbounded",
    seed: int = DIAGNOSTIC_SEED,
) -> Draw:
    """``dpcore.kmeans.diagnostic_draw`` at ``epsilon`` plus what the charts show about it (cached)."""
    true_centers = true_clustering(key, _X, k)[1]
    noisy = kmeans.diagnostic_draw(
        mechanism,
        _X,
        _labels,
        epsilon,
        delta=delta,
        calibration=calibration,  # type: ignore[arg-type]
        bounds=_bounds if KMEANS[mechanism].is_dp else None,
        graph=graph,
        neighbours=neighbours,  # type: ignore[arg-type]
        mcmc_steps=mcmc_steps,
        seed=seed,
    )
    blocks, trace, gap, caveats = None, None, None, ()
    if not KMEANS[mechanism].is_dp:
        cov = noise_shape(mechanism, _X, _labels, epsilon, delta, calibration)  # type: ignore[arg-type]
        blocks, trace, gap, caveats = list(cov.blocks), cov.trace, cov.gap, tuple(cov.caveats)
    return Draw(
        noisy_centers=noisy,
        noisy_labels=assign(_X, noisy),
        populations=population_table(_X, true_centers, noisy),
        covariance=blocks,
        noise_trace=trace,
        gap=gap,
        caveats=caveats,
    )


# ---------------------------------------------------------------- release helpers


def release_table(prep: PreparedData, centers: np.ndarray) -> pd.DataFrame:
    """Released centroids: one row per cluster, columns '<f> [scaled]' and '<f> [original units]'.

    With standardisation the scaling comes from the data's mean and standard deviation: the table then
    holds the scaled columns only, since both coordinate systems together would reveal them exactly.
    """
    return centroid_table(KMeansInputs.from_prepared(prep), centers)
