"""Helpers of the K-means page: cached calls into dpcore, policy checks and the released-centroid table.

Nothing here computes privacy or utility: clustering, noise, metrics and figures come from dpcore.
Cached functions are keyed by :func:`data_key` (the prepared data's table fingerprint, features,
scaling and public bounds) and the parameters; arrays are passed as ``_X``/``_labels`` (not hashed).
Figures are built once per key and shared (``st.cache_resource``: Plotly's validation, not the drawing,
is what a rerun paid for). Comparisons are memoised per server process, one part per mechanism keyed by
the data key and the settings that mechanism reads, so a second visit, a reload or another tab with the
same data shows them at once, and ticking one more mechanism computes that one only; they report progress
to an ``st.progress`` bar, so they are not in ``st.cache_data`` (element updates would be replayed).
Long comparisons (DP-Lloyd + MCMC, or many fits) run in a worker thread (:class:`SweepJob`): the page
stays usable, shows a progress bar and can cancel them. On a table of more than ``DIAGNOSTIC_ROWS`` rows a
comparison reads a uniform sample of that many (the same for the same data key), and its result says so
(``SweepResult.sample``); releases read every row.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dpcore import kmeans
from dpcore.data import PreparedData
from dpcore.diagnostic_sample import diagnostic_sample, sample_label
from dpcore.errors import DPCoreError
from dpcore.kmeans import KMEANS, KMeansInputs, blowfish_gain, centroid_table, noise_shape, sweep
from dpcore.kmeans.blowfish import sensitivity_gain_bound
from dpcore.kmeans.lloyd import Neighbours
from dpcore.kmeans.sweep import diagnostic_rows
from dpcore.metrics import assign, elbow_wcss, population_table
from dpcore.policy import Policy
from ui.errors import log_unexpected

__all__ = [
    "CALIBRATIONS",
    "DEFAULT_MECHANISMS",
    "EPS_OPTIONS",
    "Draw",
    "SweepJob",
    "SweepParams",
    "SweepResult",
    "blowfish_gain_text",
    "cached_sweep",
    "data_key",
    "diagnostic_draw",
    "draw_name",
    "elbow",
    "figure",
    "policy_neighbours",
    "release_table",
    "run_sweep",
    "runs_in_background",
    "start_sweep",
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
MCMC = "dp_lloyd_mcmc"
MCMC_CHAINS = 1  # DP-Lloyd + MCMC chains per ε by default (its own trial count: more on request)
BACKGROUND_FITS = 1000  # a comparison with more noisy-Lloyd fits runs in the background (default: 440)
_PARTS = 64  # comparison parts (one mechanism's trials over an ε grid) kept per server process
_FIGURES = 32  # figures kept (each holds about 1,600 Python objects for the garbage collector)


ELBOW_ROWS = 20_000  # rows the elbow chart reads at most (a uniform sample beyond that)


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


@st.cache_resource(show_spinner=False, max_entries=_FIGURES)
def figure(kind: str, key: str, _build: Callable[[], go.Figure]) -> go.Figure:
    """``_build()``, once per (kind, key) per server process, shared by every run and session (never
    mutated: ``st.plotly_chart`` serialises a copy). ``key`` must name every input of ``_build``."""
    return _build()


@st.cache_data(show_spinner="Elbow: non-private k-means for each K...", max_entries=16)
def elbow(key: str, _X: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    """``dpcore.metrics.elbow_wcss`` for ``ks`` (non-private diagnostic), cached per data key; on a table
    of more than ``ELBOW_ROWS`` rows, on a uniform sample of that many (:func:`elbow_note`): its ten K
    times four k-means++ fits then take about a second whatever the table's size."""
    return elbow_wcss(_X[diagnostic_sample(_X.shape[0], key, ELBOW_ROWS)], list(ks))


def elbow_note(n_rows: int) -> str:
    """What the elbow chart read: empty when every row, else the sample's size."""
    used = min(n_rows, ELBOW_ROWS)
    return "" if used == n_rows else f"Elbow on a uniform sample of {used:,} of {n_rows:,} rows (its WCSS)."


