"""Metrics on hand-computed examples (docs/mathematics.md)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from dpcore import metrics
from dpcore.errors import ParameterError

# Four points on a line, two centres: nearest squared distances 1, 1, 0, 4 -> WCSS 6.
X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [12.0, 0.0]])
C = np.array([[1.0, 0.0], [10.0, 0.0]])


def test_wcss_hand_computed() -> None:
    assert metrics.wcss(X, C) == pytest.approx(1 + 1 + 0 + 4, abs=1e-12)
    assert metrics.wcss(X, np.array([[1.0, 0.0], [11.0, 0.0]])) == pytest.approx(4.0, abs=1e-12)
    np.testing.assert_array_equal(metrics.assign(X, C), [0, 0, 1, 1])


def test_wcss_many_matches_loop_and_far_offset() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(size=(500, 5)) + 1e4  # large offset: centring keeps the expansion accurate
    sets = data[rng.choice(500, size=(7, 3))]
    many = metrics.wcss_many(data, sets)
    exact = [((data[:, None, :] - s[None]) ** 2).sum(axis=2).min(axis=1).sum() for s in sets]
    np.testing.assert_allclose(many, exact, rtol=1e-9)
    assert many.shape == (7,)
    assert metrics.wcss_many(data, sets.reshape(7, 1, 3, 5)).shape == (7, 1)


def test_wcss_chunked_equals_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    data = rng.normal(size=(1001, 3))
    centers = rng.normal(size=(4, 3))
    full = metrics.wcss(data, centers)
    monkeypatch.setattr(metrics, "_CHUNK_ENTRIES", 40)  # 10 rows per chunk
    assert metrics.wcss(data, centers) == pytest.approx(full, rel=1e-12)
    np.testing.assert_array_equal(
        metrics.assign(data, centers), np.argmin(((data[:, None] - centers) ** 2).sum(2), 1)
    )


def test_fractional_loss() -> None:
    true_c = np.array([[1.0, 0.0], [11.0, 0.0]])  # WCSS 4
    assert metrics.fractional_loss(X, true_c, true_c) == 0.0
    assert metrics.fractional_loss(X, C, true_c) == pytest.approx((6.0 - 4.0) / 4.0)


def test_nicv_is_wcss_over_n_and_scales_quadratically() -> None:
    assert metrics.nicv(X, C) == pytest.approx(6.0 / 4.0)
    assert metrics.nicv(3.0 * X, 3.0 * C) == pytest.approx(9.0 * 6.0 / 4.0)
    # Bounds (0, 12) map x -> x/6 - 1 in the first coordinate: distances shrink by 6.
    bounds = (np.array([0.0, -1.0]), np.array([12.0, 1.0]))
    assert metrics.nicv(X, C, bounds=bounds) == pytest.approx(6.0 / 36.0 / 4.0)
    with pytest.raises(ParameterError, match="upper bound"):
        metrics.nicv(X, C, bounds=(np.zeros(2), np.zeros(2)))


def test_centroid_mse_sum_and_expectation() -> None:
    true_c = np.zeros((2, 3))
    noisy = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    assert metrics.centroid_mse(noisy, true_c) == pytest.approx(1 + 4 + 9)
    rng = np.random.default_rng(2)
    sigma = np.diag([1.0, 4.0, 0.25])
    draws = rng.multivariate_normal(np.zeros(3), sigma, size=(20000, 2))
    mse = metrics.centroid_mse(draws, true_c)
    assert mse.shape == (20000,)
    assert mse.mean() == pytest.approx(2 * np.trace(sigma), rel=0.02)  # E = tr(Sigma) over K = 2 blocks


def test_label_agreement_and_ari() -> None:
    swapped = C[::-1]
    assert metrics.label_agreement(X, C, C) == 1.0
    assert metrics.label_agreement(X, C, swapped) == 0.0  # indices all change
    assert metrics.ari(X, C, swapped) == pytest.approx(1.0)  # ARI ignores the index names
    # Row 2 (x = 10) is 9 from centre 0 and 10 from x = 20, so it joins cluster 0; row 3 stays.
    moved = np.array([[1.0, 0.0], [20.0, 0.0]])
    assert metrics.label_agreement(X, C, moved) == pytest.approx(3 / 4)


def test_ari_many_matches_sklearn() -> None:
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 4, size=300)
    preds = np.where(rng.random((6, 300)) < 0.7, truth, rng.integers(0, 4, size=(6, 300)))
    preds[0] = truth
    preds[1] = 0  # a single cluster
    got = metrics.ari_many(truth, preds, 4)
    want = [adjusted_rand_score(truth, p) for p in preds]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_populations_and_table() -> None:
    np.testing.assert_array_equal(metrics.populations(X, C), [2, 2])
    noisy = np.array([[1.0, 0.0], [20.0, 0.0]])
    table = metrics.population_table(X, C, noisy)
    assert list(table.columns) == ["true", "noisy", "change"]
    assert table.index.name == "cluster"
    assert table["true"].tolist() == [2, 2]
    assert table["noisy"].tolist() == [3, 1]
    assert table["change"].tolist() == [1, -1]
    assert table["true"].sum() == table["noisy"].sum() == len(X)
    # An empty noisy cluster still gets a row (count 0).
    far = np.array([[1.0, 0.0], [1e6, 0.0]])
    assert metrics.population_table(X, C, far)["noisy"].tolist() == [4, 0]


def test_match_centers_undoes_a_permutation() -> None:
    rng = np.random.default_rng(4)
    true_c = rng.normal(size=(5, 3)) * 10
    perm = true_c[[3, 0, 4, 1, 2]] + 0.01
    np.testing.assert_allclose(metrics.match_centers(perm, true_c), true_c + 0.01)
    table = metrics.population_table(X, C, C[::-1], match=True)
    assert table["change"].tolist() == [0, 0]


def test_elbow_wcss_decreases_and_rejects_bad_k() -> None:
    rng = np.random.default_rng(5)
    data = np.vstack([rng.normal(c, 0.1, size=(30, 2)) for c in ((0, 0), (5, 5), (0, 5))])
    curve = metrics.elbow_wcss(data, [1, 2, 3, 4])
    assert np.all(np.diff(curve) < 0)
    assert curve[2] < 0.05 * curve[0]
    with pytest.raises(ParameterError, match="between 1"):
        metrics.elbow_wcss(data, [0])


def test_bad_input_messages() -> None:
    with pytest.raises(ParameterError, match="NaN"):
        metrics.wcss(np.array([[np.nan, 0.0]]), C)
    with pytest.raises(ParameterError, match="shape"):
        metrics.wcss(X, np.zeros((2, 3)))
