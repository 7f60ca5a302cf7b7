"""Location sweep and Plotly builders: trace types and counts, axis titles, legend names."""

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.location.grids import uniform_grid
from dpcore.location.prilocation import synthetic_visits
from dpcore.location.registry import LOCATIONS
from dpcore.location.sweep import comparable, location_sweep
from dpcore.plots.location import (
    density_heatmap,
    displacement_histogram,
    error_vs_eps,
    hotspot_map,
    released_map,
    true_vs_released,
)

US = Region(24.0, 50.0, -125.0, -66.0)
MECHANISMS = comparable()
LABELS = {m: LOCATIONS[m].label for m in MECHANISMS}


def _points(fig: go.Figure) -> list:
    """The figure's traces without the basemap outlines."""
    return [t for t in fig.data if not (t.name or "").startswith("Natural Earth")]


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    df = pd.read_csv("dpcore/samples/us_airports.csv")
    df = df[US.contains(df.latitude, df.longitude)]
    v = synthetic_visits(df.latitude.to_numpy(), df.longitude.to_numpy(), n_users=150, seed=1)
    params = {"prilocation": {"n_clusters": 40}, "planar_laplace": {"radius_m": 300_000.0}}
    return location_sweep(v.lat, v.lon, v.user, MECHANISMS, [0.5, 2.0], 2, region=US, params=params)


def test_sweep_is_tidy_and_sensible(sweep: pd.DataFrame) -> None:
    assert list(sweep.columns) == ["mechanism", "label", "epsilon", "trial", "metric", "value"]
    assert len(sweep) == len(MECHANISMS) * 2 * 2
    assert np.isfinite(sweep.value).all()
    med = sweep.groupby(["mechanism", "epsilon"]).value.median()
    assert med["planar_laplace", 2.0] == pytest.approx(300_000.0, rel=0.15)  # 2 r / eps metres
    assert med["dp_mean", 2.0] > med["blowfish_mean", 2.0]
    hot = sweep[sweep.metric == "fractional_wcss_loss"]
    assert set(hot.mechanism) == {"dp_hotspots", "blowfish_hotspots"} and (hot.value > -0.01).all()
    declared = {(m, x.name) for m in MECHANISMS for x in LOCATIONS[m].metrics}
    assert set(zip(sweep.mechanism, sweep.metric, strict=True)) == declared  # what each declares
    assert set(sweep.label) == set(LABELS.values())
    with pytest.raises(ParameterError, match="Unknown location mechanism 'nope'"):
        location_sweep([40.0], [-100.0], [1], ["nope"], [1.0], 1, region=US)
    with pytest.raises(ParameterError, match="has no parameter theta_m"):
        location_sweep(
            [40.0], [-100.0], [1], ["dp_mean"], [1.0], 1, region=US, params={"dp_mean": {"theta_m": 1}}
        )


def test_error_vs_eps_figure(sweep: pd.DataFrame) -> None:
    fig = error_vs_eps(sweep)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(fig.data) == 2 * len(MECHANISMS) and len(lines) == len(MECHANISMS)
    assert {t.name for t in lines} == set(LABELS.values())
    assert {t.line.color for t in lines} == {LOCATIONS[m].color for m in MECHANISMS}  # the specs' colours
    rows = len(set(sweep.metric))
    assert fig.layout[f"xaxis{rows}"].title.text == "ε (privacy parameter, log scale)"
    fig2 = error_vs_eps(sweep, metric="error_m")
    assert fig2.layout.yaxis.title.text == "Location error (m)"
    unknown = sweep.assign(metric=np.where(sweep.mechanism == "dp_mean", "made_up", sweep.metric))
    with pytest.raises(ParameterError, match="declares no metric 'made_up'"):
        error_vs_eps(unknown)  # never left off the chart silently


def test_true_vs_released_offline_and_tiles() -> None:
    la, lo = np.array([40.0, 41.0]), np.array([-100.0, -101.0])
    fig = true_vs_released(la, lo, la + 0.1, lo)
    assert [type(t) for t in _points(fig)] == [go.Scattergl, go.Scattergl]
    assert [t.name for t in _points(fig)] == ["true", "released"]
    assert fig.layout.xaxis.title.text == "Longitude (°)" and fig.layout.yaxis.title.text == "Latitude (°)"
    assert fig.layout.yaxis.scaleanchor == "x"
    mid = np.mean(fig.layout.yaxis.range)
    assert fig.layout.yaxis.scaleratio == pytest.approx(1 / np.cos(np.radians(mid)))
    tiles = true_vs_released(la, lo, la, lo, tiles=True)
    assert all(isinstance(t, go.Scattermap) for t in tiles.data) and len(tiles.data) == 2


