"""Trajectory releases through the release plan: files (CSV, GeoJSON LineStrings, manifest, report), the
per-person account, request ids, demo mode, and an attack on the released files for true values."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
import pytest

from dpcore.errors import ParameterError
from dpcore.ledger import Ledger
from dpcore.mechanisms import Sampler
from dpcore.plan import ReleasePlan
from dpcore.policy import PureDP
from dpcore.releases import make_release
from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns, read_trajectory_steps
from dpcore.trajectory.registry import TRAJECTORIES, TrajectoryInputs, scope_of
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips

PARAMS = {"max_trips": 2, "max_fixes": 40}


@pytest.fixture(scope="module")
def fixes() -> pd.DataFrame:
    return road_trips(150, seed=8)


@pytest.fixture(scope="module")
def inputs(fixes: pd.DataFrame) -> TrajectoryInputs:
    return TrajectoryInputs(
        fixes.person.to_numpy(), fixes.time, fixes.lat.to_numpy(), fixes.lon.to_numpy(), None, DEFAULT_REGION
    )


def _plan(mechanism: str = "dpt", mode: str = "secure", seed: int | None = None) -> ReleasePlan:
    steps = (
        TrajectoryColumns("person", "time", "lat", "lon", None),
        PublicTripLimits.of(DEFAULT_REGION, 1200.0, 70.0),
    )
    return ReleasePlan(
        "trajectory",
        mechanism,
        1.0,
        PureDP(1.0),
        "trips",
        "ab" * 32,
        params=PARAMS,
        preparation=steps,
        scope=scope_of(2, 40),
        mode=mode,
        seed=seed,  # type: ignore[arg-type]
    )


def test_the_plan_states_the_per_person_guarantee_and_account() -> None:
    plan = _plan()
    assert (
        "one person's trips added or removed, at most 2 trips of at most 40 fixes per person"
        in plan.guarantee
    )
    assert (
        plan.account.relation
        == "one row added or removed, for all rows of one user at once (at most 80 per user)"
    )
    assert ReleasePlan.from_manifest(plan.to_manifest()) == plan
    columns, tz, region, gap, speed = read_trajectory_steps(plan.preparation)
    assert columns == {"person": "person", "time": "time", "lat": "lat", "lon": "lon", "trip": None}
    assert (tz, region, gap, speed) == ("UTC", DEFAULT_REGION, 1200.0, 70.0)
    with pytest.raises(ParameterError, match="Trajectories page"):
        read_trajectory_steps(plan.preparation[:1])
    assert set(TRAJECTORIES) == {"dpt", "markov_grid"}


def test_a_secure_release_writes_every_file_once_and_debits_the_person_account(
    tmp_path, inputs: TrajectoryInputs, fixes: pd.DataFrame
) -> None:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    plan = _plan()
    ledger.set_budget(plan.account, epsilon=1.5)
    out = make_release(
        ledger,
        plan,
        inputs,
        request_id=plan.request_id(),
        user="u",
        artifacts_dir=tmp_path / "a",
        name="trips",
    )
    again = make_release(
        ledger,
        plan,
        inputs,
        request_id=plan.request_id(),
        user="u",
        artifacts_dir=tmp_path / "a",
        name="trips",
    )
    assert again.files == out.files
    assert ledger.remaining(plan.account)[0] == pytest.approx(0.5)
    assert sorted(n.split("-", 2)[-1] for n in out.files) == sorted(
        f"{out.manifest['request_id'][5:13]}{s}"
        for s in (".csv", ".json", ".geojson", "-manifest.json", "-report.html")
    )
    geo = json.loads(next(v for k, v in out.files.items() if k.endswith(".geojson")))
    kinds = {f["geometry"]["type"] for f in geo["features"]}
    assert kinds <= {"LineString", "Point"} and "LineString" in kinds
    manifest = out.manifest
    assert manifest["details"]["timestamps"].startswith("not released")
    assert "per person" in manifest["guarantee"]
    assert sum(e for _, e in manifest["details"]["budget_log"]) <= 1.0

    # the attack: no true position, timestamp or true count in any released file
    text = b"\n".join(out.files.values()).decode()
    released = pd.read_csv(io.BytesIO(next(v for k, v in out.files.items() if k.endswith(".csv"))))
    assert list(released.columns) == ["trip", "point", "lat", "lon"]
    true = set(zip(fixes.lat.round(5), fixes.lon.round(5), strict=True))
    synthetic = set(zip(released.lat.round(5), released.lon.round(5), strict=True))
    # a copied fix would match by the hundred; a point drawn in a cell may land within 1 m of one by chance
    assert len(true & synthetic) <= 0.01 * len(synthetic)
    assert DEFAULT_REGION.contains(released.lat, released.lon).all()
    days = set(fixes.time.dt.strftime("%Y-%m-%d")) | set(fixes.time.dt.strftime("%d/%m/%Y"))
    assert not any(d in text for d in days)  # the fixes' day
    assert "time" not in released.columns and not any("time" in f["properties"] for f in geo["features"])
    assert not re.search(r"\bp0000\d\d\b", text)  # no person id
    spec = TRAJECTORIES["dpt"]
    diagnostics = spec.release(
        inputs, epsilon=1.0, delta=0.0, params=plan.params, random_state=Sampler()
    ).diagnostics
    # the number of synthetic trips is a noisy count of the trips used: now and then equal to it by chance
    details = json.dumps({k: v for k, v in manifest["details"].items() if k != "synthetic_trips"})
    for key in ("trips_used", "fixes_used", "fixes_given"):
        assert key not in json.dumps(manifest)
        assert not re.search(rf'"[a-z_]+": {diagnostics[key]}\b', details), key


def test_demo_releases_repeat_and_carry_the_notice(tmp_path, inputs: TrajectoryInputs) -> None:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    plan = _plan("markov_grid", "demo", 7)
    ledger.set_budget(plan.account, epsilon=5.0)
    a = make_release(
        ledger, plan, inputs, request_id=plan.request_id(1), user="u", artifacts_dir=tmp_path / "a"
    )
    b = make_release(
        ledger, plan, inputs, request_id=plan.request_id(2), user="u", artifacts_dir=tmp_path / "a"
    )
    pd.testing.assert_frame_equal(a.table, b.table)
    geo = json.loads(next(v for k, v in a.files.items() if k.endswith(".geojson")))
    assert all(f["properties"]["notice"] == "DEMO - not a privacy release" for f in geo["features"])
    assert np.isfinite(a.table[["lat", "lon"]].to_numpy()).all()
