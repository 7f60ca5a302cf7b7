"""Plotly figures for k-means centroid release: pure functions, no Streamlit, testable without a browser.

Most of these charts read the true data (true centres, true labels, losses over many noisy trials), so
they are curator diagnostics: ``diagnostic=True`` (the default) stamps them "Diagnostic: uses raw data".

- :func:`loss_vs_eps`: the k-means trade-off chart: median and interquartile band over trials per
  mechanism against eps, ε-DP and not-DP mechanisms marked (line style, legend groups).
- :func:`embedding`: 2-D PCA or MDS of the data with true and noisy centres and each mechanism's noise
  ellipse P Sigma_k P' (an ellipse smaller than a marker is drawn enlarged, dotted, and says so).
- :func:`population_table_figure`: true vs noisy cluster populations.
- :func:`violins`: per-cluster distributions of a column, true vs noisy labels.
- :func:`elbow`: non-private WCSS against K.
- :func:`released_centers_figure`: the released centroids, each as its place within its clip bounds, the
  released value in the hover (release values only, no stamp); pages and reports show the released table
  beside it as a real table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, qualitative
from scipy.stats import chi2

from dpcore.errors import ParameterError
from dpcore.metrics import assign
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
)
from dpcore.registry import Metric
from dpcore.safe_text import plot_text

DIAGNOSTIC_TEXT = "Diagnostic: uses raw data (for the curator only, not a release)"
_PALETTE = qualitative.D3
WHITE, BLACK = "#ffffff", "#000000"
MIN_ELLIPSE_FRACTION = 0.04  # an ellipse's largest semi-axis is drawn at least this share of the plot span
MAX_ELLIPSE_FRACTION = 0.25  # enlarging stops before the largest ellipse passes this share of the span


def diagnostic_annotation(fig: go.Figure, text: str = DIAGNOSTIC_TEXT) -> go.Figure:
    """Stamp a figure as a raw-data diagnostic (top-left, above the plot area)."""
    fig.add_annotation(
        text=text,
        xref="paper",
        yref="paper",
        x=0.0,
        y=1.0,
        yshift=8,
        xanchor="left",
        yanchor="bottom",
        showarrow=False,
        font={"size": 11, "color": "#b22222"},
    )
    return fig


def mechanism_color(key: str, index: int = 0) -> str:
    """The colour a registered mechanism declares (``MechanismSpec.color``), else a palette colour by
    position."""
    from dpcore.kmeans import KMEANS

    color = KMEANS[key].color if key in KMEANS else None
    return color or _PALETTE[index % len(_PALETTE)]


def metric_of(name: str, keys: Sequence[str]) -> Metric:
    """The metric ``name`` as the mechanisms ``keys`` declare it; an undeclared column keeps its own name
    as its title (drawn, never left off)."""
    from dpcore.kmeans.registry import KMEANS, declared_metrics

    known = {m.name: m for m in declared_metrics(k for k in keys if k in KMEANS)}
    return known.get(name) or Metric(name, name)


def _rgba(color: str, alpha: float) -> str:
    r, g, b = hex_to_rgb(color)
    return f"rgba({r}, {g}, {b}, {alpha})"


def _label(key: str, labels: Mapping[str, str] | None) -> str:
    if labels and key in labels:
        return labels[key]
    from dpcore.kmeans import KMEANS

    return KMEANS[key].label if key in KMEANS else key


def privacy_class(key: str) -> PrivacyClass:
    """What a k-means mechanism guarantees (from its registry definition): ε-DP, Blowfish or local."""
    from dpcore.kmeans import KMEANS

    if key not in KMEANS:
        raise ParameterError(
            f"unknown mechanism {key!r}: pass privacy={{'{key}': 'dp' | 'blowfish' | 'geo' | 'local'}}."
        )
    return DEFINITION_CLASSES[KMEANS[key].definition]


def _finish(fig: go.Figure, title: str, diagnostic: bool) -> go.Figure:
    """Title, template and plain numbers; readable down to an 800 px window (``narrow_layout``)."""
    fig.update_layout(template="plotly_white")
    narrow_layout(fig, title, extra_top=20 if diagnostic else 0)
    plain_numbers(fig)
    return diagnostic_annotation(fig) if diagnostic else fig


# ---------------------------------------------------------------- loss vs eps


def loss_vs_eps(
    df: pd.DataFrame,
    metric: str = "fractional_loss",
    *,
    band: tuple[float, float] = (0.25, 0.75),
    labels: Mapping[str, str] | None = None,
    privacy: Mapping[str, PrivacyClass] | None = None,
    log_y: bool | None = None,
    diagnostic: bool = True,
    title: str | None = None,
) -> go.Figure:
    """The trade-off chart: median of ``metric`` over trials against eps, band between two quantiles.

    ``df`` is the tidy output of :func:`dpcore.kmeans.sweep.sweep` (columns mechanism, epsilon, trial,
    metric). Each mechanism's line style and legend group come from its privacy class (``privacy``
    overrides :func:`privacy_class`): solid for ε-DP, dashed for Blowfish, dotted for the local
    mechanisms, which are not DP. The eps axis is logarithmic with plain-number ticks; ``log_y=None``
    uses a log y axis when every plotted value is > 0 and the metric (as the mechanisms declare it,
    :func:`metric_of`) has an automatic scale; a "unit" metric (the adjusted Rand index) is linear up to 1.
    """
    missing = {"mechanism", "epsilon", metric} - set(df.columns)
    if missing:
        raise ParameterError(f"the sweep table lacks columns {sorted(missing)}; pass the output of sweep().")
    lo_q, hi_q = band
    if not 0.0 <= lo_q < hi_q <= 1.0:
        raise ParameterError(f"band must be two quantiles 0 <= lo < hi <= 1 (got {band}).")
    stats = (
        df.groupby(["mechanism", "epsilon"], sort=True)[metric]
        .agg(median="median", lo=lambda s: s.quantile(lo_q), hi=lambda s: s.quantile(hi_q))
        .reset_index()
    )
    keys = list(dict.fromkeys(df["mechanism"]))
    classes = {k: (privacy or {}).get(k) or privacy_class(k) for k in keys}
    band_name = f"{round(lo_q * 100)}–{round(hi_q * 100)}%"
    fig = go.Figure()
    for cls in class_order(classes.values()):
        for n_in_class, key in enumerate(k for k in keys if classes[k] == cls):
            i = keys.index(key)
            part = stats[stats["mechanism"] == key]
            eps = part["epsilon"].to_numpy()
            color = mechanism_color(key, i)
            name = _label(key, labels)
            fig.add_trace(
                go.Scatter(
                    x=np.concatenate([eps, eps[::-1]]),
                    y=np.concatenate([part["hi"].to_numpy(), part["lo"].to_numpy()[::-1]]),
                    mode="lines",
                    fill="toself",
                    fillcolor=_rgba(color, 0.15),
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=cls,
                    name=f"{name} {band_name}",
                )
            )
            fig.add_trace(
                line_trace(
                    eps,
                    part["median"].to_numpy(),
                    name=name,
                    color=color,
                    privacy=cls,
                    first_of_class=n_in_class == 0,
                    customdata=part[["lo", "hi"]].to_numpy(),
                    hovertemplate=(
                        f"<b>{name}</b> ({PRIVACY_CLASSES[cls].title})<br>ε = %{{x:.3g}}<br>"
                        f"median = %{{y:.4g}}<br>{band_name} = "
                        "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>"
                    ),
                )
            )
    values = stats[["median", "lo", "hi"]].to_numpy()
    declared = metric_of(metric, keys)
    y_title = declared.title
    if declared.scale == "unit":
        low = float(np.nanmin(values)) if values.size else 0.0
        yaxis = {"type": "linear", "range": [min(0.0, low), 1.0], "automargin": True}
    else:
        log = declared.scale == "auto" and bool((values > 0).all()) if log_y is None else log_y
        yaxis = value_axis(values.ravel(), log=log)
    fig.update_xaxes(**eps_axis(stats["epsilon"]))
    fig.update_yaxes(**yaxis, title={"text": y_title})
    fig.update_layout(legend={"groupclick": "toggleitem", "title": {"text": LINE_NOTE, "side": "top"}})
    band_text = f"median, shaded {band_name} over trials"
    return _finish(fig, title or f"{y_title} vs ε ({band_text})", diagnostic)


# ---------------------------------------------------------------- embedding with noise ellipses


def project_covariance(cov: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """2 x 2 covariance A' Sigma A of the projected noise, for a linear map A (d x 2)."""
    return projection.T @ np.asarray(cov, dtype=float) @ projection


