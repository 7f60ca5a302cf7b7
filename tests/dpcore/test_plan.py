"""The release plan: one place for the guarantee, the ledger account and cost, validated as a whole."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, load_sample, prepare
from dpcore.data.missing import handle_missing
from dpcore.errors import PolicyError
from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.kmeans.registry import KMeansInputs
from dpcore.ledger import Account, BudgetNotSet, Ledger
from dpcore.manifest import DEMO_NOTICE
from dpcore.mechanisms import Sampler
from dpcore.plan import ReleasePlan, policy_account, preparation_steps
from dpcore.policy import ApproxDP, Blowfish, GeoIndistinguishability, LocalPDP, PartitionGraph, PureDP
from dpcore.releases import make_release
from dpcore.steps import DropMissing, Impute

FP = "ab" * 32


def _plan(**kw) -> ReleasePlan:
    base = {
        "domain": "kmeans",
        "mechanism": "dp_lloyd",
        "epsilon": 1.0,
        "policy": PureDP(1.0),
        "dataset_name": "toy",
        "fingerprint": FP,
        "params": {"n_clusters": 2},
    }
    return ReleasePlan(**{**base, **kw})


def _prepared(strategy: str):
    df = pd.DataFrame({"a": [0.1, 0.9, np.nan, 0.5, 0.2, np.nan], "b": [0.3, 0.4, 0.8, np.nan, 0.6, 0.1]})
    cleaned = handle_missing(df, ["a", "b"], strategy)
    removed = len(df) - len(cleaned)
    step = DropMissing(("a", "b"), removed) if strategy == "drop" else Impute(strategy, ("a", "b"))
    bounds = {"a": (0, 1), "b": (0, 1)}
    prep = prepare(cleaned, infer_schema(cleaned), ["a", "b"], scaling="none", bounds=bounds)
    return step, prep


@pytest.mark.parametrize("strategy", ["mean", "median", "mode"])
def test_data_derived_imputation_is_refused_for_a_secure_dp_release(strategy: str) -> None:
    step, prep = _prepared(strategy)
    steps = preparation_steps([step], prep)
    assert any(s.data_derived for s in steps)
    with pytest.raises(PolicyError, match="read values from the data"):
        _plan(preparation=steps)
    demo = _plan(preparation=steps, mode="demo", seed=3)  # allowed, and labelled with what it is
    assert "does not cover that preparation" in demo.guarantee and "DEMO" in demo.guarantee
    local = _plan(mechanism="colored", delta=1e-6, policy=LocalPDP(1.0, 1e-6), preparation=steps)
    assert "does not cover that preparation" in local.guarantee


def test_imputation_moves_many_rows_so_the_dp_lloyd_sensitivity_does_not_hold() -> None:
    """Why the refusal: with mean imputation, adding one person moves every imputed row."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 200)
    a[:100] = np.nan
    base = pd.DataFrame({"a": a})
    grown = pd.concat([base, pd.DataFrame({"a": [1000.0]})], ignore_index=True)  # one extreme person
    fill = [handle_missing(t, ["a"], "mean")["a"].clip(0, 1).to_numpy() for t in (base, grown)]
    moved = np.abs(fill[1][:200] - fill[0]).sum()
    est = DPLloydKMeans(2, 1.0, bounds=([0.0], [1.0]), random_state=Sampler(0)).fit(fill[0][:, None])
    assert moved > 10 * float(np.max(est.sum_sensitivity_))  # the noise covers one row, not 100


def test_dropping_rows_and_curator_bounds_keep_the_guarantee() -> None:
    step, prep = _prepared("drop")
    steps = preparation_steps([step], prep)
    assert steps and not any(s.data_derived for s in steps)
    plan = _plan(preparation=steps)
    assert plan.guarantee.startswith("Differential privacy with ε = 1")
    assert "one row added or removed" in plan.guarantee


def test_data_bounds_and_standardising_are_data_derived() -> None:
    df = load_sample("marketing_campaign").dropna()
    prep = prepare(df, infer_schema(df), ["Income", "MntWines"], scaling="standardize", data_bounds_ok=True)
    steps = preparation_steps([], prep)
    assert len([s for s in steps if s.data_derived]) >= 2
    with pytest.raises(PolicyError):
        _plan(preparation=steps)