def test_density_heatmap_and_displacement_histogram() -> None:
    g = uniform_grid([40.0, 41.0, 30.0], [-100.0, -90.0, -80.0], 1.0, US, n_estimate=1000.0, random_state=1)
    fig = density_heatmap(g)
    assert isinstance(fig.data[0], go.Heatmap) and fig.data[0].z.shape == g.counts.shape
    assert fig.layout.xaxis.title.text == "Longitude (°)"
    h = displacement_histogram(np.array([10.0, 200.0, 350.0]), 0.01)
    assert [type(t) for t in h.data] == [go.Histogram, go.Scatter]
    assert h.data[1].name == "Gamma(2, 1/ε) density"
    r, y = np.asarray(h.data[1].x), np.asarray(h.data[1].y)
    assert np.trapezoid(y, r) == pytest.approx(1.0, abs=0.01)
    assert h.layout.xaxis.title.text == "Great-circle displacement (m)"
    assert h.layout.yaxis.exponentformat == "none"  # a density of 1e-4 per metre, not "100µ"


def test_released_map_shows_released_points_only() -> None:
    fig = released_map([40.0, 41.0], [-100.0, -101.0], title="Released")
    (points,) = _points(fig)
    assert points.name == "released" and isinstance(points, go.Scattergl)
    assert list(points.x) == [-100.0, -101.0] and list(points.y) == [40.0, 41.0]
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
    points = _points(fig)
    assert [t.name for t in points] == [
        "locations (raw data)",
        "true hotspots (non-private k-means)",
        "DP",
        "Blowfish",
    ]
    assert all(isinstance(t, go.Scattergl) for t in points)
    assert list(points[2].x) == [-99.0, -91.0] and list(points[2].y) == [40.5, 30.2]  # x = lon, y = lat
    assert points[2].marker.color != points[3].marker.color
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.xaxis.title.text == "Longitude (°)"
    lat0, lat1 = fig.layout.yaxis.range
    assert lat0 <= 29 and lat1 >= 41  # every point inside the map's range
    assert fig.layout.yaxis.scaleratio == pytest.approx(1 / np.cos(np.radians((lat0 + lat1) / 2)))
    assert fig.layout.annotations and fig.layout.annotations[0].text.startswith("Diagnostic")
    release = hotspot_map({"DP": rel["DP"]}, title="Released")
    assert [t.name for t in _points(release)] == ["DP"] and not release.layout.annotations  # released only
    tiles = hotspot_map(rel, true_centres=true, tiles=True)
    assert all(isinstance(t, go.Scattermap) for t in tiles.data) and len(tiles.data) == 3
    with pytest.raises(ParameterError, match="no released hotspot"):
        hotspot_map({"DP": ([], [])})


# ---------------------------------------------------------------- charts a stakeholder can read


def test_error_vs_eps_marks_dp_and_not_dp_mechanisms(sweep: pd.DataFrame) -> None:
    fig = error_vs_eps(sweep[sweep.mechanism.isin(["planar_laplace", "prilocation"])], metric="error_m")
    lines = {t.name: t for t in fig.data if t.mode == "lines+markers"}
    assert lines[LABELS["planar_laplace"]].line.dash == "dashdot"  # geo-indistinguishable
    assert lines[LABELS["prilocation"]].line.dash == "dash"  # Blowfish-style, not ε-DP
    titles = {t.legendgrouptitle.text for t in fig.data if t.legendgrouptitle.text}
    assert titles == {"Geo-indistinguishable (per metre, not ε-DP)", "Blowfish (policy graph, not ε-DP)"}
    assert list(fig.layout.xaxis.tickvals) == [0.5, 1.0, 2.0]
    assert list(fig.layout.xaxis.ticktext) == ["0.5", "1", "2"]
    grids = error_vs_eps(sweep, metric="median_relative_error")
    assert {t.line.dash for t in grids.data if t.mode == "lines+markers"} == {"solid"}  # ε-DP


