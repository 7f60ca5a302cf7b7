"""The Present page's charts: the privacy/utility trade-off for a stakeholder reading alone.

Pure functions of a story's per-ε summary (``dpcore.story.summarise``): plain units on a linear y axis
(percent worse, percent of the data range, kilometres in the hover), ε on a log axis whose title says
that left is more private, the middle half of the trials shaded, every point's hover text a sentence,
and the budget already spent on the dataset drawn as a dashed vertical line with its own legend entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dpcore.plots.style import eps_axis, narrow_layout, plain_numbers
from dpcore.policy import truthful_probability
from dpcore.story import centres_sentence, clustering_sentence, meaning_sentence

__all__ = ["EPS_TITLE", "SPENT_NAME", "centres_chart", "clustering_chart", "meaning_chart"]

EPS_TITLE = "← more privacy     ε (privacy loss, log scale)     less privacy →"
SPENT_NAME = "already spent on this dataset"
LINE, BAND, SPENT = "#2ca02c", "rgba(44, 160, 44, 0.18)", "#b22222"


def _band(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> go.Scatter:
    return go.Scatter(
        x=np.concatenate([x, x[::-1]]),
        y=np.concatenate([hi, lo[::-1]]),
        fill="toself",
        fillcolor=BAND,
        line={"width": 0},
        mode="lines",
        name="middle half of the runs",
        hoverinfo="skip",
    )


def _line(
    x: np.ndarray, y: np.ndarray, name: str, sentences: Sequence[str], markers: bool = True
) -> go.Scatter:
    return go.Scatter(
        x=x,
        y=y,
        mode="lines+markers" if markers else "lines",
        name=name,
        line={"color": LINE, "width": 3},
        marker={"size": 7},
        customdata=np.asarray(sentences, dtype=object),
        hovertemplate="%{customdata}<extra></extra>",
    )


def _spent(fig: go.Figure, spent: float | None, y_range: tuple[float, float]) -> None:
    """The budget already spent: a dashed vertical line with a legend entry and a sentence on hover."""
    if spent is None or not spent > 0:
        return
    sentence = f"ε = {spent:g} has already been spent on releases of this dataset."
    fig.add_trace(
        go.Scatter(
            x=[spent, spent],
            y=list(y_range),
            mode="lines",
            name=f"{SPENT_NAME} (ε = {spent:g})",
            line={"color": SPENT, "dash": "dash", "width": 2},
            customdata=[sentence, sentence],
            hovertemplate="%{customdata}<extra></extra>",
        )
    )


def _finish(fig: go.Figure, title: str, y_title: str, eps: np.ndarray, spent: float | None) -> go.Figure:
    grid = np.append(eps, spent) if spent else eps
    fig.update_xaxes(**eps_axis(grid, EPS_TITLE))
    fig.update_yaxes(title={"text": y_title}, rangemode="tozero", automargin=True)
    fig.update_layout(template="plotly_white", hovermode="closest", height=420)
    narrow_layout(fig, title)
    return plain_numbers(fig)


def clustering_chart(summary: pd.DataFrame, groups: str, spent: float | None = None) -> go.Figure:
    """How much worse the clustering fits than without privacy (%), median and middle half, against ε."""
    eps = summary["epsilon"].to_numpy(dtype=float)
    med, lo, hi = (summary[f"worse_pct_{s}"].to_numpy(dtype=float) for s in ("median", "lo", "hi"))
    sentences = [clustering_sentence(row, groups) for _, row in summary.iterrows()]
    fig = go.Figure([_band(eps, lo, hi), _line(eps, med, "typical run (median)", sentences)])
    _spent(fig, spent, (0.0, float(np.nanmax(hi))))
    title = f"How much worse the {groups} fit the data than without privacy"
    return _finish(fig, title, "worse than without privacy (%)", eps, spent)


def centres_chart(summary: pd.DataFrame, unit: str = "", spent: float | None = None) -> go.Figure:
    """How far the centres move (% of the data range; the distance in ``unit`` in the hover) against ε."""
    eps = summary["epsilon"].to_numpy(dtype=float)
    med, lo, hi = (summary[f"shift_pct_{s}"].to_numpy(dtype=float) for s in ("median", "lo", "hi"))
    sentences = [centres_sentence(row, unit) for _, row in summary.iterrows()]
    fig = go.Figure([_band(eps, lo, hi), _line(eps, med, "typical run (median)", sentences)])
    _spent(fig, spent, (0.0, float(np.nanmax(hi))))
    return _finish(fig, "How far the centres move", "shift (% of the data range)", eps, spent)


def meaning_chart(eps: Sequence[float], spent: float | None = None) -> go.Figure:
    """What ε means: the best yes/no guess about one person an attacker can make, against ε
    (e^ε / (1 + e^ε); Machanavajjhala & Kifer 2015), with the coin flip (50%) for reference."""
    grid = np.geomspace(min(eps), max(eps), 60)
    guess = 100.0 * np.array([truthful_probability(e) for e in grid])
    sentences = [meaning_sentence(float(f"{e:.2g}")) for e in grid]
    fig = go.Figure(
        [
            go.Scatter(
                x=[grid[0], grid[-1]],
                y=[50.0, 50.0],
                mode="lines",
                name="coin flip (no information)",
                line={"color": "#7f7f7f", "dash": "dot"},
                hoverinfo="skip",
            ),
            _line(grid, guess, "attacker's best guess", sentences, markers=False),
        ]
    )
    _spent(fig, spent, (50.0, 100.0))
    fig.update_yaxes(range=[45.0, 101.0])
    return _finish(
        fig,
        "What ε means: how often an attacker's best guess about one person is right",
        "best yes/no guess right (%)",
        grid,
        spent,
    )
