"""Trajectory charts: trips as lines on an offline map, utility vs eps, trip-length/diameter histograms.

Pure functions returning Plotly figures. Maps draw at equal ground scale over the public region with the
bundled outlines (no tile server). Figures that read the true trips are stamped as diagnostics.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.plots.kmeans import diagnostic_annotation
from dpcore.plots.location import _map_axes, _outlines
from dpcore.plots.style import eps_axis, narrow_layout, plain_numbers

__all__ = [
    "TRUE_COLOR",
    "distribution_histograms",
    "trips_map",
    "trips_side_by_side",
    "utility_vs_eps",
]

TRUE_COLOR = "#1f77b4"  # the true trips, in every chart
OTHER_COLOR = "#7f7f7f"  # a set of trips given no colour
MAX_DRAWN = 400  # trips drawn per map (the first ones)

Trips = tuple[ArrayLike, ArrayLike, ArrayLike]  # (lat, lon, offsets)


def _lines(trips: Trips, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """lon, lat of the first ``limit`` trips joined into one trace, NaN between trips."""
    lat, lon, off = (np.asarray(a) for a in trips)
    off = off[: limit + 1]
    if off.size < 2:
        return np.zeros(0), np.zeros(0)
    n = off.size - 1
    lens = np.diff(off)
    idx = np.arange(int(off[-1]))
    trip = np.repeat(np.arange(n), lens)
    pos = idx + trip  # room for one NaN after each trip
    x = np.full(idx.size + n, np.nan)
    y = np.full(idx.size + n, np.nan)
    x[pos], y[pos] = np.asarray(lon, float)[idx], np.asarray(lat, float)[idx]
    return x, y


def _ranges(region: Region) -> tuple[list[float], list[float]]:
    pad_lat = 0.03 * (region.lat_max - region.lat_min)
    pad_lon = 0.03 * (region.lon_max - region.lon_min)
    return (
        [region.lat_min - pad_lat, region.lat_max + pad_lat],
        [region.lon_min - pad_lon, region.lon_max + pad_lon],
    )


def trips_map(
    trips: Trips, region: Region, *, title: str, color: str = "#d62728", diagnostic: bool = False
) -> go.Figure:
    """Trips as lines over the public region (the first :data:`MAX_DRAWN`); ``diagnostic`` stamps it."""
    x, y = _lines(trips, MAX_DRAWN)
    lat_range, lon_range = _ranges(region)
    fig = go.Figure(
        [
            _outlines(lat_range, lon_range),
            go.Scattergl(
                x=x, y=y, mode="lines", line={"color": color, "width": 1}, opacity=0.5, name="trips"
            ),
        ]
    )
    _map_axes(fig, lat_range, lon_range)
    narrow_layout(fig, title)
    fig = plain_numbers(fig)
    return diagnostic_annotation(fig) if diagnostic else fig


def trips_side_by_side(
    panels: Mapping[str, Trips],
    region: Region,
    *,
    title: str,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """One map per named set of trips (name -> (lat, lon, offsets)) on the same scale, each in its colour
    (``colors``: name -> hex); diagnostic (the true trips are one of them)."""
    if not panels:
        raise ParameterError("give at least one set of trips to draw.")
    names = list(panels)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.04)
    lat_range, lon_range = _ranges(region)
    for col, (name, trips) in enumerate(panels.items(), 1):
        x, y = _lines(trips, MAX_DRAWN)
        color = (colors or {}).get(name, OTHER_COLOR)
        fig.add_trace(_outlines(lat_range, lon_range), 1, col)
        fig.add_trace(
            go.Scattergl(x=x, y=y, mode="lines", line={"color": color, "width": 1}, opacity=0.5, name=name),
            1,
            col,
        )
        fig.update_xaxes(range=lon_range, showticklabels=False, row=1, col=col)
        fig.update_yaxes(
            range=lat_range,
            showticklabels=col == 1,
            scaleanchor=f"x{'' if col == 1 else col}",
            scaleratio=1.0 / max(np.cos(np.radians(np.mean(lat_range))), 0.05),
            row=1,
            col=col,
        )
    fig.update_layout(height=420, showlegend=False)
    narrow_layout(fig, title)
    return diagnostic_annotation(plain_numbers(fig))


def utility_vs_eps(
    table: pd.DataFrame,
    metrics: Mapping[str, str],
    labels: Mapping[str, str],
    colors: Mapping[str, str],
) -> go.Figure:
    """Mean (line) and min-max band over trials of each measure (``metrics``: name -> title) per mechanism
    vs eps, each mechanism under its label and in its colour (key -> hex); diagnostic."""
    need = {"mechanism", "epsilon", "trial", *metrics}
    if not need <= set(table.columns):
        raise ParameterError(f"the comparison table needs columns {sorted(need)}.")
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=list(metrics.values()),
    )
    for row, metric in enumerate(metrics, 1):
        for mech in dict.fromkeys(table["mechanism"]):
            g = table[table["mechanism"] == mech].groupby("epsilon")[metric]
            eps = g.mean().index.to_numpy()
            mean, lo, hi = g.mean().to_numpy(), g.min().to_numpy(), g.max().to_numpy()
            color = colors.get(str(mech), OTHER_COLOR)
            fig.add_trace(
                go.Scatter(
                    x=np.r_[eps, eps[::-1]],
                    y=np.r_[hi, lo[::-1]],
                    fill="toself",
                    mode="lines",
                    line={"width": 0},
                    fillcolor=color,
                    opacity=0.18,
                    showlegend=False,
                    hoverinfo="skip",
                    legendgroup=str(mech),
                ),
                row,
                1,
            )
            fig.add_trace(
                go.Scatter(
                    x=eps,
                    y=mean,
                    mode="lines+markers",
                    name=labels.get(str(mech), str(mech)),
                    line={"color": color},
                    legendgroup=str(mech),
                    showlegend=row == 1,
                ),
                row,
                1,
            )
    x_axis = eps_axis(table["epsilon"])
    fig.update_xaxes(**{k: v for k, v in x_axis.items() if k != "title"})
    fig.update_xaxes(title=x_axis["title"], row=len(metrics), col=1)
    fig.update_layout(height=max(420, 240 * len(metrics)))
    narrow_layout(fig, "Utility vs ε (mean over trials, band min–max)", extra_top=20)
    return diagnostic_annotation(plain_numbers(fig))


def distribution_histograms(
    values: Mapping[str, ArrayLike],
    *,
    title: str,
    unit: str = "km",
    top: float | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """Overlaid histograms (share of trips) of one per-trip quantity for each named set (diagnostic)."""
    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    hi = top if top is not None else max((float(a.max()) for a in arrays.values() if a.size), default=1.0)
    bins = np.linspace(0, max(hi, 1e-9), 31)
    fig = go.Figure()
    for name, a in arrays.items():
        counts = np.histogram(np.minimum(a, bins[-1]), bins)[0]
        share = counts / max(counts.sum(), 1)
        fig.add_trace(
            go.Bar(
                x=(bins[:-1] + bins[1:]) / 2,
                y=share,
                name=name,
                opacity=0.55,
                marker={"color": (colors or {}).get(name)},
            )
        )
    fig.update_layout(barmode="overlay", height=360)
    fig.update_xaxes(title_text=unit)
    fig.update_yaxes(title_text="share of trips")
    narrow_layout(fig, title)
    return diagnostic_annotation(plain_numbers(fig))
