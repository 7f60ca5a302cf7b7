"""The diagnostic sample of a large table: size, uniformity, one sample per (fingerprint, limit), and a
release that never reads it."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcore import diagnostic_sample as ds
from dpcore.diagnostic_sample import DIAGNOSTIC_ROWS, diagnostic_sample, sample_label
from dpcore.errors import ParameterError
from dpcore.kmeans.lloyd import NoisyLloydBase
from dpcore.kmeans.registry import KMeansInputs, release_centroids
from dpcore.kmeans.sweep import diagnostic_rows
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler


def test_sample_has_the_limit_of_distinct_sorted_rows_and_small_tables_keep_every_row():
    rows = diagnostic_sample(930_000, "fp")
    assert rows.size == DIAGNOSTIC_ROWS == 50_000
    assert np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < 930_000
    assert np.array_equal(diagnostic_sample(DIAGNOSTIC_ROWS, "fp"), np.arange(DIAGNOSTIC_ROWS))
    assert np.array_equal(diagnostic_sample(7, "fp", limit=10), np.arange(7))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ParameterError, match="whole number"):
            diagnostic_sample(bad, "fp")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="fingerprint"):
        diagnostic_sample(100, "")


def test_sample_is_fixed_per_fingerprint_and_limit():
    first = diagnostic_sample(200_000, "table-a", limit=1_000)
    assert np.array_equal(first, diagnostic_sample(200_000, "table-a", limit=1_000))
    assert not np.array_equal(first, diagnostic_sample(200_000, "table-b", limit=1_000))
    assert not np.array_equal(first, diagnostic_sample(200_000, "table-a", limit=1_001)[:1_000])


def test_sample_is_uniform_over_the_rows():
    # within one sample: 50 equal buckets of row indices each hold limit / 50 rows in expectation
    rows = diagnostic_sample(1_000_000, "uniform", limit=50_000)
    counts = np.bincount(rows // 20_000, minlength=50)
    assert stats.chisquare(counts).pvalue > 1e-3
    # across tables: every row is kept with probability limit / n (20 rows, 5 kept, 4000 fingerprints)
    kept = np.zeros(20, dtype=int)
    for i in range(4_000):
        kept[diagnostic_sample(20, f"table-{i}", limit=5)] += 1
    assert kept.sum() == 20_000 and stats.chisquare(kept).pvalue > 1e-3
    # and pairs are kept together as often as sampling without replacement says (no structure)
    pairs = np.zeros((4, 4), dtype=int)
    for i in range(4_000):
        rows = diagnostic_sample(4, f"pairs-{i}", limit=2)
        pairs[rows[0], rows[1]] += 1
    observed = pairs[np.triu_indices(4, 1)]
    assert observed.sum() == 4_000 and stats.chisquare(observed).pvalue > 1e-3


def test_diagnostic_rows_take_the_sample_with_its_labels():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60_000, 2))
    labels = (X[:, 0] > 0).astype(np.intp)
    Xs, ls = diagnostic_rows(X, labels, "fp")
    rows = diagnostic_sample(60_000, "fp")
    assert Xs.shape == (DIAGNOSTIC_ROWS, 2) and np.array_equal(Xs, X[rows])
    assert np.array_equal(ls, labels[rows])
    small, small_labels = diagnostic_rows(X[:100], labels[:100], "fp")
    assert np.array_equal(small, X[:100]) and np.array_equal(small_labels, labels[:100])
    tiny = labels.copy()
    outside = np.setdiff1d(np.arange(60_000), rows)[:3]
    tiny[outside] = 2  # a cluster of 3 rows, none of them in the sample
    with pytest.raises(ParameterError, match=r"no row of cluster\(s\) 2 \(3 rows in the table\); choose a"):
        diagnostic_rows(X, tiny, "fp")


def test_label_names_the_sample_and_the_full_release():
    assert sample_label(50_000, 930_000).startswith(
        "Comparison on a uniform sample of 50,000 of 930,000 rows; the release uses every row."
    )
    assert sample_label(100, 100) == ""


def test_a_release_reads_every_row_and_never_the_diagnostic_sample(monkeypatch: pytest.MonkeyPatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a release drew the diagnostic sample")

    monkeypatch.setattr(ds, "diagnostic_sample", refuse)
    monkeypatch.setattr(sys.modules["dpcore.kmeans.sweep"], "diagnostic_sample", refuse)
    rng = np.random.default_rng(2)
    n = DIAGNOSTIC_ROWS + 10_000
    X = np.clip(rng.normal(size=(n, 2)), -3, 3)
    inputs = KMeansInputs(X, None, np.full(2, -3.0), np.full(2, 3.0))
    seen: list[int] = []
    original = NoisyLloydBase.fit

    def spy(self: NoisyLloydBase, data, y=None):
        seen.append(np.asarray(data).shape[0])
        return original(self, data, y)

    monkeypatch.setattr(NoisyLloydBase, "fit", spy)
    out = release_centroids("dp_lloyd", inputs, epsilon=1.0, params={"n_clusters": 2}, random_state=Sampler())
    assert len(out.table) == 2 and seen == [n]  # one fit, on every row


def test_location_comparison_reads_the_sample_and_the_release_every_row(monkeypatch: pytest.MonkeyPatch):
    from ui import locations_view as view

    rng = np.random.default_rng(4)
    n = DIAGNOSTIC_ROWS + 5_000
    frame = pd.DataFrame({"lat": rng.uniform(30, 45, n), "lon": rng.uniform(-120, -70, n)})
    coords = view.coordinates(frame, "lat", "lon", None)
    key = view.data_key("large-fingerprint", [], coords.columns)
    seen: list[np.ndarray] = []

    def spy(lat, lon, users, *args, **kwargs):
        seen.append(np.asarray(lat))
        return pd.DataFrame(columns=["mechanism"])

    monkeypatch.setattr(view, "location_sweep", spy)
    box = (24.0, 50.0, -125.0, -66.0)
    view.sweep(key, coords.lat, coords.lon, coords.users, ("dp_mean",), (1.0,), 1, box, "{}")
    (lat,) = seen
    assert np.array_equal(lat, coords.lat[diagnostic_sample(n, key)]) and lat.size == DIAGNOSTIC_ROWS
    assert view.sample_note(n).startswith(f"Comparison on a uniform sample of 50,000 of {n:,} rows")
    assert view.sample_note(DIAGNOSTIC_ROWS) == ""
    inputs = view.release_inputs(coords, Region(*box))
    assert inputs.lat.size == n and np.array_equal(inputs.lat, coords.lat)
