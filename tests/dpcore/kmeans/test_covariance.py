"""Local (eps, delta)-PDP centroid covariances (Ravi, Scaglione & Peisert 2021): privacy, optimum, utility."""

from __future__ import annotations

import functools
import math
import warnings

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_wine

from dpcore.errors import ParameterError
from dpcore.kmeans import (
    NoiseCovariance,
    RankDeficientWarning,
    colored_noise_covariance,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.kmeans.covariance import _leave_one_out, solve_cluster
from dpcore.mechanisms import Sampler, gaussian_ratio
from tests.paths import ROOT

EPS, DELTA = 1.0, 1e-5
SAMPLE = ROOT / "dpcore" / "samples" / "marketing_campaign.csv"
ALL = (colored_noise_covariance, white_per_cluster_noise_covariance, white_noise_covariance)


def brute_force_max(cov: NoiseCovariance, X: np.ndarray, labels: np.ndarray) -> float:
    """max_p Delta_p' Sigma^+ Delta_p / gamma from scratch: full Kd x Kd covariance, each row removed."""
    k, d = cov.centers.shape
    full = np.zeros((k * d, k * d))
    for j, b in enumerate(cov.blocks):
        full[j * d : (j + 1) * d, j * d : (j + 1) * d] = b
    pinv = np.linalg.pinv(full, rcond=1e-13, hermitian=True)
    centers = np.array([X[labels == j].mean(axis=0) for j in range(k)])
    worst = 0.0
    for p in range(X.shape[0]):
        keep = np.ones(X.shape[0], bool)
        keep[p] = False
        j = labels[p]
        moved = centers.copy()
        moved[j] = X[keep & (labels == j)].mean(axis=0)
        delta = (centers - moved).ravel()
        worst = max(worst, float(delta @ pinv @ delta) / cov.gamma)
    return worst


def random_case(seed: int, n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.2, 3.0, d) + rng.standard_normal(d)
    labels = np.concatenate([np.arange(k), rng.integers(0, k, n - k)])
    return X, labels


def rank_deficient_case() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 2)) @ rng.standard_normal((2, 4))  # cluster 0 spans a plane in R^4
    b = rng.standard_normal((30, 4)) + 5.0
    b[:, 3] = 1.0  # cluster 1: constant last feature
    X = np.vstack([a, b, b[:5]])  # duplicated rows too
    return X, np.array([0] * 40 + [1] * 35)


@pytest.fixture(scope="module")
def marketing() -> tuple[np.ndarray, np.ndarray]:
    df = pd.read_csv(SAMPLE, sep=";").drop(columns=["ID"]).dropna(subset=["Income"])
    for col in ("Education", "Marital_Status"):
        df[col] = df[col].astype("category").cat.codes
    dates = pd.to_datetime(df["Dt_Customer"], dayfirst=True)
    df["Dt_Customer"] = (dates - pd.Timestamp("1970-01-01")).dt.days
    X = df.to_numpy(dtype=float)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0  # Z_CostContact and Z_Revenue are constant
    X = (X - X.mean(axis=0)) / sd
    return X, KMeans(n_clusters=4, random_state=0).fit(X).labels_


@pytest.fixture(scope="module")
def marketing_covs(marketing: tuple[np.ndarray, np.ndarray]) -> dict[str, NoiseCovariance]:
    X, labels = marketing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficientWarning)
        return {f.__name__: f(X, labels, EPS, DELTA) for f in ALL}


# ---------------------------------------------------------------- privacy


@pytest.mark.parametrize(
    ("seed", "n", "d", "k"), [(0, 30, 1, 2), (1, 50, 2, 3), (2, 80, 3, 2), (3, 120, 5, 4), (4, 25, 6, 1)]
)
def test_every_leave_one_out_constraint_holds(seed: int, n: int, d: int, k: int) -> None:
    X, labels = random_case(seed, n, d, k)
    for make in ALL:
        cov = make(X, labels, EPS, DELTA)
        assert brute_force_max(cov, X, labels) <= 1 + 1e-9
        assert cov.max_constraint(X, labels) <= 1 + 1e-9
        assert cov.gap <= 1e-6
    colored = colored_noise_covariance(X, labels, EPS, DELTA)
    assert colored.max_constraint(X, labels) >= 1 - 1e-6  # tight: no wasted noise