def test_error_vs_eps_one_chart_for_every_mechanism_one_row_per_declared_metric(sweep: pd.DataFrame) -> None:
    fig = error_vs_eps(sweep)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert sorted(t.name for t in lines) == sorted(LABELS.values())
    metres = [t for t in lines if t.yaxis in (None, "y")]
    assert {t.name for t in metres} == {
        LABELS[m] for m in ("planar_laplace", "prilocation", "blowfish_mean", "dp_mean")
    }
    assert fig.layout.yaxis.title.text == "Location error (m)"
    pl = next(t for t in lines if t.name == LABELS["planar_laplace"])
    de = sweep[sweep.mechanism == "planar_laplace"].groupby("epsilon").value.median().to_numpy()
    np.testing.assert_allclose(pl.y, de)  # in metres, as the trial reports it
    # The other metrics get their own rows on the same ε axis, titled as declared.
    assert {fig.layout.yaxis2.title.text, fig.layout.yaxis3.title.text} == {
        "Rectangle queries: median<br>relative error",
        "Hotspots: fractional WCSS loss<br>(vs non-private k-means)",
    }
    assert fig.layout.xaxis3.tickvals and fig.layout.xaxis2.matches == "x3"
    band = next(t for t in fig.data if t.fill == "toself" and t.name.startswith(pl.name))
    q75 = sweep[sweep.mechanism == "planar_laplace"].groupby("epsilon").value.quantile(0.75).to_numpy()
    np.testing.assert_allclose(band.y[:2], q75)  # interquartile band by default
    assert "25–75%" in fig.layout.title.text


def test_true_vs_released_share_ranges_without_scaleanchor_conflicts() -> None:
    la, lo = np.array([34.0, 34.2, 33.9]), np.array([-118.3, -118.1, -118.5])
    fig = true_vs_released(la, lo, la + 0.3, lo - 0.4)
    layout = fig.layout
    for name in ("xaxis", "yaxis", "xaxis2", "yaxis2"):
        axis = layout[name]
        assert not (axis.matches and axis.scaleanchor), f"{name} has both matches and scaleanchor"
    assert layout.xaxis2.matches == "x" and layout.yaxis2.matches == "y"
    assert layout.yaxis.scaleanchor == "x"
    lon0, lon1 = layout.xaxis.range
    lat0, lat1 = layout.yaxis.range
    assert lon0 <= -118.9 and lon1 >= -118.1 and lat0 <= 33.9 and lat1 >= 34.5  # both point sets inside
    assert layout.xaxis.nticks and layout.xaxis2.nticks  # no crowded tick labels


def test_maps_draw_natural_earth_outlines_under_the_points() -> None:
    from dpcore.plots.basemap import DATA_FILE, SOURCE, outlines

    la, lo = np.array([34.0, 40.7, 41.9]), np.array([-118.2, -74.0, -87.6])
    for fig in (
        true_vs_released(la, lo, la, lo),
        released_map(la, lo),
        hotspot_map({"DP": (la, lo)}),
    ):
        base = [t for t in fig.data if t.name and SOURCE in t.name]
        assert base and fig.data.index(base[0]) == 0  # under every marker
        assert all(t.mode == "lines" and t.showlegend is False and t.hoverinfo == "skip" for t in base)
        assert np.isfinite(np.asarray(base[0].x, dtype=float)).sum() > 100
    assert not any(SOURCE in (t.name or "") for t in true_vs_released(la, lo, la, lo, tiles=True).data)
    x, y = outlines((-125.0, -66.0), (24.0, 50.0))
    finite = np.isfinite(x)
    inside = (x[finite] >= -125) & (x[finite] <= -66) & (y[finite] >= 24) & (y[finite] <= 50)
    assert inside.mean() > 0.95 and finite.sum() > 1000  # US coasts, borders and state lines
    la_x, _ = outlines((-119.0, -117.5), (33.5, 34.5))
    assert np.isfinite(la_x).sum() >= 5  # the Los Angeles coastline
    assert DATA_FILE.stat().st_size < 1_500_000
    readme = (DATA_FILE.parent / "README.md").read_text()
    assert "naturalearthdata.com" in readme and "public domain" in readme
    assert '"plots/data/*.npz"' in Path("pyproject.toml").read_text()  # installed with the package


