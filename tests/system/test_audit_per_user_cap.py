"""Issue 19, finding 1: the per-user cap must keep rows chosen independently of their values.

The audit's table: one user with 100 identical home visits and one visit 300 km away, a cap of 5; in the
neighbouring table each home visit has moved by at most 0.98 m. A cap keyed on the values kept the far
visit in about half the releases of the first table and a twentieth of the second (planar Laplace per
user: empirical eps >= 2.04 against a claim of 0.001). Each test releases both tables many times with
secure sampling, counts an event that sees whether the far visit was kept, and checks that the
Clopper-Pearson lower bound on eps (99.9% intervals) stays below the guarantee's claim for the pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcore.location.geometry import Region, destination_point, haversine_m
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.mechanisms import Sampler

HOME = (40.0, -100.0)
REGION = Region(39.0, 41.0, -104.0, -96.0)  # centred on the home: the hotspot estimator's centring
MAX_MOVE_M = 0.98
_FAR = destination_point(np.array([HOME[0]]), np.array([HOME[1]]), np.array([90.0]), np.array([300_000.0]))
FAR = (float(_FAR[0][0]), float(_FAR[1][0]))
ALPHA = 1e-3  # each Clopper-Pearson bound holds with probability 1 - ALPHA / 2


def _table(lat: np.ndarray, lon: np.ndarray, others: int) -> LocationInputs:
    """The user's 100 home visits (``lat``, ``lon``), the far visit, and ``others`` one-visit users placed
    in symmetric pairs around the home (their mean is the home)."""
    off = np.random.default_rng(1).uniform(-0.1, 0.1, (2, others // 2))
    o_lat, o_lon = np.r_[HOME[0] + off[0], HOME[0] - off[0]], np.r_[HOME[1] + off[1], HOME[1] - off[1]]
    users = np.array(["a"] * 101 + [f"b{i}" for i in range(o_lat.size)])
    return LocationInputs(np.r_[lat, FAR[0], o_lat], np.r_[lon, FAR[1], o_lon], users, REGION)


def neighbours(others: int = 0) -> tuple[LocationInputs, LocationInputs]:
    """The audit's pair: home visits identical, then each moved by at most 0.98 m."""
    rng = np.random.default_rng(0)
    moved = destination_point(
        np.full(100, HOME[0]),
        np.full(100, HOME[1]),
        rng.uniform(0, 360, 100),
        rng.uniform(0, MAX_MOVE_M, 100),
    )
    assert haversine_m(moved[0], moved[1], HOME[0], HOME[1]).max() <= MAX_MOVE_M
    return _table(np.full(100, HOME[0]), np.full(100, HOME[1]), others), _table(*moved, others)


def _far_from_home(km: float) -> Callable[[pd.DataFrame], bool]:
    return lambda t: bool((haversine_m(t.lat.to_numpy(), t.lon.to_numpy(), *HOME) > km * 1000).any())


def _near_far(t: pd.DataFrame) -> bool:
    return bool((haversine_m(t.lat.to_numpy(), t.lon.to_numpy(), *FAR) < 100_000).any())


def _east_of_home(others: int) -> Callable[[pd.DataFrame], bool]:
    """The centre of all rows moved east by more than half the far visit's pull (300 km / n)."""
    half_pull = 300_000 / (5 + others) / (111_320 * math.cos(math.radians(HOME[0]))) / 2
    return lambda t: bool(t.lon.iloc[0] > HOME[1] + half_pull)


class Case(NamedTuple):
    params: dict[str, Any]
    epsilon: float
    claim: float  # the guarantee's bound on the pair's privacy loss
    others: int  # one-visit users around the home
    event: Callable[[pd.DataFrame], bool]  # on the released table: was the far visit kept?
    runs: int  # releases of each table


CASES = {
    # level 1 within 1000 m: moving each location by <= 0.98 m costs 1 x 0.98 / 1000 for the whole person
    "planar_laplace": Case(
        {"radius_m": 1000.0, "max_per_user": 5}, 1.0, MAX_MOVE_M / 1000, 0, _far_from_home(150), 200
    ),
    # theta = 1 m: every location moves along one edge of the policy graph, eps for the whole person
    "blowfish_mean": Case({"theta_m": 1.0, "max_per_user": 5}, 0.5, 0.5, 0, _far_from_home(30), 200),
    "blowfish_hotspots": Case(
        {"theta_m": 1.0, "hotspot_k": 1, "max_per_user": 5}, 0.5, 0.5, 1000, _east_of_home(1000), 150
    ),
    # every visit moves within HS in its cluster: eps for the whole person (its own noise hides the cap)
    "prilocation": Case(
        {"hs_m": 500.0, "n_clusters": 2, "grid_size": 10, "max_per_user": 5}, 1.0, 1.0, 40, _near_far, 100
    ),
}


def clopper_pearson_epsilon(k1: int, k2: int, n: int, alpha: float = ALPHA) -> float:
    """Lower bound on eps from k1 and k2 events in n runs each: log(lower(p1) / upper(p2)), over both
    orders and the complementary event (-inf when no bound is positive)."""

    def bound(a: int, b: int) -> float:
        lo = stats.beta.ppf(alpha / 2, a, n - a + 1) if a else 0.0
        hi = stats.beta.ppf(1 - alpha / 2, b + 1, n - b) if b < n else 1.0
        return math.log(lo / hi) if lo > 0 else -math.inf

    return max(bound(k1, k2), bound(k2, k1), bound(n - k1, n - k2), bound(n - k2, n - k1))


def distinguishing_bound(key: str) -> tuple[float, float, list[int]]:
    """(the empirical lower bound on eps, the claim, the event counts) of ``key`` on the audit's pair."""
    case, spec = CASES[key], LOCATIONS[key]
    hits = [
        sum(
            case.event(
                spec.release(
                    table, epsilon=case.epsilon, delta=0.0, params=case.params, random_state=Sampler()
                ).table
            )
            for _ in range(case.runs)
        )
        for table in neighbours(case.others)
    ]
    return clopper_pearson_epsilon(hits[0], hits[1], case.runs), case.claim, hits


@pytest.mark.parametrize("key", list(CASES))
def test_the_per_user_cap_does_not_tell_the_neighbouring_tables_apart(key: str) -> None:
    bound, claim, hits = distinguishing_bound(key)
    assert bound < claim, (key, hits, bound, claim)


def test_the_bound_sees_a_cap_that_keeps_the_far_visit_half_the_time() -> None:
    """The audit's counts (766 vs 76 of 1500) give a bound near 2; equal counts give none."""
    assert clopper_pearson_epsilon(766, 76, 1500) > 1.8
    assert clopper_pearson_epsilon(100, 76, 1500) < 0.0
