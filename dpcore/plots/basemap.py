"""Offline basemap: Natural Earth coastlines, country borders and state lines as thin grey lines.

The outlines ship with the package (``dpcore/plots/data/natural_earth.npz``, public domain, provenance in
``dpcore/plots/data/README.md``), so location maps need no tile server and no network. Only the pieces
of polylines inside the requested box (plus one vertex beyond its edge) are drawn; boxes wider than
``COARSE_SPAN_DEG`` degrees use the 1:110m outlines, narrower ones the 1:50m outlines.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

DATA_FILE = Path(__file__).with_name("data") / "natural_earth.npz"
SOURCE = "Natural Earth"
LAYERS = ("coast", "border", "state")
COARSE_SPAN_DEG = 75.0
OUTLINE_COLOR = "#9a9a9a"
_UNIT = 1e-4  # degrees per stored integer unit


@lru_cache(maxsize=1)
def _layers() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """scale_layer -> (lon/lat (n, 2) in degrees, polyline id of each vertex)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with np.load(DATA_FILE) as data:
        for scale in ("110m", "50m"):
            for layer in LAYERS:
                xy = data[f"{scale}_{layer}_lonlat"].astype(float) * _UNIT
                offsets = data[f"{scale}_{layer}_offsets"]
                out[f"{scale}_{layer}"] = (xy, np.repeat(np.arange(offsets.size - 1), np.diff(offsets)))
    return out


def auto_scale(lon_range: tuple[float, float], lat_range: tuple[float, float]) -> str:
    """ "110m" for a box wider than ``COARSE_SPAN_DEG`` degrees either way, else "50m"."""
    span = max(abs(lon_range[1] - lon_range[0]), abs(lat_range[1] - lat_range[0]))
    return "110m" if span > COARSE_SPAN_DEG else "50m"


def outlines(
    lon_range: tuple[float, float], lat_range: tuple[float, float], *, scale: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Longitudes and latitudes of the outlines crossing the box, polylines separated by NaN.

    ``scale`` is "110m" or "50m"; None picks it for this box (:func:`auto_scale`).
    """
    lon0, lon1 = sorted(map(float, lon_range))
    lat0, lat1 = sorted(map(float, lat_range))
    scale = scale or auto_scale((lon0, lon1), (lat0, lat1))
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for layer in LAYERS:
        xy, poly = _layers()[f"{scale}_{layer}"]
        inside = (xy[:, 0] >= lon0) & (xy[:, 0] <= lon1) & (xy[:, 1] >= lat0) & (xy[:, 1] <= lat1)
        keep = inside.copy()
        same = poly[1:] == poly[:-1]
        keep[1:] |= inside[:-1] & same  # one vertex beyond the edge, so lines reach it
        keep[:-1] |= inside[1:] & same
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            continue
        breaks = np.flatnonzero((np.diff(idx) != 1) | (poly[idx[1:]] != poly[idx[:-1]])) + 1
        for part in np.split(idx, breaks):
            if part.size >= 2:
                xs += [xy[part, 0], np.array([np.nan])]
                ys += [xy[part, 1], np.array([np.nan])]
    if not xs:
        return np.empty(0), np.empty(0)
    return np.concatenate(xs), np.concatenate(ys)


def basemap_trace(lon_range: tuple[float, float], lat_range: tuple[float, float]) -> go.Scatter:
    """One thin grey line trace of the outlines in the box (no legend entry, no hover)."""
    lon, lat = outlines(lon_range, lat_range)
    return go.Scatter(
        x=lon,
        y=lat,
        mode="lines",
        name=f"{SOURCE} outlines (public domain)",
        line={"color": OUTLINE_COLOR, "width": 0.8},
        hoverinfo="skip",
        showlegend=False,
        connectgaps=False,
    )