def test_density_heatmap_non_negative_post_processing() -> None:
    from dpcore.postprocess import nonnegative_counts

    g = uniform_grid([40.0, 41.0, 30.0], [-100.0, -90.0, -80.0], 0.2, US, n_estimate=3.0, random_state=3)
    assert (g.counts < 0).any()  # noisy counts of an almost empty grid
    raw = density_heatmap(g)
    np.testing.assert_allclose(np.asarray(raw.data[0].z), g.counts)  # the release as it is, by default
    fig = density_heatmap(g, nonnegative="project")
    z = np.asarray(fig.data[0].z, dtype=float)
    assert (z >= 0).all() and z.sum() == pytest.approx(max(g.counts.sum(), 0.0))
    np.testing.assert_allclose(z, nonnegative_counts(g.counts, "project"))
    assert "post-processing" in fig.layout.title.text
    clamped = density_heatmap(g, nonnegative="clamp")
    np.testing.assert_allclose(np.asarray(clamped.data[0].z, dtype=float), np.maximum(g.counts, 0.0))


def test_nonnegative_counts_is_the_exact_projection_keeping_the_total() -> None:
    from scipy.optimize import minimize

    from dpcore.postprocess import nonnegative_counts

    rng = np.random.default_rng(7)
    for _ in range(20):
        c = rng.laplace(2.0, 3.0, size=6)
        x = nonnegative_counts(c)
        total = max(c.sum(), 0.0)
        assert (x >= 0).all() and x.sum() == pytest.approx(total)
        if total > 0:  # the KKT form of the projection: x = max(c - tau, 0) for one tau
            tau = np.mean((c - x)[x > 0])
            np.testing.assert_allclose(x, np.maximum(c - tau, 0.0), atol=1e-12)
            best = minimize(
                lambda z, c=c: ((z - c) ** 2).sum(),
                np.full(6, total / 6),
                bounds=[(0, None)] * 6,
                constraints=({"type": "eq", "fun": lambda z, s=total: z.sum() - s},),
                method="SLSQP",
                options={"ftol": 1e-12},
            )
            assert ((x - c) ** 2).sum() <= best.fun + 1e-7  # no feasible point is closer
    np.testing.assert_array_equal(nonnegative_counts([-1.0, -2.0]), [0.0, 0.0])
    np.testing.assert_array_equal(nonnegative_counts([-1.0, 3.0], "clamp"), [0.0, 3.0])
    with pytest.raises(ParameterError, match="'project'"):
        nonnegative_counts([1.0], "round")  # type: ignore[arg-type]


def test_the_comparison_runs_planar_laplace_and_the_blowfish_mean_as_they_are_released() -> None:
    """Planar Laplace's error is that of level ε within its radius r (mean displacement 2 r / ε metres, the
    Gamma(2, r / ε) radius); the Blowfish mean's noise follows its θ: each with its declared parameters."""
    rng = np.random.default_rng(3)
    lat, lon = rng.uniform(30, 45, 4000), rng.uniform(-110, -80, 4000)
    users = np.arange(lat.size)
    params = {"planar_laplace": {"radius_m": 500.0}, "blowfish_mean": {"theta_m": 5_000.0}}
    by_r = location_sweep(
        lat, lon, users, ["planar_laplace", "blowfish_mean"], [1.0, 2.0], 3, region=US, params=params,
        random_state=2,
    )
    planar = by_r[by_r.mechanism == "planar_laplace"]
    metres = planar.groupby("epsilon")["value"].mean()
    np.testing.assert_allclose(metres.to_numpy(), [2 * 500.0 / 1.0, 2 * 500.0 / 2.0], rtol=0.05)
    assert planar["label"].iloc[0] == LABELS["planar_laplace"]
    mean = by_r[by_r.mechanism == "blowfish_mean"].groupby("epsilon")["value"].median()
    wide = location_sweep(
        lat,
        lon,
        users,
        ["blowfish_mean"],
        [1.0, 2.0],
        3,
        region=US,
        params={"blowfish_mean": {"theta_m": 5e4}},
        random_state=2,
    )
    ratio = wide.groupby("epsilon")["value"].median() / mean
    np.testing.assert_allclose(ratio.to_numpy(), 10.0, rtol=0.02)  # the noise follows θ
    with pytest.raises(ParameterError, match="Radius r"):
        location_sweep(
            lat,
            lon,
            users,
            ["planar_laplace"],
            [1.0],
            1,
            region=US,
            params={"planar_laplace": {"radius_m": 0.0}},
        )
