"""Plotly figures for the location page: pure functions, offline by default (no tile server needed).

Maps draw the bundled Natural Earth outlines (:mod:`dpcore.plots.basemap`) as thin grey lines under the
points, with lon/lat axes at equal ground scale (scaleratio 1 / cos(latitude)); ``tiles=True`` draws them
on an OpenStreetMap basemap instead (needs a network).

- :func:`true_vs_released`: true and released points side by side on identical axis ranges.
- :func:`released_map`: released points alone (no raw data: fit for a release report).
- :func:`density_heatmap`: a released density grid's level-1 counts, optionally made non-negative by
  post-processing (:func:`dpcore.postprocess.nonnegative_counts`, costs no privacy).
- :func:`displacement_histogram`: great-circle displacements with the Gamma(2, 1/eps) density.
- :func:`hotspot_map`: hotspot centres of one or more mechanisms (optionally with the true hotspots and
  points, then stamped as a diagnostic), at equal ground scale.
- :func:`error_vs_eps`: the location trade-off chart: median and interquartile band over trials per
  mechanism against eps, ε-DP and not-DP mechanisms marked; with every metric, one row per declared
  metric, each mechanism in its spec's colour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from dpcore.errors import ParameterError
from dpcore.location.grids import DensityGrid
from dpcore.plots.basemap import basemap_trace
from dpcore.plots.kmeans import diagnostic_annotation
from dpcore.plots.style import (
    DEFINITION_CLASSES,
    LINE_NOTE,
    PRIVACY_CLASSES,
    PrivacyClass,
    class_order,
    eps_axis,
    line_trace,
    narrow_layout,
    plain_numbers,
    value_axis,
    wrap_title,
)
from dpcore.postprocess import Nonnegative, nonnegative_counts

TRUE_COLOR, RELEASED_COLOR = "#1f77b4", "#d62728"
HOTSPOT_SYMBOLS = ("diamond", "square", "triangle-up", "cross")
HOTSPOT_COLORS = ("#8c564b", "#e377c2", "#2ca02c", "#ff7f0e")
MAP_TICKS = 6  # at most this many ticks per map axis: labels never overlap


def true_vs_released(
    true_lat: ArrayLike,
    true_lon: ArrayLike,
    rel_lat: ArrayLike,
    rel_lon: ArrayLike,
    *,
    tiles: bool = False,
    diagnostic: bool = True,
    title: str = "True vs released locations",
) -> go.Figure:
    """Two panels: true locations (diagnostic) and released ones, at equal ground scale.

    Both panels show the same lon/lat box (the right panel's axes ``match`` the left one's, so zooming
    one zooms both); only the left y axis carries the ground-scale constraint, which keeps Plotly from
    ignoring a ``scaleanchor`` on an axis that also ``matches``.
    """
    tl, tn, rl, rn = (np.asarray(a, dtype=float) for a in (true_lat, true_lon, rel_lat, rel_lon))
    names = ("True locations (raw data)", "Released locations")
    if tiles:
        fig = make_subplots(1, 2, subplot_titles=names, specs=[[{"type": "map"}, {"type": "map"}]])
        centre = {"lat": float(np.mean(tl)), "lon": float(np.mean(tn))}
        for col, (la, lo, name, color) in enumerate(
            ((tl, tn, "true", TRUE_COLOR), (rl, rn, "released", RELEASED_COLOR)), 1
        ):
            fig.add_trace(
                go.Scattermap(lat=la, lon=lo, mode="markers", name=name, marker={"color": color}), 1, col
            )
        fig.update_maps(style="open-street-map", center=centre, zoom=3)
    else:
        fig = make_subplots(1, 2, subplot_titles=names, horizontal_spacing=0.08)
        lat_range, lon_range = _box(np.r_[tl, rl], np.r_[tn, rn])
        for col, (la, lo, name, color) in enumerate(
            ((tl, tn, "true", TRUE_COLOR), (rl, rn, "released", RELEASED_COLOR)), 1
        ):
            fig.add_trace(_outlines(lat_range, lon_range), 1, col)
            fig.add_trace(
                go.Scattergl(x=lo, y=la, mode="markers", name=name, marker={"color": color, "size": 4}),
                1,
                col,
            )
        ratio = _ground_ratio(lat_range)
        fig.update_xaxes(title_text="Longitude (°)", range=lon_range, nticks=MAP_TICKS, automargin=True)
        fig.update_yaxes(range=lat_range, nticks=MAP_TICKS, automargin=True)
        fig.update_layout(
            yaxis={"title": {"text": "Latitude (°)"}, "scaleanchor": "x", "scaleratio": ratio},
            xaxis2={"matches": "x"},
            yaxis2={"matches": "y"},
        )
    fig.update_layout(legend_title_text="Points")
    narrow_layout(fig, title, extra_top=50)
    plain_numbers(fig)
    if diagnostic:
        diagnostic_annotation(fig).layout.annotations[-1].yshift = 30  # above the panel titles
    return fig


def _box(lat: np.ndarray, lon: np.ndarray) -> tuple[list[float], list[float]]:
    """Latitude and longitude ranges around the points, 5% of the span (at least 0.01°) on each side."""
    ranges = []
    for values, limit in ((lat, 90.0), (lon, 180.0)):
        finite = values[np.isfinite(values)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-limit, limit)
        pad = max(0.05 * (hi - lo), 0.01)
        ranges.append([max(lo - pad, -limit), min(hi + pad, limit)])
    return ranges[0], ranges[1]


def _ground_ratio(lat_range: list[float]) -> float:
    return 1.0 / max(math.cos(math.radians(float(np.mean(lat_range)))), 0.05)


def _outlines(lat_range: list[float], lon_range: list[float]) -> go.Scatter:
    """Basemap outlines for a box, taken wider than the box: the ground-scale constraint may widen it."""
    lat_pad = lat_range[1] - lat_range[0]
    lon_pad = max(lon_range[1] - lon_range[0], lat_pad * _ground_ratio(lat_range))
    return basemap_trace(
        (lon_range[0] - lon_pad, lon_range[1] + lon_pad), (lat_range[0] - lat_pad, lat_range[1] + lat_pad)
    )


def _map_axes(fig: go.Figure, lat_range: list[float], lon_range: list[float]) -> None:
    """Lon/lat axes at equal ground scale over the box, with few enough ticks not to overlap."""
    fig.update_xaxes(title_text="Longitude (°)", range=lon_range, nticks=MAP_TICKS, automargin=True)
    fig.update_yaxes(
        title_text="Latitude (°)",
        range=lat_range,
        nticks=MAP_TICKS,
        automargin=True,
        scaleanchor="x",
        scaleratio=_ground_ratio(lat_range),
    )


def released_map(
    lat: ArrayLike, lon: ArrayLike, *, tiles: bool = False, title: str = "Released locations"
) -> go.Figure:
    """Released points alone at equal ground scale (or on an OpenStreetMap basemap with ``tiles=True``)."""
    la, lo = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
    if la.size == 0:
        raise ParameterError("there are no released points to draw.")
    if tiles:
        fig = go.Figure(
            go.Scattermap(lat=la, lon=lo, mode="markers", name="released", marker={"color": RELEASED_COLOR})
        )
        fig.update_maps(
            style="open-street-map", center={"lat": float(la.mean()), "lon": float(lo.mean())}, zoom=3
        )
    else:
        lat_range, lon_range = _box(la, lo)
        fig = go.Figure(
            [
                _outlines(lat_range, lon_range),
                go.Scattergl(
                    x=lo, y=la, mode="markers", name="released", marker={"color": RELEASED_COLOR, "size": 4}
                ),
            ]
        )
        _map_axes(fig, lat_range, lon_range)
    narrow_layout(fig, title)
    return plain_numbers(fig)


def hotspot_map(
    released: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    true_centres: tuple[ArrayLike, ArrayLike] | None = None,
    points: tuple[ArrayLike, ArrayLike] | None = None,
    tiles: bool = False,
    title: str = "Hotspot centres",
) -> go.Figure:
    """Released hotspot centres per mechanism (name -> (lat, lon)) on one map at equal ground scale.

    ``true_centres`` (non-private k-means) and ``points`` (the raw locations, drawn faintly) read the raw
    data: with either, the figure is stamped as a diagnostic; without both it shows released values only.
    """
    if not released or any(np.asarray(la).size == 0 for la, _ in released.values()):
        raise ParameterError("there are no released hotspot centres to draw.")
    layers: list[tuple[str, np.ndarray, np.ndarray, dict]] = []
    if points is not None:
        layers.append(("locations (raw data)", *_latlon(points), {"color": "#bbbbbb", "size": 3}))
    if true_centres is not None:
        style = {"color": "#000000", "size": 14, "symbol": "x"}
        layers.append(("true hotspots (non-private k-means)", *_latlon(true_centres), style))
    for i, (name, latlon) in enumerate(released.items()):
        style = {
            "color": RELEASED_COLOR if len(released) == 1 else HOTSPOT_COLORS[i % len(HOTSPOT_COLORS)],
            "size": 12,
            "symbol": HOTSPOT_SYMBOLS[i % len(HOTSPOT_SYMBOLS)],
            "line": {"width": 1, "color": "#ffffff"},
        }
        layers.append((name, *_latlon(latlon), style))
    fig = go.Figure()
    all_lat = np.concatenate([la for _, la, _, _ in layers])
    all_lon = np.concatenate([lo for _, _, lo, _ in layers])
    lat_range, lon_range = _box(all_lat, all_lon)
    if not tiles:
        fig.add_trace(_outlines(lat_range, lon_range))
    for name, la, lo, marker in layers:
        if tiles:
            tile_marker = {k: v for k, v in marker.items() if k in ("color", "size")}
            fig.add_trace(go.Scattermap(lat=la, lon=lo, mode="markers", name=name, marker=tile_marker))
        else:
            fig.add_trace(go.Scattergl(x=lo, y=la, mode="markers", name=name, marker=marker))
    if tiles:
        centre = {"lat": float(all_lat.mean()), "lon": float(all_lon.mean())}
        fig.update_maps(style="open-street-map", center=centre, zoom=3)
    else:
        _map_axes(fig, lat_range, lon_range)
    fig.update_layout(legend_title_text="Hotspots")
    narrow_layout(fig, title, extra_top=20)
    plain_numbers(fig)
    diagnostic = true_centres is not None or points is not None
    return diagnostic_annotation(fig) if diagnostic else fig


def _latlon(pair: tuple[ArrayLike, ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(pair[0], dtype=float).ravel(), np.asarray(pair[1], dtype=float).ravel()


def density_heatmap(
    grid: DensityGrid, *, nonnegative: Nonnegative | None = None, title: str | None = None
) -> go.Figure:
    """Heatmap of the grid's level-1 noisy counts (a release: no raw data), outlines drawn on top.

    ``nonnegative`` ("project" or "clamp") shows the counts post-processed by
    :func:`dpcore.postprocess.nonnegative_counts` (no privacy cost; the title says so); None shows the
    released counts as they are, negative ones included.
    """
    lat_c = (grid.lat_edges[:-1] + grid.lat_edges[1:]) / 2
    lon_c = (grid.lon_edges[:-1] + grid.lon_edges[1:]) / 2
    counts = grid.counts if nonnegative is None else nonnegative_counts(grid.counts, nonnegative)
    lat_range = [float(grid.lat_edges[0]), float(grid.lat_edges[-1])]
    lon_range = [float(grid.lon_edges[0]), float(grid.lon_edges[-1])]
    fig = go.Figure(
        [
            go.Heatmap(
                x=lon_c,
                y=lat_c,
                z=counts,
                name=f"{grid.kind} grid",
                colorscale="Viridis",
                colorbar={"title": {"text": "noisy count" if nonnegative is None else "count (≥ 0)"}},
            ),
            _outlines(lat_range, lon_range),
        ]
    )
    fig.data[1].line.color = "rgba(255, 255, 255, 0.6)"  # visible over the dark colours
    _map_axes(fig, lat_range, lon_range)
    what = f"Private density ({grid.kind} grid, ε = {grid.epsilon_spent:.3g}, {grid.sampling_mode})"
    if nonnegative is not None:
        what += f": counts made non-negative by post-processing ({nonnegative}; costs no privacy)"
    narrow_layout(fig, title or what)
    return plain_numbers(fig)


def displacement_histogram(
    displacement_m: ArrayLike, epsilon: float, *, diagnostic: bool = True
) -> go.Figure:
    """Histogram of displacements (metres) with the density eps^2 r e^(-eps r) of Gamma(2, 1/eps)."""
    d = np.asarray(displacement_m, dtype=float)
    if d.size == 0 or not np.isfinite(epsilon) or epsilon <= 0:
        raise ParameterError("need at least one displacement and epsilon > 0 (per metre) to plot.")
    r = np.linspace(0.0, max(float(d.max()), 8.0 / epsilon), 400)
    fig = go.Figure(
        [
            go.Histogram(x=d, histnorm="probability density", name="observed displacement", nbinsx=60),
            go.Scatter(
                x=r, y=epsilon**2 * r * np.exp(-epsilon * r), mode="lines", name="Gamma(2, 1/ε) density"
            ),
        ]
    )
    fig.update_xaxes(title_text="Great-circle displacement (m)")
    fig.update_yaxes(title_text="Density (1/m)")
    narrow_layout(fig, f"Planar Laplace displacement, ε = {epsilon:.3g} per metre", extra_top=20)
    plain_numbers(fig)
    return diagnostic_annotation(fig) if diagnostic else fig


def privacy_class(mechanism: str) -> PrivacyClass:
    """What a location mechanism guarantees (from its registry definition): ε-DP, Blowfish, geo-ind."""
    from dpcore.location import LOCATIONS

    if mechanism not in LOCATIONS:
        raise ParameterError(f"unknown location mechanism {mechanism!r}; use one of {list(LOCATIONS)}.")
    return DEFINITION_CLASSES[LOCATIONS[mechanism].definition]


def error_vs_eps(
    sweep: pd.DataFrame,
    *,
    metric: str | None = None,
    band: tuple[float, float] = (0.25, 0.75),
    log_y: bool = True,
) -> go.Figure:
    """The location trade-off chart: median (line) and quantile band over trials per mechanism vs eps.

    ``sweep`` is ``location_sweep``'s output. One ``metric`` gives one panel; ``metric=None`` draws every
    metric the mechanisms declare, one row each on a shared eps axis (titles from the declarations; a
    metric its mechanism does not declare is refused). Each mechanism draws in its spec's colour; line
    style and legend group mark what it guarantees (solid: ε-DP; dashed: Blowfish; dash-dot:
    geo-indistinguishability).
    """
    from dpcore.location import LOCATIONS
    from dpcore.location.sweep import declared_metrics

    need = {"mechanism", "label", "epsilon", "trial", "metric", "value"}
    if not need <= set(sweep.columns):
        raise ParameterError(f"the sweep frame needs columns {sorted(need)}; pass location_sweep's output.")
    lo_q, hi_q = band
    if not 0.0 <= lo_q < hi_q <= 1.0:
        raise ParameterError(f"band must be two quantiles 0 <= lo < hi <= 1 (got {band}).")
    df = sweep if metric is None else sweep[sweep["metric"] == metric]
    if df.empty:
        raise ParameterError(f"no sweep rows for metric {metric!r}.")
    declared = declared_metrics(df)
    metrics = list(declared)
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    mechs = list(dict.fromkeys(df["mechanism"]))
    classes = {m: privacy_class(str(m)) for m in mechs}
    band_name = f"{round(lo_q * 100)}–{round(hi_q * 100)}%"
    titled: set[PrivacyClass] = set()
    for row, met in enumerate(metrics, 1):
        part = df[df["metric"] == met]
        for cls in class_order(classes.values()):
            for mech in (m for m in dict.fromkeys(part["mechanism"]) if classes[m] == cls):
                g = part[part["mechanism"] == mech].groupby("epsilon")["value"]
                eps, med = g.median().index.to_numpy(), g.median().to_numpy()
                lo, hi = g.quantile(lo_q).to_numpy(), g.quantile(hi_q).to_numpy()
                color = LOCATIONS[str(mech)].color or "#7f7f7f"
                label = str(part.loc[part["mechanism"] == mech, "label"].iloc[0])
                fig.add_trace(
                    go.Scatter(
                        x=np.r_[eps, eps[::-1]],
                        y=np.r_[hi, lo[::-1]],
                        mode="lines",
                        fill="toself",
                        line={"width": 0},
                        fillcolor=color,
                        opacity=0.18,
                        name=f"{label} ({band_name})",
                        legendgroup=cls,
                        showlegend=False,
                        hoverinfo="skip",
                    ),
                    row,
                    1,
                )
                fig.add_trace(
                    line_trace(
                        eps,
                        med,
                        name=label,
                        color=color,
                        privacy=cls,
                        first_of_class=cls not in titled,
                        customdata=np.c_[lo, hi],
                        hovertemplate=(
                            f"<b>{label}</b> ({PRIVACY_CLASSES[cls].title})<br>ε = %{{x:.3g}}<br>"
                            f"median = %{{y:.4g}}<br>{band_name} = "
                            "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>"
                        ),
                    ),
                    row,
                    1,
                )
                titled.add(cls)
        auto = declared[met].scale == "auto"
        yaxis = value_axis(part["value"].to_numpy(), log=log_y and auto and bool((part["value"] > 0).all()))
        fig.update_yaxes(**yaxis, title={"text": wrap_title(declared[met].title, 30)}, row=row, col=1)
    x_axis = eps_axis(df["epsilon"])
    fig.update_xaxes(**{k: v for k, v in x_axis.items() if k != "title"})
    fig.update_xaxes(title=x_axis["title"], row=len(metrics), col=1)
    what = declared[metrics[0]].title if len(metrics) == 1 else "Error of every mechanism"
    fig.update_layout(height=max(450, 300 * len(metrics)))
    narrow_layout(fig, f"{what} vs ε (median over trials, band {band_name})", extra_top=20)
    fig.update_layout(legend={"groupclick": "toggleitem", "title": {"text": LINE_NOTE, "side": "top"}})
    return diagnostic_annotation(plain_numbers(fig))