def ellipse_points(center: np.ndarray, cov2: np.ndarray, radius: float = 1.0, n: int = 73) -> np.ndarray:
    """Closed curve (n, 2) of {center + radius * S^(1/2) u : ||u|| = 1} for a 2 x 2 covariance S."""
    vals, vecs = np.linalg.eigh((cov2 + cov2.T) / 2.0)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    t = np.linspace(0.0, 2.0 * np.pi, n)
    return np.asarray(center, dtype=float) + radius * (np.stack([np.cos(t), np.sin(t)], axis=1) @ root.T)


def _embed(
    X: np.ndarray, extra: np.ndarray, method: str, random_state: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """2-D coordinates of X and of extra points, and the linear map A (d x 2) used for ellipses."""
    mean = X.mean(axis=0)
    if method == "pca":
        _, _, vt = np.linalg.svd(X - mean, full_matrices=False)
        proj = vt[:2].T
        if proj.shape[1] < 2:
            proj = np.pad(proj, ((0, 0), (0, 2 - proj.shape[1])))
        return (X - mean) @ proj, (extra - mean) @ proj, proj, "PC"
    if method == "mds":
        from sklearn.manifold import MDS

        both = np.vstack([X, extra])
        coords = MDS(
            n_components=2, init="classical_mds", max_iter=100, random_state=random_state
        ).fit_transform(both)
        coords = coords - coords.mean(axis=0)
        # Ellipses need a linear map: least-squares fit of the MDS coordinates on the centred data.
        proj, *_ = np.linalg.lstsq(both - both.mean(axis=0), coords, rcond=None)
        return coords[: len(X)], coords[len(X) :], proj, "MDS"
    raise ParameterError(f"unknown embedding method {method!r}; use 'pca' or 'mds'.")


def embedding(
    X: np.ndarray,
    true_centers: np.ndarray,
    noisy_centers: np.ndarray | None = None,
    covariances: Mapping[str, Sequence[np.ndarray] | np.ndarray] | None = None,
    *,
    method: Literal["pca", "mds"] = "pca",
    labels: np.ndarray | None = None,
    noisy_name: str = "noisy centres",
    level: Literal["1sigma", "95%"] = "1sigma",
    max_points: int | None = None,
    mechanism_labels: Mapping[str, str] | None = None,
    random_state: int = 0,
    diagnostic: bool = True,
) -> go.Figure:
    """2-D embedding of the data (sampled), true centres, noisy centres and noise ellipses per mechanism.

    Each ellipse is the projection A' Sigma_k A of centre k's noise covariance, drawn around the true
    centre: ``level="1sigma"`` is the 1-standard-deviation contour, ``"95%"`` contains the projected
    noise with probability 0.95 (radius sqrt(chi2_2(0.95)) = 2.448). With PCA, A has orthonormal
    columns, so white noise draws a circle. MDS is non-linear; its ellipses use the least-squares
    linear map from the data to the MDS coordinates (an approximation, said in the axis titles).
    Ellipses are drawn last (above every marker). When some mechanism's ellipses are all smaller than
    ``MIN_ELLIPSE_FRACTION`` of the plot span (hidden under a marker), every ellipse is scaled by one
    common factor (their sizes stay comparable; at most until the largest reaches
    ``MAX_ELLIPSE_FRACTION``), drawn dotted, and a legend entry gives the factor; any still below the
    minimum is drawn at the minimum. The hover text gives each ellipse's true semi-axes and its factor.
    """
    data = np.asarray(X, dtype=float)
    true_c = np.asarray(true_centers, dtype=float)
    if data.ndim != 2 or true_c.ndim != 2 or true_c.shape[1] != data.shape[1]:
        raise ParameterError("X must be (n, d) and true_centers (K, d) with the same d.")
    k = true_c.shape[0]
    point_labels = assign(data, true_c) if labels is None else np.asarray(labels)
    cap = max_points if max_points is not None else (2000 if method == "pca" else 400)
    rng = np.random.default_rng(random_state)
    keep = (
        np.sort(rng.choice(len(data), size=cap, replace=False)) if len(data) > cap else np.arange(len(data))
    )
    noisy_c = (
        None if noisy_centers is None else np.asarray(noisy_centers, dtype=float).reshape(-1, data.shape[1])
    )
    extra = true_c if noisy_c is None else np.vstack([true_c, noisy_c])
    pts, extra2, proj, axis_name = _embed(data[keep], extra, method, random_state)
    true2, noisy2 = extra2[:k], extra2[k:]

    fig = go.Figure()
    for j in range(k):
        sel = point_labels[keep] == j
        fig.add_trace(
            go.Scatter(
                x=pts[sel, 0],
                y=pts[sel, 1],
                mode="markers",
                name=f"cluster {j} (true labels)",
                marker={"size": 4, "opacity": 0.35, "color": _PALETTE[j % len(_PALETTE)]},
                customdata=keep[sel],
                hovertemplate=f"row %{{customdata}}<br>true cluster {j}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=true2[:, 0],
            y=true2[:, 1],
            mode="markers",
            name="true centres",
            marker={"symbol": "x", "size": 13, "color": "black", "line": {"width": 1}},
            text=[f"true centre {j}" for j in range(k)],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    if noisy_c is not None:
        fig.add_trace(
            go.Scatter(
                x=noisy2[:, 0],
                y=noisy2[:, 1],
                mode="markers",
                name=noisy_name,
                marker={
                    "symbol": "diamond",
                    "size": 12,
                    "color": WHITE,
                    "line": {"width": 2, "color": BLACK},
                },
                text=[f"{noisy_name}: centre {j}" for j in range(len(noisy2))],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    radius = 1.0 if level == "1sigma" else float(np.sqrt(chi2.ppf(0.95, 2)))
    level_text = "1σ" if level == "1sigma" else "95%"
    shown = np.vstack([pts, extra2])
    span = max(float(np.ptp(shown[:, 0])), float(np.ptp(shown[:, 1])), 1e-12)
    floor = MIN_ELLIPSE_FRACTION * span
    projected: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for key, blocks in (covariances or {}).items():
        mats = np.asarray(blocks, dtype=float)
        if mats.shape != (k, data.shape[1], data.shape[1]):
            raise ParameterError(f"covariances[{key!r}] must be K = {k} blocks of shape d x d.")
        covs2 = [project_covariance(mats[j], proj) for j in range(k)]
        axes = [radius * np.sqrt(np.clip(np.linalg.eigvalsh((c + c.T) / 2.0), 0.0, None)) for c in covs2]
        projected[key] = list(zip(covs2, axes, strict=True))
    factor = 1.0
    if projected:
        smallest = min(max(float(a.max()) for _, a in pairs) for pairs in projected.values())
        largest = max(float(a.max()) for pairs in projected.values() for _, a in pairs)
        if smallest < floor:  # one factor for every ellipse keeps their sizes comparable
            factor = min(floor / max(smallest, 1e-300), max(1.0, MAX_ELLIPSE_FRACTION * span / largest))
    for i, (key, pairs) in enumerate(projected.items()):
        name = _label(key, mechanism_labels)
        xs: list[float | None] = []
        ys: list[float | None] = []
        texts: list[str] = []
        for j, (cov2, axes) in enumerate(pairs):
            drawn = max(factor, floor / max(float(axes.max()), 1e-300))
            curve = ellipse_points(true2[j], cov2, radius * drawn)
            note = f"centre {j}: true size {level_text} semi-axes {axes[1]:.3g} × {axes[0]:.3g}"
            if drawn > 1.0:
                note += f", drawn ×{drawn:.3g}"
            xs += [*curve[:, 0], None]
            ys += [*curve[:, 1], None]
            texts += [note] * (len(curve) + 1)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=f"{name}: {level_text} noise",
                legendgroup=key,
                line={
                    "color": mechanism_color(key, i),
                    "width": 2.5,
                    "dash": "dot" if factor > 1.0 else "solid",
                },
                text=texts,
                hovertemplate=f"{name}: %{{text}}<extra></extra>",
            )
        )
    if factor > 1.0:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                name=f"dotted ellipses drawn ×{factor:.3g}: smaller than a marker at true size",
                line={"color": "#7f7f7f", "dash": "dot"},
                hoverinfo="skip",
            )
        )
    approx = " (linear fit)" if method == "mds" else ""
    fig.update_xaxes(title={"text": f"{axis_name} 1{approx}"})
    fig.update_yaxes(title={"text": f"{axis_name} 2{approx}"}, scaleanchor="x", scaleratio=1)
    method_name = "PCA" if method == "pca" else "MDS"
    title = f"{method_name} embedding: true and noisy centres, {level_text} noise ellipses"
    return _finish(fig, title, diagnostic)


# ---------------------------------------------------------------- populations, violins, elbow


def population_table_figure(
    table: pd.DataFrame, *, kind: Literal["bar", "table"] = "bar", diagnostic: bool = True
) -> go.Figure:
    """True vs noisy populations from :func:`dpcore.metrics.population_table` (Ravi et al. 2021 Table 1)."""
    if not {"true", "noisy"} <= set(table.columns):
        raise ParameterError("pass the output of dpcore.metrics.population_table (columns true, noisy).")
    clusters = [str(c) for c in table.index]
    if kind == "table":
        header = ["Cluster", *clusters]
        cells = [
            ["True", "Noisy"],
            *[[int(t), int(n)] for t, n in zip(table["true"], table["noisy"], strict=True)],
        ]
        fig = go.Figure(go.Table(header={"values": header}, cells={"values": cells}))
    elif kind == "bar":
        fig = go.Figure()
        for col, name, color in (("true", "true labels", "#7f7f7f"), ("noisy", "noisy labels", "#d62728")):
            fig.add_trace(
                go.Bar(
                    x=clusters,
                    y=table[col],
                    name=name,
                    marker_color=color,
                    hovertemplate=f"cluster %{{x}}<br>{name}: %{{y}} rows<extra></extra>",
                )
            )
        fig.update_layout(barmode="group")
        fig.update_xaxes(title={"text": "cluster"}, type="category")
        fig.update_yaxes(title={"text": "rows (nearest centre)"})
    else:
        raise ParameterError(f"unknown kind {kind!r}; use 'bar' or 'table'.")
    return _finish(fig, "Cluster populations: true vs noisy centres", diagnostic)


def violins(
    df: pd.DataFrame,
    column: str,
    true_labels: np.ndarray,
    noisy_labels: np.ndarray,
    *,
    noisy_name: str = "noisy labels",
    diagnostic: bool = True,
) -> go.Figure:
    """Split violins of ``column`` per cluster: true labels left, noisy labels right.

    The density is drawn only over the observed range (``spanmode="hard"``), so a column that is never
    negative never shows below 0; the y range covers every value with a small margin (no clipping).
    """
    if column not in df.columns:
        raise ParameterError(f"column {column!r} is not in the table; pick one of {list(df.columns)[:10]}...")
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    t_lab = np.asarray(true_labels)
    n_lab = np.asarray(noisy_labels)
    if not (len(values) == len(t_lab) == len(n_lab)):
        raise ParameterError("the table and both label arrays must have one entry per row.")
    fig = go.Figure()
    for lab, name, side, color in (
        (t_lab, "true labels", "negative", "#7f7f7f"),
        (n_lab, noisy_name, "positive", "#d62728"),
    ):
        fig.add_trace(
            go.Violin(
                x=[f"cluster {v}" for v in lab],
                y=values,
                name=name,
                side=side,
                line_color=color,
                legendgroup=name,
                scalegroup=name,
                spanmode="hard",
                meanline_visible=True,
                points=False,
            )
        )
    order = [f"cluster {v}" for v in np.unique(np.concatenate([t_lab, n_lab]))]
    fig.update_layout(violinmode="overlay", violingap=0)
    fig.update_xaxes(
        title={"text": "cluster"}, categoryorder="array", categoryarray=order, tickangle=0, automargin=True
    )
    finite = values[np.isfinite(values)]
    yaxis: dict = {"title": {"text": plot_text(column)}, "automargin": True}
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        pad = 0.04 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.04
        yaxis["range"] = [0.0 if lo >= 0 else lo - pad, hi + pad]
    fig.update_yaxes(**yaxis)
    return _finish(fig, f"{plot_text(column)} per cluster: true vs noisy labels", diagnostic)


def elbow(
    ks: Sequence[int], wcss: Sequence[float], *, chosen_k: int | None = None, diagnostic: bool = True
) -> go.Figure:
    """Non-private WCSS against K (the elbow method; Ravi et al. 2021 picks K = 4 this way)."""
    if len(ks) != len(wcss) or len(ks) == 0:
        raise ParameterError("ks and wcss must be non-empty and of equal length.")
    fig = go.Figure(
        go.Scatter(
            x=list(ks),
            y=list(wcss),
            mode="lines+markers",
            name="WCSS (non-private k-means)",
            hovertemplate="K = %{x}<br>WCSS = %{y:.4g}<extra></extra>",
        )
    )
    if chosen_k is not None:
        fig.add_vline(x=chosen_k, line_dash="dash", line_color="#d62728", annotation_text=f"K = {chosen_k}")
    fig.update_xaxes(title={"text": "K (number of clusters)"}, dtick=1)
    fig.update_yaxes(title={"text": "WCSS (non-private)"})
    return _finish(fig, "Elbow: WCSS vs K (non-private diagnostic, costs no budget)", diagnostic)


def released_centers_figure(
    table: pd.DataFrame, features: Sequence[str], mechanism: str, positions: np.ndarray | None = None
) -> go.Figure:
    """Released centroids: grouped bars per feature, each bar's released value (with its units) on hover.

    ``table`` is a release's centroid table (``dpcore.kmeans.registry.centroid_table``): 'cluster', then
    one column per feature in the units that release publishes. ``positions`` (K, d) are the centres'
    places within their clip bounds (0 = lower, 1 = upper; ``box_position``), drawn as the bars so that
    features of any units share one axis; without bounds the bars are the table's values. The released
    values themselves are a table, shown beside the chart (``st.dataframe`` in the release panel, an HTML
    table in the report): a Plotly table clipped them. The figure reads released values and public bounds
    only, so it carries no diagnostic stamp and may leave with the release.
    """
    columns = [c for c in table.columns if c != "cluster"]
    if len(columns) != len(features) or not all(
        str(c).startswith(f"{f} [") for c, f in zip(columns, features, strict=True)
    ):
        raise ParameterError(
            f"the release table's columns {columns} do not name the features {list(features)} in order; "
            "build it with centroid_table."
        )
    published = table[columns]
    numeric = all(pd.api.types.is_numeric_dtype(t) for t in published.dtypes)
    if positions is None:
        if not numeric:
            raise ParameterError("a release table with dates or categories needs the centres' positions.")
        values, axis = published.to_numpy(dtype=float), "released value"
    else:
        values, axis = np.asarray(positions, dtype=float), "place within its bounds (0 = lower, 1 = upper)"
    fig = go.Figure()
    for i, row in enumerate(values):
        shown = [plot_text(_plain(v)) for v in published.iloc[i]]
        fig.add_trace(
            go.Bar(
                x=[plot_text(f) for f in features],
                y=row,
                name=f"centre {i}",
                customdata=shown,
                hovertemplate=f"centre {i}, %{{x}}: released value %{{customdata}}<extra></extra>",
            )
        )
    fig.update_layout(barmode="group", height=450)
    fig.update_xaxes(tickangle=-30, automargin=True)
    fig.update_yaxes(title={"text": axis}, automargin=True)
    return _finish(fig, f"Released centroids ({plot_text(mechanism)})", diagnostic=False)


def _plain(value: object) -> str:
    """A table cell: numbers with thousands separators and 4 significant digits, text as it is."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        number = float(value)
        return f"{number:,.0f}" if abs(number) >= 1000 else f"{number:.4g}"
    return str(value)
