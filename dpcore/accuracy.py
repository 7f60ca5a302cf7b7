"""Accuracy first: the smallest eps on a diagnostic sweep whose error meets the curator's target.

Curators think in error, not in eps. Given a comparison (the tidy output of
:func:`dpcore.kmeans.sweep.sweep` or :func:`dpcore.location.sweep.location_sweep`) and a :class:`Target`
(metric, value, quantile), :func:`eps_for_target` answers, per mechanism, the smallest eps of the grid from
which the metric's quantile over trials meets the target at every larger eps of the grid too (a noisy
curve that dips under the target once and rises again does not count). The answer is a diagnostic: the
sweep ran on the true data with diagnostic noise, so it must be read as "about this eps", never published.
With ``interpolate=True`` it also gives, labelled as such, the eps where the straight line between the two
bracketing grid points (in log eps and, for positive values, log error: errors scale as powers of eps)
crosses the target; that value was not measured.

Quantile: the share of trials that must meet the target (0.5 = the median trial, 0.9 = nine trials in
ten). For an error (lower is better) it is the metric's q-quantile, for a score such as the adjusted Rand
index (higher is better) its (1 - q)-quantile. A trial whose metric is missing (NaN) counts as failing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError

__all__ = [
    "HIGHER_IS_BETTER",
    "LOCATION_ERROR_M",
    "EpsAnswer",
    "Target",
    "eps_for_target",
    "metric_curves",
    "tidy",
]

LOCATION_ERROR_M = "error_m"
#: Metrics where a larger value is better (scores); every other metric is an error.
HIGHER_IS_BETTER = frozenset({"ari"})
_KMEANS_ID = ("mechanism", "epsilon", "trial")


@dataclass(frozen=True)
class Target:
    """The accuracy the curator needs: ``metric`` at most ``value`` (at least, for a score) for a share
    ``quantile`` of the trials."""

    metric: str
    value: float
    quantile: float = 0.5

    def __post_init__(self) -> None:
        if not math.isfinite(float(self.value)):
            raise ParameterError(f"the target value must be a finite number (got {self.value!r}).")
        if not 0.0 < float(self.quantile) < 1.0:
            raise ParameterError(
                f"the quantile is the share of trials that must meet the target, strictly between 0 and 1 "
                f"(got {self.quantile!r}); 0.5 is the median trial, 0.9 nine trials in ten."
            )

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def met(self, values: np.ndarray) -> np.ndarray:
        """Which of ``values`` meet the target (NaN never does)."""
        v = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):
            return v >= self.value if self.higher_is_better else v <= self.value


@dataclass(frozen=True)
class EpsAnswer:
    """Per mechanism: the smallest grid eps meeting the target (None: not reached on the grid).

    ``achieved`` is the metric's quantile at that eps; ``interpolated`` (only when asked for) the eps
    where the line between the bracketing grid points crosses the target, an estimate, not measured.
    """

    mechanism: str
    label: str
    epsilon: float | None
    achieved: float | None
    interpolated: float | None
    note: str


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Long form (mechanism, label, epsilon, trial, metric, value) of either sweep's output.

    The location sweep is already long; the k-means sweep has one column per metric (its labels are
    the mechanism keys unless a ``label`` column is present).
    """
    if {"metric", "value"} <= set(frame.columns):
        need = {"mechanism", "epsilon", "metric", "value"}
        if not need <= set(frame.columns):
            raise ParameterError(f"the sweep table needs columns {sorted(need)}; pass a sweep's output.")
        out = frame.copy()
    else:
        if not set(_KMEANS_ID) <= set(frame.columns):
            raise ParameterError(
                "the sweep table needs columns mechanism, epsilon and trial; pass the output of sweep()."
            )
        keep = [c for c in frame.columns if c not in (*_KMEANS_ID, "label")]
        ids = [c for c in frame.columns if c not in keep]
        out = frame.melt(id_vars=ids, value_vars=keep, var_name="metric", value_name="value")
    if "label" not in out.columns:
        out["label"] = out["mechanism"].astype(str)
    if "trial" not in out.columns:
        out["trial"] = out.groupby(["mechanism", "epsilon", "metric"]).cumcount()
    return out[["mechanism", "label", "epsilon", "trial", "metric", "value"]]


