"""Location sweep and Plotly builders: trace types and counts, axis titles, legend names."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.location.grids import uniform_grid
from dpcore.location.prilocation import synthetic_visits
from dpcore.location.sweep import MECHANISMS, location_sweep
from dpcore.plots.location import (
    LOCATION_COLORS,
    METRIC_TITLES,
    density_heatmap,
    displacement_histogram,
    error_vs_eps,
    hotspot_map,
    released_map,
    true_vs_released,
)

US = Region(24.0, 50.0, -125.0, -66.0)


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    df = pd.read_csv("dpcore/samples/us_airports.csv")
    df = df[US.contains(df.latitude, df.longitude)]
    v = synthetic_visits(df.latitude.to_numpy(), df.longitude.to_numpy(), n_users=150, seed=1)
    return location_sweep(v.lat, v.lon, v.user, list(MECHANISMS), [0.5, 2.0], 2, region=US, n_clusters=40)


def test_sweep_is_tidy_and_sensible(sweep: pd.DataFrame) -> None:
    assert list(sweep.columns) == ["mechanism", "label", "epsilon", "trial", "metric", "value"]
    assert len(sweep) == len(MECHANISMS) * 2 * 2
    assert np.isfinite(sweep.value).all()
    med = sweep.groupby(["mechanism", "epsilon"]).value.median()
    assert med["planar_laplace", 2.0] == pytest.approx(1.0, rel=0.15)  # 2 / eps
    assert med["dp_mean", 2.0] > med["blowfish_mean", 2.0]
    hot = sweep[sweep.metric == "fractional_wcss_loss"]
    assert set(hot.mechanism) == {"dp_hotspots", "blowfish_hotspots"} and (hot.value > -0.01).all()
    assert {m for _, m in MECHANISMS.values()} <= set(METRIC_TITLES) and set(MECHANISMS) <= set(
        LOCATION_COLORS
    )
    with pytest.raises(ParameterError, match="unknown mechanism"):
        location_sweep([40.0], [-100.0], [1], ["nope"], [1.0], 1, region=US)


def test_error_vs_eps_figure(sweep: pd.DataFrame) -> None:
    fig = error_vs_eps(sweep)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(fig.data) == 2 * len(MECHANISMS) and len(lines) == len(MECHANISMS)
    assert {t.name for t in lines} == {label for label, _ in MECHANISMS.values()}
    assert fig.layout.xaxis.title.text == "ε"
    fig2 = error_vs_eps(sweep, metric="distance_error")
    assert fig2.layout.yaxis.title.text.startswith("Distance error")


def test_true_vs_released_offline_and_tiles() -> None:
    la, lo = np.array([40.0, 41.0]), np.array([-100.0, -101.0])
    fig = true_vs_released(la, lo, la + 0.1, lo)
    assert [type(t) for t in fig.data] == [go.Scattergl, go.Scattergl]
    assert [t.name for t in fig.data] == ["true", "released"]
    assert fig.layout.xaxis.title.text == "Longitude (°)" and fig.layout.yaxis.title.text == "Latitude (°)"
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.layout.yaxis.scaleratio == pytest.approx(1 / np.cos(np.radians(40.55)))
    tiles = true_vs_released(la, lo, la, lo, tiles=True)
    assert all(isinstance(t, go.Scattermap) for t in tiles.data) and len(tiles.data) == 2


def test_density_heatmap_and_displacement_histogram() -> None:
    g = uniform_grid([40.0, 41.0, 30.0], [-100.0, -90.0, -80.0], 1.0, US, n_estimate=1000.0, rng=1)
    fig = density_heatmap(g)
    assert isinstance(fig.data[0], go.Heatmap) and fig.data[0].z.shape == g.counts.shape
    assert fig.layout.xaxis.title.text == "Longitude (°)"
    h = displacement_histogram(np.array([10.0, 200.0, 350.0]), 0.01)
    assert [type(t) for t in h.data] == [go.Histogram, go.Scatter]
    assert h.data[1].name == "Gamma(2, 1/ε) density"
    r, y = np.asarray(h.data[1].x), np.asarray(h.data[1].y)
    assert np.trapezoid(y, r) == pytest.approx(1.0, abs=0.01)
    assert h.layout.xaxis.title.text == "Great-circle displacement (m)"


def test_released_map_shows_released_points_only() -> None:
    fig = released_map([40.0, 41.0], [-100.0, -101.0], title="Released")
    assert [t.name for t in fig.data] == ["released"] and isinstance(fig.data[0], go.Scattergl)
    assert list(fig.data[0].x) == [-100.0, -101.0] and list(fig.data[0].y) == [40.0, 41.0]
    assert fig.layout.yaxis.scaleanchor == "x" and not fig.layout.annotations  # no diagnostic label
    assert isinstance(released_map([40.0], [-100.0], tiles=True).data[0], go.Scattermap)
    with pytest.raises(ParameterError, match="no released points"):
        released_map([], [])


def test_hotspot_map_diagnostic_and_release_forms() -> None:
    true = (np.array([40.0, 30.0]), np.array([-100.0, -90.0]))
    rel = {
        "DP": (np.array([40.5, 30.2]), np.array([-99.0, -91.0])),
        "Blowfish": ([41.0, 29.0], [-98.0, -92.0]),
    }
    fig = hotspot_map(rel, true_centres=true, points=([35.0, 36.0, 37.0], [-95.0, -96.0, -97.0]), title="H")
    assert [t.name for t in fig.data] == [
        "locations (raw data)",
        "true hotspots (non-private k-means)",
        "DP",
        "Blowfish",
    ]
    assert all(isinstance(t, go.Scattergl) for t in fig.data)
    assert list(fig.data[2].x) == [-99.0, -91.0] and list(fig.data[2].y) == [40.5, 30.2]  # x = lon, y = lat
    assert fig.data[2].marker.color != fig.data[3].marker.color
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.xaxis.title.text == "Longitude (°)"
    mean_lat = np.mean([35, 36, 37, 40, 30, 40.5, 30.2, 41, 29])
    assert fig.layout.yaxis.scaleratio == pytest.approx(1 / np.cos(np.radians(mean_lat)))
    assert fig.layout.annotations and fig.layout.annotations[0].text.startswith("Diagnostic")
    release = hotspot_map({"DP": rel["DP"]}, title="Released")
    assert [t.name for t in release.data] == ["DP"] and not release.layout.annotations  # released values only
    tiles = hotspot_map(rel, true_centres=true, tiles=True)
    assert all(isinstance(t, go.Scattermap) for t in tiles.data) and len(tiles.data) == 3
    with pytest.raises(ParameterError, match="no released hotspot"):
        hotspot_map({"DP": ([], [])})
