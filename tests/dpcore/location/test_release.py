"""PriLocation, private density grids, Blowfish mean position, exponential selection."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from dpcore.errors import DataError, ParameterError
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.location import prilocation
from dpcore.location.blowfish import blowfish_mean_sensitivity, dp_mean_sensitivity, mean_position
from dpcore.location.geometry import EARTH_RADIUS_M, Region, destination_point, haversine_m, unit_vectors
from dpcore.location.grids import (
    adaptive_grid,
    random_boxes,
    relative_error,
    true_box_counts,
    uniform_grid,
)
from dpcore.location.hotspots import (
    TRUE_SAMPLE,
    hotspot_estimator,
    hotspot_trials,
    location_hotspots,
    nearest_hotspot_distance_m,
    project_locations,
    true_hotspots,
)
from dpcore.location.prilocation import (
    PriLocation,
    _selection_log_weights,
    candidate_offsets,
    distance_error,
    exact_select,
    exponential_select,
    laplace_distance_error,
    prepare_visits,
    run_prilocation,
    sample_log_weights,
    synthetic_visits,
)
from dpcore.location.sweep import location_sweep
from dpcore.mechanisms import Sampler, exponential_probabilities, snap_to_noise_grid
from dpcore.metrics import wcss, wcss_many

US = Region(24.0, 50.0, -125.0, -66.0)


@pytest.fixture(scope="module")
def airports() -> pd.DataFrame:
    df = pd.read_csv("dpcore/samples/us_airports.csv")
    return df[US.contains(df.latitude, df.longitude)].reset_index(drop=True)


@pytest.fixture(scope="module")
def visits(airports: pd.DataFrame) -> pd.DataFrame:
    return synthetic_visits(airports.latitude.to_numpy(), airports.longitude.to_numpy(), seed=0)


def test_prilocation_beats_per_location_laplace_at_state_level(visits: pd.DataFrame) -> None:
    """eps = 1, HS = 300 km ("state"): DE of PriLocation below per-location planar Laplace (report the %)."""
    de_p, de_l = [], []
    for t in range(3):
        m = PriLocation(
            1.0, US, level="state", n_clusters=80, grid_size=30, random_state=Sampler.diagnostic(t)
        )
        m.fit(visits.user, visits.lat, visits.lon)
        de_p.append(m.diagnostic_distance_error_)
        de_l.append(
            laplace_distance_error(
                visits.user, visits.lat, visits.lon, 1.0, 300_000.0, Sampler.diagnostic(50 + t)
            )
        )
    gain = 1 - np.mean(de_p) / np.mean(de_l)
    print(
        f"DE PriLocation {np.mean(de_p):.3f} vs planar Laplace {np.mean(de_l):.3f}: {100 * gain:.1f}% lower"
    )
    assert np.mean(de_l) == pytest.approx(2.0, rel=0.1)  # E[r] / HS = 2 / eps
    assert gain > 0.5


def test_prilocation_budget_release_and_guarantee_structure(visits: pd.DataFrame) -> None:
    m = PriLocation(
        0.8,
        US,
        hs_m=200_000.0,
        n_clusters=30,
        grid_size=30,
        max_visits_per_user=5,
        random_state=Sampler(seed=4),
    )
    m.fit(visits.user, visits.lat, visits.lon)
    # Per user: at most 5 visits, each step at eps / 5 per visit (group privacy), split exactly.
    assert m.epsilon_per_visit_ == 0.16 and m.group_size_ == 5
    assert m.budget_log_ == [("clustering", 0.08), ("weights", 0.04), ("selection", 0.04)]
    assert m.budget_spent_ == pytest.approx(0.8, abs=1e-15) and m.budget_spent_ <= 0.8
    assert m.grid_.epsilon_spent == 0.08 and m.grid_.neighbours == "bounded"
    assert m.sampling_mode_ == "demo"
    released = m.released()
    assert list(released.columns) == ["user", "lat", "lon"]  # nothing marks added rows
    w_true, w_noisy = m.diagnostic_weights_
    assert len(released) == np.maximum(np.rint(w_noisy), 0).sum()  # one row per released weight unit
    assert m.diagnostic_added_.sum() == np.maximum(np.maximum(np.rint(w_noisy), 0) - w_true, 0).sum()
    # Cap: at most 5 visits per user are used, chosen at random (not the first 5 in input order).
    kept = visits.iloc[m.diagnostic_kept_index_]
    assert kept.groupby("user").size().max() <= 5
    first5 = visits.groupby("user").head(5).index
    assert not set(m.diagnostic_kept_index_) <= set(first5)
    # Every released row, replaced or added, is a public candidate within HS/2 of a released centre.
    d = haversine_m(
        released.lat.to_numpy()[:, None],
        released.lon.to_numpy()[:, None],
        m.centers_[:, 0],
        m.centers_[:, 1],
    )
    assert np.all(d.min(axis=1) <= 100_000.0 + 1e-6)
    # The curator's user ids never leave: released users are pseudonyms, rows in random order.
    assert not set(released.user) & set(visits.user.astype(str)) and not set(released.user) & set(visits.user)
    assert released.user.str.fullmatch(r"user-\d{5}").all()
    assert not released.user.is_monotonic_increasing
    per_user = kept.groupby("user").size().sort_values().to_numpy()
    replaced_per_user = released[~m.diagnostic_added_].groupby("user").size().sort_values().to_numpy()
    assert np.array_equal(per_user, replaced_per_user)  # linkage within the release is kept


def test_prilocation_errors(visits: pd.DataFrame) -> None:
    with pytest.raises(ParameterError, match="exactly one"):
        PriLocation(1.0, US).fit(visits.user, visits.lat, visits.lon)
    with pytest.raises(ParameterError, match="unknown level"):
        PriLocation(1.0, US, level="planet").fit(visits.user, visits.lat, visits.lon)
    with pytest.raises(DataError, match="one user per row"):
        PriLocation(1.0, US, level="city").fit(visits.user[:3], visits.lat, visits.lon)
    with pytest.raises(ParameterError, match="n_clusters"):
        PriLocation(1.0, US, level="city", n_clusters=10**6).fit(visits.user, visits.lat, visits.lon)


def test_exponential_select_matches_exponential_mechanism_probabilities() -> None:
    scores = np.array([10.0, 7.0, 4.0, 0.0, -np.inf])
    p = exponential_probabilities(scores[:4], 1.0, 5.0)
    choice = exponential_select(np.tile(scores, (60_000, 1)), 1.0, 5.0, Sampler(seed=9))
    counts = np.bincount(choice, minlength=5)
    assert counts[4] == 0
    assert stats.chisquare(counts[:4], 60_000 * p).pvalue > 0.01


def test_distance_error_formula() -> None:
    # user a: mean 100 m; user b: mean 300 m -> DE = mean(0.1, 0.3) with HS = 1000
    assert distance_error(["a", "a", "b"], [50.0, 150.0, 300.0], 1000.0) == pytest.approx(0.2)


def test_grid_budget_sizes_and_consistency(airports: pd.DataFrame) -> None:
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    g = uniform_grid(la, lo, 1.0, US, random_state=Sampler(seed=1))
    assert g.epsilon_spent == pytest.approx(1.0) and g.epsilon_count == pytest.approx(0.05)
    assert g.n_source == "noisy count"
    assert g.counts.shape[0] == round(np.sqrt(g.n_estimate * 0.95 / 10))
    g2 = uniform_grid(la, lo, 1.0, US, n_estimate=3000.0, random_state=1)
    assert g2.epsilon_count == 0.0 and g2.counts.shape == (17, 17)
    ag = adaptive_grid(la, lo, 1.0, US, neighbours="bounded", random_state=Sampler(seed=1))
    assert ag.epsilon_spent == pytest.approx(1.0) and ag.n_source.startswith("public")
    assert ag.counts.shape[0] == max(10, int(np.ceil(np.sqrt(len(la) * 1.0 / 10) / 4)))
    sums = np.array(
        [ag.leaves[a:b, 4].sum() for a, b in zip(ag.leaf_offsets[:-1], ag.leaf_offsets[1:], strict=True)]
    )
    np.testing.assert_allclose(sums, ag.counts.ravel(), atol=1e-8)
    # Whole-region query = total noisy count.
    full = np.array([[US.lat_min, US.lat_max, US.lon_min, US.lon_max]])
    assert ag.range_query(full)[0] == pytest.approx(ag.counts.sum())


def test_grid_error_falls_as_eps_grows(airports: pd.DataFrame) -> None:
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    boxes = random_boxes(US, 100, 3)
    truth = true_box_counts(la, lo, boxes, US)
    for build in (uniform_grid, adaptive_grid):
        med = []
        for eps in (0.05, 0.5, 5.0):
            errs = [
                np.median(
                    relative_error(
                        build(
                            la, lo, eps, US, n_estimate=3000.0, random_state=Sampler.diagnostic(t)
                        ).range_query(boxes),
                        truth,
                        len(la),
                    )
                )
                for t in range(3)
            ]
            med.append(np.mean(errs))
        assert med[0] > med[1] > med[2], (build.__name__, med)


def test_grid_requires_public_region() -> None:
    with pytest.raises(ParameterError, match="public region"):
        uniform_grid([40.0], [-100.0], 1.0, None)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="latitude"):
        uniform_grid([140.0], [-100.0], 1.0, US)


def test_blowfish_mean_sensitivity_brute_force() -> None:
    """Every edge (haversine <= theta) of a 25 x 25 lat/lon grid moves the projected mean <= the bound."""
    region = Region(44.0, 46.0, -101.0, -98.0)
    proj = region.projection()
    lat, lon = np.meshgrid(np.linspace(44, 46, 25), np.linspace(-101, -98, 25), indexing="ij")
    lat, lon = lat.ravel(), lon.ravel()
    x, y = proj.forward(lat, lon)
    n, theta = 7, 20_000.0
    d = haversine_m(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    edge = d <= theta
    l1 = (np.abs(x[:, None] - x[None, :]) + np.abs(y[:, None] - y[None, :])) / n
    l2 = np.hypot(x[:, None] - x[None, :], y[:, None] - y[None, :]) / n
    b1, b2 = blowfish_mean_sensitivity(n, theta, region), blowfish_mean_sensitivity(n, theta, region, "l2")
    assert l1[edge].max() <= b1 and l2[edge].max() <= b2
    dp = dp_mean_sensitivity(n, region)
    assert l1.max() <= dp
    print(f"tightness: L1 {l1[edge].max() / b1:.3f}, L2 {l2[edge].max() / b2:.3f}, DP {l1.max() / dp:.3f}")
    assert l1[edge].max() / b1 > 0.6 and l2[edge].max() / b2 > 0.9 and l1.max() / dp > 0.95
    assert b1 < dp / 10


def test_mean_position_release() -> None:
    rng = np.random.default_rng(0)
    la, lo = rng.uniform(30, 45, 2000), rng.uniform(-110, -80, 2000)
    rel = mean_position(la, lo, 1.0, US, theta_m=10_000.0, random_state=Sampler(seed=1))
    assert rel.policy == "blowfish" and rel.sampling_mode == "demo"
    assert rel.laplace_scale_m == pytest.approx(rel.l1_sensitivity_m / 1.0)
    dp = mean_position(la, lo, 1.0, US, policy="dp", random_state=Sampler(seed=1))
    assert dp.l1_sensitivity_m > 50 * rel.l1_sensitivity_m
    with pytest.raises(ParameterError, match="theta_m"):
        mean_position(la, lo, 1.0, US)


def test_location_hotspots_dp_and_blowfish(airports: pd.DataFrame) -> None:
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    c, model = location_hotspots(la, lo, 4, 1.0, US, random_state=2)
    assert c.shape == (4, 2) and model.budget_spent_ == pytest.approx(1.0)
    assert isinstance(model, DPLloydKMeans) and model.sampling_mode_ == "demo"
    assert US.contains(c[:, 0], c[:, 1]).all()
    _, mb = location_hotspots(la, lo, 4, 1.0, US, policy="blowfish", theta_m=20_000.0, random_state=2)
    assert isinstance(mb, BlowfishKMeans)
    assert mb.graph.theta == pytest.approx(20_000.0 * US.projection().max_scale(US))
    assert mb.graph.theta > 20_000.0
    with pytest.raises(ParameterError, match="theta_m"):
        location_hotspots(la, lo, 4, 1.0, US, policy="blowfish")
    with pytest.raises(ParameterError, match="policy"):
        location_hotspots(la, lo, 4, 1.0, US, policy="geo")
    with pytest.raises(ParameterError, match="public region"):
        location_hotspots(la, lo, 4, 1.0, (24, 50, -125, -66))  # type: ignore[arg-type]


def test_hotspots_come_back_to_the_right_places() -> None:
    """Tight clusters, huge eps: each released hotspot (lat, lon) sits on its city (projection round trip)."""
    cities = np.array([[47.6, -122.3], [25.8, -80.2], [41.9, -87.6]])  # Seattle, Miami, Chicago
    pts = np.repeat(cities, 400, axis=0) + np.random.default_rng(0).normal(0.0, 0.01, (1200, 2))
    data = project_locations(pts[:, 0], pts[:, 1], US)
    back = data.to_latlon(data.X)
    assert haversine_m(pts[:, 0], pts[:, 1], back[:, 0], back[:, 1]).max() < 1e-3  # exact inverse
    for policy in ("dp", "blowfish"):
        c, _ = location_hotspots(
            pts[:, 0], pts[:, 1], 3, 1e5, US, policy=policy, theta_m=10_000.0, random_state=1
        )
        d = haversine_m(cities[:, None, 0], cities[:, None, 1], c[None, :, 0], c[None, :, 1])
        assert d.min(axis=1).max() < 500.0, policy  # metres: no swapped axes, no degrees-as-metres
        assert nearest_hotspot_distance_m(cities, c) < 500.0


@pytest.mark.parametrize("policy", ["dp", "blowfish"])
def test_hotspot_release_noise_goes_through_privatize(
    airports: pd.DataFrame, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every released count and sum lies on its noise lattice (Sampler.privatize), one call per query."""
    calls: list[float] = []
    original = Sampler.privatize

    def spy(self: Sampler, value: np.ndarray, kind: str, scale: float) -> np.ndarray:
        calls.append(scale)
        return original(self, value, kind, scale)

    monkeypatch.setattr(Sampler, "privatize", spy)
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    _, model = location_hotspots(
        la, lo, 6, 0.7, US, policy=policy, theta_m=30_000.0, random_state=Sampler(seed=5)
    )
    state = model.released_state()
    for t in range(model.n_iter_):
        for values, scale in (
            (state.noisy_counts[t], state.count_scale[t]),
            (state.noisy_sums[t], state.sum_scale[t]),
        ):
            assert np.array_equal(snap_to_noise_grid(values, scale), values)
            assert scale in calls
    assert len(calls) == 2 * model.n_iter_
    assert math.fsum(e for _, e in model.budget_log_) == 0.7


