"""Trajectories engine: road-trip generator, trip preparation under public limits, DPT and its baselines.

Privacy side: every released count vector's change over every neighbouring pair (one person's at most m
trips of at most L fixes added or removed) on a tiny hierarchy stays within what its noise is calibrated
to; the budget parts add up to at most eps exactly; an empirical distinguishing test stays below the
claim; the trip cap draws trips uniformly. Utility side: on 20,000 trips DPT beats both baselines on
range-query error and trip-length distance at eps = 1 (10 trials), and comes closer on both as eps grows.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.trajectory.dpt import DPT, Hierarchy, anchor_sequences, level_weight
from dpcore.trajectory.prepare import TripLimits, TripSet, plane_box, prepare_trips
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips
from dpcore.trajectory.sweep import compare
from tests.system.test_audit_per_user_cap import clopper_pearson_epsilon


@pytest.fixture(scope="module")
def fixes() -> pd.DataFrame:
    return road_trips(1000, seed=3)


@pytest.fixture(scope="module")
def trips(fixes: pd.DataFrame) -> TripSet:
    limits = TripLimits(DEFAULT_REGION, max_trips=2, max_fixes=60)
    return prepare_trips(fixes.person, fixes.time, fixes.lat, fixes.lon, limits, Sampler.diagnostic(0)).trips


def test_the_generator_is_deterministic_and_states_its_time_zone(fixes: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(road_trips(100, seed=3), road_trips(100, seed=3))
    assert list(fixes.columns) == ["person", "trip", "time", "lat", "lon"]
    assert str(fixes.time.dt.tz) == "UTC"
    assert DEFAULT_REGION.contains(fixes.lat, fixes.lon).all()
    assert not road_trips(50, seed=4).equals(road_trips(50, seed=5))


def test_the_shipped_sample_is_the_generator_s_output() -> None:
    from dpcore.data import load_sample

    shipped = load_sample("road_trips")
    made = road_trips(100, seed=11)
    assert len(shipped) == len(made)
    assert (pd.to_datetime(shipped.time, utc=True) == made.time).all()
    np.testing.assert_array_equal(shipped[["lat", "lon"]].to_numpy(), made[["lat", "lon"]].to_numpy())


def test_preparation_applies_every_public_limit(fixes: pd.DataFrame) -> None:
    limits = TripLimits(DEFAULT_REGION, max_trips=1, max_fixes=10, gap_s=1200, max_speed_mps=40)
    out = prepare_trips(fixes.person, fixes.time, fixes.lat, fixes.lon, limits, Sampler.diagnostic(1))
    t = out.trips
    assert np.bincount(t.person).max() == 1
    assert t.lengths.max() == 10 and t.lengths.min() >= 2
    assert out.counts["trips_over_cap"] > 0 and out.counts["fixes_truncated"] > 0
    step = np.hypot(np.diff(t.x), np.diff(t.y))[np.diff(t.trip_of) == 0]
    assert step.max() <= 40 * 30 * 1.01  # fixes 30 s apart
    # the gap split finds the trips the trip column names (the generator leaves >= 30 min between them)
    wide = TripLimits(DEFAULT_REGION, max_trips=10, max_fixes=10_000)
    by_gap = prepare_trips(fixes.person, fixes.time, fixes.lat, fixes.lon, wide, Sampler.diagnostic(1))
    by_col = prepare_trips(
        fixes.person, fixes.time, fixes.lat, fixes.lon, wide, Sampler.diagnostic(1), trip=fixes.trip
    )
    assert by_gap.trips.n_trips == by_col.trips.n_trips == fixes.groupby(["person", "trip"]).ngroups
    outside = prepare_trips(
        fixes.person,
        fixes.time,
        fixes.lat,
        fixes.lon,
        TripLimits(Region(44.91, 45.0, 6.87, 7.0)),
        Sampler.diagnostic(1),
    )
    assert outside.counts["fixes_outside_region"] > 0


def test_limits_are_checked() -> None:
    with pytest.raises(ParameterError, match="max_trips"):
        TripLimits(DEFAULT_REGION, max_trips=0)
    with pytest.raises(ParameterError, match="max_speed_mps"):
        TripLimits(DEFAULT_REGION, max_speed_mps=float("nan"))


def test_a_person_over_the_cap_keeps_a_uniformly_random_subset() -> None:
    """Three trips, m = 1: each kept about a third of the time, whatever its values (chi-square)."""
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    time = [t0 + pd.Timedelta(minutes=m) for m in (0, 1, 60, 61, 120, 121)]
    lat = [45.0, 45.001, 45.02, 45.021, 45.05, 45.051]
    limits = TripLimits(DEFAULT_REGION, max_trips=1)
    kept = np.zeros(3)
    random_state = Sampler.diagnostic(2)
    for _ in range(300):
        out = prepare_trips(["a"] * 6, time, lat, [7.0] * 6, limits, random_state).trips
        kept[
            int(
                np.argmin(
                    np.abs(
                        np.array([45.0, 45.02, 45.05])
                        - limits.region.projection().inverse(out.x[:1], out.y[:1])[0][0]
                    )
                )
            )
        ] += 1
    assert stats.chisquare(kept).pvalue > 1e-3


# -- DPT: privacy ---------------------------------------------------------------------------------------

TINY = Region(45.0, 45.02, 7.0, 7.03)
M, L, ORDER = 2, 4, 2


def _tiny_model(eps: float = 1.0, random_state: Sampler | None = None) -> DPT:
    return DPT(
        eps,
        max_trips=M,
        max_fixes=L,
        box=plane_box(TINY),
        finest=4,
        levels=2,
        order=ORDER,
        window=2,
        random_state=random_state,
    )


def _tripset(trips: list[list[tuple[float, float]]]) -> TripSet:
    x = np.array([p[0] for t in trips for p in t], dtype=float)
    y = np.array([p[1] for t in trips for p in t], dtype=float)
    return TripSet(x, y, np.r_[0, np.cumsum([len(t) for t in trips])].astype(np.int64))


def _candidate_trips() -> list[list[tuple[float, float]]]:
    """Short trips (<= L fixes) in the tiny box's square: slow ones, fast ones, jumps that interpolate."""
    x0, y0, side = plane_box(TINY)
    c = side / 4
    at = lambda i, j: (x0 + (i + 0.5) * c, y0 + (j + 0.5) * c)  # noqa: E731
    return [
        [at(0, 0), at(0, 0)],
        [at(0, 0), at(1, 0), at(1, 1), at(2, 2)],
        [at(3, 3), at(0, 0)],  # a jump across the square: anchors interpolated, then cut at L_k
        [at(0, 3), at(3, 0), at(0, 3), at(3, 0)],
        [at(2, 1), at(2, 2), at(1, 2)],
        [at(1, 1), (at(1, 1)[0] + 1.0, at(1, 1)[1])],
    ]