def test_rank_deficient_and_duplicated_rows_are_handled_and_warned() -> None:
    X, labels = rank_deficient_case()
    with pytest.warns(RankDeficientWarning, match="released exactly"):
        cov = colored_noise_covariance(X, labels, EPS, DELTA)
    assert cov.rank_deficient == [0, 1]
    assert [b.shape[1] for b in cov.bases] == [2, 3]
    assert np.linalg.matrix_rank(cov.blocks[0]) == 2 and len(cov.caveats) == 2
    assert brute_force_max(cov, X, labels) <= 1 + 1e-9
    assert cov.gap <= 1e-6


def constant_cluster_case() -> tuple[np.ndarray, np.ndarray]:
    """Cluster 0 spans R^3, cluster 1 has all rows equal, cluster 2 has a constant third feature."""
    rng = np.random.default_rng(8)
    spread = rng.standard_normal((2000, 3)) - 4.0
    spread[:, 2] = 0.1  # inexact in binary: numpy's mean of 2000 copies is off by ~255 ulps
    X = np.vstack([rng.standard_normal((30, 3)), np.tile([4.0, 4.0, 4.0], (12, 1)), spread])
    return X, np.repeat([0, 1, 2], [30, 12, 2000])


SILENT = {  # clusters whose noise misses a direction: white per cluster silences only an all-equal cluster
    colored_noise_covariance: [1, 2],
    white_per_cluster_noise_covariance: [1],
    white_noise_covariance: [],  # one global scale: every cluster gets noise in every direction
}


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_every_direction_without_noise_carries_the_same_caveat(make) -> None:
    """Colored, white per cluster and white alike: a caveat (and a RankDeficientWarning) exactly for the
    clusters whose sampled noise misses some direction, with the same wording for the same situation."""
    X, labels = constant_cluster_case()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cov = make(X, labels, EPS, DELTA)
    draws = cov.sample(Sampler.diagnostic(seed=3), n_draws=500)
    silent = [k for k in range(3) if np.linalg.matrix_rank(draws[:, k, :]) < 3]
    assert silent == SILENT[make]
    assert cov.rank_deficient == silent and len(cov.caveats) == len(silent)
    assert [str(w.message) for w in caught if w.category is RankDeficientWarning] == cov.caveats
    for k, caveat in zip(silent, cov.caveats, strict=True):
        assert caveat.startswith(f"cluster {k}:") and "released exactly (no noise)" in caveat
        assert np.all(draws[:, k, 2] == 0.0)  # the constant feature: no noise at all
    if silent:
        assert "all its rows are equal" in cov.caveats[0]
        assert np.all(draws[:, 1, :] == 0.0)
    if 2 in silent:
        assert "only 2 of 3 directions" in cov.caveats[1] and "in the other 1" in cov.caveats[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficientWarning)
        wording = {f: f(X, labels, EPS, DELTA).caveats for f in ALL}
    assert wording[colored_noise_covariance][0] == wording[white_per_cluster_noise_covariance][0]
    assert cov.centers[2, 2] == 0.1  # the exact value, not a rounded mean
    assert cov.max_constraint(X, labels) <= 1 + 1e-9


def test_marketing_constraints_gap_and_gain(marketing, marketing_covs) -> None:
    X, labels = marketing
    colored = marketing_covs["colored_noise_covariance"]
    per_cluster = marketing_covs["white_per_cluster_noise_covariance"]
    white = marketing_covs["white_noise_covariance"]
    for cov in (colored, per_cluster, white):
        assert cov.max_constraint(X, labels) <= 1 + 1e-9
    assert colored.gap <= 1e-6
    assert colored.rank_deficient == [0, 1, 2, 3]  # the two constant columns
    assert colored.trace <= per_cluster.trace <= white.trace
    ratio = white.trace / colored.trace
    assert ratio >= 5.0  # measured: about 10.7x
    assert colored.rescaled(0.3, DELTA).trace / white.rescaled(0.3, DELTA).trace == pytest.approx(1 / ratio)


