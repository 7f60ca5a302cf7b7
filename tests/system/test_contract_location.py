"""The contract every location mechanism keeps (scikit-learn's ``check_estimator`` habit): for each spec
registered in ``LOCATIONS``, with its declared parameters and a tiny table, it releases, compares (its
declared trial: every declared metric reaches the chart, in its colour), plots, plans (the plan names it
and words its guarantee from the spec), records (one ledger row), replays from the manifest through the
batch job (the same release with the same demo seed) and, where the spec declares it, runs out of core.

A toy mechanism defined here, "noisy count", registers for this module only and passes the same
contract; it appears in the Locations page's comparison and release panel, with a widget for its own
parameter, without touching any other file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, load_table
from dpcore.ledger import Ledger
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import FloatArray, Region
from dpcore.location.plan_steps import LocationColumns, PublicRegion
from dpcore.location.registry import (
    LOCATIONS,
    MAX_PER_USER,
    LocationInputs,
    kept_details,
    kept_diagnostics,
    no_delta,
)
from dpcore.location.sweep import location_sweep
from dpcore.location.trial_data import TrialData
from dpcore.mechanisms import Sampler, laplace_scale
from dpcore.outofcore.run_plan import in_memory, run_plan
from dpcore.plan import ReleasePlan, policy_account
from dpcore.plots.location import error_vs_eps
from dpcore.policy import GeoIndistinguishability, PureDP
from dpcore.registry import DEFINITION_NAMES, MechanismOutput, MechanismSpec, Metric, Param
from dpcore.releases import make_release
from tests.panel import release_button
from tests.paths import APP
from ui.state import DEFAULT_POLICY

# ---------------------------------------------------------------- the toy mechanism (this file only)

TOY = "noisy_count"
COUNT_ERROR = Metric("count_error", "Absolute error of the location count")
ROUND_TO = Param(
    "round_to",
    "Round the released count to a multiple of",
    int,
    1,
    low=1,
    high=1000,
    help="Post-processing of the noisy count (costs no privacy), e.g. 10.",
)


def _toy_release(
    inputs: Any, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """The number of kept locations + Laplace(g / eps), rounded to ``round_to`` (post-processing)."""
    no_delta(delta)
    counted = inputs.counted(params["max_per_user"], random_state)  # rows in memory or an engine's table
    scale = laplace_scale(counted.group, epsilon)
    step = params["round_to"]
    value = float(np.round((counted.n + float(random_state.laplace(1, scale)[0])) / step) * step)
    table = pd.DataFrame({"noisy_count": [value]})
    figure = go.Figure(go.Bar(x=["locations"], y=[value], marker={"color": "#123456"}))
    details = {**kept_details(counted, inputs), "laplace_scale": scale}
    return MechanismOutput(table, (figure,), details, kept_diagnostics(counted, inputs), counted.scope)


def _toy_trial(
    data: TrialData, eps: FloatArray, trials: int, random_state: Sampler, params: dict[str, Any]
) -> dict[str, FloatArray]:
    """|Laplace(1 / eps)| per run (every row its own person), rounding aside."""
    return {COUNT_ERROR.name: np.abs(random_state.laplace((trials, eps.size), 1.0)) / eps}


TOY_SPEC = MechanismSpec(
    domain="location",
    key=TOY,
    label="Noisy count (toy)",
    definition="pure_dp",
    summary="Releases how many locations there are, blurred so that it barely depends on any one person.",
    formula="n + Laplace(g / eps), g = most locations per user.",
    citation="Dwork et al. 2006",
    release=_toy_release,
    params=(ROUND_TO, MAX_PER_USER),
    trial=_toy_trial,
    metrics=(COUNT_ERROR,),
    out_of_core=_toy_release,
    color="#123456",
)

# ---------------------------------------------------------------- every spec, the toy included

KEYS = [*LOCATIONS, TOY]
US = Region(24.0, 50.0, -125.0, -66.0)
SEED = 11  # demo seed: the dashboard's release and the batch job's replay draw the same noise
PER_USER = 3
#: Small values of the declared parameters, so that every release runs in well under a second.
SMALL = {"n_clusters": 5, "grid_size": 10, "hotspot_k": 3}


@pytest.fixture(scope="module", autouse=True)
def toy() -> Iterator[MechanismSpec]:
    LOCATIONS.register(TOY_SPEC)
    yield TOY_SPEC
    LOCATIONS.unregister(TOY)
    assert TOY not in LOCATIONS


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    """300 locations of 60 users inside the contiguous US, as a Parquet file the batch job reads."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "lat": np.round(rng.uniform(30.0, 45.0, 300), 6),
            "lon": np.round(rng.uniform(-115.0, -75.0, 300), 6),
            "user": [f"u{i}" for i in rng.integers(0, 60, 300)],
        }
    )
    path = tmp_path_factory.mktemp("contract") / "locations.parquet"
    frame.to_parquet(path, index=False)
    return load_table(path.read_bytes(), filename=path.name), path


def _params(spec: MechanismSpec) -> dict[str, Any]:
    declared = {p.name for p in spec.params}
    asked = {k: v for k, v in SMALL.items() if k in declared}
    return spec.validate_params({**asked, MAX_PER_USER.name: PER_USER})


def _policy(spec: MechanismSpec) -> Any:
    return GeoIndistinguishability.from_level(1.0, 1000.0) if spec.definition == "geo_ind" else PureDP(1.0)


