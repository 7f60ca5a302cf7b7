"""Mechanism sweep and single release (dpcore.kmeans.sweep)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcore.errors import ParameterError
from dpcore.kmeans.sweep import MECHANISMS, CentroidRelease, noise_shape, release, sweep
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


def test_registry() -> None:
    assert set(MECHANISMS) == {
        "white",
        "white_per_cluster",
        "colored",
        "dp_lloyd",
        "blowfish",
        "dp_lloyd_mcmc",
    }
    for key, info in MECHANISMS.items():
        assert info.key == key
        assert info.is_local == (key in LOCAL)
        assert info.needs_delta == info.is_local
        assert info.needs_bounds == (not info.is_local)
        assert info.uses_graph == (key == "blowfish")
        assert "neighbour" in info.guarantee
        if info.is_local:
            assert "not differential privacy" in info.guarantee


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
        seed=1,
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
    assert "nicv" not in sweep(X, labels, ["white"], EPS, 2, 1e-5, seed=1).columns


def test_sweep_is_reproducible_with_a_seed(data: tuple) -> None:
    X, labels, bounds = data
    a = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, seed=7)
    b = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, seed=7)
    pd.testing.assert_frame_equal(a, b)
    c = sweep(X, labels, ["colored", "dp_lloyd"], EPS, 3, 1e-5, bounds=bounds, seed=8)
    assert not np.allclose(a["wcss"], c["wcss"])


def test_loss_decreases_with_eps_and_colored_beats_white(data: tuple) -> None:
    X, labels, bounds = data
    grid = [0.05, 0.5, 5.0, 50.0]
    df = sweep(X, labels, [*LOCAL, "dp_lloyd"], grid, 20, 1e-5, bounds=bounds, seed=3)
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
    cov = noise_shape("colored", X, labels, 1.0, 1e-5)
    big = sweep(X, labels, ["colored"], [1.0], 400, 1e-5, seed=4)
    assert big["centroid_mse"].mean() == pytest.approx(cov.trace, rel=0.15)


def test_noise_shape_cached_and_rescaled(data: tuple) -> None:
    X, labels, _ = data
    a = noise_shape("colored", X, labels, 1.0, 1e-5)
    b = noise_shape("colored", X, labels, 2.0, 1e-5)
    assert a.bases is b.bases  # the shape was solved once
    assert b.trace == pytest.approx(a.trace * a.gamma / b.gamma)
    assert a.max_constraint(X, labels) <= 1.0 + 1e-9


def test_sweep_mcmc_runs(data: tuple) -> None:
    X, labels, bounds = data
    df = sweep(X, labels, ["dp_lloyd_mcmc"], [1.0], 1, bounds=bounds, seed=2, mcmc_steps=200)
    assert df["mechanism"].tolist() == ["dp_lloyd_mcmc"] and np.isfinite(df["wcss"]).all()


def test_sweep_errors(data: tuple) -> None:
    X, labels, bounds = data
    with pytest.raises(ParameterError, match="unknown mechanism"):
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


def test_release_local_modes_and_reproducibility(data: tuple) -> None:
    X, labels, _ = data
    a = release("colored", X, labels, epsilon=1.0, delta=1e-5, sampler=Sampler(seed=11))
    b = release("colored", X, labels, epsilon=1.0, delta=1e-5, sampler=Sampler(seed=11))
    assert isinstance(a, CentroidRelease)
    assert a.sampling_mode == "demo" and a.is_local and a.mechanism == "colored"
    assert a.epsilon == 1.0 and a.delta == 1e-5 and a.calibration == "analytic"
    assert "not differential privacy" in a.guarantee
    np.testing.assert_array_equal(a.centers, b.centers)
    true_c = a.diagnostics["true_centers"]
    assert a.centers.shape == true_c.shape == (3, 3)
    assert not np.allclose(a.centers, true_c)
    assert "true_centers" not in a.details  # details are for the manifest; diagnostics never leave
    c = release("white", X, labels, epsilon=1.0, delta=1e-5, sampler=Sampler(seed=12))
    assert not np.allclose(a.centers, c.centers)
    secure = release("white", X, labels, epsilon=1.0, delta=1e-5)
    assert secure.sampling_mode == "secure"
    with pytest.raises(ParameterError, match="diagnostic"):
        release("white", X, labels, epsilon=1.0, delta=1e-5, sampler=Sampler.diagnostic(0))
    with pytest.raises(ParameterError, match="delta"):
        release("colored", X, labels, epsilon=1.0, sampler=Sampler(seed=1))


def test_release_dp_lloyd_and_blowfish(data: tuple) -> None:
    X, labels, bounds = data
    a = release("dp_lloyd", X, n_clusters=3, epsilon=2.0, bounds=bounds, sampler=Sampler(seed=5))
    b = release("dp_lloyd", X, n_clusters=3, epsilon=2.0, bounds=bounds, sampler=Sampler(seed=5))
    np.testing.assert_array_equal(a.centers, b.centers)
    assert a.sampling_mode == "demo" and not a.is_local and a.delta == 0.0
    assert a.details["budget_spent"] == 2.0
    assert sum(e for _, e in a.details["budget_log"]) == pytest.approx(2.0, abs=1e-12)
    assert np.all((a.centers >= -4) & (a.centers <= 4))
    g = release(
        "blowfish",
        X,
        labels,
        epsilon=2.0,
        bounds=bounds,
        graph=DistanceThresholdGraph(1.0, "l1"),
        sampler=Sampler(seed=5),
    )
    assert g.details["n_clusters"] == 3 and "graph" in g.details
    assert "Blowfish" in g.guarantee or "blowfish" in g.guarantee.lower()
    with pytest.raises(ParameterError, match="n_clusters"):
        release("dp_lloyd", X, epsilon=1.0, bounds=bounds, sampler=Sampler(seed=1))


def test_marketing_preprocessing() -> None:
    from dpcore.experiments.marketing import load_marketing

    d = load_marketing()
    assert d.X.shape == (2216, 28) and len(d.feature_names) == 28 and "ID" not in d.feature_names
    assert np.isfinite(d.X).all()
    np.testing.assert_allclose(d.X.mean(axis=0), 0.0, atol=1e-9)
    assert sorted(np.bincount(d.labels).tolist()) == sorted(np.bincount(d.labels, minlength=4).tolist())
    assert np.bincount(d.labels).sum() == 2216 and d.true_centers.shape == (4, 28)
    assert np.all(d.bounds[0] < d.bounds[1])