def _quantile(values: np.ndarray, q: float, worst: float) -> float:
    """Linear-interpolation quantile with NaN read as ``worst`` (+inf for an error, -inf for a score)."""
    v = np.sort(np.where(np.isnan(values), worst, values))
    pos = q * (v.size - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or v[lo] == v[hi]:
        return float(v[lo])
    if not (np.isfinite(v[lo]) and np.isfinite(v[hi])):
        return float(worst)
    return float(v[lo] + (v[hi] - v[lo]) * (pos - lo))


def metric_curves(frame: pd.DataFrame, target: Target) -> pd.DataFrame:
    """Per (mechanism, epsilon): the metric's quantile over trials that the target is checked against.

    Columns mechanism, label, epsilon, value, met (sorted by mechanism order, then eps).
    """
    long = tidy(frame)
    part = long[long["metric"] == target.metric]
    if part.empty:
        known = sorted(set(long["metric"]))
        raise ParameterError(f"the sweep has no metric {target.metric!r}; choose one of {known}.")
    q = 1.0 - target.quantile if target.higher_is_better else target.quantile
    worst = -math.inf if target.higher_is_better else math.inf
    order = {m: i for i, m in enumerate(dict.fromkeys(part["mechanism"]))}
    rows = [
        (mech, str(g["label"].iloc[0]), float(eps), _quantile(g["value"].to_numpy(dtype=float), q, worst))
        for (mech, eps), g in part.groupby(["mechanism", "epsilon"], sort=False)
    ]
    out = pd.DataFrame(rows, columns=["mechanism", "label", "epsilon", "value"])
    out["met"] = target.met(out["value"].to_numpy())
    out["_order"] = out["mechanism"].map(order)
    return out.sort_values(["_order", "epsilon"]).drop(columns="_order").reset_index(drop=True)


def _crossing(e0: float, v0: float, e1: float, v1: float, target: float) -> float | None:
    """eps where the segment (e0, v0) -> (e1, v1) crosses ``target``: log eps, log value when all > 0.

    None when the failing end has no finite value (its trials failed).
    """
    if not np.isfinite(v0):
        return None
    if v0 == v1:
        return e1
    logs = min(v0, v1, target) > 0
    f = (np.log(target) - np.log(v0)) / (np.log(v1) - np.log(v0)) if logs else (target - v0) / (v1 - v0)
    return float(np.exp(np.log(e0) + float(np.clip(f, 0.0, 1.0)) * (np.log(e1) - np.log(e0))))


def eps_for_target(frame: pd.DataFrame, target: Target, *, interpolate: bool = False) -> list[EpsAnswer]:
    """Per mechanism, the smallest grid eps from which the target is met at every larger grid eps.

    ``frame`` is a sweep's output (see :func:`tidy`).
    Mechanisms without rows for ``target.metric`` are left out (each location mechanism has one metric).
    """
    curves = metric_curves(frame, target)
    answers = []
    for mech, c in curves.groupby("mechanism", sort=False):
        eps, values, met = c["epsilon"].to_numpy(), c["value"].to_numpy(), c["met"].to_numpy()
        label = str(c["label"].iloc[0])
        failing = np.flatnonzero(~met)
        first = 0 if failing.size == 0 else int(failing[-1]) + 1
        if first == eps.size:
            answers.append(
                EpsAnswer(
                    str(mech),
                    label,
                    None,
                    None,
                    None,
                    f"not reached on the grid: {values[-1]:.4g} at the largest ε = {eps[-1]:g}",
                )
            )
            continue
        notes = []
        if first == 0:
            notes.append("met already at the smallest ε of the grid: a smaller ε may do (widen the range)")
        if met[:first].any():
            notes.append("also met at a smaller ε, but not at every larger one (noisy: run more trials)")
        interpolated = None
        if interpolate and first > 0:
            interpolated = _crossing(
                eps[first - 1], values[first - 1], eps[first], values[first], float(target.value)
            )
            if interpolated is not None:
                notes.append("interpolated ε: between two grid points, not measured")
        found = float(eps[first])
        answers.append(
            EpsAnswer(str(mech), label, found, float(values[first]), interpolated, "; ".join(notes))
        )
    return answers
