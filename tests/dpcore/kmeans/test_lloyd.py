"""DP-Lloyd: exact budget, clipping, data-independent init, Laplace scales, errors, sensitivities."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpcore.errors import DPCoreError, ParameterError
from dpcore.kmeans.cells import PlanarCells, cluster_statistics
from dpcore.kmeans.lloyd import (
    DPLloydKMeans,
    informative_count,
    noisy_lloyd,
    noisy_lloyd_trials,
    privatized_noise,
    reseed_centres,
    sphere_packing_init,
)
from dpcore.kmeans.schedule import (
    auto_iterations,
    budget_schedule,
    plan_rounds,
    su_count_share,
    su_iterations,
)
from dpcore.mechanisms import Sampler
from dpcore.metrics import assign, nearest_sets


def blobs(n: int = 600, d: int = 2, k: int = 3, seed: int = 0, spread: float = 0.08) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-0.6, 0.6, (k, d))
    return np.clip(centres[rng.integers(0, k, n)] + rng.normal(0, spread, (n, d)), -1, 1)


def true_statistics(est: DPLloydKMeans, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recompute the exact per-round counts and centred sums the estimator noised."""
    lo, hi = est.bounds_
    Xc = np.clip(X, lo, hi) - (lo + hi) / 2
    T, K = est.noisy_counts_.shape
    counts, sums = np.zeros((T, K)), np.zeros((T, K, X.shape[1]))
    for t in range(T):
        lab = assign(Xc, est.centers_history_[t] - (lo + hi) / 2)
        counts[t] = np.bincount(lab, minlength=K)
        np.add.at(sums[t], lab, Xc)
    return counts, sums


@pytest.mark.parametrize("eps", [0.1, 0.3, 1 / 3, 0.7, 1.0, 2.5, 7.3])
@pytest.mark.parametrize("neighbours", ["unbounded", "bounded"])
@pytest.mark.parametrize("n_iter", [None, 1, 3, 7])
def test_budget_is_spent_exactly(eps: float, neighbours: str, n_iter: int | None) -> None:
    X = blobs(d=7)
    est = DPLloydKMeans(3, eps, (-1, 1), n_iter=n_iter, neighbours=neighbours, random_state=1).fit(X)
    spends = [e for _, e in est.budget_log_]
    assert math.fsum(spends) == eps
    assert est.budget_spent_ == eps
    assert all(e > 0 for e in spends)
    T = est.n_iter_
    extra = 1 if (n_iter is None and neighbours == "unbounded") else 0
    assert len(est.budget_log_) == 2 * T + extra
    assert est.budget_log_[-1][0] == f"iteration {T} sums"
    assert est.budget_log_[extra][0] == "iteration 1 counts"
    # d = 7 > 5: no round overspends (diffprivlib's split would spend eps/T * 1.06 per round here).
    rounds = np.array(spends[extra:]).reshape(T, 2).sum(axis=1)
    assert np.allclose(rounds, (eps - (spends[0] if extra else 0.0)) / T, rtol=1e-12)


def test_budget_schedule_absorbs_rounding() -> None:
    rng = np.random.default_rng(0)
    for eps in [0.1, 0.3, 1e-3, 3.0, 7.3, 0.123456789, *rng.uniform(1e-3, 50, 500)]:
        for parts in (2, 3, 7, 11, 29):
            shares = rng.dirichlet(np.ones(parts)).tolist()
            sched = budget_schedule(float(eps), [str(i) for i in range(parts)], shares)
            assert math.fsum(e for _, e in sched) == eps
            assert all(e > 0 for _, e in sched)
            assert np.allclose([e for _, e in sched], np.array(shares) * eps, rtol=1e-9)


def test_count_split_follows_su_et_al() -> None:
    for d in (1, 2, 5, 10, 26):
        c = np.cbrt(4 * d * 0.225**2)
        assert su_count_share(d) == pytest.approx(c / (c + d))
    X = blobs(d=4)
    est = DPLloydKMeans(3, 1.0, (-1, 1), n_iter=4, random_state=0).fit(X)
    (_, e_n), (_, e_s) = est.budget_log_[0], est.budget_log_[1]
    assert e_n / e_s == pytest.approx(np.cbrt(4 * 4 * 0.225**2) / 4)
    assert e_n + e_s == pytest.approx(0.25)


