"""Helpers of the K-means page: cached calls into dpcore, policy checks and the released-centroid table.

Nothing here computes privacy or utility: clustering, noise, metrics and figures come from dpcore.
Cached functions are keyed by :func:`data_key` (the prepared data's table fingerprint, features, scaling and
public bounds) and the parameters; arrays are passed as ``_X``/``_labels`` (not hashed). Figures are built
once per key and shared (``st.cache_resource``: Plotly's validation, not the drawing, is what a rerun paid
for). Comparisons are memoised per server process, one part per mechanism keyed by the data key and the
settings that mechanism reads, so a second visit, a reload or another tab with the same data shows them at
once, and ticking one more mechanism computes that one only; they report progress to an ``st.progress`` bar,
so they are not in ``st.cache_data`` (element updates would be replayed). Long comparisons (by the mechanisms'
declared background cost) run in a worker thread (:class:`SweepJob`): the page stays usable, shows a progress
bar and can cancel them. On a table of more than ``DIAGNOSTIC_ROWS`` rows a comparison reads a uniform sample
of that many (the same for the same data key), and its result says so (``SweepResult.sample``); releases read
every row.
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
from dpcore.kmeans import KMEANS, KMeansInputs, centroid_table, sweep
from dpcore.kmeans.sweep import diagnostic_rows
from dpcore.metrics import assign, elbow_wcss, population_table
from dpcore.policy import Policy
from dpcore.registry import MechanismSpec, Param
from ui.errors import log_unexpected

__all__ = [
    "EPS_OPTIONS",
    "Draw",
    "SweepJob",
    "SweepParams",
    "SweepResult",
    "always_background",
    "cached_sweep",
    "compared_by_default",
    "data_key",
    "diagnostic_draw",
    "draw_name",
    "elbow",
    "figure",
    "note_text",
    "policy_values",
    "release_params",
    "release_table",
    "run_sweep",
    "runs_in_background",
    "start_sweep",
    "true_clustering",
    "widget_params",
]

EPS_OPTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0)
DIAGNOSTIC_SEED = 0  # diagnostic noise only (Sampler.diagnostic): never used for a release
BACKGROUND_FITS = 1000  # a comparison costing more (noisy-Lloyd fits: MechanismSpec.background_cost) runs in
# the background (the default comparison: 2 x 12 x 20 = 480)
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


def compared_by_default(spec: MechanismSpec) -> bool:
    """Ticked for the comparison when the page opens: as the spec says, unless it runs in the background."""
    return spec.compared_by_default and spec.trial is not None and not always_background(spec)


def always_background(spec: MechanismSpec) -> bool:
    """True when one trial of ``spec`` at one ε already costs a background comparison."""
    return spec.background_cost >= BACKGROUND_FITS


def policy_values(specs: list[MechanismSpec], policy: Policy) -> dict[str, Any]:
    """The parameters of ``specs`` that follow the policy (``Param.from_policy``), by name."""
    return {p.name: p.from_policy(policy) for s in specs for p in s.params if p.from_policy is not None}


def release_params(mechanism: str, k: int, policy: Policy) -> dict[str, Any]:
    """The release parameters of ``mechanism`` that follow from K and the policy (the release panel adds
    the ones the curator picks there from the mechanism's other declared parameters)."""
    return {"n_clusters": k, **policy_values([KMEANS[mechanism]], policy)}


def widget_params(specs: list[MechanismSpec]) -> list[Param]:
    """The declared parameters of ``specs`` the curator sets (not hidden, not from the policy), each
    name once, in declaration order; a mechanism's own trial count (``MechanismSpec.trials``) too."""
    out: dict[str, Param] = {}
    for spec in specs:
        for p in (*spec.params, *([spec.trials] if spec.trials else [])):
            if not p.hidden and p.from_policy is None:
                out.setdefault(p.name, p)
    return list(out.values())


@st.cache_data(show_spinner="Reading the data for the mechanism's note...", max_entries=16)
def note_text(key: str, mechanism: str, _inputs: KMeansInputs, params: str) -> str:
    """``MechanismSpec.note`` of ``mechanism`` on the prepared data ``key`` with ``params`` (JSON), cached."""
    return KMEANS[mechanism].note(_inputs, json.loads(params))  # type: ignore[misc]


# ---------------------------------------------------------------- sweep


@dataclass(frozen=True)
class SweepParams:
    """Everything that defines a comparison (with the data key): hashable, used as the memo key.

    ``trials`` fits per ε for every mechanism but those declaring their own trial count
    (``MechanismSpec.trials``, e.g. MCMC chains), read from ``values``; ``values`` holds the declared
    parameters by name (JSON values: a policy graph as its dict).
    """

    k: int
    mechanisms: tuple[str, ...]
    eps: tuple[float, ...]
    trials: int
    delta: float
    values: tuple[tuple[str, Any], ...] = ()
    seed: int = DIAGNOSTIC_SEED

    def key(self) -> str:
        """Plain-JSON identity (survives Streamlit reloading this module while the app runs)."""
        return json.dumps({**self.__dict__, "values": dict(self.values)}, sort_keys=True)

    @property
    def params(self) -> dict[str, Any]:
        """The declared parameters by name, with K."""
        return {**dict(self.values), "n_clusters": self.k}

    def trials_of(self, mechanism: str) -> int:
        """The trial count of ``mechanism`` in this comparison: its own parameter's value, else ``trials``."""
        own = KMEANS[mechanism].trials
        return self.trials if own is None else int(self.params.get(own.name, own.default))


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
    values = params.params
    fields = {p.name: values.get(p.name) for p in spec.params}
    fields.update(
        mechanism=mechanism,
        eps=list(params.eps),
        trials=params.trials_of(mechanism),
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
    """Long comparisons run in a worker thread: those costing more than ``BACKGROUND_FITS`` noisy-Lloyd
    fits (each mechanism's ``background_cost`` per trial and ε)."""
    cost = sum(KMEANS[m].background_cost * params.trials_of(m) for m in params.mechanisms) * len(params.eps)
    return cost > BACKGROUND_FITS


def _compute(
    key: str,
    prep: PreparedData,
    labels: np.ndarray,
    params: SweepParams,
    progress: Callable[[float, str], None],
    memo: _PartMemo,
) -> SweepResult:
    """``dpcore.kmeans.sweep`` for each chosen mechanism ``memo`` lacks (with its own trial count, if it
    declares one) on the rows ``diagnostic_rows`` picks for ``key``, memoised as it finishes; warnings
    become the parts' notes. No Streamlit call here: it runs in worker threads."""
    parts = {m: memo.get(_part_key(key, params, m)) for m in params.mechanisms}
    todo = [m for m, part in parts.items() if part is None]
    X, lab = diagnostic_rows(prep.X, labels, key) if todo else (prep.X, labels)
    sample = sample_label(X.shape[0], prep.X.shape[0])
    shares = np.cumsum([0.0] + [1.0 + min(KMEANS[m].background_cost, 3.0) for m in todo])
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
                trials=params.trials_of(m),
                delta=params.delta,
                bounds=(prep.lower, prep.upper),
                random_state=_seed(params, m),
                progress=report,
                params=params.params,
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
    return json.dumps([key, params.k, mechanism, epsilon, params.delta, dict(params.values), params.seed])


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
    values: str,
    random_state: int = DIAGNOSTIC_SEED,
) -> Draw:
    """``dpcore.kmeans.diagnostic_draw`` at ``epsilon`` with the declared parameters ``values`` (JSON) plus
    what the charts show about it: the noise covariance when the mechanism declares one (cached)."""
    params = {**json.loads(values), "n_clusters": k}
    true_centers = true_clustering(key, _X, k)[1]
    noisy = kmeans.diagnostic_draw(
        mechanism, _X, _labels, epsilon, delta=delta, bounds=_bounds, random_state=random_state, params=params
    )
    blocks, trace, gap, caveats = None, None, None, ()
    spec = KMEANS[mechanism]
    if spec.covariance is not None:
        cov = spec.covariance(KMeansInputs(_X, _labels), epsilon, delta, spec.validate_params(
            {p.name: params[p.name] for p in spec.params if p.name in params}
        ))
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
