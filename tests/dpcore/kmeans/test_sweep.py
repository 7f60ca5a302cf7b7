"""The comparison sweep and its diagnostics (dpcore.kmeans.sweep).

Releases are tested in tests/dpcore/kmeans/test_registry.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcore.errors import ParameterError
from dpcore.kmeans import (
    KMeansInputs,
    blowfish_gain,
    diagnostic_draw,
    local_unavailable,
    noise_covariance,
    release_centroids,
    sweep,
    true_clustering,
)
from dpcore.mechanisms import Sampler
from dpcore.policy import DistanceThresholdGraph

EPS = [0.1, 1.0, 10.0]
LOCAL = ["white", "white_per_cluster", "colored"]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Three anisotropic clusters of unequal size in [-4, 4]^3 (white noise pays for the widest one)."""
    rng = np.random.default_rng(0)
    parts, labels = [], []
    for k, (n, centre, scale) in enumerate(
        [
            (200, (-2, -2, 0), (1.0, 0.1, 0.1)),
            (80, (2, 2, 0), (0.1, 0.6, 0.1)),
            (120, (2, -2, 1), (0.2, 0.2, 0.2)),
        ]
    ):
        parts.append(np.asarray(centre) + rng.normal(size=(n, 3)) * np.asarray(scale))
        labels.append(np.full(n, k))
    X = np.clip(np.vstack(parts), -4, 4)
    return X, np.concatenate(labels), (np.full(3, -4.0), np.full(3, 4.0))


def test_sweep_tidy_and_complete(data: tuple) -> None:
    X, labels, bounds = data
    graph = DistanceThresholdGraph(1.0, "l1")
    mechs = [*LOCAL, "dp_lloyd", "blowfish"]
    calls: list[tuple[float, str]] = []
    df = sweep(
        X,
        labels,
        mechs,
        EPS,
        4,
        1e-5,
        bounds=bounds,
        graph=graph,
        random_state=1,
        progress=lambda f, m: calls.append((f, m)),
    )
    assert list(df.columns) == [
        "mechanism",
        "epsilon",
        "trial",
        "wcss",
        "fractional_loss",
        "centroid_mse",
        "nicv",
        "ari",
    ]
    assert len(df) == len(mechs) * len(EPS) * 4
    counts = df.groupby(["mechanism", "epsilon"]).size()
    assert (counts == 4).all() and len(counts) == len(mechs) * len(EPS)
    assert df["trial"].tolist()[:8] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert np.isfinite(df[["wcss", "fractional_loss", "centroid_mse", "nicv", "ari"]].to_numpy()).all()
    # NICV is WCSS / n on [-1, 1]^3: the box [-4, 4] shrinks distances by 4.
    np.testing.assert_allclose(df["nicv"], df["wcss"] / 16.0 / len(X), rtol=1e-9)
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert "nicv" not in sweep(X, labels, ["white"], EPS, 2, 1e-5, random_state=1).columns


def test_sweep_is_reproducible_with_a_seed(data: tuple) -> None:
    X, labels, bounds = data
    a = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, random_state=7)
    b = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, random_state=7)
    pd.testing.assert_frame_equal(a, b)
    c = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, random_state=8)
    assert not np.allclose(a["wcss"], c["wcss"])


def test_loss_decreases_with_eps_and_colored_beats_white(data: tuple) -> None:
    X, labels, bounds = data
    grid = [0.05, 0.5, 5.0, 50.0]
    df = sweep(X, labels, [*LOCAL, "dp_lloyd"], grid, 20, 1e-5, bounds=bounds, random_state=3)
    med = df.groupby(["mechanism", "epsilon"])[["fractional_loss", "centroid_mse", "ari"]].median()
    for m in LOCAL:
        loss = med.loc[m, "fractional_loss"].to_numpy()
        assert np.all(np.diff(loss) < 0), (m, loss)
        assert loss[-1] < 1e-3
        assert med.loc[m, "ari"].iloc[-1] > max(0.95, med.loc[m, "ari"].iloc[0])
    lloyd = med.loc["dp_lloyd", "fractional_loss"].to_numpy()
    assert lloyd[-1] < lloyd[0]
    # Colored noise has the smallest trace, so the smallest centroid MSE (E[MSE] = tr Sigma) at every eps.
    for eps in grid:
        assert med.loc[("colored", eps), "centroid_mse"] < med.loc[("white_per_cluster", eps), "centroid_mse"]
        assert med.loc[("white_per_cluster", eps), "centroid_mse"] < med.loc[("white", eps), "centroid_mse"]
    # Mean MSE over trials estimates tr(Sigma).
    cov = noise_covariance("colored", X, labels, 1.0, 1e-5)
    big = sweep(X, labels, ["colored"], [1.0], 400, 1e-5, random_state=4)
    assert big["centroid_mse"].mean() == pytest.approx(cov.trace, rel=0.15)