def test_iteration_rule_range_and_growth() -> None:
    assert su_iterations(0.01, 100, 5, 10) == 2
    assert su_iterations(100.0, 1e6, 2, 2) == 7
    values = [su_iterations(e, 5000, 3, 2) for e in (0.1, 0.5, 1.0, 2.0, 5.0)]
    assert values == sorted(values) and 2 <= min(values) and max(values) <= 7


def test_auto_iterations_never_below_su_and_grows_with_eps() -> None:
    share = su_count_share(28)
    su = [su_iterations(e, 2216, 4, 28) for e in (0.5, 1.0, 10.0)]
    auto = [auto_iterations(e, 2216, 4, 28, share) for e in (0.5, 1.0, 10.0)]
    assert su == [2, 2, 2] and auto == [2, 2, 5]  # Marketing: Su keeps T = 2 up to eps ~ 26
    for n, k, d in ((100, 5, 10), (5000, 4, 2), (1e6, 2, 2), (2216, 4, 28)):
        values = [auto_iterations(e, n, k, d, su_count_share(d)) for e in (0.01, 0.1, 0.5, 1, 3, 10, 100)]
        assert values == sorted(values) and min(values) >= 2 and max(values) <= 7
        assert all(
            a >= su_iterations(e, n, k, d)
            for a, e in zip(values, (0.01, 0.1, 0.5, 1, 3, 10, 100), strict=True)
        )


@pytest.mark.parametrize("neighbours", ["unbounded", "bounded"])
def test_batched_loop_with_one_run_is_the_estimator(neighbours: str) -> None:
    """Demo seed, B = 1: noisy_lloyd with privatized noise reproduces the estimator bit for bit."""
    X = blobs(n=700, d=3, k=4, seed=5)
    lo, hi = np.array([-1.0, -1.5, -1.0]), np.array([1.0, 1.0, 2.0])
    est = DPLloydKMeans(4, 2.0, (lo, hi), neighbours=neighbours, random_state=17).fit(X)
    random_state = Sampler(seed=17)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    n_rows = 700.0
    if neighbours == "unbounded":
        n_rows += random_state.laplace(1, 1.0 / (2.0 * 0.02))[0]
    T, log, eps_rounds = plan_rounds(2.0, None, n_rows, 4, 3, su_count_share(3), neighbours == "unbounded")
    init = sphere_packing_init(4, lo, hi, random_state.rng) - mid
    run = noisy_lloyd(
        np.clip(X, lo, hi) - mid,
        init[None],
        eps_rounds[None],
        half,
        privatized_noise(random_state),
        est._batch_sensitivities(half),
        random_state.rng,
    )
    assert T == est.n_iter_ and log == est.budget_log_
    np.testing.assert_array_equal(run.noisy_counts[0], est.noisy_counts_)
    np.testing.assert_array_equal(run.noisy_sums[0], est.noisy_sums_)
    np.testing.assert_array_equal(run.centers_history[0] + mid, est.centers_history_)
    np.testing.assert_array_equal(run.sum_sensitivity[0], est.sum_sensitivity_)


