"""dpcore.private_bounds: bounds estimated with OpenDP's DP quantile, a step of the release plan debited
with the release in one ledger transaction (two rows that add up exactly to the budget), refused outside
differential privacy, and not telling neighbouring tables apart beyond ε_b."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.errors import DataError, ParameterError, PolicyError
from dpcore.kmeans.registry import KMeansInputs
from dpcore.ledger import BudgetExceeded, Ledger
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import Blowfish, PartitionGraph, PureDP
from dpcore.private_bounds import MECHANISM, BoundsStep
from dpcore.releases import make_release, plan_releases
from tests.system.test_audit_per_user_cap import clopper_pearson_epsilon
from ui.ledger_view import accounts_frame, releases_frame

RNG = np.random.default_rng(3)
TABLE = pd.DataFrame(
    {"age": RNG.uniform(20, 70, 400).round(1), "income": RNG.uniform(1e4, 9e4, 400).round(0)}
)


@pytest.fixture(scope="module")
def prepared():
    return prepare(
        TABLE,
        infer_schema(TABLE),
        ["age", "income"],
        scaling="minmax",
        bounds={"age": (18, 100)},
        private_epsilon=0.1,
    )


def _plan(prepared, **changes) -> ReleasePlan:
    base = {
        "domain": "kmeans",
        "mechanism": "dp_lloyd",
        "epsilon": 0.9,
        "policy": PureDP(1.0),
        "dataset_name": "people",
        "fingerprint": prepared.fingerprint,
        "params": {"n_clusters": 2},
        "preparation": preparation_steps((), prepared),
        "private_bounds": prepared.private_bounds,
    }
    return ReleasePlan(**{**base, **changes})


def test_prepare_leaves_the_pending_feature_unscaled_and_the_plan_says_what_will_run(prepared) -> None:
    assert prepared.private_bounds == {"features": ["income"], "epsilon": 0.1, "scaling": "minmax"}
    assert np.array_equal(prepared.X[:, 1], TABLE["income"].to_numpy())  # its own units until the release
    assert prepared.X[:, 0].min() >= -1 and prepared.X[:, 0].max() <= 1  # age: min-max to its public bounds
    plan = _plan(prepared)
    assert plan.cost == (1.0, 0.0) and not plan.data_derived_steps
    rows = dict(plan.summary_rows())
    assert rows["ε_b (private bounds)"] == "0.1" and rows["ε in all"] == "1"
    assert any("estimated privately at release" in s.text for s in plan.preparation)
    assert "ε = 1:" in plan.guarantee and "ε_b = 0.1" in plan.guarantee
    assert ReleasePlan.from_manifest(json.loads(json.dumps(plan.to_manifest()))) == plan
    assert batch_refusal(plan) is None  # DP-Lloyd runs out of core: the batch job replays the step
    mcmc = _plan(prepared, mechanism="dp_lloyd_mcmc")
    assert "out-of-core passes only" in batch_refusal(mcmc)  # said before any debit
    with pytest.raises(DataError, match="not both"):
        prepare(TABLE, infer_schema(TABLE), ["income"], data_bounds_ok=True, private_epsilon=0.1)
    with pytest.raises(DataError, match="Standardising"):
        prepare(TABLE, infer_schema(TABLE), ["income"], scaling="standardize", private_epsilon=0.1)


def test_a_private_bounds_step_is_refused_outside_differential_privacy(prepared) -> None:
    with pytest.raises(PolicyError, match="differential privacy step of a k-means or location release"):
        graph = PartitionGraph(0.5)
        _plan(
            prepared,
            mechanism="blowfish",
            policy=Blowfish(1.0, graph),
            params={"n_clusters": 2, "graph": graph.to_dict()},
        )
    altered = {**_plan(prepared).private_bounds, "neighbours": "bounded"}
    with pytest.raises(PolicyError, match="other neighbours"):
        _plan(prepared, private_bounds=altered)


def test_the_bound_step_and_the_release_add_up_to_exactly_the_budget_in_one_transaction(
    prepared, tmp_path: Path
) -> None:
    plan = _plan(prepared)
    step = plan.bounds_step
    assert step.spent() <= Fraction("0.1") and 2 * Fraction(repr(step.per_quantile)) <= Fraction("0.1")
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    inputs = KMeansInputs.from_prepared(prepared)
    ledger.set_budget(plan.account, 0.99, 0.0)  # a cent short: nothing is recorded, nothing published
    with pytest.raises(BudgetExceeded, match="asks eps=1,"):
        make_release(ledger, plan, inputs, request_id="r0", user="u", artifacts_dir=tmp_path / "a")
    assert ledger.releases(plan.account) == []
    ledger.set_budget(plan.account, 1.0, 0.0)
    release = make_release(ledger, plan, inputs, request_id="r1", user="u", artifacts_dir=tmp_path / "a")
    rows = {r.mechanism: r for r in ledger.releases(plan.account)}
    assert set(rows) == {"dp_lloyd", MECHANISM}
    assert (rows["dp_lloyd"].epsilon, rows[MECHANISM].epsilon) == (0.9, 0.1)
    assert rows[MECHANISM].request_id == "r1/private_bounds" and rows[MECHANISM].time == rows["dp_lloyd"].time
    assert ledger.remaining(plan.account) == (0.0, 0.0)  # exactly spent: 0.9 + 0.1 = 1, no ulp over
    lo, hi = release.manifest["estimated_bounds"]["income"]
    assert lo < hi and release.manifest["private_bounds"]["epsilon"] == 0.1
    assert "income_lo" not in release.table and release.table.filter(like="income").shape[1] >= 1
    again = make_release(ledger, plan, inputs, request_id="r1", user="u", artifacts_dir=tmp_path / "a")
    assert again.replayed and len(ledger.releases(plan.account)) == 2  # nothing debited twice
    status = ledger.budget(plan.account)
    assert (status.n_releases, status.epsilon_spent) == (1, 1.0)  # one release of two rows, both spent
    assert ledger.release_by_request("r1").mechanism == "dp_lloyd" and release.record.part_of is None
    assert ledger.release_by_request("r1/private_bounds").part_of == "r1"
    with pytest.raises(ParameterError, match="not a valid file name"):  # a step's row is no release
        make_release(ledger, plan, inputs, request_id="r1/private_bounds", user="u", artifacts_dir=tmp_path)

    ledger.set_budget(plan.account, 2.0, 0.0)  # the dashboard's request ids: plan-<key>, plan-<key>-2, ...
    rid = plan.request_id(1)
    second = make_release(ledger, plan, inputs, request_id=rid, user="u", artifacts_dir=tmp_path)
    assert plan_releases(ledger, plan) == [second.record]  # "This plan was released once"
    status = ledger.budget(plan.account)
    assert (status.n_releases, status.epsilon_spent, status.epsilon_left) == (2, 2.0, 0.0)
    assert accounts_frame([status])["releases"].tolist() == [2]
    for frame in (releases_frame(ledger), releases_frame(ledger, for_csv=True)):
        step = "↳ bounds estimated privately (OpenDP quantile) for "
        assert frame["mechanism"].tolist() == [
            "DP-Lloyd (SuLQ)", step + plan.request_id(1), "DP-Lloyd (SuLQ)", step + "r1"
        ], frame["mechanism"]
        assert frame["part of request"].fillna("").tolist() == ["", plan.request_id(1), "", "r1"]
        assert frame["ε"].sum() == 2.0


def test_the_bound_step_does_not_tell_neighbouring_tables_apart_beyond_its_epsilon() -> None:
    """Neighbours differ by one extreme row; the event "the upper bound is above 1,000" is the most telling.
    The Clopper-Pearson lower bound on ε from 1,500 runs each stays below ε_b; the data's own maximum (what
    'bounds from the data' would publish) is told apart at once."""
    step = BoundsStep(("x",), 1.0)
    (_, _), (upper, _) = step.measurements()
    base = [10.0] * 40
    runs = 1500
    hits = [sum(upper(table) >= 1000 for _ in range(runs)) for table in (base, [*base, 1e6])]
    assert clopper_pearson_epsilon(hits[0], hits[1], runs) < step.epsilon, hits
    leaked = [runs * (max(t) >= 1000) for t in (base, [*base, 1e6])]
    assert clopper_pearson_epsilon(leaked[0], leaked[1], runs) > step.epsilon


def test_estimates_come_from_the_grid_and_are_ordered() -> None:
    step = BoundsStep(("a", "b"), 50.0)
    data = np.column_stack([np.linspace(3, 7, 300), np.full(300, 5.0)])
    lower, upper = step.estimate(data)
    assert set(np.round(lower, 12)) | set(np.round(upper, 12)) <= set(np.round(step.candidates, 12))
    assert (lower < upper).all() and lower[0] <= 3.5 and upper[0] >= 6.5
    with pytest.raises(ParameterError):
        BoundsStep(("a",), 0.1, scaling="standardize")
    with pytest.raises(ParameterError):
        step.estimate(np.array([[1.0, np.nan]]))


def test_the_batch_job_replays_the_bound_step_and_debits_it_with_the_release(
    prepared, tmp_path: Path
) -> None:
    path = tmp_path / "people.parquet"
    TABLE.to_parquet(path, index=False)
    plan = _plan(prepared)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, 1.0, 0.0)
    release = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    rows = sorted((r.mechanism, r.epsilon) for r in ledger.releases(plan.account))
    assert rows == [("dp_lloyd", 0.9), (MECHANISM, 0.1)] and ledger.remaining(plan.account) == (0.0, 0.0)
    again = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert again.record == release.record and len(ledger.releases(plan.account)) == 2  # debited once
    assert ledger.budget(plan.account).n_releases == 1
    lo, hi = release.manifest["estimated_bounds"]["income"]
    assert lo < hi and release.manifest["private_bounds"]["features"] == ["income"]


def test_a_demo_release_refuses_private_bounds_saying_why_and_what_to_do(prepared) -> None:
    with pytest.raises(PolicyError, match=r"not available in demo mode.*reproduced from the demo seed"):
        _plan(prepared, mode="demo", seed=7)
    assert _plan(prepared, mode="demo", seed=7, private_bounds={}, preparation=()).mode == "demo"


def test_the_stated_rank_error_bounds_what_each_quantile_misses_by() -> None:
    """The accuracy the Data page and "What will run" state before spending: 2 d_in (ln|C| + ln 20) / (ε_b/2k)
    rows (95%). Measured on 4,000 rows where it is 400: the 1% quantile's rank error stays within it; the
    same ε_b over 30 features (9,707 rows, more than the table) picks grid values that miss the data."""
    step = BoundsStep(("x",), 2 * 2 * (np.log(163) + np.log(20)) / 400)
    assert step.rank_error() == pytest.approx(400) and len(step.candidates) == 163
    assert "off by up to 400 rows (95%)" in step.accuracy() and step.accuracy() in step.text
    x = np.random.default_rng(4).uniform(0, 1000, 4000)
    ranks = np.sort(x).searchsorted([step.estimate(x[:, None])[0][0] for _ in range(40)])
    assert (np.abs(ranks - 40) <= 400).mean() >= 0.9, ranks
    assert BoundsStep(tuple("abcdefghijklmnopqrstuvwxyz1234"), 0.1).rank_error() == pytest.approx(9707, abs=1)
    one = BoundsStep(("x",), 0.1)
    assert BoundsStep(("x",), 0.1, neighbours="bounded").rank_error() == pytest.approx(2 * one.rank_error())