def test_blowfish_hotspot_gain_is_as_small_as_the_guarantee_text_says(airports: pd.DataFrame) -> None:
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    _, dp = location_hotspots(la, lo, 8, 1.0, US, random_state=3)
    _, bf = location_hotspots(la, lo, 8, 1.0, US, policy="blowfish", theta_m=50_000.0, random_state=3)
    print(f"Blowfish gain vs bounded DP: {np.round(bf.sensitivity_gain_, 3)}")
    assert np.all(bf.sensitivity_gain_ < 1.1)  # "within a few percent of bounded DP's"
    assert bf.sum_sensitivity_.min() > 1.8 * dp.sum_sensitivity_.max()  # "about twice DP hotspots'"
    assert np.all(bf.count_sensitivity_ == 2.0) and np.all(dp.count_sensitivity_ == 1.0)


def test_hotspot_trials_loss_falls_with_eps(airports: pd.DataFrame) -> None:
    data = project_locations(airports.latitude.to_numpy(), airports.longitude.to_numpy(), US)
    true = true_hotspots(data, 8)
    centres = hotspot_trials(data, 8, [0.2, 5.0], 6, Sampler.diagnostic(0))
    assert centres.shape == (2, 6, 8, 2)
    base = wcss(data.X, true)
    loss = (wcss_many(data.X, centres) - base) / base
    print(f"median fractional WCSS loss: eps 0.2 {np.median(loss[0]):.3f}, eps 5 {np.median(loss[1]):.3f}")
    assert loss.min() > -0.01  # non-private k-means is (near) optimal
    assert np.median(loss[1]) < 0.5 * np.median(loss[0])
    with pytest.raises(ParameterError, match="diagnostic"):
        hotspot_trials(data, 8, [1.0], 1, Sampler(seed=1))
    with pytest.raises(ParameterError, match="smaller K"):
        true_hotspots(project_locations([40.0, 41.0], [-100.0, -101.0], US), 3)