@st.cache_data(show_spinner="Fitting the non-private clustering...", max_entries=16)
def true_clustering(key: str, _X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``dpcore.kmeans.true_clustering`` (k-means++, 10 inits, seed 0): labels and TRUE centroids, cached."""
    return kmeans.true_clustering(_X, k, random_state=DIAGNOSTIC_SEED, n_init=10)


def policy_neighbours(policy: Policy) -> Neighbours:
    """The neighbour relation DP-Lloyd is calibrated for: the policy's if bounded, else unbounded."""
    return "bounded" if getattr(policy, "neighbours", "") == "bounded" else "unbounded"


def release_params(mechanism: str, k: int, policy: Policy) -> dict[str, Any]:
    """The release parameters of ``mechanism`` that follow from K and the policy (the release panel adds
    the ones the curator picks there: calibration, Blowfish graph)."""
    params: dict[str, Any] = {"n_clusters": k}
    if "neighbours" in {p.name for p in KMEANS[mechanism].params}:
        params["neighbours"] = policy_neighbours(policy)
    return params


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
    gains = blowfish_gain(_X, k, epsilon, _bounds, graph, random_state=DIAGNOSTIC_SEED)
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
    """Everything that defines a comparison (with the data key): hashable, used as the memo key.

    ``trials`` fits per ε for every mechanism but DP-Lloyd + MCMC, which runs ``mcmc_chains`` chains per ε.
    """

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
    mcmc_chains: int = MCMC_CHAINS

    def key(self) -> str:
        """Plain-JSON identity (survives Streamlit reloading this module while the app runs)."""
        fields = {**self.__dict__, "graph": None if self.graph is None else self.graph.to_dict()}
        return json.dumps(fields, sort_keys=True)


@dataclass(frozen=True)
class SweepResult:
    """A finished comparison: its data key, parameters, tidy table, warnings raised on the way and, when
    it read a uniform sample of the rows, the label saying so (empty when it read every row)."""

    key: str
    params: SweepParams
    frame: pd.DataFrame
    notes: tuple[str, ...] = field(default=())
    sample: str = ""


@dataclass(frozen=True)
class _Part:
    """One mechanism's share of a comparison: its rows of the tidy table, the warnings it raised and the
    sample label of the rows it read."""

    frame: pd.DataFrame
    notes: tuple[str, ...]
    sample: str = ""


class _PartMemo:
    """The last ``_PARTS`` comparison parts of this server process, by (data key, part key)."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, str], _Part] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> _Part | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str], part: _Part) -> None:
        with self._lock:
            self._items[key] = part
            while len(self._items) > _PARTS:
                self._items.popitem(last=False)


@st.cache_resource(show_spinner=False)
def _memo() -> _PartMemo:
    return _PartMemo()


def _part_key(key: str, params: SweepParams, mechanism: str) -> tuple[str, str]:
    """A mechanism's part of a comparison, named by the settings it reads: its registry parameters,
    δ if it takes one, the ε grid, its trial count and its seed (so ticking one more mechanism, or
    changing a setting another one reads, leaves this part as it is)."""
    spec = KMEANS[mechanism]
    values = {
        "n_clusters": params.k,
        "calibration": params.calibration,
        "graph": None if params.graph is None else params.graph.to_dict(),
        "n_iter": 0,
        "mcmc_steps": params.mcmc_steps,
        "neighbours": params.neighbours,
    }
    fields = {p.name: values.get(p.name) for p in spec.params}
    fields.update(
        mechanism=mechanism,
        eps=list(params.eps),
        trials=params.mcmc_chains if mechanism == MCMC else params.trials,
        seed=_seed(params, mechanism),
        delta=params.delta if spec.needs_delta else None,
    )
    return key, json.dumps(fields, sort_keys=True)


def _seed(params: SweepParams, mechanism: str) -> int:
    """Each mechanism's diagnostic seed: the comparison's, offset by its place in the registry."""
    return params.seed + list(KMEANS).index(mechanism)


def _assemble(key: str, params: SweepParams, parts: list[_Part]) -> SweepResult:
    frame = pd.concat([p.frame for p in parts], ignore_index=True)
    notes = tuple(dict.fromkeys(n for p in parts for n in p.notes))
    return SweepResult(key, params, frame, notes, next((p.sample for p in parts if p.sample), ""))


def cached_sweep(key: str, params: SweepParams) -> SweepResult | None:
    """The comparison of ``params`` on the data ``key`` if this server already ran every part of it."""
    memo = _memo()
    parts = [memo.get(_part_key(key, params, m)) for m in params.mechanisms]
    return None if any(p is None for p in parts) else _assemble(key, params, parts)  # type: ignore[arg-type]


def runs_in_background(params: SweepParams) -> bool:
    """Long comparisons run in a worker thread: DP-Lloyd + MCMC, or more than ``BACKGROUND_FITS`` fits."""
    fits = params.trials * len(params.eps) * sum(KMEANS[m].is_dp for m in params.mechanisms if m != MCMC)
    return MCMC in params.mechanisms or fits > BACKGROUND_FITS


def _compute(
    key: str,
    prep: PreparedData,
    labels: np.ndarray,
    params: SweepParams,
    progress: Callable[[float, str], None],
    memo: _PartMemo,
) -> SweepResult:
    """``dpcore.kmeans.sweep`` for each chosen mechanism ``memo`` lacks (DP-Lloyd + MCMC with its own
    chain count) on the rows ``diagnostic_rows`` picks for ``key``, memoised as it finishes; warnings
    become the parts' notes. No Streamlit call here: it runs in worker threads."""
    parts = {m: memo.get(_part_key(key, params, m)) for m in params.mechanisms}
    todo = [m for m, part in parts.items() if part is None]
    X, lab = diagnostic_rows(prep.X, labels, key) if todo else (prep.X, labels)
    sample = sample_label(X.shape[0], prep.X.shape[0])
    shares = np.cumsum([0.0] + [4.0 if m == MCMC else 1.0 for m in todo])
    for m, lo, hi in zip(todo, shares[:-1] / shares[-1], shares[1:] / shares[-1], strict=True):

        def report(fraction: float, message: str, lo: float = lo, hi: float = hi) -> None:
            progress(lo + (hi - lo) * min(max(fraction, 0.0), 1.0), message)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frame = sweep(
                X,
                lab,
                [m],
                list(params.eps),
                trials=params.mcmc_chains if m == MCMC else params.trials,
                delta=params.delta,
                calibration=params.calibration,  # type: ignore[arg-type]
                bounds=(prep.lower, prep.upper),
                graph=params.graph,
                random_state=_seed(params, m),
                progress=report,
                mcmc_steps=params.mcmc_steps,
                neighbours=params.neighbours,  # type: ignore[arg-type]
            )
        parts[m] = _Part(frame, tuple(dict.fromkeys(str(w.message) for w in caught)), sample)
        memo.put(_part_key(key, params, m), parts[m])
    return _assemble(key, params, list(parts.values()))  # type: ignore[arg-type]


def run_sweep(
    key: str,
    prep: PreparedData,
    labels: np.ndarray,
    params: SweepParams,
    progress: Callable[[float, str], None],
) -> SweepResult:
    """The comparison in this run: the parts this server already ran, the others computed now."""
    return _compute(key, prep, labels, params, progress, _memo())


class Cancelled(Exception):
    """Raised in a worker thread's progress callback once the curator pressed Cancel."""


@dataclass(eq=False)
class SweepJob:
    """A comparison running in a worker thread. The thread writes ``fraction``, ``message`` and, at the
    end, ``result`` or ``error``; the page reads them and sets ``cancel`` (checked at every progress
    report: between mechanisms, and every few thousand MCMC steps)."""

    key: str
    params: SweepParams
    fraction: float = 0.0
    message: str = "Starting the comparison..."
    result: SweepResult | None = None
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _progress(self, fraction: float, message: str) -> None:
        if self.cancel.is_set():
            raise Cancelled
        self.fraction, self.message = float(min(max(fraction, 0.0), 1.0)), message

    def _work(self, prep: PreparedData, labels: np.ndarray, memo: _PartMemo) -> None:
        try:
            self.result = _compute(self.key, prep, labels, self.params, self._progress, memo)
        except Cancelled:
            pass
        except DPCoreError as err:
            self.error = str(err)
        except Exception as err:  # a worker thread: log without the message, never raise
            log_unexpected(err, "running the comparison")
            self.error = "Something went wrong while running the comparison; the details were logged."


def start_sweep(key: str, prep: PreparedData, labels: np.ndarray, params: SweepParams) -> SweepJob:
    """Start the comparison in a daemon worker thread; its result joins this server's memo."""
    job = SweepJob(key, params)
    args = (prep, labels, _memo())  # the memo is fetched here: the worker makes no Streamlit call
    job.thread = threading.Thread(target=job._work, args=args, name="dpcore-sweep", daemon=True)
    job.thread.start()
    return job


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


def draw_name(key: str, params: SweepParams, mechanism: str, epsilon: float) -> str:
    """Names :func:`diagnostic_draw`'s result for a comparison's settings: every input it reads."""
    graph = None if params.graph is None else params.graph.to_dict()
    fields = (key, params.k, mechanism, epsilon, params.delta, params.calibration, graph, params.mcmc_steps)
    return json.dumps([*fields, params.neighbours, params.seed])


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
    random_state: int = DIAGNOSTIC_SEED,
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
        random_state=random_state,
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
    """Released centroids: one row per cluster, one column per feature in the one coordinate system where
    its clip bounds are public (``dpcore.kmeans.registry.centroid_table``): '<f> [original units]' for
    the curator's bounds, '<f> [fraction of data range]' for bounds read from the data."""
    return centroid_table(KMeansInputs.from_prepared(prep), centers)