def test_batched_trials_match_the_estimator_in_distribution() -> None:
    """noisy_lloyd_trials (diagnostic, all runs at once) vs 40 estimator fits: same loss distribution."""
    rng = np.random.default_rng(2)
    truth = np.array([[-0.6, -0.6], [0.6, 0.6], [-0.6, 0.6]])
    X = np.clip(truth[rng.integers(0, 3, 800)] + rng.normal(0, 0.1, (800, 2)), -1, 1)
    est = DPLloydKMeans(3, 0.5, (-1, 1))
    batched = noisy_lloyd_trials(est, X, [0.5, 2.0], 40, Sampler.diagnostic(0))
    assert batched.shape == (2, 40, 3, 2)
    one_by_one = np.stack(
        [
            DPLloydKMeans(3, 0.5, (-1, 1), random_state=Sampler.diagnostic(s)).fit(X).cluster_centers_
            for s in range(60)
        ]
    )

    def wcss(c: np.ndarray) -> np.ndarray:
        return ((X[None, :, None, :] - c[:, None]) ** 2).sum(-1).min(-1).sum(-1)

    assert stats.ks_2samp(wcss(batched[0]), wcss(one_by_one)).pvalue > 1e-3
    assert np.median(wcss(batched[1])) < np.median(wcss(batched[0]))  # larger eps, better centres
    with pytest.raises(ParameterError, match="diagnostic"):
        noisy_lloyd_trials(est, X, [1.0], 2, Sampler(seed=0))


def test_reseeding_reads_only_the_release_and_splits_the_largest_cluster() -> None:
    half = np.ones(2)
    centres = np.array([[[0.5, 0.5], [-0.9, 0.9], [0.9, -0.9]]])
    counts = np.array([[900.0, 3.0, 40.0]])
    n_min = informative_count(np.array([10.0]), half)
    assert n_min[0] == pytest.approx(np.sqrt(2) * 10.0)
    moved = reseed_centres(centres, counts, n_min, half, np.random.default_rng(0))
    np.testing.assert_array_equal(moved[0, [0, 2]], centres[0, [0, 2]])  # informative clusters stay
    assert np.linalg.norm(moved[0, 1] - centres[0, 0]) < 0.1  # the dead one sits next to the largest
    assert not np.array_equal(moved[0, 1], centres[0, 0])  # offset: the next bisector splits it
    small = reseed_centres(centres, np.array([[100.0, 3.0, 40.0]]), n_min, half, np.random.default_rng(0))
    np.testing.assert_array_equal(small, centres)  # 100 < 2 x 8 n_min: too small to split


def test_the_one_nearest_centre_search_matches_brute_force() -> None:
    rng = np.random.default_rng(4)
    X, C = rng.normal(size=(300, 5)), rng.normal(size=(7, 4, 5))
    brute = np.argmin(((X[None, :, None] - C[:, None]) ** 2).sum(-1), axis=2)
    np.testing.assert_array_equal(nearest_sets(X, C)[0], brute)
    np.testing.assert_array_equal(assign(X, C[3]), brute[3])


def test_planar_cells_match_brute_force() -> None:
    """Grid filtering: same counts, sums and WCSS as assigning every row to its nearest centre."""
    rng = np.random.default_rng(6)
    X = np.r_[rng.normal(size=(3000, 2)) * [3.0, 1.0], rng.normal(5.0, 0.3, size=(500, 2))]
    C = rng.uniform(-4.0, 6.0, size=(9, 5, 2))
    C[2, 3] = C[2, 1]  # duplicated centre: the lower index wins the tie
    d2 = ((X[None, :, None] - C[:, None]) ** 2).sum(-1)
    labels = np.argmin(d2, axis=2)
    cells = PlanarCells(X, grid_size=16)
    counts, sums = cells.statistics(C)
    true_n, true_s = cluster_statistics(X, labels, 5)
    np.testing.assert_array_equal(counts, true_n)
    np.testing.assert_allclose(sums, true_s, rtol=1e-12, atol=1e-9)
    assert counts[2, 3] == 0
    np.testing.assert_allclose(cells.wcss(C), d2.min(axis=2).sum(axis=1), rtol=1e-12)


def test_clipping_to_the_public_box() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(0, 5, (400, 3))  # mostly outside [-1, 1]
    lo, hi = np.array([-1.0, -2.0, 0.0]), np.array([1.0, 0.5, 3.0])
    a = DPLloydKMeans(4, 1.0, (lo, hi), n_iter=3, random_state=5).fit(X)
    b = DPLloydKMeans(4, 1.0, (lo, hi), n_iter=3, random_state=5).fit(np.clip(X, lo, hi))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.noisy_sums_, b.noisy_sums_)
    assert np.all(a.centers_history_ >= lo) and np.all(a.centers_history_ <= hi)
    counts, sums = true_statistics(a, X)
    centred = np.clip(X, lo, hi) - (lo + hi) / 2
    assert np.all(np.abs(sums) <= counts[..., None] * (hi - lo) / 2 + 1e-9)
    assert np.abs(centred).sum(axis=1).max() <= np.sum((hi - lo) / 2)