def test_true_hotspots_on_a_sample_match_full_inits(airports: pd.DataFrame) -> None:
    """Above TRUE_SAMPLE rows: inits on a sample, Lloyd on all rows; WCSS within 0.1% of 10 full inits."""
    rng = np.random.default_rng(5)
    pick = rng.integers(0, len(airports), 3 * TRUE_SAMPLE)
    lat = airports.latitude.to_numpy()[pick] + rng.normal(0, 0.05, pick.size)
    lon = airports.longitude.to_numpy()[pick] + rng.normal(0, 0.05, pick.size)
    data = project_locations(lat, lon, US)
    with threadpool_limits(1):
        full = KMeans(8, n_init=10, random_state=0).fit(data.X).cluster_centers_
    fast = true_hotspots(data, 8)
    assert wcss(data.X, fast) <= 1.001 * wcss(data.X, full)


@pytest.mark.parametrize("policy", ["dp", "blowfish"])
def test_batched_hotspot_trials_match_one_fit_per_trial(airports: pd.DataFrame, policy: str) -> None:
    """hotspot_trials (all runs at once) vs 60 separate estimator fits: same WCSS distribution (KS)."""
    rows = airports.iloc[::4]
    data = project_locations(rows.latitude.to_numpy(), rows.longitude.to_numpy(), US)
    batched = hotspot_trials(data, 4, [1.0, 5.0], 60, Sampler.diagnostic(0), policy=policy, theta_m=50_000.0)
    assert batched.shape == (2, 60, 4, 2)
    one_by_one = np.stack(
        [
            hotspot_estimator(
                data, 4, 1.0, policy=policy, theta_m=50_000.0, random_state=Sampler.diagnostic(100 + s)
            )
            .fit(data.X)
            .cluster_centers_
            for s in range(60)
        ]
    )
    a, b = wcss_many(data.X, batched[0]), wcss_many(data.X, one_by_one)
    pvalue = stats.ks_2samp(a, b).pvalue
    print(
        f"{policy}: KS p = {pvalue:.3f}, median WCSS batched {np.median(a):.3e}, "
        f"one by one {np.median(b):.3e}"
    )
    assert pvalue > 1e-3
    assert np.median(wcss_many(data.X, batched[1])) < np.median(a)  # larger eps, better centres


