"""Chart conventions shared by every figure: privacy classes of the mechanisms and readable axes.

A legend must say what each curve guarantees: ε-DP (solid line), Blowfish and geo-indistinguishability
(weaker, policy-specific relations: dashed / dash-dot) and the local mechanisms calibrated on the data
(not DP at all: dotted). Log axes get ticks at 1, 2 and 5 times a power of ten, written as plain numbers
(0.05, 0.1, ..., 10), never SI suffixes such as "100µ" or "5m".
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import plotly.graph_objects as go

PrivacyClass = Literal["dp", "blowfish", "geo", "local"]


@dataclass(frozen=True)
class ClassStyle:
    """How one privacy class is drawn: legend group title and line dash."""

    title: str
    dash: str
    is_dp: bool


PRIVACY_CLASSES: dict[PrivacyClass, ClassStyle] = {
    "dp": ClassStyle("ε-DP", "solid", True),
    "blowfish": ClassStyle("Blowfish (policy graph, not ε-DP)", "dash", False),
    "geo": ClassStyle("Geo-indistinguishable (per metre, not ε-DP)", "dashdot", False),
    "local": ClassStyle("Local, not DP (noise calibrated on this dataset)", "dot", False),
}
#: Privacy definition of a registered mechanism (``MechanismSpec.definition``) -> its class on the charts.
DEFINITION_CLASSES: dict[str, PrivacyClass] = {
    "pure_dp": "dp",
    "approx_dp": "dp",
    "blowfish": "blowfish",
    "geo_ind": "geo",
    "local_pdp": "local",
}
LINE_NOTE = "solid line: ε-DP<br>dashed or dotted: not ε-DP"  # legend title of the trade-off charts


def class_order(classes: Iterable[PrivacyClass]) -> list[PrivacyClass]:
    """The classes present, in the legend's order: ε-DP first, then the weaker guarantees."""
    present = set(classes)
    return [c for c in PRIVACY_CLASSES if c in present]


def readable_ticks(lo: float, hi: float, *, max_ticks: int = 10) -> tuple[list[float], list[str]]:
    """Log-axis ticks at 1, 2, 5 x 10^k within [lo, hi] (10^k only if those would be too many).

    Labels are plain numbers (0.05, 0.1, 1, 10, 100,000, 1e-05), never SI prefixes. With fewer
    than two such values in the range, the range's own end points are added.
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        return [], []
    tol = 1e-9
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    values = [m * 10.0**k for k in decades for m in (1, 2, 5)]
    values = [float(f"{v:.12g}") for v in values if lo * (1 - tol) <= v <= hi * (1 + tol)]
    if len(values) > max_ticks:
        values = [v for v in values if abs(math.log10(v) - round(math.log10(v))) < 1e-9]
        step = max(1, math.ceil(len(values) / max_ticks))
        values = values[::step]
    if len(values) < 2:
        values = sorted({*values, float(f"{lo:.3g}"), float(f"{hi:.3g}")})
    return values, [f"{v:,.0f}" if v >= 1000 else f"{v:g}" for v in values]


def log_axis(values: Iterable[float]) -> dict:
    """Layout dict of a log axis over the positive finite ``values``, with readable ticks."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    out: dict = {"type": "log", "automargin": True}
    if arr.size:
        ticks, text = readable_ticks(float(arr.min()), float(arr.max()))
        out.update(tickmode="array", tickvals=ticks, ticktext=text)
    return out


def eps_axis(eps: Iterable[float], title: str = "ε (privacy parameter, log scale)") -> dict:
    """Layout dict of the log ε axis: ticks at 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10 within the grid."""
    return {**log_axis(eps), "title": {"text": title}}


def value_axis(values: Iterable[float], *, log: bool) -> dict:
    """Layout dict of a value axis: log with readable ticks, or linear (plain numbers: see below)."""
    if log:
        return log_axis(values)
    return {"type": "linear", "automargin": True}


def plain_numbers(fig: go.Figure) -> go.Figure:
    """Every cartesian axis writes plain numbers (40,000 and 0.0003), never "40k" or "300µ"."""
    fig.update_xaxes(exponentformat="none", separatethousands=True)
    fig.update_yaxes(exponentformat="none", separatethousands=True)
    return fig


def line_trace(
    x: np.ndarray,
    y: np.ndarray,
    *,
    name: str,
    color: str,
    privacy: PrivacyClass,
    first_of_class: bool,
    hovertemplate: str,
    customdata: np.ndarray | None = None,
) -> go.Scatter:
    """The median line of one mechanism: line dash and legend group from its privacy class."""
    style = PRIVACY_CLASSES[privacy]
    return go.Scatter(
        x=x,
        y=y,
        mode="lines+markers",
        name=name,
        legendgroup=privacy,
        legendgrouptitle_text=style.title if first_of_class else None,
        line={"color": color, "dash": style.dash, "width": 2.5 if style.is_dp else 2},
        marker={"symbol": "circle" if style.is_dp else "circle-open", "size": 7},
        customdata=customdata,
        hovertemplate=hovertemplate,
    )


TITLE_CHARS = 48  # characters per title line: a chart about 450 px wide (an 800 px window) shows them all


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """``text`` broken into lines of at most ``width`` characters (Plotly never wraps a title itself);
    a title that already holds line breaks is kept as it is."""
    if "<br>" in text or len(text) <= width:
        return text
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))


def narrow_layout(fig: go.Figure, title: str, *, extra_top: int = 0) -> go.Figure:
    """Readable down to an 800 px window: the title wrapped and left-aligned, the legend in rows under the
    plot (never beside it, where it took half the width), small side margins; ``extra_top`` pixels above
    the plot for a stamp between title and plot."""
    fig.update_layout(
        title={"text": wrap_title(title), "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0.0,
            "yanchor": "bottom",
            "x": 0.0,
            "xanchor": "left",
        },
        margin={"l": 10, "r": 10, "t": 30 + 22 * (wrap_title(title).count("<br>") + 1) + extra_top, "b": 10},
    )
    return fig