def test_initial_centres_are_data_independent() -> None:
    X1, X2 = blobs(seed=1), blobs(n=900, seed=2) * 0.3
    for n_iter in (None, 3):
        a = DPLloydKMeans(3, 1.0, (-1, 1), n_iter=n_iter, random_state=11).fit(X1)
        b = DPLloydKMeans(3, 1.0, (-1, 1), n_iter=n_iter, random_state=11).fit(X2)
        np.testing.assert_array_equal(a.initial_centers_, b.initial_centers_)
    c = DPLloydKMeans(3, 1.0, (-1, 1), n_iter=3, random_state=12).fit(X1)
    assert not np.array_equal(a.initial_centers_, c.initial_centers_)
    # sphere packing: centres inside the box and pairwise separated
    init = a.initial_centers_
    assert np.all(np.abs(init) <= 1)
    assert min(np.linalg.norm(p - q) for p, q in itertools.combinations(init, 2)) > 0.1


@pytest.mark.parametrize("neighbours", ["unbounded", "bounded"])
def test_noise_scale_is_sensitivity_over_query_epsilon(neighbours: str) -> None:
    X = blobs(n=300, d=2)
    count_noise, sum_noise = [], []
    for seed in range(150):
        est = DPLloydKMeans(3, 0.8, (-1, 1), n_iter=2, neighbours=neighbours, random_state=seed).fit(X)
        counts, sums = true_statistics(est, X)
        factor = 2.0 if neighbours == "bounded" else 1.0
        eps = np.array([e for _, e in est.budget_log_]).reshape(2, 2)
        assert np.allclose(est.count_sensitivity_, factor) and np.allclose(est.sum_sensitivity_, 2.0 * factor)
        count_noise.append((est.noisy_counts_ - counts) / (factor / eps[:, :1]))
        sum_noise.append(((est.noisy_sums_ - sums) / (2.0 * factor / eps[:, 1:2])[..., None]).ravel())
    for sample in (np.concatenate([c.ravel() for c in count_noise]), np.concatenate(sum_noise)):
        assert stats.kstest(sample, "laplace").pvalue > 1e-3
        assert stats.kstest(sample * 2.0, "laplace").pvalue < 1e-6  # a 2x scale error is detected


def test_sensitivities_brute_force_on_a_grid() -> None:
    """Unbounded: adding one row moves one count by 1 and the sums by ||x - m||_1 <= sum h."""
    lo, hi = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    grid = np.array(list(itertools.product(np.linspace(-2, 2, 9), np.linspace(0, 1, 5))))
    est = DPLloydKMeans(2, 1.0, (lo, hi), n_iter=1, random_state=0).fit(grid)
    worst = np.abs(grid - (lo + hi) / 2).sum(axis=1).max()
    assert est.sum_sensitivity_[0] == pytest.approx(worst) == 2.5
    bounded = DPLloydKMeans(2, 1.0, (lo, hi), n_iter=1, neighbours="bounded", random_state=0).fit(grid)
    centred = grid - (lo + hi) / 2
    lab = assign(centred, bounded.centers_history_[0] - (lo + hi) / 2)
    pair_worst = max(
        np.abs(x - y).sum() if lab[i] == lab[j] else np.abs(x).sum() + np.abs(y).sum()
        for (i, x), (j, y) in itertools.product(enumerate(centred), repeat=2)
    )
    assert bounded.sum_sensitivity_[0] >= pair_worst and bounded.count_sensitivity_[0] == 2