def test_nearest_hotspot_distance() -> None:
    one_degree = EARTH_RADIUS_M * math.pi / 180.0
    got = nearest_hotspot_distance_m([[0.0, 0.0], [0.0, 10.0]], [[0.0, 1.0], [0.0, 2.0], [0.0, 10.0]])
    assert got == pytest.approx(one_degree / 2)
    with pytest.raises(ParameterError, match="non-empty"):
        nearest_hotspot_distance_m([[0.0, 0.0]], np.empty((0, 2)))


def test_sample_log_weights_never_picks_zero_weight_and_matches_probabilities() -> None:
    logits = np.array([0.0, np.log(3.0), -np.inf, np.log(6.0)])
    for dtype in (np.float64, np.float32):
        log_w = np.repeat(logits[:, None], 50_000, axis=1).astype(dtype)
        counts = np.bincount(sample_log_weights(log_w, Sampler(seed=3)), minlength=4)
        assert counts[2] == 0
        assert stats.chisquare(counts[[0, 1, 3]], 50_000 * np.array([0.1, 0.3, 0.6])).pvalue > 0.01


def test_exact_select_matches_the_exponential_mechanism_and_never_picks_a_banned_candidate() -> None:
    dist = np.array([[0.0, 300.0], [100.0, 0.0], [np.inf, 150.0], [250.0, np.inf]])  # metres; inf: banned
    columns = np.repeat([0, 1], [30_000, 30_000])
    choice = exact_select(dist[:, columns], 1000.0, 2.0, Sampler(seed=8))
    for j in (0, 1):
        counts = np.bincount(choice[columns == j], minlength=4)
        allowed = np.isfinite(dist[:, j])
        p = np.exp(-2.0 * dist[allowed, j] / (2 * 1000.0))  # exp(eps q / (2 HS)), q = -d
        assert counts[~allowed].sum() == 0
        assert stats.chisquare(counts[allowed], counts.sum() * p / p.sum()).pvalue > 0.01


