"""Estimators releasing noisy centroids under local (eps, delta)-PDP (Ravi, Scaglione & Peisert 2021)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

from dpcore.errors import ParameterError
from dpcore.kmeans import ColoredNoiseKMeans, RankDeficientWarning, WhiteNoiseKMeans, WhitePerClusterKMeans
from dpcore.kmeans.covariance import GUARANTEE

ESTIMATORS = (ColoredNoiseKMeans, WhiteNoiseKMeans, WhitePerClusterKMeans)
KINDS = {
    ColoredNoiseKMeans: "trace_optimal",
    WhiteNoiseKMeans: "isotropic",
    WhitePerClusterKMeans: "isotropic_per_cluster",
}


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    X, _ = make_blobs(n_samples=600, n_features=3, centers=3, cluster_std=0.6, random_state=0)
    return X


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_fit_releases_noisy_centres_with_a_feasible_covariance(cls, blobs) -> None:
    est = cls(n_clusters=3, epsilon=1.0, delta=1e-5, random_state=7).fit(blobs)
    cov = est.noise_covariance_
    assert cov.kind == KINDS[cls]
    assert est.cluster_centers_.shape == est.diagnostic_true_centers_.shape == (3, 3)
    assert not np.allclose(est.cluster_centers_, est.diagnostic_true_centers_)
    assert cov.max_constraint(blobs, est.labels_) <= 1 + 1e-9
    assert est.sampling_mode_ == "demo"
    assert est.budget_spent_ == (1.0, 1e-5)
    assert "not differential privacy" in est.guarantee_ and "demo" in est.guarantee_
    assert cls.guarantee == GUARANTEE and "X minus one of its own rows" in " ".join(
        cls.__doc__.split()
    )
    # predict = nearest released centre
    d2 = ((blobs[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(est.predict(blobs), d2.argmin(1))
    # demo seed: reproducible release
    again = clone(est).fit(blobs)
    np.testing.assert_array_equal(again.cluster_centers_, est.cluster_centers_)


def test_default_is_secure_sampling_and_labels_can_be_given(blobs) -> None:
    labels = (blobs[:, 0] > np.median(blobs[:, 0])).astype(int)
    est = ColoredNoiseKMeans(n_clusters=2, epsilon=0.5, delta=1e-6).fit(blobs, labels=labels)
    assert est.sampling_mode_ == "secure" and "secure" in est.guarantee_
    np.testing.assert_array_equal(est.labels_, labels)
    np.testing.assert_allclose(est.diagnostic_true_centers_[1], blobs[labels == 1].mean(0))
    assert est.noise_covariance_.max_constraint(blobs, labels) <= 1 + 1e-9


def test_colored_noise_is_smallest(blobs) -> None:
    traces = [cls(n_clusters=3, random_state=0).fit(blobs).noise_covariance_.trace for cls in ESTIMATORS]
    assert traces[0] <= traces[2] * (1 + 1e-6) and traces[2] <= traces[1]


@pytest.mark.parametrize(
    ("params", "X", "labels", "match"),
    [
        ({"n_clusters": 5}, np.arange(8.0).reshape(4, 2), None, "exceeds the number of rows"),
        ({"n_clusters": 0}, np.arange(8.0).reshape(4, 2), None, "n_clusters"),
        ({"n_clusters": 2}, np.array([[0.0, 1], [1, 2], [np.nan, 3]]), None, "NaN"),
        ({"n_clusters": 2}, np.arange(8.0).reshape(4, 2), [0, 0, 0, 1], "single row.*smaller K"),
        ({"n_clusters": 2}, np.ones((6, 2)), [0, 0, 0, 1, 1, 1], "constant data"),
        ({"n_clusters": 3}, np.arange(8.0).reshape(4, 2), [0, 0, 1, 1], "using all 3 clusters"),
        ({"n_clusters": 2, "epsilon": 1.0, "calibration": "classic"}, np.eye(4), [0, 0, 1, 1], "epsilon < 1"),
        ({"n_clusters": 2, "delta": 0.0}, np.eye(4), [0, 0, 1, 1], "delta"),
    ],
)
def test_bad_inputs(params, X, labels, match) -> None:
    for cls in ESTIMATORS:
        with pytest.raises(ParameterError, match=match):
            cls(**params).fit(X, labels=None if labels is None else np.asarray(labels))


def test_predict_checks_width(blobs) -> None:
    est = WhiteNoiseKMeans(n_clusters=3, random_state=1).fit(blobs)
    with pytest.raises(ParameterError, match="3 columns"):
        est.predict(np.zeros((2, 2)))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_fit_records_every_direction_released_without_noise(cls) -> None:
    """A cluster whose rows are all equal gets no noise from colored or white-per-cluster noise (white puts
    the global scale on it): every estimator says so in caveats_, exactly where the release is exact."""
    rng = np.random.default_rng(4)
    X = np.vstack([rng.normal(size=(40, 2)), np.tile([5.0, 5.0], (10, 1))])
    labels = np.repeat([0, 1], [40, 10])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = cls(n_clusters=2, random_state=3).fit(X, labels=labels)
    exact = cls is not WhiteNoiseKMeans
    assert est.caveats_ == est.noise_covariance_.caveats and len(est.caveats_) == int(exact)
    assert [str(w.message) for w in caught if w.category is RankDeficientWarning] == est.caveats_
    if exact:
        assert est.caveats_[0].startswith("cluster 1: all its rows are equal")
        np.testing.assert_array_equal(est.cluster_centers_[1], [5.0, 5.0])
    else:
        assert not np.allclose(est.cluster_centers_[1], [5.0, 5.0])
