"""dpcore.location.private_region: a location release's region estimated with OpenDP's DP quantile per
latitude and longitude, a step of the release plan charged with the release on its own account (pure DP,
Blowfish or geo-indistinguishability) in one ledger transaction, two rows adding up exactly to the budget;
replayed by the batch job; not telling neighbouring tables apart beyond its ε."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import fingerprint, load_table
from dpcore.errors import ParameterError, PolicyError
from dpcore.ledger import BudgetExceeded, Ledger
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region
from dpcore.location.plan_steps import LocationColumns, PublicRegion
from dpcore.location.private_region import LABEL, LAT_GRID, MECHANISM, WHOLE_EARTH, RegionStep
from dpcore.location.registry import LocationInputs
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan
from dpcore.policy import Blowfish, DistanceThresholdGraph, GeoIndistinguishability, PureDP
from dpcore.releases import make_release
from tests.system.test_audit_per_user_cap import clopper_pearson_epsilon
from ui.ledger_view import releases_frame

RNG = np.random.default_rng(11)
N = 1500
TABLE = pd.DataFrame(
    {"lat": RNG.uniform(30.0, 45.0, N).round(5), "lon": RNG.uniform(-110.0, -80.0, N).round(5)}
)
STEP = RegionStep(0.1)
STEPS = (LocationColumns("lat", "lon", None), STEP)


def _plan(
    mechanism: str = "uniform_grid", epsilon: float = 0.2, eps_b: float = 0.1, **changes
) -> ReleasePlan:
    base = {
        "domain": "location",
        "mechanism": mechanism,
        "epsilon": epsilon,
        "policy": PureDP(1.0),
        "dataset_name": "spots",
        "fingerprint": "f" * 64,
        "params": {"neighbours": "unbounded", "max_per_user": 1},
        "preparation": STEPS,
        "scope": scope_sentence(False, 1),
        "private_bounds": {"region": "latitude and longitude quantiles", "epsilon": eps_b},
    }
    return ReleasePlan(**{**base, **changes})


def _inputs(frame: pd.DataFrame = TABLE) -> LocationInputs:
    return LocationInputs(frame["lat"].to_numpy(), frame["lon"].to_numpy(), None, WHOLE_EARTH)


def test_the_plan_shows_the_region_step_with_its_cost_and_neighbours_for_each_kind_of_account() -> None:
    plan = _plan()
    step = plan.bounds_step
    assert (step.neighbours, step.per_user, step.epsilon) == ("unbounded", None, 0.1)  # the release's
    rows = dict(plan.summary_rows())
    assert rows["ε_b (private region)"] == "0.1" and rows["ε in all"] == "0.3"
    assert "off by up to" in rows["Private region"] and plan.cost == (0.3, 0.0)
    assert "The region was estimated privately first" in plan.guarantee
    assert ReleasePlan.from_manifest(json.loads(json.dumps(plan.to_manifest()))) == plan
    assert batch_refusal(plan) is None

    geo = GeoIndistinguishability(1.0, 1000.0)
    planar = _plan("planar_laplace", 1.0, policy=geo, params={"max_per_user": 1})
    assert planar.bounds_step.neighbours == "bounded"  # any replacement: at most ε_b within r
    rows = dict(planar.summary_rows())
    assert rows["level l in all"] == "1.1" and planar.account.definition == "geo_ind"
    assert "counted as level l = 0.1 on this account" in planar.guarantee
    assert "Geo-indistinguishability at level 1.1 within 1000 m" in planar.guarantee
    graph = DistanceThresholdGraph(50_000.0, "haversine")
    blowfish = _plan(
        "blowfish_mean", policy=Blowfish(1.0, graph), params={"theta_m": 50_000.0, "max_per_user": 1}
    )
    assert blowfish.bounds_step.neighbours == "bounded"
    users = _plan(params={"neighbours": "bounded", "max_per_user": 3}, scope=scope_sentence(True, 3))
    assert (users.bounds_step.neighbours, users.bounds_step.per_user) == ("bounded", 3)
    assert users.bounds_step.parts[0].d_in == 6  # a user's 3 kept rows replaced by 3 others


def test_the_region_step_is_refused_in_demo_mode_and_when_altered() -> None:
    with pytest.raises(PolicyError, match=r"not available in demo mode.*Switch to secure mode"):
        _plan(mode="demo", seed=3)
    altered = {**_plan().private_bounds, "neighbours": "bounded"}
    with pytest.raises(PolicyError, match="other neighbours"):
        _plan(private_bounds=altered)
    with pytest.raises(ParameterError, match="private region"):
        RegionStep(-1.0)


def test_the_region_step_and_the_release_add_up_to_exactly_the_budget_in_one_transaction(
    tmp_path: Path,
) -> None:
    plan = _plan()  # 0.2 + 0.1: 0.30000000000000004 in floats, 0.3 exactly in the ledger
    step = plan.bounds_step
    assert step.spent() <= Fraction("0.1") and 4 * Fraction(repr(step.per_quantile)) <= Fraction("0.1")
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.set_budget(plan.account, 0.29999999999999993, 0.0)  # one ulp short: nothing recorded
    with pytest.raises(BudgetExceeded):
        make_release(ledger, plan, _inputs(), request_id="r0", user="u", artifacts_dir=tmp_path / "a")
    assert ledger.releases(plan.account) == []
    ledger.set_budget(plan.account, 0.3, 0.0)
    release = make_release(ledger, plan, _inputs(), request_id="r1", user="u", artifacts_dir=tmp_path / "a")
    rows = {r.mechanism: r for r in ledger.releases(plan.account)}
    assert (rows["uniform_grid"].epsilon, rows[MECHANISM].epsilon) == (0.2, 0.1)
    assert rows[MECHANISM].part_of == "r1" and rows[MECHANISM].time == rows["uniform_grid"].time
    assert ledger.remaining(plan.account) == (0.0, 0.0)  # exactly spent, no ulp over
    region = Region(**release.manifest["estimated_region"])
    assert release.manifest["details"]["region"] == region.to_dict()  # what the grid was drawn over
    assert set(region.to_dict().values()) <= set(np.arange(-18000, 18001) / 100)  # values of the grids
    frame = releases_frame(ledger)
    assert frame["mechanism"].tolist()[1] == f"↳ {LABEL} for r1"

    # the dataset's geo-indistinguishability account: the DP release above (both parts: one row added or
    # removed) is charged there at twice its ε (a move is a removal and an addition: 2 x 0.3), and a
    # planar Laplace release's region step (bounded: any replacement) at ε_b itself, on its own account
    geo_policy = GeoIndistinguishability(1.0, 1000.0)
    geo = _plan("planar_laplace", 1.0, policy=geo_policy, params={"max_per_user": 1})
    ledger.set_budget(geo.account, 1.7, 0.0)
    assert ledger.remaining(geo.account)[0] == pytest.approx(1.1)
    make_release(ledger, geo, _inputs(), request_id="g1", user="u", artifacts_dir=tmp_path / "a")
    parts = sorted((r.mechanism, r.epsilon, r.definition) for r in ledger.releases(geo.account))
    assert parts == [("planar_laplace", 1.0, "geo_ind"), (MECHANISM, 0.1, "geo_ind")]
    assert ledger.remaining(geo.account) == (0.0, 0.0)


def test_the_region_step_does_not_tell_neighbouring_tables_apart_beyond_its_epsilon() -> None:
    """Neighbours differ by one user's 3 rows far north (per user, unbounded: d_in = 3); the event "the
    northern edge is above 80°" is the most telling. The Clopper-Pearson lower bound on ε from 1,500 runs
    each stays below the quantile's ε (ε_b / 4); the data's own maximum is told apart at once."""
    step = RegionStep(2.0, "unbounded", per_user=3)
    (_, _), (north, eps) = step.parts[0].measurements()
    assert eps <= step.epsilon / 4
    base = [40.0] * 30
    runs = 1500
    tables = (base, [*base, 89.0, 89.0, 89.0])
    hits = [sum(north(table) >= 80 for _ in range(runs)) for table in tables]
    assert clopper_pearson_epsilon(hits[0], hits[1], runs) < eps, hits
    leaked = [runs * (max(t) >= 80) for t in tables]
    assert clopper_pearson_epsilon(leaked[0], leaked[1], runs) > step.epsilon


def test_with_users_the_step_reads_at_most_m_rows_each_and_gives_a_grid_region() -> None:
    users = np.repeat(np.arange(600), 5).astype(str)
    lat, lon = RNG.uniform(40, 41, 3000), RNG.uniform(-75, -74, 3000)
    inputs = LocationInputs(lat, lon, users, WHOLE_EARTH)
    out, region = RegionStep(200.0, per_user=2).apply(inputs)  # 1,200 rows kept; rank error 2.2 rows
    assert out.region.to_dict() == region and out.region != WHOLE_EARTH
    assert 39.9 <= region["lat_min"] < region["lat_max"] <= 41.1, region
    assert -75.1 <= region["lon_min"] < region["lon_max"] <= -73.9, region
    assert {region["lat_min"], region["lat_max"]} <= set(LAT_GRID)
    with pytest.raises(ParameterError, match="no user column"):
        RegionStep(1.0, per_user=2).apply(_inputs())
    with pytest.raises(ParameterError, match="have a user column"):
        RegionStep(1.0).apply(inputs)


def test_the_batch_job_replays_the_region_step_and_debits_it_with_the_release(tmp_path: Path) -> None:
    """Out of core (DuckDB), per user: the step reads each user's at most m = 2 kept rows from the engine."""
    path = tmp_path / "spots.parquet"
    TABLE.assign(user=np.arange(N) % 500).to_parquet(path, index=False)
    plan = _plan(
        fingerprint=fingerprint(load_table(path)),
        params={"neighbours": "unbounded", "max_per_user": 2},
        preparation=(LocationColumns("lat", "lon", "user"), STEPS[1]),
        scope=scope_sentence(True, 2),
    )
    assert plan.bounds_step.per_user == 2
    both = plan.to_manifest()
    both["preparation"].append(PublicRegion.of(WHOLE_EARTH).to_dict())
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    with pytest.raises(ParameterError, match="records a public region and estimates one"):
        run_plan(both, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    ledger.set_budget(plan.account, 0.3, 0.0)
    release = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    rows = sorted((r.mechanism, r.epsilon) for r in ledger.releases(plan.account))
    assert rows == [(MECHANISM, 0.1), ("uniform_grid", 0.2)] and ledger.remaining(plan.account) == (0.0, 0.0)
    again = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert again.record == release.record and len(ledger.releases(plan.account)) == 2  # debited once
    region = Region(**release.manifest["estimated_region"])
    assert release.manifest["details"]["region"] == region.to_dict()