def test_released_selection_uses_no_float_inverse_cdf(visits: pd.DataFrame, monkeypatch) -> None:
    """Issue 19, finding 5: a release's selection (replaced and added visits) is exact; the float inverse
    CDF only serves diagnostic runs."""

    def refused(*_args: object) -> None:
        raise AssertionError("a release drew its selection from a float inverse CDF")

    monkeypatch.setattr(prilocation, "sample_log_weights", refused)
    m = PriLocation(1.0, US, level="state", n_clusters=20, grid_size=20, random_state=Sampler(seed=4))
    table = m.fit(visits.user, visits.lat, visits.lon).released()
    assert len(table) > 0 and m.diagnostic_added_.any()


def test_float32_selection_scores_keep_sub_metre_precision_at_street_level(visits: pd.DataFrame) -> None:
    v = prepare_visits(visits.user, visits.lat, visits.lon, US)
    hs = 500.0
    dist, bearing = candidate_offsets(hs, hs / 8)
    c_lat, c_lon = v.lat[:3], v.lon[:3]
    cand_lat, cand_lon = destination_point(c_lat[:, None], c_lon[:, None], bearing[None, :], dist[None, :])
    allowed = np.ones(cand_lat.shape, dtype=bool)
    near_lat, near_lon = destination_point(c_lat, c_lon, 45.0, 120.0)  # one visit 120 m from each centre
    uv = unit_vectors(near_lat, near_lon)
    bounds = np.arange(4)
    args = (uv, bounds, unit_vectors(c_lat, c_lon), unit_vectors(cand_lat, cand_lon), allowed, 1.0)
    d32 = -_selection_log_weights(*args, np.float32) * EARTH_RADIUS_M
    d64 = -_selection_log_weights(*args, np.float64) * EARTH_RADIUS_M
    true = haversine_m(near_lat[None, :], near_lon[None, :], cand_lat.T, cand_lon.T)
    assert np.abs(d64 - true).max() < 0.01  # chord = great circle at this scale
    assert np.abs(d32 - d64).max() < 0.5  # float32 relative to the centre: sub-metre