def test_account_follows_definition_and_relation_never_mixing() -> None:
    dp = _plan()
    bounded = _plan(params={"n_clusters": 2, "neighbours": "bounded"})
    local = _plan(mechanism="colored", delta=1e-6, policy=LocalPDP(1.0, 1e-6))
    demo = _plan(mode="demo", seed=1)
    keys = {p.account.key for p in (dp, bounded, local, demo)}
    assert len(keys) == 4
    assert dp.account == policy_account(dp.dataset_id, PureDP(1.0))
    assert dp.account == policy_account(dp.dataset_id, ApproxDP(1.0, 1e-6))  # eps-DP is (eps, 0)-DP
    assert local.account == policy_account(dp.dataset_id, LocalPDP(1.0, 1e-6))
    assert demo.account.mode == "demo"


def test_blowfish_account_is_per_graph() -> None:
    g1 = PartitionGraph(0.5)
    g2 = PartitionGraph(0.25)
    plans = [
        _plan(mechanism="blowfish", policy=Blowfish(1.0, g), params={"n_clusters": 2, "graph": g.to_dict()})
        for g in (g1, g2)
    ]
    assert plans[0].account != plans[1].account
    assert plans[0].account == policy_account(plans[0].dataset_id, Blowfish(1.0, g1))


def test_geo_plans_count_levels_within_the_policy_radius() -> None:
    geo = GeoIndistinguishability.from_level(2.0, 500.0)
    assert geo.level == pytest.approx(2.0)
    with pytest.raises(PolicyError, match="geo-indistinguishability"):
        _plan(domain="location", mechanism="planar_laplace", policy=PureDP(1.0), params={})
    with pytest.raises(PolicyError, match="radius is set on the Privacy policy page"):
        _plan(domain="location", mechanism="planar_laplace", policy=geo, params={"radius_m": 2000.0})
    plan = _plan(domain="location", mechanism="planar_laplace", policy=geo, params={"radius_m": 500.0})
    assert plan.account == policy_account(plan.dataset_id, geo)
    assert "level 1 within 500 metres" in plan.guarantee


def test_manifest_round_trip_and_tamper_check() -> None:
    plan = _plan(params={"n_clusters": 3, "neighbours": "bounded"})
    manifest = json.loads(json.dumps(plan.to_manifest()))
    again = ReleasePlan.from_manifest(manifest)
    assert again == plan and again.key == plan.key and again.account == plan.account
    manifest["guarantee"] = "eps-DP for everyone, forever"
    with pytest.raises(PolicyError, match="altered"):
        ReleasePlan.from_manifest(manifest)


def test_invalid_combinations_are_refused() -> None:
    with pytest.raises(PolicyError, match="delta"):
        _plan(delta=1e-6)  # DP-Lloyd is a pure mechanism
    with pytest.raises(PolicyError, match="needs delta"):
        _plan(mechanism="colored", policy=LocalPDP(1.0, 1e-6))
    with pytest.raises(PolicyError, match="epsilon"):
        _plan(epsilon=float("nan"))


def test_make_release_records_the_plan_in_manifest_and_ledger(tmp_path) -> None:
    led = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (300, 2))
    inputs = KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b"))
    plan = _plan()
    with pytest.raises(BudgetNotSet, match="Privacy policy page"):
        make_release(led, plan, inputs, request_id="r0", user="u", artifacts_dir=tmp_path)
    led.set_budget(plan.account, 1.5)
    rel = make_release(led, plan, inputs, request_id="r1", user="u", artifacts_dir=tmp_path)
    assert rel.manifest["guarantee"] == plan.guarantee
    assert rel.manifest["account"] == plan.account.key == rel.record.account
    assert ReleasePlan.from_manifest(rel.manifest) == plan
    assert led.remaining(plan.account) == (0.5, 0.0)
    assert led.dataset_names() == {plan.dataset_id: "toy"}
    # a demo plan never spends the real budget, and every file says DEMO inside
    demo = plan.with_mode("demo", 7)
    led.set_budget(demo.account, 5.0)
    out = make_release(led, demo, inputs, request_id="r2", user="u", artifacts_dir=tmp_path)
    assert led.remaining(plan.account) == (0.5, 0.0)
    assert led.remaining(Account(plan.dataset_id, "dp", plan.relation, "demo")) == (4.0, 0.0)
    assert all(DEMO_NOTICE.encode() in body for body in out.files.values())
    assert Sampler(7).mode == "demo"