def _plan(spec: MechanismSpec, frame: pd.DataFrame) -> ReleasePlan:
    return ReleasePlan(
        domain="location",
        mechanism=spec.key,
        epsilon=1.0,
        policy=_policy(spec),
        dataset_name="locations",
        fingerprint=fingerprint(frame),
        params=_params(spec),
        preparation=(LocationColumns("lat", "lon", "user"), PublicRegion.of(US)),
        mode="demo",
        seed=SEED,
        scope=scope_sentence(True, PER_USER),
    )


@pytest.mark.parametrize("key", KEYS)
def test_release_compare_plot(key: str, table: tuple[pd.DataFrame, Path]) -> None:
    spec, (frame, _) = LOCATIONS[key], table
    inputs = LocationInputs(frame.lat.to_numpy(), frame.lon.to_numpy(), frame.user.to_numpy(), US)
    params = _params(spec)
    out = spec.release(inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(SEED))
    assert len(out.table) > 0 and out.figures and all(isinstance(f, go.Figure) for f in out.figures)
    assert out.scope == scope_sentence(True, PER_USER) and out.details["max_per_user"] == PER_USER
    json.dumps(out.details)  # published facts are JSON
    # compare: the declared trial reports exactly the declared metrics, and each reaches the chart
    assert spec.trial is not None and spec.metrics and spec.color is not None
    sweep = location_sweep(
        frame.lat, frame.lon, frame.user, [key], [0.5, 2.0], 2, region=US, params={key: params}
    )
    assert set(sweep.metric) == {m.name for m in spec.metrics} and np.isfinite(sweep.value).all()
    assert len(sweep) == len(spec.metrics) * 2 * 2 and set(sweep.label) == {spec.label}
    fig = error_vs_eps(sweep)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == [spec.label] * len(spec.metrics)
    assert {t.line.color for t in lines} == {spec.color}  # the spec's own colour, a hex string
    titles = [fig.layout[f"yaxis{i or ''}"].title.text.replace("<br>", " ") for i in range(len(spec.metrics))]
    assert sorted(titles) == sorted(m.title for m in spec.metrics)


@pytest.mark.parametrize("key", KEYS)
def test_plan_record_replay(key: str, table: tuple[pd.DataFrame, Path], tmp_path: Path) -> None:
    spec, (frame, path) = LOCATIONS[key], table
    plan = _plan(spec, frame)
    manifest = plan.to_manifest()
    assert manifest["mechanism"] == key and manifest["mechanism_label"] == spec.label
    name = "Geo-indistinguishability" if spec.definition == "geo_ind" else DEFINITION_NAMES[spec.definition]
    assert plan.guarantee.lower().startswith(name.lower())  # worded from the spec's definition
    assert ReleasePlan.from_manifest(manifest).key == plan.key
    # record: the dashboard's release, one ledger row
    inputs = LocationInputs(frame.lat.to_numpy(), frame.lon.to_numpy(), frame.user.astype(str).to_numpy(), US)
    dash_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash_ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(
        dash_ledger, plan, inputs, request_id="contract", user="u", artifacts_dir=tmp_path / "d", name="loc"
    )
    (row,) = dash_ledger.releases(plan.account)
    assert (row.mechanism, row.definition, row.epsilon) == (key, spec.definition, 1.0)
    # replay: the batch job on the Parquet file, out of core where the spec declares it
    assert in_memory(plan) == (spec.out_of_core is None)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    batch = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "b", user="batch")
    assert list(batch.table.columns) == list(dash.table.columns) and len(batch.table) == len(dash.table)
    for column in dash.table.columns:
        if pd.api.types.is_numeric_dtype(dash.table[column]):
            np.testing.assert_allclose(batch.table[column], dash.table[column], rtol=1e-9, err_msg=column)
        else:
            assert batch.table[column].tolist() == dash.table[column].tolist(), column
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def test_the_toy_needs_no_other_file_and_is_in_the_page_s_comparison_and_release_panel() -> None:
    ds_name = "Sample: US airports"
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    at.switch_page("pages/locations.py").run()
    at.button(key="loc_load_airports").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert TOY_SPEC.label in at.multiselect(key="loc_mechs").options  # offered for comparison
    at.number_input(key=f"loc_{ROUND_TO.name}").set_value(10).run()  # its own parameter has a widget
    at.multiselect(key="loc_mechs").set_value([TOY])
    at.select_slider(key="loc_eps_range").set_value((0.5, 1.0))
    at.number_input(key="loc_trials").set_value(1)
    at.button(key="loc_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    _, frame = at.session_state["loc_sweep"]
    assert set(frame.mechanism) == {TOY} and set(frame.metric) == {COUNT_ERROR.name}
    charts = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    assert any(COUNT_ERROR.title in json.dumps(c["layout"]) for c in charts)
    ds = at.session_state["dp_dataset"]
    assert ds.name == ds_name
    ledger = Ledger(config.ledger_url())
    account = policy_account(ds.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(account, 3.0, 1e-6)
    at.selectbox(key="loc_rel_mech").set_value(TOY).run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    assert not release_button(at, "locations").disabled
    release_button(at, "locations").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (record,) = ledger.releases(dataset_id=ds.dataset_id)
    assert record.mechanism == TOY and record.parameters[ROUND_TO.name] == 10
