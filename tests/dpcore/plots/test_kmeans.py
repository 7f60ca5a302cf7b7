"""Plot builders: trace counts and types, axis titles, legend entries, ellipse geometry."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore import plots
from dpcore.errors import ParameterError
from dpcore.metrics import assign, population_table
from dpcore.plots.kmeans import DIAGNOSTIC_TEXT


def _blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0, 0.0, 0.0], [6.0, 0.0, 1.0, 0.0], [0.0, 6.0, 0.0, 1.0]])
    X = np.vstack([rng.normal(c, 1.0, size=(80, 4)) for c in centers])
    return X, centers


def _annotations(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def _sweep_frame() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    for mech, scale in (("white", 10.0), ("colored", 1.0)):
        for eps in (0.1, 1.0, 10.0):
            for trial in range(11):
                rows.append((mech, eps, trial, scale / eps**2 * (1 + 0.1 * rng.normal())))
    return pd.DataFrame(rows, columns=["mechanism", "epsilon", "trial", "fractional_loss"])


def test_loss_vs_eps_traces_band_and_axes() -> None:
    df = _sweep_frame()
    fig = plots.loss_vs_eps(df, labels={"white": "White noise", "colored": "Colored noise"}, band=(0.1, 0.9))
    assert len(fig.data) == 4  # band + median per mechanism
    assert all(isinstance(t, go.Scatter) for t in fig.data)
    bands, lines = fig.data[0::2], fig.data[1::2]
    assert [t.name for t in lines] == ["White noise", "Colored noise"]
    assert all(t.showlegend is False and t.fill == "toself" for t in bands)
    assert [t.legendgroup for t in lines] == ["local", "local"]  # both local (not DP): one legend group
    assert lines[0].line.color != lines[1].line.color
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.yaxis.type == "log"  # all values positive
    assert "ε" in fig.layout.xaxis.title.text
    assert "Fractional clustering loss" in fig.layout.yaxis.title.text
    white = df[df.mechanism == "white"]
    np.testing.assert_allclose(lines[0].y, white.groupby("epsilon")["fractional_loss"].median().to_numpy())
    # Band: upper quantile on the way out, lower on the way back.
    q90 = white.groupby("epsilon")["fractional_loss"].quantile(0.9).to_numpy()
    np.testing.assert_allclose(bands[0].y[:3], q90)
    assert DIAGNOSTIC_TEXT in _annotations(fig)
    assert DIAGNOSTIC_TEXT not in _annotations(plots.loss_vs_eps(df, diagnostic=False))


def test_loss_vs_eps_linear_y_for_negative_values_and_bad_input() -> None:
    df = _sweep_frame()
    df.loc[df["mechanism"] == "white", "fractional_loss"] -= 1e3  # medians below 0
    assert plots.loss_vs_eps(df).layout.yaxis.type == "linear"
    with pytest.raises(ParameterError, match="sweep"):
        plots.loss_vs_eps(df.drop(columns="fractional_loss"))


def test_ellipse_points_radius() -> None:
    circle = plots.ellipse_points(np.array([1.0, 2.0]), 4.0 * np.eye(2))
    radii = np.linalg.norm(circle - [1.0, 2.0], axis=1)
    np.testing.assert_allclose(radii, 2.0)
    stretched = plots.ellipse_points(np.zeros(2), np.diag([9.0, 1.0]))
    assert np.abs(stretched[:, 0]).max() == pytest.approx(3.0)
    assert np.abs(stretched[:, 1]).max() == pytest.approx(1.0)


def test_embedding_white_circle_colored_ellipse() -> None:
    X, centers = _blobs()
    d = X.shape[1]
    white = [0.5 * np.eye(d)] * 3
    aniso = [np.diag([4.0, 0.01, 0.01, 0.01])] * 3
    noisy = centers + 0.1
    fig = plots.embedding(
        X, centers, noisy, {"white": white, "colored": aniso}, mechanism_labels={"white": "W", "colored": "C"}
    )
    names = [t.name for t in fig.data]
    assert names[:3] == [f"cluster {j} (true labels)" for j in range(3)]
    assert names[3:] == ["true centres", "noisy centres", "W: 1σ noise", "C: 1σ noise"]
    assert len(fig.data) == 3 + 2 + 2
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.layout.xaxis.title.text == "PC 1"
    true2 = np.column_stack([fig.data[3].x, fig.data[3].y])

    def curves(trace: go.Scatter) -> list[np.ndarray]:
        xy = np.column_stack([np.array(trace.x, dtype=float), np.array(trace.y, dtype=float)])
        return [
            part for part in np.split(xy, np.where(np.isnan(xy[:, 0]))[0]) if len(part[~np.isnan(part[:, 0])])
        ]

    for j, curve in enumerate(curves(fig.data[5])):
        radii = np.linalg.norm(curve[~np.isnan(curve[:, 0])] - true2[j], axis=1)
        np.testing.assert_allclose(radii, np.sqrt(0.5), rtol=1e-9)  # white: a circle of radius sigma
    for j, curve in enumerate(curves(fig.data[6])):
        radii = np.linalg.norm(curve[~np.isnan(curve[:, 0])] - true2[j], axis=1)
        assert radii.max() / radii.min() > 2.0  # anisotropic: not a circle
    wide = plots.embedding(X, centers, None, {"white": white}, level="95%")
    curve = curves(wide.data[4])[0]
    true_w = np.array([wide.data[3].x[0], wide.data[3].y[0]])
    radii = np.linalg.norm(curve[~np.isnan(curve[:, 0])] - true_w, axis=1)
    np.testing.assert_allclose(radii, np.sqrt(0.5) * 2.4477, rtol=1e-4)


def test_embedding_projects_centres_with_pca() -> None:
    X, centers = _blobs(1)
    fig = plots.embedding(X, centers)
    mean = X.mean(axis=0)
    _, _, vt = np.linalg.svd(X - mean, full_matrices=False)
    want = (centers - mean) @ vt[:2].T
    got = np.column_stack([fig.data[3].x, fig.data[3].y])
    np.testing.assert_allclose(np.abs(got), np.abs(want), atol=1e-9)
    assert sum(len(t.x) for t in fig.data[:3]) == len(X)


def test_embedding_mds_and_errors() -> None:
    X, centers = _blobs(2)
    fig = plots.embedding(X, centers, centers + 0.2, {"white": [np.eye(4)] * 3}, method="mds", max_points=60)
    assert sum(len(t.x) for t in fig.data[:3]) == 60
    assert "MDS" in fig.layout.xaxis.title.text
    with pytest.raises(ParameterError, match="pca"):
        plots.embedding(X, centers, method="tsne")
    with pytest.raises(ParameterError, match="blocks"):
        plots.embedding(X, centers, covariances={"white": [np.eye(3)] * 3})


def test_population_table_figure_bar_and_table() -> None:
    X, centers = _blobs(3)
    table = population_table(X, centers, centers + np.array([1.0, 0, 0, 0]))
    bar = plots.population_table_figure(table)
    assert [t.type for t in bar.data] == ["bar", "bar"]
    assert [t.name for t in bar.data] == ["true labels", "noisy labels"]
    assert sum(bar.data[0].y) == sum(bar.data[1].y) == len(X)
    assert bar.layout.barmode == "group"
    assert bar.layout.yaxis.title.text == "rows (nearest centre)"
    tab = plots.population_table_figure(table, kind="table")
    assert tab.data[0].type == "table"
    assert list(tab.data[0].header.values) == ["Cluster", "0", "1", "2"]
    assert list(tab.data[0].cells.values[1]) == [int(table.loc[0, "true"]), int(table.loc[0, "noisy"])]


def test_violins_split_true_vs_noisy() -> None:
    X, centers = _blobs(4)
    df = pd.DataFrame(X, columns=["a", "b", "c", "deals"])
    true_l = assign(X, centers)
    noisy_l = assign(X, centers + 0.5)
    fig = plots.violins(df, "deals", true_l, noisy_l)
    assert [t.type for t in fig.data] == ["violin", "violin"]
    assert [t.side for t in fig.data] == ["negative", "positive"]
    assert [t.name for t in fig.data] == ["true labels", "noisy labels"]
    assert fig.layout.yaxis.title.text == "deals"
    assert fig.layout.violinmode == "overlay"
    assert list(fig.data[0].x[:1]) == [f"cluster {true_l[0]}"]
    with pytest.raises(ParameterError, match="not in the table"):
        plots.violins(df, "nope", true_l, noisy_l)


def test_elbow() -> None:
    fig = plots.elbow([1, 2, 3, 4], [100.0, 40.0, 20.0, 18.0], chosen_k=3)
    assert len(fig.data) == 1 and fig.data[0].mode == "lines+markers"
    assert fig.layout.xaxis.title.text == "K (number of clusters)"
    assert "non-private" in fig.layout.yaxis.title.text
    assert DIAGNOSTIC_TEXT in _annotations(fig)
    assert any(a.text == "K = 3" for a in fig.layout.annotations)
    with pytest.raises(ParameterError, match="equal length"):
        plots.elbow([1, 2], [1.0])


def test_released_centers_figure_bars_per_centre_without_diagnostic_stamp() -> None:
    from dpcore.plots.kmeans import released_centers_figure

    fractions = [[0.55, 0.0], [0.25, 0.5], [0.95, 1.0]]
    table = pd.DataFrame(
        {
            "cluster": [0, 1, 2],
            "a [fraction of data range]": [0.55, 0.25, 0.95],
            "b [fraction of data range]": [0.0, 0.5, 1.0],
        }
    )
    fig = released_centers_figure(table, ("a", "b"), "DP-Lloyd (SuLQ)", np.array(fractions))
    assert [t.type for t in fig.data] == ["bar"] * 3
    assert [t.name for t in fig.data] == ["centre 0", "centre 1", "centre 2"]
    assert list(fig.data[1].x) == ["a", "b"] and list(fig.data[1].y) == [0.25, 0.5]  # released values only
    assert fig.layout.title.text == "Released centroids (DP-Lloyd (SuLQ))"
    assert not [t for t in fig.data if t.type == "table"]  # the bars are the released values: no table
    assert fig.layout.barmode == "group"
    assert fig.layout.yaxis.title.text == "place within its bounds (0 = lower, 1 = upper)"
    assert DIAGNOSTIC_TEXT not in _annotations(fig)  # released values only: it may leave with the release
    with pytest.raises(ParameterError, match="do not name the features"):
        released_centers_figure(table, ("a", "c"), "DP-Lloyd (SuLQ)")
    plain = table.set_axis(["cluster", "a [scaled]", "b [scaled]"], axis=1)
    fig = released_centers_figure(plain, ("a", "b"), "DP-Lloyd (SuLQ)")  # no bounds: the values themselves
    assert list(fig.data[2].y) == [0.95, 1.0] and fig.layout.yaxis.title.text == "released value"


# ---------------------------------------------------------------- charts a stakeholder can read


GRID = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


def _class_sweep(values: dict[str, float], grid: tuple[float, ...] = GRID) -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(1)
    for mech, scale in values.items():
        for eps in grid:
            for trial in range(9):
                loss = scale / eps * (1 + 0.1 * rng.normal()) + 1e-6
                rows.append((mech, eps, trial, loss, 0.5 + 0.05 * rng.normal()))
    return pd.DataFrame(rows, columns=["mechanism", "epsilon", "trial", "fractional_loss", "ari"])


def test_loss_vs_eps_marks_dp_and_not_dp_mechanisms_in_the_legend() -> None:
    df = _class_sweep({"white": 1e-3, "colored": 1e-4, "dp_lloyd": 0.3, "blowfish": 0.5})
    fig = plots.loss_vs_eps(df)
    lines = {t.name: t for t in fig.data if t.mode == "lines+markers"}
    assert lines["DP-Lloyd (SuLQ)"].line.dash == "solid"
    assert lines["White Gaussian"].line.dash == lines["Colored Gaussian (optimal)"].line.dash == "dot"
    assert lines["Blowfish k-means"].line.dash == "dash"
    assert {t.legendgroup for t in lines.values()} == {"dp", "local", "blowfish"}
    titles = [t.legendgrouptitle.text for t in fig.data if t.legendgrouptitle.text]
    assert sorted(titles) == sorted(
        ["ε-DP", "Local, not DP (noise calibrated on this dataset)", "Blowfish (policy graph, not ε-DP)"]
    )
    # ε-DP first in the legend, then the weaker guarantees.
    assert next(t.legendgroup for t in fig.data if t.mode == "lines+markers") == "dp"


def test_loss_vs_eps_readable_log_ticks_and_linear_rand_index() -> None:
    df = _class_sweep({"white": 1e-5, "dp_lloyd": 1e-4})
    fig = plots.loss_vs_eps(df)
    assert fig.layout.xaxis.type == "log"
    assert list(fig.layout.xaxis.tickvals) == [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]
    assert list(fig.layout.xaxis.ticktext) == ["0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10"]
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.tickvals
    assert not any(s in t for t in fig.layout.yaxis.ticktext for s in ("µ", "u", "m", "k"))
    ari = plots.loss_vs_eps(df, "ari")
    assert ari.layout.yaxis.type == "linear"
    assert tuple(ari.layout.yaxis.range) == (0.0, 1.0)
    big = plots.elbow([1, 2, 3], [40_000.0, 20_000.0, 0.0003])
    assert big.layout.yaxis.exponentformat == "none" and big.layout.yaxis.separatethousands  # no "40k"


def test_loss_vs_eps_default_band_is_interquartile() -> None:
    df = _class_sweep({"dp_lloyd": 0.3})
    fig = plots.loss_vs_eps(df)
    band = fig.data[0]
    q75 = df.groupby("epsilon")["fractional_loss"].quantile(0.75).to_numpy()
    np.testing.assert_allclose(band.y[: q75.size], q75)
    assert "25–75%" in fig.layout.title.text


def test_embedding_ellipses_visible_above_markers_when_smaller_than_a_marker() -> None:
    X, centers = _blobs(5)
    covs = {"colored": [1e-8 * np.eye(4)] * 3, "white": [1e-7 * np.eye(4)] * 3}  # sd 1e-4 and 3.2e-4
    fig = plots.embedding(X, centers, centers + 0.01, covs)
    kinds = ["ellipse" if t.mode == "lines" else "marker" for t in fig.data[:-1]]
    assert kinds.index("ellipse") > max(i for i, k in enumerate(kinds) if k == "marker")  # drawn on top
    true2 = np.column_stack([fig.data[3].x, fig.data[3].y])
    span = max(np.ptp(np.r_[*[np.asarray(t.x, dtype=float) for t in fig.data[:4]]]), 1e-9)

    def first_radius(trace: go.Scatter) -> float:
        xy = np.column_stack([np.array(trace.x, dtype=float), np.array(trace.y, dtype=float)])
        first = xy[: np.flatnonzero(np.isnan(xy[:, 0]))[0]]
        return float(np.linalg.norm(first - true2[0], axis=1).max())

    colored, white = (next(t for t in fig.data if t.legendgroup == m) for m in ("colored", "white"))
    assert first_radius(colored) >= 0.03 * span  # larger than a marker
    assert first_radius(white) / first_radius(colored) == pytest.approx(np.sqrt(10), rel=1e-6)  # comparable
    for trace in (colored, white):
        assert trace.line.dash == "dot" and "true size 1σ semi-axes" in trace.text[0]
    assert fig.data[-1].name.startswith("dotted ellipses drawn ×")  # the legend says they are enlarged


def test_violins_not_clipped_and_never_below_zero_for_non_negative_columns() -> None:
    X, centers = _blobs(6)
    df = pd.DataFrame(np.abs(X), columns=["a", "b", "c", "deals"])
    fig = plots.violins(df, "deals", assign(X, centers), assign(X, centers + 0.5))
    assert all(t.spanmode == "hard" for t in fig.data)  # no density drawn beyond the data
    lo, hi = fig.layout.yaxis.range
    assert lo == 0.0 and hi >= df["deals"].max()


def test_released_centers_figure_also_in_original_units() -> None:
    from dpcore.plots.kmeans import released_centers_figure

    table = pd.DataFrame(
        {
            "cluster": [0, 1],
            "Income [original units]": [55_000.0, 25_000.0],
            "Dt_Customer [original units]": ["2013-01-02", "2014-05-06"],
        }
    )
    positions = np.array([[0.55, 0.1], [0.25, 0.6]])  # within the public bounds
    fig = released_centers_figure(table, ("Income", "Dt_Customer"), "DP-Lloyd (SuLQ)", positions)
    assert [list(t.y) for t in fig.data if t.type == "bar"] == positions.tolist()
    assert not [t for t in fig.data if t.type == "table"]  # the panel and the report show a real table
    assert [list(t.customdata) for t in fig.data] == [["55,000", "2013-01-02"], ["25,000", "2014-05-06"]]
    assert "released value %{customdata}" in fig.data[0].hovertemplate  # the published value on hover
    assert fig.layout.legend.orientation == "h"  # under the chart: readable at 800 px
    with pytest.raises(ParameterError, match="needs the centres' positions"):
        released_centers_figure(table, ("Income", "Dt_Customer"), "DP-Lloyd (SuLQ)")
    assert fig.layout.xaxis.automargin and fig.layout.xaxis.tickangle == -30
