"""Plotly figures for k-means centroid release: pure functions, no Streamlit, testable without a browser.

Most of these charts read the true data (true centres, true labels, losses over many noisy trials), so
they are curator diagnostics: ``diagnostic=True`` (the default) stamps them "Diagnostic: uses raw data".

- :func:`loss_vs_eps`: median and quantile band over trials per mechanism (seed 000 Fig. 2).
- :func:`embedding`: 2-D PCA or MDS of the data with true and noisy centres and each mechanism's noise
  ellipse P Sigma_k P' (seed 000 Fig. 1a).
- :func:`population_table_figure`: true vs noisy cluster populations (seed 000 Table 1).
- :func:`violins`: per-cluster distributions of a column, true vs noisy labels (seed 000 Fig. 3).
- :func:`elbow`: non-private WCSS against K.
- :func:`released_centers_figure`: the released centroids (release values only, no stamp).
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

DIAGNOSTIC_TEXT = "Diagnostic: uses raw data (for the curator only, not a release)"
MECHANISM_COLORS: dict[str, str] = {
    "white": "#1f77b4",
    "white_per_cluster": "#17becf",
    "colored": "#d62728",
    "dp_lloyd": "#2ca02c",
    "blowfish": "#9467bd",
    "dp_lloyd_mcmc": "#ff7f0e",
}
METRIC_TITLES: dict[str, str] = {
    "fractional_loss": "Fractional clustering loss (WCSS − WCSS_true) / WCSS_true",
    "wcss": "WCSS of the released centres",
    "centroid_mse": "Centroid MSE (sum of squared errors)",
    "nicv": "NICV (WCSS / n on [-1, 1]^d)",
    "ari": "Adjusted Rand index vs true labels",
}
_PALETTE = qualitative.D3


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
    """Fixed colour for a known mechanism key, else a palette colour by position."""
    return MECHANISM_COLORS.get(key, _PALETTE[index % len(_PALETTE)])


def _rgba(color: str, alpha: float) -> str:
    r, g, b = hex_to_rgb(color)
    return f"rgba({r}, {g}, {b}, {alpha})"


def _label(key: str, labels: Mapping[str, str] | None) -> str:
    if labels and key in labels:
        return labels[key]
    from dpcore.kmeans.sweep import MECHANISMS

    return MECHANISMS[key].label if key in MECHANISMS else key


def _finish(fig: go.Figure, title: str, diagnostic: bool) -> go.Figure:
    fig.update_layout(title={"text": title}, template="plotly_white", margin={"t": 80})
    return diagnostic_annotation(fig) if diagnostic else fig


# ---------------------------------------------------------------- loss vs eps


def loss_vs_eps(
    df: pd.DataFrame,
    metric: str = "fractional_loss",
    *,
    band: tuple[float, float] = (0.1, 0.9),
    labels: Mapping[str, str] | None = None,
    log_y: bool | None = None,
    diagnostic: bool = True,
    title: str | None = None,
) -> go.Figure:
    """Median of ``metric`` over trials against eps (log x), one colour per mechanism, quantile band.

    ``df`` is the tidy output of :func:`dpcore.kmeans.sweep.sweep` (columns mechanism, epsilon, trial,
    metric). ``log_y=None`` uses a log y axis when every plotted value is > 0.
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
    fig = go.Figure()
    for i, key in enumerate(dict.fromkeys(df["mechanism"])):
        part = stats[stats["mechanism"] == key]
        eps = part["epsilon"].to_numpy()
        color = mechanism_color(key, i)
        name = _label(key, labels)
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([eps, eps[::-1]]),
                y=np.concatenate([part["hi"].to_numpy(), part["lo"].to_numpy()[::-1]]),
                fill="toself",
                fillcolor=_rgba(color, 0.18),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=key,
                name=f"{name} {int(lo_q * 100)}–{int(hi_q * 100)}%",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=eps,
                y=part["median"],
                mode="lines+markers",
                name=name,
                legendgroup=key,
                line={"color": color},
                customdata=part[["lo", "hi"]].to_numpy(),
                hovertemplate=(
                    f"<b>{name}</b><br>ε = %{{x:.3g}}<br>median = %{{y:.4g}}<br>"
                    f"{int(lo_q * 100)}–{int(hi_q * 100)}% = [%{{customdata[0]:.4g}}, %{{customdata[1]:.4g}}]"
                    "<extra></extra>"
                ),
            )
        )
    if log_y is None:
        log_y = bool((stats[["median", "lo", "hi"]].to_numpy() > 0).all())
    fig.update_xaxes(type="log", title={"text": "ε (privacy parameter)"})
    fig.update_yaxes(type="log" if log_y else "linear", title={"text": METRIC_TITLES.get(metric, metric)})
    band_text = f"median, shaded {int(lo_q * 100)}–{int(hi_q * 100)}% over trials"
    return _finish(fig, title or f"{METRIC_TITLES.get(metric, metric)} vs ε ({band_text})", diagnostic)


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
                    "color": "white",
                    "line": {"width": 2, "color": "black"},
                },
                text=[f"{noisy_name}: centre {j}" for j in range(len(noisy2))],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    radius = 1.0 if level == "1sigma" else float(np.sqrt(chi2.ppf(0.95, 2)))
    level_text = "1σ" if level == "1sigma" else "95%"
    for i, (key, blocks) in enumerate((covariances or {}).items()):
        mats = np.asarray(blocks, dtype=float)
        if mats.shape != (k, data.shape[1], data.shape[1]):
            raise ParameterError(f"covariances[{key!r}] must be K = {k} blocks of shape d x d.")
        xs: list[float | None] = []
        ys: list[float | None] = []
        for j in range(k):
            curve = ellipse_points(true2[j], project_covariance(mats[j], proj), radius)
            xs += [*curve[:, 0], None]
            ys += [*curve[:, 1], None]
        name = _label(key, mechanism_labels)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=f"{name}: {level_text} noise",
                legendgroup=key,
                line={"color": mechanism_color(key, i), "width": 2},
                hovertemplate=f"{name}: {level_text} noise ellipse<extra></extra>",
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
    """True vs noisy populations from :func:`dpcore.metrics.population_table` (seed 000 Table 1)."""
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
    """Split violins of ``column`` per cluster: true labels left, noisy labels right (seed 000 Fig. 3)."""
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
                meanline_visible=True,
                points=False,
            )
        )
    order = [f"cluster {v}" for v in np.unique(np.concatenate([t_lab, n_lab]))]
    fig.update_layout(violinmode="overlay", violingap=0)
    fig.update_xaxes(title={"text": "cluster"}, categoryorder="array", categoryarray=order)
    fig.update_yaxes(title={"text": column})
    return _finish(fig, f"{column} per cluster: true vs noisy labels", diagnostic)


def elbow(
    ks: Sequence[int], wcss: Sequence[float], *, chosen_k: int | None = None, diagnostic: bool = True
) -> go.Figure:
    """Non-private WCSS against K (the elbow method; seed 000 picks K = 4 this way)."""
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


def released_centers_figure(table: pd.DataFrame, features: Sequence[str], mechanism: str) -> go.Figure:
    """Grouped bars of released centroids in the scaled space, one trace per centre ('centre i').

    ``table`` has one row per centre and columns '<feature> [scaled]' (the release table); the figure
    reads released values only, so it carries no diagnostic stamp and may leave with the release.
    """
    columns = [f"{f} [scaled]" for f in features]
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ParameterError(f"the release table lacks the columns {missing}; build it with one per feature.")
    values = table[columns].to_numpy(dtype=float)
    fig = go.Figure([go.Bar(x=list(features), y=row, name=f"centre {i}") for i, row in enumerate(values)])
    fig.update_layout(barmode="group")
    fig.update_xaxes(title={"text": "feature"})
    fig.update_yaxes(title={"text": "released value (scaled)"})
    return _finish(fig, f"Released centroids ({mechanism}), scaled feature space", diagnostic=False)