def test_lemma5_smallest_norm_choice_violates_constraints(marketing, marketing_covs) -> None:
    """Seed 000 Lemma 5 keeps the Kd smallest-norm u_p; its optimum ignores the binding extreme rows."""
    X, labels = marketing
    _, _, _, _, diffs = _leave_one_out(X, labels)
    worst, share = [], []
    for u in diffs:
        d = np.linalg.matrix_rank(u)
        smallest = np.argsort(np.einsum("ij,ij->i", u, u))[:d]
        sol = solve_cluster(u[smallest], 1e-6)  # exact optimum for those constraints only
        z = u @ (sol.basis / np.sqrt(sol.eigenvalues))
        ratios = np.einsum("ij,ij->i", z, z)
        worst.append(ratios.max())
        share.append(np.mean(ratios > 1 + 1e-9))
    assert min(worst) > 10.0 and np.mean(share) > 0.5  # measured: worst 36x-775x per cluster
    assert marketing_covs["colored_noise_covariance"].max_constraint(X, labels) <= 1 + 1e-9


# ---------------------------------------------------------------- scale invariance: raw, standardised, minmax

LOADERS = {"wine": load_wine, "breast_cancer": load_breast_cancer, "digits": load_digits}


@functools.cache
def scaled_case(name: str, scaling: str) -> tuple[np.ndarray, np.ndarray]:
    """A scikit-learn table as given ("raw"), standardised or min-max scaled to [-1, 1], with the labels
    of KMeans(3, random_state=0, n_init=1) fitted on that same matrix."""
    raw = LOADERS[name]().data.astype(float)
    if scaling == "raw":
        X = raw
    elif scaling == "standardised":
        sd = raw.std(axis=0)
        X = (raw - raw.mean(axis=0)) / np.where(sd > 0, sd, 1.0)  # digits has constant pixels
    else:
        span = np.ptp(raw, axis=0)
        X = 2.0 * (raw - raw.min(axis=0)) / np.where(span > 0, span, 1.0) - 1.0
    return X, KMeans(n_clusters=3, random_state=0, n_init=1).fit(X).labels_


def explicit_constraints(cov: NoiseCovariance, X: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Delta_p' Sigma^+ Delta_p / gamma for every row p, from the leave-one-out centroids computed directly
    (c_k - (n_k c_k - x_p) / (n_k - 1)) and the factor the noise is sampled from; rows that move a centroid
    outside the noise's range get +inf (an unbounded privacy loss)."""
    out = np.empty(X.shape[0])
    for k in range(cov.centers.shape[0]):
        rows = np.flatnonzero(labels == k)
        n_k, c_k = rows.size, X[rows].mean(axis=0)
        diff = c_k - (n_k * c_k - X[rows]) / (n_k - 1)
        basis, var = cov.bases[k], cov.unit_eigenvalues[k] / cov.gamma
        z = diff @ basis
        outside = np.linalg.norm(diff - z @ basis.T, axis=1) > 1e-9 * np.linalg.norm(diff, axis=1).max()
        out[rows] = np.where(outside, np.inf, np.sum(z**2 / var, axis=1) / cov.gamma)
    return out


def certified_lower_bound(cov: NoiseCovariance, X: np.ndarray, labels: np.ndarray) -> float:
    """Weak duality from the published dual weights w (a distribution over each cluster's rows):
    every feasible Sigma_k has trace >= ||diag(sqrt w) U_k||_*^2 / gamma (nuclear norm)."""
    total = 0.0
    for k in range(cov.centers.shape[0]):
        rows = np.flatnonzero(labels == k)
        w = cov.dual_weights[rows]
        assert np.all(w >= 0) and math.isclose(w.sum(), 1.0, rel_tol=1e-12)
        u = (X[rows] - X[rows].mean(axis=0)) / (rows.size - 1)
        total += np.linalg.svd(np.sqrt(w)[:, None] * u, compute_uv=False).sum() ** 2
    return total / cov.gamma


@pytest.mark.parametrize("scaling", ["raw", "standardised", "minmax"])
@pytest.mark.parametrize("name", ["wine", "breast_cancer", "digits"])
def test_certificate_reaches_its_target_whatever_the_scaling(name: str, scaling: str) -> None:
    """Relative gap tr(Sigma) / dual bound - 1 <= 1e-6 (dimensionless, so unchanged by units), checked from
    the published dual weights; every constraint holds; digits' constant pixels are released exactly."""
    X, labels = scaled_case(name, scaling)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficientWarning)
        cov = colored_noise_covariance(X, labels, EPS, DELTA)
    assert cov.gap <= 1e-6
    lower = certified_lower_bound(cov, X, labels)
    assert lower <= cov.trace <= lower * (1 + 1e-6)
    assert cov.absolute_gap == pytest.approx(cov.trace - lower, rel=1e-6, abs=1e-12 * cov.trace)
    quad = explicit_constraints(cov, X, labels)
    assert quad.max() <= 1 + 1e-9  # every leave-one-out constraint, with only rounding slack
    assert quad.max() >= 1 - 1e-6  # and tight: the noise is not inflated
    constant = [k for k in range(3) if np.any(np.ptp(X[labels == k], axis=0) == 0)]
    assert cov.rank_deficient == constant and len(cov.caveats) == len(constant)
    assert constant == ([0, 1, 2] if name == "digits" else [])