def test_diagnostic_prilocation_run_has_the_release_distribution(visits: pd.DataFrame) -> None:
    v = prepare_visits(visits.user, visits.lat, visits.lon, US)
    de = {True: [], False: []}
    for diagnostic in (True, False):
        for t in range(6):
            run = run_prilocation(
                v, 1.0, 300_000.0, US, 40, 30, 37_500.0, Sampler.diagnostic(t), diagnostic=diagnostic
            )
            assert (run.w_noisy is None) == diagnostic
            de[diagnostic].append(distance_error(v.codes[run.kept], run.displacement_m(v), 300_000.0))
    assert np.mean(de[True]) == pytest.approx(np.mean(de[False]), rel=0.05)


def test_range_query_equals_brute_force_leaf_overlap(airports: pd.DataFrame) -> None:
    la, lo = airports.latitude.to_numpy(), airports.longitude.to_numpy()
    boxes = np.vstack([random_boxes(US, 40, 5), [[24.0, 50.0, -125.0, -66.0], [30.0, 30.001, -90.0, -89.9]]])
    for build in (uniform_grid, adaptive_grid):
        g = build(la, lo, 2.0, US, n_estimate=float(la.size), random_state=Sampler.diagnostic(2))
        lv = g.leaves
        h = np.clip(np.minimum(lv[:, 1], boxes[:, 1:2]) - np.maximum(lv[:, 0], boxes[:, 0:1]), 0, None)
        w = np.clip(np.minimum(lv[:, 3], boxes[:, 3:4]) - np.maximum(lv[:, 2], boxes[:, 2:3]), 0, None)
        brute = (h / (lv[:, 1] - lv[:, 0]) * w / (lv[:, 3] - lv[:, 2]) * lv[:, 4]).sum(axis=1)
        assert g.range_query(boxes) == pytest.approx(brute, rel=1e-9, abs=1e-6)


def test_sweep_reports_progress_and_rejects_bad_eps(visits: pd.DataFrame) -> None:
    seen: list[float] = []
    frame = location_sweep(
        visits.lat,
        visits.lon,
        visits.user,
        ["prilocation", "dp_mean"],
        [1.0],
        1,
        region=US,
        params={"prilocation": {"n_clusters": 20}},
        progress=lambda f, _t: seen.append(f),
    )
    assert len(frame) == 2 and seen == sorted(seen) and seen[-1] == 1.0
    with pytest.raises(ParameterError, match="epsilon"):
        location_sweep(visits.lat, visits.lon, visits.user, ["dp_mean"], [0.0], 1, region=US)