def test_noise_covariance_cached_and_rescaled(data: tuple) -> None:
    X, labels, _ = data
    a = noise_covariance("colored", X, labels, 1.0, 1e-5)
    b = noise_covariance("colored", X, labels, 2.0, 1e-5)
    assert a.bases is b.bases  # the shape was solved once
    assert b.trace == pytest.approx(a.trace * a.gamma / b.gamma)
    assert a.max_constraint(X, labels) <= 1.0 + 1e-9


def test_sweep_mcmc_runs(data: tuple) -> None:
    X, labels, bounds = data
    df = sweep(X, labels, ["dp_lloyd_mcmc"], [1.0], 1, bounds=bounds, random_state=2, mcmc_steps=200)
    assert df["mechanism"].tolist() == ["dp_lloyd_mcmc"] and np.isfinite(df["wcss"]).all()


def test_sweep_errors(data: tuple) -> None:
    X, labels, bounds = data
    with pytest.raises(ParameterError, match="Unknown kmeans mechanism"):
        sweep(X, labels, ["laplace"], EPS, 2)
    with pytest.raises(ParameterError, match="public bounds"):
        sweep(X, labels, ["dp_lloyd"], EPS, 2)
    with pytest.raises(ParameterError, match="policy graph"):
        sweep(X, labels, ["blowfish"], EPS, 2, bounds=bounds)
    with pytest.raises(ParameterError, match="eps grid"):
        sweep(X, labels, ["white"], [0.0, 1.0], 2)
    with pytest.raises(ParameterError, match="trials"):
        sweep(X, labels, ["white"], EPS, 0)
    with pytest.raises(ParameterError, match="delta"):
        sweep(X, labels, ["white"], EPS, 2, delta=1.5)
    with pytest.raises(ParameterError, match="at least one mechanism"):
        sweep(X, labels, [], EPS, 2)
    with pytest.raises(ParameterError, match="Gaussian calibration"):
        sweep(X, labels, ["white"], EPS, 2, calibration="exact")


def test_marketing_preprocessing() -> None:
    from dpcore.experiments.marketing import load_marketing

    d = load_marketing()
    assert d.X.shape == (2216, 28) and len(d.feature_names) == 28 and "ID" not in d.feature_names
    assert np.isfinite(d.X).all()
    np.testing.assert_allclose(d.X.mean(axis=0), 0.0, atol=1e-9)
    assert sorted(np.bincount(d.labels).tolist()) == sorted(np.bincount(d.labels, minlength=4).tolist())
    assert np.bincount(d.labels).sum() == 2216 and d.true_centers.shape == (4, 28)
    assert np.all(d.bounds[0] < d.bounds[1])


# ---------------------------------------------------------------- true clustering, draws, neighbours


def test_true_clustering_is_sklearn_kmeans_with_exact_means(data: tuple) -> None:
    from sklearn.cluster import KMeans

    import dpcore.kmeans

    X, _, _ = data
    labels, centers = dpcore.kmeans.true_clustering(X, 3, random_state=0, n_init=10)
    ref = KMeans(n_clusters=3, n_init=10, random_state=0).fit(X)
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_allclose(centers, np.stack([X[labels == j].mean(axis=0) for j in range(3)]))
    np.testing.assert_allclose(centers, ref.cluster_centers_, atol=1e-8)
    assert local_unavailable(labels) is None
    tiny = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0]])
    lab, cen = true_clustering(tiny, 2)  # a one-row cluster is allowed here ...
    assert sorted(np.bincount(lab).tolist()) == [1, 3] and cen.shape == (2, 2)
    message = local_unavailable(lab)  # ... but blocks the local mechanisms, with their own message
    assert message is not None and "has a single row" in message and "Choose a smaller K" in message
    with pytest.raises(ParameterError, match=message.split(":")[0]):
        noise_covariance("white", tiny, lab, 1.0, 1e-5)
    with pytest.raises(ParameterError, match="exceeds the number of rows"):
        true_clustering(tiny, 5)
    with pytest.raises(ParameterError, match="distinct clusters"):
        true_clustering(np.zeros((4, 2)), 2)


def test_diagnostic_draw_local_is_true_centres_plus_seeded_noise(data: tuple) -> None:
    X, labels, _ = data
    draw = diagnostic_draw("colored", X, labels, 0.5, delta=1e-5, random_state=3)
    cov = noise_covariance("colored", X, labels, 0.5, 1e-5)
    np.testing.assert_allclose(draw, cov.centers + cov.sample(Sampler.diagnostic(3)))
    np.testing.assert_array_equal(
        draw, diagnostic_draw("colored", X, labels, 0.5, delta=1e-5, random_state=3)
    )
    far = diagnostic_draw("colored", X, labels, 50.0, delta=1e-5, random_state=3)
    assert np.abs(far - cov.centers).max() < np.abs(draw - cov.centers).max()  # noise shrinks with eps