def _base() -> list[list[tuple[float, float]]]:
    cand = _candidate_trips()
    return [cand[1], cand[4], cand[2], cand[5], cand[1]]


def test_every_released_count_moves_within_its_calibrated_sensitivity() -> None:
    """Brute force: every person of at most m candidate trips (with repeats) added to the base table, for
    every selection of systems: each vector's L1 change, weighted by 1 / (its per-system weight), is at most
    m (so Laplace(m w / eps_part) bounds the loss by eps_part)."""
    model = _tiny_model()
    hier = Hierarchy(*model.box, finest=4, levels=2)
    caps = np.minimum(L, 2 * hier.cells(np.arange(2)))
    cand, base = _candidate_trips(), _base()
    worst: dict[str, Fraction] = {}
    for selected in (np.array([1]), np.array([0, 1])):
        before = model.true_counts(_tripset(base), selected)
        for size in range(1, M + 1):
            for person in itertools.combinations_with_replacement(range(len(cand)), size):
                after = model.true_counts(_tripset(base + [cand[i] for i in person]), selected)
                for name, (keys, counts) in after.items():
                    b = dict(zip(*before[name], strict=True))
                    a = dict(zip(keys, counts, strict=True))
                    total = Fraction(0)
                    for key in set(a) | set(b):
                        diff = abs(int(a.get(key, 0)) - int(b.get(key, 0)))
                        if name.startswith("level"):
                            j = int(name.split()[1])
                            tok = key % (hier.n_cells + 2)
                            cell = (
                                tok - 2 if tok >= 2 else (key // (hier.n_cells + 2)) % (hier.n_cells + 2) - 2
                            )
                            diff = Fraction(
                                diff, int(level_weight(j, caps[hier.level_of(np.array([cell]))[0]]))
                            )
                        total += diff
                    worst[name] = max(worst.get(name, Fraction(0)), total)
    assert set(worst) == {"reference systems", "start cells", "level 1", "level 2", "level 3"}
    assert all(v <= M for v in worst.values()), worst
    assert worst["reference systems"] == M and worst["level 2"] == M  # the bound is reached: it is tight


def test_anchor_sequences_move_between_neighbouring_cells_only() -> None:
    hier = Hierarchy(*plane_box(TINY), finest=4, levels=2)
    t = _tripset(_candidate_trips())
    for level in (0, 1):
        ids, offsets = anchor_sequences(t, np.full(t.n_trips, level), hier, 50)
        k, ix, iy = hier.split(ids)
        same = np.diff(np.repeat(np.arange(t.n_trips), np.diff(offsets))) == 0
        assert (k == level).all()
        assert (np.maximum(np.abs(np.diff(ix)), np.abs(np.diff(iy)))[same] == 1).all()


@pytest.mark.parametrize("eps", [0.1, 1 / 3, 1.0, 7.77, 1e-3])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_the_budget_parts_add_up_to_at_most_eps_exactly(eps: float, order: int) -> None:
    log = DPT(eps, max_trips=2, max_fixes=60, box=(0, 0, 1), order=order).budget()
    assert [n for n, _ in log] == [
        "reference systems",
        "start cells",
        *[f"level {j}" for j in range(1, order + 2)],
    ]
    total = sum((Fraction(e) for _, e in log), Fraction(0))
    assert total <= Fraction(eps) and total >= Fraction(eps) * (1 - Fraction(1, 10**9))


def test_the_scales_follow_the_budget_and_the_limits() -> None:
    model = DPT(1.0, max_trips=3, max_fixes=60, box=(0, 0, 1), finest=64, levels=4, order=2)
    hier = Hierarchy(0, 0, 1, 64, 4)
    eps = dict(model.budget())
    scales = model.scales(hier)
    assert scales["start cells"] == 3 / eps["start cells"]
    # L_k = min(60, 2 x cells a side): 60, 60, 32, 16 anchors
    assert list(scales["level 1"] * eps["level 1"] / 3) == [60, 60, 32, 16]
    assert list(scales["level 3"] * eps["level 3"] / 3) == [60, 60, 32, 16]


def test_one_person_is_not_distinguishable_beyond_the_claim() -> None:
    """D and D plus one person whose m trips start in a cell no one else visits; the event: a synthetic
    trip starts in that cell. The Clopper-Pearson lower bound on eps stays below the claim."""
    cand = _candidate_trips()
    base = [cand[1], cand[4], cand[5]] * 3
    person = [cand[3], cand[3]]
    eps, runs = 2.0, 200
    x0, y0, side = plane_box(TINY)
    hits = []
    for table in (base, base + person):
        count = 0
        random_state = Sampler.diagnostic(len(table))
        for _ in range(runs):
            out = _tiny_model(eps, random_state).fit(_tripset(table)).sample()
            starts = out.offsets[:-1][out.lengths > 0]
            count += bool(((out.x[starts] < x0 + side / 4) & (out.y[starts] > y0 + 3 * side / 4)).any())
        hits.append(count)
    assert clopper_pearson_epsilon(hits[0], hits[1], runs) < eps, hits


def test_synthetic_trips_hold_no_true_position_or_count(trips: TripSet) -> None:
    model = DPT(
        1.0, max_trips=2, max_fixes=60, box=plane_box(DEFAULT_REGION), random_state=Sampler.diagnostic(5)
    )
    outs = [model.fit(trips).sample() for _ in range(3)]
    true_points = set(zip(np.round(trips.x, 3), np.round(trips.y, 3), strict=True))
    for out in outs:
        assert not true_points & set(zip(np.round(out.x, 3), np.round(out.y, 3), strict=True))
    assert len({o.n_trips for o in outs}) > 1  # the number of trips is noisy


def test_synthetic_trips_do_not_depend_on_how_many_are_stepped_at_once(trips: TripSet, monkeypatch) -> None:
    """The walks step their rows in chunks of WALK_ROWS (one draw per step for every walking trip), the
    chunks on threads: any chunk size and any number of threads give the same trips with the same
    sampler."""
    from dpcore.trajectory import dpt

    def draw() -> TripSet:
        model = DPT(
            1.0, max_trips=2, max_fixes=60, box=plane_box(DEFAULT_REGION), random_state=Sampler.diagnostic(8)
        )
        return model.fit(trips).sample()

    monkeypatch.setattr(dpt, "workers", lambda: 1)
    whole = draw()
    monkeypatch.setattr(dpt, "WALK_ROWS", 7)
    monkeypatch.setattr(dpt, "workers", lambda: 3)
    chunked = draw()
    assert whole.n_trips > 100 and np.diff(whole.offsets).max() > 2
    for a, b in ((whole.x, chunked.x), (whole.y, chunked.y), (whole.offsets, chunked.offsets)):
        np.testing.assert_array_equal(a, b)


# -- utility --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def road_network() -> TripSet:
    """10,900 people's fixes on the generated road network, prepared with m = 2, L = 60: 20,000 trips."""
    made = road_trips(10_900, seed=3)
    limits = TripLimits(DEFAULT_REGION, max_trips=2, max_fixes=60)
    return prepare_trips(made.person, made.time, made.lat, made.lon, limits, Sampler.diagnostic(0)).trips


def test_dpt_beats_both_baselines_at_eps_1(road_network: TripSet) -> None:
    """At least 20,000 trips, eps = 1, 10 trials: mean range-query error and trip-length JSD."""
    assert road_network.n_trips >= 20_000
    result = compare(road_network, DEFAULT_REGION, [1.0], max_trips=2, max_fixes=60, trials=10, n_queries=60)
    mean = result.table.groupby("mechanism")[["range_error", "length_jsd"]].mean()
    for metric in ("range_error", "length_jsd"):
        assert mean.loc["dpt", metric] < mean.loc["markov_grid", metric], mean
        assert mean.loc["dpt", metric] < mean.loc["per_point", metric], mean
    assert set(result.examples) == {"dpt", "markov_grid", "per_point"}


def test_dpt_comes_closer_to_the_true_trips_as_eps_grows(road_network: TripSet) -> None:
    """Less noise, closer trips: both measures fall from eps = 1 to eps = 8 (5 trials). With one offset
    shared by a trip's anchors, every synthetic length was a sum of whole cell steps, and the trip-length
    distance rose with eps (0.068 at 1, 0.107 at 8 on 37,000 trips)."""
    result = compare(
        road_network,
        DEFAULT_REGION,
        [1.0, 8.0],
        max_trips=2,
        max_fixes=60,
        trials=5,
        mechanisms=["dpt"],
        n_queries=60,
    )
    mean = result.table.groupby("epsilon")[["range_error", "length_jsd"]].mean()
    assert (mean.loc[8.0] < mean.loc[1.0]).all(), mean


def test_each_synthetic_point_is_a_uniform_point_of_its_own_anchor_cell(trips: TripSet) -> None:
    """One grid of 16 cells a side: a point's place within its cell is uniform (Kolmogorov-Smirnov) and
    drawn for each point, not shared along a trip; consecutive points lie in neighbouring cells (their
    anchors')."""
    box = plane_box(DEFAULT_REGION)
    model = DPT(
        2.0,
        max_trips=2,
        max_fixes=60,
        box=box,
        finest=16,
        levels=1,
        order=1,
        window=0,
        random_state=Sampler.diagnostic(3),
    )
    out = model.fit(trips).sample()
    side = box[2] / 16
    cell = np.floor(np.c_[out.x - box[0], out.y - box[1]] / side)
    within = np.c_[out.x - box[0], out.y - box[1]] / side - cell
    assert out.n_fixes > 1000 and ((cell >= 0) & (cell < 16)).all()
    for axis in (0, 1):
        assert stats.kstest(within[:, axis], "uniform").pvalue > 1e-3
    inner = np.ones(out.n_fixes, dtype=bool)
    inner[out.offsets[1:] - 1] = False  # a trip's last point has no next one in the trip
    steps = np.abs(cell[1:] - cell[:-1])[inner[:-1]]
    assert steps.max() <= 1 and (steps.sum(axis=1) > 0).all()
    for axis in (0, 1):
        assert abs(np.corrcoef(within[:-1, axis][inner[:-1]], within[1:, axis][inner[:-1]])[0, 1]) < 0.1
