"""Issue 19, finding 2: a per-user bounded release must not publish a person's number of rows.

Bounded neighbours replace one person's locations by any others, as many or not: the audit found dp_mean's
table column ``n`` (101 vs 103 for a user with 1 vs 3 locations), its ``laplace_scale_m`` and the bounded
grids' ``n_estimate`` equal to the exact kept-row count. Two such neighbouring tables must give identical
values for every field not drawn from noise, and the true counts must appear in no released file.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dpcore.location.geometry import Region
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.mechanisms import Sampler

REGION = Region(30.0, 45.0, -110.0, -85.0)
CAP = 3


def neighbours() -> tuple[LocationInputs, LocationInputs, int, int]:
    """211 users with 1 location each plus user 'x' with 1, then 3, locations; the kept counts of both."""
    rng = np.random.default_rng(3)
    lat, lon = rng.uniform(31, 44, 214), rng.uniform(-109, -86, 214)
    users = np.array([f"u{i}" for i in range(211)] + ["x"] * 3)

    def table(rows: int) -> LocationInputs:
        n = 211 + rows
        return LocationInputs(lat[:n], lon[:n], users[:n], REGION)

    return table(1), table(3), 212, 214


# key, params, the published fields drawn from noise (or computed from noisy values only)
CASES = [
    ("dp_mean", {"neighbours": "bounded", "max_per_user": CAP}, {"lat", "lon", "n"}, set()),
    ("uniform_grid", {"neighbours": "bounded", "max_per_user": CAP}, {"noisy_count"}, {"n_estimate"}),
    ("adaptive_grid", {"neighbours": "bounded", "max_per_user": CAP}, {"noisy_count"}, {"n_estimate"}),
    (
        "dp_hotspots",
        {"neighbours": "bounded", "max_per_user": CAP, "hotspot_k": 3},
        {"lat", "lon"},
        {"n_iter", "budget_log_per_location", "count_sensitivity", "sum_l1_sensitivity_m"},
    ),
]


@pytest.mark.parametrize(
    ("key", "params", "noisy_columns", "noisy_details"), CASES, ids=[c[0] for c in CASES]
)
def test_neighbouring_tables_publish_the_same_facts_and_no_true_count(
    key: str, params: dict, noisy_columns: set[str], noisy_details: set[str]
) -> None:
    small, large, n_small, n_large = neighbours()
    spec = LOCATIONS[key]
    a, b = (
        spec.release(t, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(7))
        for t in (small, large)
    )
    assert list(a.table.columns) == list(b.table.columns)
    exact = [c for c in a.table.columns if c not in noisy_columns]
    if key == "dp_mean":
        assert a.table[exact].equals(b.table[exact])
    fixed = {k: v for k, v in a.details.items() if k not in noisy_details and k != "cells_per_side_level_1"}
    assert fixed == {k: b.details[k] for k in fixed}, key
    for out, n in ((a, n_small), (b, n_large)):
        files = out.table.to_csv(index=False) + json.dumps(out.details, default=str)
        assert not re.search(rf"(?<![\d.]){n}(\.0+)?(?![\d.])", files), (key, n)


def test_dp_hotspots_per_user_take_their_rounds_from_a_noisy_count() -> None:
    """Bounded DP-Lloyd chose T from the exact kept count (at eps 12.3, T = 2 for one table and 3 for its
    neighbour, whatever the seed); per user it now spends 2% of eps on a noisy count: both give both."""
    small, large, _, _ = neighbours()
    params = {"neighbours": "bounded", "max_per_user": CAP, "hotspot_k": 3}
    rounds = [
        {
            LOCATIONS["dp_hotspots"]
            .release(t, epsilon=12.3, delta=0.0, params=params, random_state=Sampler(s))
            .details["n_iter"]
            for s in range(12)
        }
        for t in (small, large)
    ]
    assert len(rounds[0]) > 1 and rounds[0] == rounds[1], rounds
    out = LOCATIONS["dp_hotspots"].release(
        small, epsilon=12.3, delta=0.0, params=params, random_state=Sampler(0)
    )
    log = out.details["budget_log_per_location"]
    assert log[0][0] == "row count (sets the number of rounds)"
    assert math.fsum(e for _, e in log) == out.details["epsilon_per_location"] == pytest.approx(12.3 / CAP)