def test_diagnostic_draw_lloyd_family_is_one_batched_fit(data: tuple) -> None:
    from dpcore.kmeans.lloyd import DPLloydKMeans, noisy_lloyd_trials
    from dpcore.metrics import match_centers

    X, labels, bounds = data
    true_centers = np.stack([X[labels == j].mean(axis=0) for j in range(3)])
    for nb in ("unbounded", "bounded"):
        draw = diagnostic_draw("dp_lloyd", X, labels, 2.0, bounds=bounds, neighbours=nb, random_state=4)
        random_state = Sampler.diagnostic(4)
        est = DPLloydKMeans(3, 2.0, bounds=bounds, neighbours=nb, random_state=random_state)
        fit = noisy_lloyd_trials(est, X, [2.0], 1, random_state)[0, 0]
        np.testing.assert_array_equal(draw, match_centers(fit, true_centers))
    graph = DistanceThresholdGraph(1.0, "l1")
    blow = diagnostic_draw("blowfish", X, labels, 2.0, bounds=bounds, graph=graph, random_state=4)
    assert blow.shape == (3, 3) and np.all(np.abs(blow) <= 4)
    with pytest.raises(ParameterError, match="public bounds"):
        diagnostic_draw("dp_lloyd", X, labels, 1.0)


def test_neighbours_reach_dp_lloyd_in_sweep_and_release(data: tuple) -> None:
    X, labels, bounds = data
    inputs = KMeansInputs(X, None, *bounds)
    kw = {"epsilon": 1.0, "random_state": Sampler(seed=2)}
    unb = release_centroids("dp_lloyd", inputs, params={"n_clusters": 3}, **kw)
    bnd = release_centroids("dp_lloyd", inputs, params={"n_clusters": 3, "neighbours": "bounded"}, **kw)
    # unbounded: n is private, so a count query sets the rounds; bounded: n is public, no such query
    assert unb.details["budget_log"][0][0].startswith("row count")
    assert not any(q.startswith("row count") for q, _ in bnd.details["budget_log"])
    assert bnd.details["neighbours"] == "bounded" and unb.details["neighbours"] == "unbounded"
    assert sum(e for _, e in bnd.details["budget_log"]) == pytest.approx(1.0, abs=1e-12)
    frames = {
        nb: sweep(
            X, labels, ["dp_lloyd"], [0.5], trials=40, bounds=bounds, random_state=0, n_iter=3, neighbours=nb
        )
        for nb in ("unbounded", "bounded")
    }
    # bounded neighbours double both sensitivities: the same eps buys noisier centres
    assert frames["bounded"]["centroid_mse"].median() > frames["unbounded"]["centroid_mse"].median()
    with pytest.raises(ParameterError, match="Neighbour relation"):
        sweep(X, labels, ["dp_lloyd"], [1.0], trials=1, bounds=bounds, neighbours="replace")
    with pytest.raises(ParameterError, match="Neighbour relation"):
        release_centroids("dp_lloyd", inputs, params={"neighbours": "add"}, **kw)


def test_blowfish_gain_is_between_one_and_the_public_ceiling(data: tuple) -> None:
    from dpcore.kmeans.blowfish import sensitivity_gain_bound
    from dpcore.policy import FullDomainGraph, PartitionGraph

    X, _, bounds = data
    graph = PartitionGraph(0.5)
    ceiling = sensitivity_gain_bound(graph, *bounds)
    assert ceiling == pytest.approx(3 * 8.0 / (3 * 0.5))  # sum of widths / sum of min(w, width)
    assert sensitivity_gain_bound(FullDomainGraph(), *bounds) == pytest.approx(1.0)
    gains = blowfish_gain(X, 3, 1.0, bounds, graph, random_state=0)
    assert gains.ndim == 1 and gains.size >= 2
    assert np.all(gains >= 1.0 - 1e-12) and np.all(gains <= ceiling + 1e-9)
    np.testing.assert_allclose(blowfish_gain(X, 3, 1.0, bounds, FullDomainGraph(), random_state=0), 1.0)


def test_a_large_true_clustering_is_seeded_on_a_sample_and_converged_on_every_row() -> None:
    """Above seed_rows rows the k-means++ starts read a sample, then one Lloyd run uses every row: the
    result is a Lloyd fixed point of the whole table (each row at its nearest centre, each centre the mean
    of its rows) and as good as the full n_init = 10 fit."""
    from sklearn.cluster import KMeans

    from dpcore.kmeans.sweep import true_clustering

    rng = np.random.default_rng(4)
    centres = rng.uniform(-1, 1, (5, 3))
    X = np.clip(centres[rng.integers(0, 5, 6000)] + rng.normal(0, 0.15, (6000, 3)), -1, 1)
    labels, means = true_clustering(X, 5, seed_rows=800)
    nearest = ((X[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == labels).all()
    np.testing.assert_allclose(means, [X[labels == j].mean(0) for j in range(5)])
    wcss = ((X - means[labels]) ** 2).sum()
    full = KMeans(n_clusters=5, n_init=10, random_state=0).fit(X).inertia_
    assert wcss <= full * 1.01