def test_solver_matches_cvxpy_on_badly_scaled_data() -> None:
    """Raw wine features span five orders of magnitude (proline ~ 1e3, hue ~ 1, ...)."""
    X, labels = scaled_case("wine", "raw")
    X, labels = X[:60, [0, 4, 7, 12]], (labels[:60] == labels[0]).astype(int)
    cov = colored_noise_covariance(X, labels, EPS, DELTA)
    reference = cvxpy_trace(X, labels, cov.gamma, scaled=True)
    assert cov.gap <= 1e-6
    assert cov.trace == pytest.approx(reference, rel=1e-5)
    assert cov.trace / (1 + cov.gap) <= reference * (1 + 1e-6)


# ---------------------------------------------------------------- optimality (cvxpy cross-check)


def cvxpy_trace(X: np.ndarray, labels: np.ndarray, gamma: float, scaled: bool = False) -> float:
    """Sum over clusters of min tr(Sigma) s.t. [[Sigma, u_p], [u_p', gamma]] PSD (Schur complement of
    u_p' Sigma^-1 u_p <= gamma). ``scaled``: solve for D^-1 Sigma D^-1 (D = the cluster's feature spreads)
    so that the conic solver sees unit-scale data; the objective becomes sum_i D_i^2 [.]_ii."""
    total = 0.0
    for u in _leave_one_out(X, labels)[4]:
        d = u.shape[1]
        spread = np.abs(u).max(axis=0) if scaled else np.ones(d)
        sigma = cp.Variable((d, d), PSD=True)
        cons = [
            cp.bmat([[sigma, row[:, None] / spread[:, None]], [row[None, :] / spread, np.array([[gamma]])]])
            >> 0
            for row in u
        ]
        problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(spread**2, cp.diag(sigma)))), cons)
        problem.solve(solver="CLARABEL", tol_gap_rel=1e-10, tol_gap_abs=1e-14, tol_feas=1e-10)
        total += problem.value
    return total


@pytest.mark.parametrize(("seed", "n", "d", "k"), [(10, 40, 2, 2), (11, 60, 3, 2), (12, 45, 4, 1)])
def test_optimum_matches_cvxpy(seed: int, n: int, d: int, k: int) -> None:
    X, labels = random_case(seed, n, d, k)
    cov = colored_noise_covariance(X, labels, EPS, DELTA)
    reference = cvxpy_trace(X, labels, cov.gamma)
    lower = cov.trace / (1 + cov.gap)
    assert lower <= reference * (1 + 1e-6)
    assert reference <= cov.trace * (1 + 1e-6)
    assert cov.trace == pytest.approx(reference, rel=1e-6)


# ---------------------------------------------------------------- utility, rescaling, calibrations


@pytest.mark.parametrize("seed", [20, 21, 22])
def test_trace_ordering(seed: int) -> None:
    X, labels = random_case(seed, 90, 4, 3)
    c, p, w = (f(X, labels, EPS, DELTA).trace for f in ALL)
    assert c <= p * (1 + 1e-6) and p <= w


