"""Plotly figures for the location page: pure functions, offline by default (no tile server needed).

- :func:`true_vs_released`: true and released points side by side, lon/lat axes at equal ground scale
  (scaleratio 1 / cos(latitude)); ``tiles=True`` draws them on an OpenStreetMap basemap instead.
- :func:`released_map`: released points alone (no raw data: fit for a release report).
- :func:`density_heatmap`: a released density grid's level-1 counts.
- :func:`displacement_histogram`: great-circle displacements with the Gamma(2, 1/eps) density.
- :func:`hotspot_map`: hotspot centres of one or more mechanisms (optionally with the true hotspots and
  points, then stamped as a diagnostic), at equal ground scale.
- :func:`error_vs_eps`: median and 10-90% band over trials per mechanism, from ``location_sweep``.
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
from dpcore.plots.kmeans import diagnostic_annotation

TRUE_COLOR, RELEASED_COLOR = "#1f77b4", "#d62728"
LOCATION_COLORS: dict[str, str] = {
    "planar_laplace": "#1f77b4",
    "prilocation": "#d62728",
    "uniform_grid": "#2ca02c",
    "adaptive_grid": "#17becf",
    "blowfish_mean": "#9467bd",
    "dp_mean": "#ff7f0e",
    "dp_hotspots": "#8c564b",
    "blowfish_hotspots": "#e377c2",
}
HOTSPOT_SYMBOLS = ("diamond", "square", "triangle-up", "cross")
HOTSPOT_COLORS = ("#8c564b", "#e377c2", "#2ca02c", "#ff7f0e")
METRIC_TITLES: dict[str, str] = {
    "distance_error": "Distance error DE (fraction of HS)",
    "median_relative_error": "Median relative error of rectangle queries",
    "mean_error_m": "Error of the mean position (m)",
    "fractional_wcss_loss": "Hotspot fractional WCSS loss (projected m², vs non-private k-means)",
}


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
    """Two panels: true locations (diagnostic) and released ones, at equal ground scale."""
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
        fig = make_subplots(1, 2, subplot_titles=names, shared_xaxes=True, shared_yaxes=True)
        for col, (la, lo, name, color) in enumerate(
            ((tl, tn, "true", TRUE_COLOR), (rl, rn, "released", RELEASED_COLOR)), 1
        ):
            fig.add_trace(
                go.Scattergl(x=lo, y=la, mode="markers", name=name, marker={"color": color, "size": 4}),
                1,
                col,
            )
        ratio = 1.0 / max(math.cos(math.radians(float(np.mean(np.r_[tl, rl])))), 0.05)
        fig.update_xaxes(title_text="Longitude (°)")
        fig.update_yaxes(title_text="Latitude (°)", scaleanchor="x", scaleratio=ratio, row=1, col=1)
        fig.update_yaxes(title_text="Latitude (°)", scaleanchor="x2", scaleratio=ratio, row=1, col=2)
    fig.update_layout(title=title, legend_title_text="Points")
    return diagnostic_annotation(fig) if diagnostic else fig


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
        fig = go.Figure(
            go.Scattergl(
                x=lo, y=la, mode="markers", name="released", marker={"color": RELEASED_COLOR, "size": 4}
            )
        )
        ratio = 1.0 / max(math.cos(math.radians(float(la.mean()))), 0.05)
        fig.update_xaxes(title_text="Longitude (°)")
        fig.update_yaxes(title_text="Latitude (°)", scaleanchor="x", scaleratio=ratio)
    fig.update_layout(title=title)
    return fig


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
        style = {"color": "black", "size": 14, "symbol": "x"}
        layers.append(("true hotspots (non-private k-means)", *_latlon(true_centres), style))
    for i, (name, latlon) in enumerate(released.items()):
        style = {
            "color": RELEASED_COLOR if len(released) == 1 else HOTSPOT_COLORS[i % len(HOTSPOT_COLORS)],
            "size": 12,
            "symbol": HOTSPOT_SYMBOLS[i % len(HOTSPOT_SYMBOLS)],
            "line": {"width": 1, "color": "white"},
        }
        layers.append((name, *_latlon(latlon), style))
    fig = go.Figure()
    for name, la, lo, marker in layers:
        if tiles:
            tile_marker = {k: v for k, v in marker.items() if k in ("color", "size")}
            fig.add_trace(go.Scattermap(lat=la, lon=lo, mode="markers", name=name, marker=tile_marker))
        else:
            fig.add_trace(go.Scattergl(x=lo, y=la, mode="markers", name=name, marker=marker))
    all_lat = np.concatenate([la for _, la, _, _ in layers])
    if tiles:
        all_lon = np.concatenate([lo for _, _, lo, _ in layers])
        centre = {"lat": float(all_lat.mean()), "lon": float(all_lon.mean())}
        fig.update_maps(style="open-street-map", center=centre, zoom=3)
    else:
        ratio = 1.0 / max(math.cos(math.radians(float(all_lat.mean()))), 0.05)
        fig.update_xaxes(title_text="Longitude (°)")
        fig.update_yaxes(title_text="Latitude (°)", scaleanchor="x", scaleratio=ratio)
    fig.update_layout(title=title, legend_title_text="Hotspots")
    diagnostic = true_centres is not None or points is not None
    return diagnostic_annotation(fig) if diagnostic else fig


def _latlon(pair: tuple[ArrayLike, ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(pair[0], dtype=float).ravel(), np.asarray(pair[1], dtype=float).ravel()


def density_heatmap(grid: DensityGrid, *, title: str | None = None) -> go.Figure:
    """Heatmap of the grid's level-1 noisy counts (a release: no raw data)."""
    lat_c = (grid.lat_edges[:-1] + grid.lat_edges[1:]) / 2
    lon_c = (grid.lon_edges[:-1] + grid.lon_edges[1:]) / 2
    fig = go.Figure(
        go.Heatmap(
            x=lon_c,
            y=lat_c,
            z=grid.counts,
            name=f"{grid.kind} grid",
            colorscale="Viridis",
            colorbar={"title": "noisy count"},
        )
    )
    ratio = 1.0 / max(math.cos(math.radians(float(np.mean(lat_c)))), 0.05)
    fig.update_xaxes(title_text="Longitude (°)")
    fig.update_yaxes(title_text="Latitude (°)", scaleanchor="x", scaleratio=ratio)
    fig.update_layout(
        title=title
        or f"Private density ({grid.kind} grid, ε = {grid.epsilon_spent:.3g}, {grid.sampling_mode})"
    )
    return fig


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
    fig.update_layout(title=f"Planar Laplace displacement, ε = {epsilon:.3g} per metre")
    return diagnostic_annotation(fig) if diagnostic else fig