def test_location_releases_refuse_imputed_coordinates() -> None:
    """Adding one person moves every imputed location (the mean): a DP grid's sensitivity 1 would not hold."""
    steps = preparation_steps([Impute("median", ("latitude", "longitude"))])
    assert steps[0].data_derived
    with pytest.raises(PolicyError, match="read values from the data"):
        _plan(domain="location", mechanism="uniform_grid", params={}, preparation=steps)
    kept = preparation_steps([DropMissing(("latitude", "longitude"), 3)])
    plan = _plan(domain="location", mechanism="uniform_grid", params={}, preparation=kept)
    assert "does not cover" not in plan.guarantee


def test_the_summary_says_what_a_zero_stands_for_not_zero() -> None:
    """"Lloyd rounds 0" would read as no round: the panel shows the automatic rule the run uses."""
    auto = dict(_plan(mechanism="dp_lloyd", params={"n_clusters": 3, "n_iter": 0}).summary_rows())
    assert auto["Lloyd rounds"].startswith("automatic (Su et al.'s rule")
    fixed = dict(_plan(mechanism="dp_lloyd", params={"n_clusters": 3, "n_iter": 4}).summary_rows())
    assert fixed["Lloyd rounds"] == "4" and fixed["Number of clusters K"] == "3"


def test_a_plan_records_an_epsilon_chosen_from_the_data_and_keeps_other_keys() -> None:
    """'What ε do I need?' reads the comparison on the raw data: a plan whose ε came from it says so in
    its summary, guarantee and manifest (and round-trips); a plan without it keeps its former key."""
    plain = _plan(mechanism="dp_lloyd", params={"n_clusters": 3})
    assert "epsilon_source" not in plain.to_manifest()
    chosen = replace(plain, epsilon_source="'What ε do I need?': loss at most 0.1")
    assert chosen.key != plain.key
    assert dict(chosen.summary_rows())["ε chosen with"] == "'What ε do I need?': loss at most 0.1"
    assert "chosen from a non-private comparison on this dataset" in chosen.guarantee
    again = ReleasePlan.from_manifest(chosen.to_manifest())
    assert again.epsilon_source == chosen.epsilon_source and again.key == chosen.key


def test_the_guarantee_keeps_its_capitals_and_asks_no_delta_where_the_definition_has_none() -> None:
    """'.capitalize()' lowercased the rest of the sentence ("analytic gaussian calibration; weaker than pdp");
    a geo-indistinguishability level or a Blowfish release shows no δ."""
    local = _plan(
        mechanism="colored", policy=LocalPDP(1.0, 1e-6), delta=1e-6,
        params={"n_clusters": 2, "calibration": "analytic"},
    )
    assert "analytic Gaussian calibration; weaker than PDP" in local.guarantee
    assert local.guarantee.startswith("An (ε, δ) indistinguishability bound")
    geo = _plan(
        domain="location", mechanism="planar_laplace", policy=GeoIndistinguishability.from_level(1.0, 500.0),
        params={"radius_m": 500.0},
    )
    assert "δ" not in dict(geo.summary_rows()) and not geo.uses_delta
    graph = PartitionGraph(1.0)
    blowfish = _plan(
        mechanism="blowfish", policy=Blowfish(1.0, graph), params={"n_clusters": 2, "graph": graph.to_dict()}
    )
    assert "δ" not in dict(blowfish.summary_rows())
    assert "δ" in dict(_plan().summary_rows())  # differential privacy has one (0 for a pure release)
