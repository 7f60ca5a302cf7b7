"""The contract every trajectory mechanism keeps (scikit-learn's ``check_estimator`` habit): for each spec
registered in ``TRAJECTORIES``, with its declared parameters and a few synthetic road trips, it releases,
compares (its declared trial: every declared metric reaches the chart, in its colour), plots, plans (the
plan names it and words its guarantee from the spec), records (one ledger row), replays from the manifest
through the batch job and, where the spec declares it, runs out of core (the same release, demo seed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore.data import fingerprint, load_table
from dpcore.ledger import Ledger
from dpcore.mechanisms import Sampler
from dpcore.outofcore.run_plan import in_memory, run_plan
from dpcore.plan import ReleasePlan
from dpcore.plots.trajectory import utility_vs_eps
from dpcore.policy import PureDP
from dpcore.registry import DEFINITION_NAMES, MechanismSpec
from dpcore.releases import make_release
from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns
from dpcore.trajectory.prepare import parse_times
from dpcore.trajectory.registry import TRAJECTORIES, TrajectoryInputs, scope_of
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips
from dpcore.trajectory.sweep import compare

KEYS = list(TRAJECTORIES)
SEED = 4  # demo seed: the dashboard's release and the batch job's replay draw the same noise
LIMITS = {"max_trips": 2, "max_fixes": 30}
#: Small values of the declared parameters, so that every release runs in well under a second.
SMALL = {"finest_cells": 16, "levels": 2, "grid_cells": 16}


@pytest.fixture(scope="module")
def fixes(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, TrajectoryInputs, Path]:
    """A few people's road trips as a Parquet file the batch job reads, and the page's inputs of it."""
    table = road_trips(30, seed=8)
    table["time"] = table.time.dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    path = tmp_path_factory.mktemp("contract") / "fixes.parquet"
    table.to_parquet(path)
    loaded = load_table(path.read_bytes(), filename=path.name)
    inputs = TrajectoryInputs(
        loaded.person.to_numpy(),
        parse_times(loaded.time),
        loaded.lat.to_numpy(),
        loaded.lon.to_numpy(),
        None,
        DEFAULT_REGION,
    )
    return loaded, inputs, path


def _params(spec: MechanismSpec) -> dict[str, Any]:
    declared = {p.name for p in spec.params}
    return spec.validate_params({**{k: v for k, v in SMALL.items() if k in declared}, **LIMITS})


@pytest.mark.parametrize("key", KEYS)
def test_release_compare_plot(key: str, fixes: tuple[pd.DataFrame, TrajectoryInputs, Path]) -> None:
    spec, (_, inputs, _) = TRAJECTORIES[key], fixes
    params = _params(spec)
    out = spec.release(inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(SEED))
    assert len(out.table) > 0 and out.figures and all(isinstance(f, go.Figure) for f in out.figures)
    assert out.scope == scope_of(**LIMITS)
    json.dumps(out.details)  # published facts are JSON
    # compare: the declared trial's trips, scored by exactly the declared metrics, each on the chart
    assert spec.trial is not None and spec.metrics and spec.color is not None
    _, prepared = inputs.prepared(params, Sampler.diagnostic(0))
    result = compare(
        prepared.trips, DEFAULT_REGION, [1.0, 2.0], **LIMITS, params={key: params}, trials=1,
        mechanisms=[key], n_queries=20,
    )
    names = [m.name for m in spec.metrics]
    assert list(result.metrics) == names and set(result.table.mechanism) == {key}
    assert result.table[names].notna().all().all() and set(result.examples) == {key}
    fig = utility_vs_eps(result.table, result.metrics, result.labels, result.colors)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert {t.name for t in lines} == {spec.label} and len(lines) == len(names)
    assert {t.line.color for t in lines} == {spec.color}  # the spec's own colour, a hex string
    assert [a.text for a in fig.layout.annotations][: len(names)] == [m.title for m in spec.metrics]


@pytest.mark.parametrize("key", KEYS)
def test_plan_record_replay(
    key: str, fixes: tuple[pd.DataFrame, TrajectoryInputs, Path], tmp_path: Path
) -> None:
    spec, (loaded, inputs, path) = TRAJECTORIES[key], fixes
    plan = ReleasePlan(
        "trajectory",
        key,
        1.0,
        PureDP(1.0),
        "fixes",
        fingerprint(loaded),
        params=_params(spec),
        preparation=(
            TrajectoryColumns("person", "time", "lat", "lon", None),
            PublicTripLimits.of(DEFAULT_REGION, 1200.0, 70.0),
        ),
        scope=scope_of(**LIMITS),
        mode="demo",
        seed=SEED,
    )
    manifest = plan.to_manifest()
    assert manifest["mechanism"] == key and manifest["mechanism_label"] == spec.label
    assert plan.guarantee.lower().startswith(DEFINITION_NAMES[spec.definition])  # from the definition
    assert ReleasePlan.from_manifest(manifest).key == plan.key
    dash_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash_ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(
        dash_ledger, plan, inputs, request_id="contract", user="u", artifacts_dir=tmp_path / "d"
    )
    (row,) = dash_ledger.releases(plan.account)
    assert (row.mechanism, row.definition, row.epsilon) == (key, spec.definition, 1.0)
    assert in_memory(plan) == (spec.out_of_core is None)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    batch = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "b", user="batch")
    pd.testing.assert_frame_equal(batch.table, dash.table)
    assert ledger.budget(plan.account).epsilon_spent == 1.0