def error_vs_eps(sweep: pd.DataFrame, *, metric: str | None = None, log_y: bool = True) -> go.Figure:
    """Median (line) and 10-90% band over trials per mechanism against epsilon, from ``location_sweep``."""
    need = {"mechanism", "label", "epsilon", "trial", "metric", "value"}
    if not need <= set(sweep.columns):
        raise ParameterError(f"the sweep frame needs columns {sorted(need)}; pass location_sweep's output.")
    df = sweep if metric is None else sweep[sweep["metric"] == metric]
    if df.empty:
        raise ParameterError(f"no sweep rows for metric {metric!r}.")
    fig = go.Figure()
    for mech, g in df.groupby("mechanism", sort=False):
        s = g.groupby("epsilon")["value"]
        eps, med = s.median().index.to_numpy(), s.median().to_numpy()
        lo, hi = s.quantile(0.1).to_numpy(), s.quantile(0.9).to_numpy()
        color = LOCATION_COLORS.get(str(mech), "#7f7f7f")
        label = str(g["label"].iloc[0])
        fig.add_trace(
            go.Scatter(
                x=np.r_[eps, eps[::-1]],
                y=np.r_[hi, lo[::-1]],
                fill="toself",
                line={"width": 0},
                fillcolor=color,
                opacity=0.2,
                name=f"{label} (10-90%)",
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(go.Scatter(x=eps, y=med, mode="lines+markers", name=label, line={"color": color}))
    metrics = df["metric"].unique()
    fig.update_xaxes(title_text="ε", type="log")
    fig.update_yaxes(
        title_text=METRIC_TITLES.get(str(metrics[0]), "error") if len(metrics) == 1 else "error (see legend)",
        type="log" if log_y else "linear",
    )
    what = METRIC_TITLES.get(str(metrics[0]), "Error") if len(metrics) == 1 else "Error"
    fig.update_layout(title=f"{what} vs ε (median over trials, band 10-90%)")
    return diagnostic_annotation(fig)