def test_rescaled_equals_fresh_solve() -> None:
    X, labels = random_case(30, 100, 3, 3)
    base = colored_noise_covariance(X, labels, 1.0, 1e-5)
    for eps, delta, cal in [(0.2, 1e-6, "analytic"), (3.0, 1e-3, "paper"), (0.5, 1e-5, "classic")]:
        fresh = colored_noise_covariance(X, labels, eps, delta, cal)
        moved = base.rescaled(eps, delta, cal)
        assert moved.gamma == fresh.gamma and moved.calibration == cal
        for a, b in zip(moved.blocks, fresh.blocks, strict=True):
            assert np.linalg.norm(a - b) <= 1e-9 * np.linalg.norm(b)
        assert moved.trace == pytest.approx(base.trace * base.gamma / fresh.gamma, rel=1e-12)
        assert moved.max_constraint(X, labels) <= 1 + 1e-9


def test_calibrations() -> None:
    X, labels = random_case(31, 60, 2, 2)
    analytic = colored_noise_covariance(X, labels, 1.0, 1e-5, "analytic")
    paper = colored_noise_covariance(X, labels, 1.0, 1e-5, "paper")
    assert analytic.gamma > paper.gamma  # analytic admits a larger ratio: smaller sigma
    assert analytic.gamma == pytest.approx(gaussian_ratio(1.0, 1e-5) ** 2)
    assert analytic.trace < paper.trace
    with pytest.raises(ParameterError, match="epsilon < 1"):
        colored_noise_covariance(X, labels, 1.0, 1e-5, "classic")
    with pytest.raises(ParameterError, match="epsilon < 1"):
        white_noise_covariance(X, labels, 1.5, 1e-5, "classic")


# ---------------------------------------------------------------- sampling


def test_sample_covariance_matches_blocks() -> None:
    X, labels = rank_deficient_case()
    with pytest.warns(RankDeficientWarning):
        cov = colored_noise_covariance(X, labels, EPS, DELTA)
    draws = cov.sample(Sampler.diagnostic(seed=1), n_draws=40_000)
    assert draws.shape == (40_000, 2, 4) and cov.sample(Sampler.diagnostic(seed=2)).shape == (2, 4)
    for j, block in enumerate(cov.blocks):
        emp = np.cov(draws[:, j, :], rowvar=False)
        assert np.linalg.norm(emp - block) <= 0.03 * np.linalg.norm(block)
    # no noise at all outside the span of cluster 1's differences (constant feature 3)
    assert np.all(draws[:, 1, 3] == 0.0)
    demo = cov.sample(Sampler(seed=4), n_draws=3)
    np.testing.assert_array_equal(demo, cov.sample(Sampler(seed=4), n_draws=3))
    secure = cov.sample(Sampler(), n_draws=2)
    assert secure.shape == (2, 2, 4) and np.all(np.isfinite(secure))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("X", "labels", "match"),
    [
        (np.array([[0.0], [1.0], [np.nan]]), [0, 0, 0], "NaN"),
        (np.array([[0.0], [1.0], [np.inf]]), [0, 0, 0], "NaN"),
        (np.arange(6.0).reshape(3, 2), [0, 0], "one label per row"),
        (np.arange(6.0).reshape(3, 2), [0, 0, 2], r"cluster\(s\) \[1\] are empty"),
        (np.arange(6.0).reshape(3, 2), [0, 0, -1], "negative"),
        (np.arange(6.0).reshape(3, 2), [0.5, 0, 0], "integers"),
        (np.arange(8.0).reshape(4, 2), [0, 0, 0, 1], "cluster 1 has a single row.*smaller K"),
        (np.ones((5, 3)), [0, 0, 1, 1, 1], "constant data"),
        (np.zeros((0, 2)), [], "at least one row"),
    ],
)
def test_bad_inputs_raise_parameter_error(X, labels, match) -> None:
    for make in ALL:
        with pytest.raises(ParameterError, match=match):
            make(X, np.asarray(labels), EPS, DELTA)


def test_bad_privacy_parameters() -> None:
    X, labels = random_case(40, 20, 2, 2)
    with pytest.raises(ParameterError, match="epsilon"):
        colored_noise_covariance(X, labels, 0.0, DELTA)
    with pytest.raises(ParameterError, match="delta"):
        white_noise_covariance(X, labels, EPS, 1.0)
    with pytest.raises(ParameterError, match="tol"):
        colored_noise_covariance(X, labels, EPS, DELTA, tol=0.0)