def test_utility_on_separated_blobs_at_large_epsilon() -> None:
    rng = np.random.default_rng(0)
    truth = np.array([[-0.6, -0.6], [0.6, 0.6], [-0.6, 0.6]])
    X = np.clip(truth[rng.integers(0, 3, 3000)] + rng.normal(0, 0.05, (3000, 2)), -1, 1)
    est = DPLloydKMeans(3, 20.0, (-1, 1), n_iter=6, random_state=4).fit(X)
    err = max(np.linalg.norm(est.cluster_centers_ - t, axis=1).min() for t in truth)
    assert err < 0.05
    labels = est.predict(X)
    assert labels.shape == (3000,) and set(np.unique(labels)) == {0, 1, 2}


def test_sampling_modes_and_reproducibility() -> None:
    X = blobs()
    secure = DPLloydKMeans(3, 1.0, (-1, 1), n_iter=2).fit(X)
    assert secure.sampling_mode_ == "secure"
    a = DPLloydKMeans(3, 1.0, (-1, 1), random_state=3).fit(X)
    b = DPLloydKMeans(3, 1.0, (-1, 1), random_state=3).fit(X)
    assert a.sampling_mode_ == "demo"
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    diag = DPLloydKMeans(3, 1.0, (-1, 1), random_state=Sampler.diagnostic(1)).fit(X)
    assert diag.sampling_mode_ == "diagnostic"
    assert "ε-differential privacy" in a.guarantee_ and "added or removed" in a.guarantee_
    bounded = DPLloydKMeans(3, 1.0, (-1, 1), neighbours="bounded", random_state=3).fit(X)
    assert "replaced" in bounded.guarantee_ and bounded.noisy_n_ is None


def test_fitted_shapes_and_released_state_holds_no_rows() -> None:
    X = blobs(n=500, d=3, k=4)
    est = DPLloydKMeans(4, 1.0, (-1, 1), n_iter=3, random_state=0).fit(X)
    assert est.noisy_counts_.shape == (3, 4) and est.noisy_sums_.shape == (3, 4, 3)
    assert est.centers_history_.shape == (4, 4, 3) and est.n_iter_ == 3
    np.testing.assert_array_equal(est.bounds_[0], -np.ones(3))
    state = est.released_state()
    for name, value in vars(state).items():
        assert np.asarray(value).shape[0] in (3, 4), name  # T, T + 1 or d: never n = 500


@pytest.mark.parametrize(
    ("kwargs", "X", "match"),
    [
        ({"n_clusters": 10}, np.zeros((5, 2)), "exceeds the number of rows"),
        ({}, np.array([[0.0, np.nan], [1.0, 1.0], [0.5, 0.5]]), "missing"),
        ({"bounds": (1.0, 1.0)}, None, "lower < upper"),
        ({"bounds": ([-1, 2], [1, 1])}, None, "lower < upper"),
        ({"bounds": None}, None, "public.*data_bounds_ok"),
        ({"bounds": (-1, 1, 2)}, None, "pair"),
        ({"epsilon": 0.0}, None, "epsilon"),
        ({"epsilon": -1.0}, None, "epsilon"),
        ({"epsilon": float("nan")}, None, "epsilon"),
        ({"n_iter": 0}, None, "n_iter"),
        ({"count_share": 1.0}, None, "count_share"),
        ({"neighbours": "sideways"}, None, "neighbours"),
        ({"n_clusters": 0}, None, "n_clusters"),
    ],
)
def test_errors_name_the_problem_and_the_fix(kwargs: dict, X: np.ndarray | None, match: str) -> None:
    params = {"n_clusters": 2, "epsilon": 1.0, "bounds": (-1, 1), "random_state": 0, **kwargs}
    data = blobs(n=50) if X is None else X
    with pytest.raises(ParameterError, match=match) as info:
        DPLloydKMeans(**params).fit(data)
    assert isinstance(info.value, DPCoreError)


def test_predict_before_fit_is_an_error() -> None:
    with pytest.raises(ParameterError, match="fit"):
        DPLloydKMeans(2, 1.0, (-1, 1)).predict(np.zeros((3, 2)))
