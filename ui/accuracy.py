"""'What ε do I need?': under each comparison chart, the smallest ε that meets the curator's accuracy target.

The curator picks a metric, a target value and the share of trials that must meet it; the table answers
per mechanism from the comparison (:func:`dpcore.accuracy.eps_for_target`). It is a diagnostic (the
comparison ran on the true data), said so on the panel. "Use ε" puts the answer into the release panel
(its mechanism and ε widgets, kept with ``ui.state.persist``), which still asks before anything is spent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from dpcore.accuracy import HIGHER_IS_BETTER, EpsAnswer, Target, eps_for_target, tidy
from dpcore.plots.style import PRIVACY_CLASSES, PrivacyClass
from ui import state
from ui.errors import user_errors
from ui.release import budget_left

__all__ = ["QUANTILES", "ReleaseKeys", "eps_finder", "kmeans_eps_finder", "locations_eps_finder"]

DIAGNOSTIC = (
    "Diagnostic (uses the true data, not a release): read off the comparison above, which ran on the raw "
    "data with diagnostic noise. Costs no budget; do not publish it."
)
QUANTILES: dict[float, str] = {
    0.5: "half of the trials (median)",
    0.75: "3 trials in 4",
    0.9: "9 trials in 10",
    0.95: "19 trials in 20",
}


@dataclass(frozen=True)
class ReleaseKeys:
    """Session keys of a release panel's mechanism selectbox and ε input (``ui.state.persist`` keys), and
    the release domain (where the plan records that its ε came from here)."""

    mechanism: str
    epsilon: str
    domain: str


def _use(keys: ReleaseKeys, mechanism: str, epsilon: float, label: str, how: str) -> None:
    """Button callback (runs before the next script run): set the release panel's mechanism and ε, and
    record where that ε came from (``how``), which the plan carries while the panel keeps that choice."""
    for key, value in ((keys.mechanism, mechanism), (keys.epsilon, float(epsilon))):
        state.keep(key, value)
    state.set_epsilon_source(keys.domain, mechanism, float(epsilon), how)
    st.toast(f"Release panel set to {label} at ε = {epsilon:g}. Review it below before releasing.")


def _default_target(frame: pd.DataFrame, metric: str) -> float:
    """A starting target: the median over every mechanism and trial at the middle ε, 2 digits."""
    long = tidy(frame)
    part = long[long["metric"] == metric]
    grid = np.sort(part["epsilon"].unique())
    value = float(part.loc[part["epsilon"] == grid[len(grid) // 2], "value"].median())
    if not np.isfinite(value) or value == 0:
        return 0.9 if metric in HIGHER_IS_BETTER else 0.1
    return float(f"{value:.2g}")


def _table(answers: list[EpsAnswer], guarantees: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "mechanism": [a.label for a in answers],
            "guarantee": [guarantees.get(a.mechanism, "") for a in answers],
            "smallest ε on the grid": [a.epsilon for a in answers],
            "metric at that ε": [a.achieved for a in answers],
            "interpolated ε (not measured)": [a.interpolated for a in answers],
            "note": [a.note for a in answers],
        }
    )


def eps_finder(
    frame: pd.DataFrame,
    *,
    prefix: str,
    metrics: Mapping[str, str],
    guarantees: Mapping[str, str],
    release: ReleaseKeys,
    releasable: Collection[str],
    left: Callable[[str], float | None],
    advice: Callable[[EpsAnswer], str | None] | None = None,
) -> None:
    """The panel: target inputs, the answer table, one "Use ε" button per mechanism that has an answer.

    ``metrics`` maps the metric keys offered to their titles; ``guarantees`` mechanism -> what it
    guarantees (shown in the table); ``releasable`` the mechanisms the release panel offers; ``left``
    mechanism -> the budget left on the account its release debits (None: unknown), so an answer above it
    is said to be more than is left and never put into the release panel; ``advice`` a sentence instead of
    a button for a mechanism whose release ε is set elsewhere.
    """
    st.subheader("What ε do I need? (diagnostic)")
    st.caption(DIAGNOSTIC)
    a, b, c = st.columns([2, 1, 1])
    metric = a.selectbox(
        "Accuracy target on",
        list(metrics),
        format_func=metrics.__getitem__,
        key=state.persist(f"{prefix}_acc_metric", next(iter(metrics)), metrics.__contains__),
    )
    better = "at least" if metric in HIGHER_IS_BETTER else "at most"
    value = b.number_input(
        f"Target ({better})",
        format="%.4g",
        key=state.persist(f"{prefix}_acc_value_{metric}", _default_target(frame, metric)),
    )
    quantile = c.selectbox(
        "Met by",
        list(QUANTILES),
        format_func=QUANTILES.__getitem__,
        key=state.persist(f"{prefix}_acc_quantile", 0.75, QUANTILES.__contains__),
    )
    interpolate = st.checkbox(
        "Also interpolate between grid points (an estimate, not measured)",
        key=state.persist(f"{prefix}_acc_interpolate", False),
    )
    with user_errors("finding the ε for this target") as outcome:
        target = Target(metric, float(value), float(quantile))
        answers = eps_for_target(frame, target, interpolate=interpolate)
    if outcome.failed:
        return
    st.dataframe(_table(answers, guarantees), hide_index=True)
    how = (
        f"'What ε do I need?': {metrics[metric]} {better} {float(value):g} in {QUANTILES[quantile]}, the "
        "smallest ε of the comparison's grid"
    )
    found = [x for x in answers if x.epsilon is not None]
    if not found:
        st.info("No mechanism meets this target on the grid: loosen the target or widen the ε range.")
        return
    cols = st.columns(min(len(found), 4))
    for i, answer in enumerate(found):
        col = cols[i % len(cols)]
        room = left(answer.mechanism)
        if room is not None and answer.epsilon > room:
            col.caption(
                f"{answer.label}: ε = {answer.epsilon:g} is more than the {room:.4g} left on the account its "
                "release debits; not offered (loosen the target, or raise the budget on the Privacy policy "
                "page)."
            )
            continue
        note = advice(answer) if advice else None
        if note:
            col.caption(note)
            continue
        col.button(
            f"Use ε = {answer.epsilon:g} for {answer.label}",
            key=f"{prefix}_acc_use_{answer.mechanism}",
            disabled=answer.mechanism not in releasable,
            help=None if answer.mechanism in releasable else "Not offered by the release panel here.",
            on_click=_use,
            args=(release, answer.mechanism, float(answer.epsilon), answer.label, how),
        )


def _guarantees(classes: Mapping[str, PrivacyClass]) -> dict[str, str]:
    return {m: PRIVACY_CLASSES[c].title for m, c in classes.items()}


def kmeans_eps_finder(frame: pd.DataFrame, releasable: Collection[str], k: int) -> None:
    """The panel under the K-means comparison chart (its sweep's tidy table, ``k`` clusters)."""
    from dpcore.kmeans import KMEANS
    from dpcore.kmeans.registry import declared_metrics
    from dpcore.plots.kmeans import privacy_class
    from ui.kmeans_view import release_params

    mechanisms = list(dict.fromkeys(frame["mechanism"]))
    labelled = frame.assign(label=frame["mechanism"].map(lambda m: KMEANS[m].label))
    offered = ("fractional_loss", "centroid_mse", "ari")
    declared = {m.name: m.title for m in declared_metrics(mechanisms) if m.name in frame.columns}
    eps_finder(
        labelled,
        prefix="km",
        metrics={m: declared[m] for m in offered if m in declared},
        guarantees=_guarantees({m: privacy_class(m) for m in mechanisms}),
        release=ReleaseKeys("km_rel_mech", "km_rel_eps", "kmeans"),
        releasable=releasable,
        left=lambda m: budget_left("kmeans", m, release_params(m, k, state.policy())),
    )
    st.caption(
        "For the Gaussian (local) mechanisms the answer holds at the comparison's δ and calibration; the "
        "release uses the δ set in the release panel."
    )


def locations_eps_finder(
    frame: pd.DataFrame,
    releasable: Collection[str],
    *,
    params: Callable[[str], Mapping[str, object]],
    scope: str,
) -> None:
    """The panel under the Locations comparison chart, on every metric the compared mechanisms declare.
    ``params`` gives a mechanism's parameters (as compared and as its release takes them) and ``scope`` the
    release's unit (for the account whose budget left bounds the answers). A mechanism whose release
    spends the privacy policy's level (geo-indistinguishability) gets advice instead of a button."""
    from dpcore.location import LOCATIONS
    from dpcore.location.sweep import declared_metrics
    from dpcore.plots.location import privacy_class

    def advice(answer: EpsAnswer) -> str | None:
        spec = LOCATIONS[answer.mechanism]
        if spec.definition != "geo_ind":
            return None
        values = params(answer.mechanism)
        fixed = [p for p in spec.params if p.from_policy is not None and p.name in values]
        within = "".join(f" with {p.label} = {float(values[p.name]):,g}" for p in fixed)
        return (
            f"{spec.label}: set the geo-indistinguishability level l = {answer.epsilon:g}{within} on the "
            "Privacy policy page (its release spends the policy's level)."
        )

    eps_finder(
        frame,
        prefix="loc",
        metrics={name: m.title for name, m in declared_metrics(frame).items()},
        guarantees=_guarantees({m: privacy_class(m) for m in dict.fromkeys(frame["mechanism"])}),
        release=ReleaseKeys("loc_rel_mech", "loc_rel_eps", "location"),
        releasable=releasable,
        left=lambda m: budget_left("location", m, params(m), scope),
        advice=advice,
    )
