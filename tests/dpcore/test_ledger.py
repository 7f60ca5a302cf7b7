"""Budget ledger: composition arithmetic, refusals, idempotent requests, persistence, configuration."""

from __future__ import annotations

import json
import math
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.dialects import postgresql

from dpcore import config
from dpcore.errors import DPCoreError, ParameterError, PolicyError
from dpcore.ledger import (
    Account,
    BudgetExceeded,
    BudgetNotSet,
    BudgetStatus,
    Ledger,
    LedgerError,
    ReleaseRecord,
)
from dpcore.ledger.writes import _lock_accounts_query


@pytest.fixture
def url(ledger_url: str) -> str:
    """A fresh ledger database on each backend (SQLite file, PostgreSQL server): every test runs on both."""
    return ledger_url


@pytest.fixture
def led(url: str):
    ledger = Ledger.initialise(url)
    yield ledger
    ledger.close()


def test_remaining_after_spends(led: Ledger) -> None:
    status = led.set_budget("ds", epsilon=1.0, delta=1e-6)
    assert (status.epsilon_left, status.delta_left, status.n_releases) == (1.0, 1e-6, 0)
    led.spend("ds", 0.2, 0.0, "laplace", "r1")
    led.spend("ds", 0.3, 5e-7, "gaussian", "r2")
    assert led.remaining("ds") == (0.5, 5e-7)
    status = led.budget("ds")
    assert status is not None
    assert (status.epsilon_spent, status.delta_spent, status.n_releases) == (0.5, 5e-7, 2)


def test_ten_tenths_use_the_whole_budget_exactly(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0, delta=0.0)
    for i in range(10):
        led.spend("ds", 0.1, 0.0, "laplace", f"r{i}")
    assert led.remaining("ds") == (0.0, 0.0)
    with pytest.raises(BudgetExceeded):
        led.spend("ds", 1e-9, 0.0, "laplace", "r10")
    assert len(led.releases("ds")) == 10


def test_decimal_sums_where_float_sums_fail(led: Ledger) -> None:
    assert 0.1 + 0.2 > 0.3  # the float sum would refuse the second spend
    led.set_budget("ds", epsilon=0.3, delta=3e-7)
    led.spend("ds", 0.1, 1e-7, "laplace", "a")
    led.spend("ds", 0.2, 2e-7, "laplace", "b")
    assert led.remaining("ds") == (0.0, 0.0)


def test_spending_what_remaining_reports_is_admitted_and_never_one_ulp_more(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0, delta=1e-6)
    led.spend("ds", 1e-20, 1e-30, "laplace", "tiny")  # 1 - 1e-20 would round to the float 1.0
    eps_left, delta_left = led.remaining("ds")
    assert eps_left == math.nextafter(1.0, 0.0)  # rounded toward zero, never up
    with pytest.raises(BudgetExceeded):  # the old 1e-12 slack admitted this (an overspend of 1e-20)
        led.spend("ds", 1.0, 0.0, "laplace", "all")
    led.spend("ds", eps_left, delta_left, "laplace", "rest")
    with pytest.raises(BudgetExceeded):
        led.spend("ds", 1e-15, 0.0, "laplace", "more")


def test_no_spend_exceeds_the_budget_by_one_ulp(led: Ledger) -> None:
    led.set_budget("ulp", epsilon=1.0)
    with pytest.raises(BudgetExceeded):
        led.spend("ulp", math.nextafter(1.0, 2.0), 0.0, "laplace", "over")
    led.spend("ulp", 1.0, 0.0, "laplace", "exact")
    assert led.remaining("ulp") == (0.0, 0.0)


def test_accounts_of_different_definitions_are_never_added(led: Ledger) -> None:
    dp = Account("d1", "dp", "unbounded")
    geo = Account("d1", "geo_ind", "within 1000 m")
    demo = Account("d1", "dp", "unbounded", mode="demo")
    for acc in (dp, geo, demo):
        led.set_budget(acc, epsilon=1.0)
    led.spend(dp, 1.0, 0.0, "dp_lloyd", "a")
    led.spend(geo, 1.0, 0.0, "planar_laplace", "b")
    led.spend(demo, 1.0, 0.0, "dp_lloyd", "c", sampling_mode="demo")
    left = {s.account: s.epsilon_left for s in led.budgets("d1")}
    assert left == {dp.key: 0.0, geo.key: 0.0, demo.key: 0.0}
    assert Account.parse(geo.key) == geo and Account.parse(demo.key) == demo
    with pytest.raises(LedgerError, match="demo"):  # a demo release never touches a real account
        led.spend(dp, 0.1, 0.0, "dp_lloyd", "d", sampling_mode="demo")


def test_over_budget_message_and_nothing_recorded(led: Ledger) -> None:
    led.set_budget("X", epsilon=1.0, delta=1e-6)
    led.spend("X", 0.8, 0.0, "laplace", "r1")
    with pytest.raises(BudgetExceeded) as info:
        led.spend("X", 0.3, 0, "laplace", "r2")
    err = info.value
    assert str(err) == (
        "Budget exceeded: Account X has eps=0.2, delta=1e-06 left; this release asks eps=0.3, delta=0. "
        "Lower epsilon or raise the budget on the Privacy policy page."
    )
    assert isinstance(err, DPCoreError) and isinstance(err, ValueError)
    assert (err.epsilon_left, err.delta_left, err.epsilon_asked, err.delta_asked) == (0.2, 1e-6, 0.3, 0.0)
    assert [r.request_id for r in led.releases("X")] == ["r1"]
    assert led.remaining("X") == (0.2, 1e-6)
    led.spend("X", 0.2, 0.0, "laplace", "r2")  # the refused request id stays usable


def test_delta_over_budget_names_delta(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0, delta=1e-6)
    with pytest.raises(BudgetExceeded, match=r"asks eps=0.1, delta=2e-06\. Lower delta"):
        led.spend("ds", 0.1, 2e-6, "gaussian", "r")
    led.set_budget("pure", epsilon=1.0)
    with pytest.raises(BudgetExceeded, match="has eps=1, delta=0 left"):
        led.spend("pure", 0.1, 1e-12, "gaussian", "r2")


def test_same_request_id_debits_once(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0, delta=1e-6)
    first = led.spend("ds", 0.4, 1e-7, "gaussian", "req", parameters={"k": 3})
    again = led.spend("ds", 0.4, 1e-7, "gaussian", "req", parameters={"k": 3})
    different = led.spend("ds", 0.9, 0.0, "laplace", "req", parameters={"k": 9})
    assert first == again == different
    assert first.inserted and not again.inserted and not different.inserted  # only the first call debited
    assert not led.release_by_request("req").inserted
    assert different.epsilon == 0.4 and different.mechanism == "gaussian"
    assert len(led.releases("ds")) == 1
    assert led.remaining("ds") == (0.6, 9e-7)
    led.spend("ds", 0.6, 0.0, "laplace", "rest")
    assert led.spend("ds", 0.4, 1e-7, "gaussian", "req") == first  # a rerun after exhaustion is not refused


def test_request_id_of_another_dataset_is_refused(led: Ledger) -> None:
    led.set_budget("a", epsilon=1.0)
    led.set_budget("b", epsilon=1.0)
    led.spend("a", 0.1, 0.0, "laplace", "req")
    with pytest.raises(LedgerError, match="request_id 'req' was already used for account a, not b"):
        led.spend("b", 0.1, 0.0, "laplace", "req")
    assert led.releases("b") == []
    assert led.remaining("b") == (1.0, 0.0)


def test_record_fields_and_json_parameters_round_trip(led: Ledger, url: str, monkeypatch) -> None:
    monkeypatch.setenv("DPCORE_USER", "alice")
    demo_account = Account("ds", "dp", "unbounded", mode="demo")
    led.set_budget(demo_account, epsilon=2.0, delta=1e-5)
    params = {
        "k": np.int64(3),
        "bounds": np.array([[0.0, 1.5], [-2.0, 3.0]]),
        "scale": np.float64(0.25),
        "features": ["Income", "Age"],
        "nested": {"graph": "partition", "theta": None, "ok": True},
        "path": Path("out/report.html"),
    }
    rec = led.spend(
        demo_account,
        0.5,
        1e-6,
        "colored_gaussian",
        "req-1",
        fingerprint="f" * 64,
        definition="approx_dp",
        calibration="analytic",
        sampling_mode="demo",
        parameters=params,
        artifact_path=Path("data/releases/req-1.json"),
        artifact_hash="ab" * 32,
    )
    expected = {
        "k": 3,
        "bounds": [[0.0, 1.5], [-2.0, 3.0]],
        "scale": 0.25,
        "features": ["Income", "Age"],
        "nested": {"graph": "partition", "theta": None, "ok": True},
        "path": "out/report.html",
    }
    assert rec.parameters == expected
    assert (rec.user, rec.dataset_fingerprint, rec.definition, rec.calibration) == (
        "alice",
        "f" * 64,
        "approx_dp",
        "analytic",
    )
    assert (rec.sampling_mode, rec.artifact_path, rec.artifact_hash) == (
        "demo",
        "data/releases/req-1.json",
        "ab" * 32,
    )
    assert (rec.composition, rec.parallel_group, rec.partition_key) == ("sequential", None, None)
    assert datetime.fromisoformat(rec.time).utcoffset().total_seconds() == 0
    fresh = Ledger(url)
    try:
        assert fresh.releases(demo_account) == [rec] == fresh.releases(dataset_id="ds")
    finally:
        fresh.close()


def test_unserialisable_parameters_are_refused_before_spending(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0)
    with pytest.raises(ParameterError, match="JSON"):
        led.spend("ds", 0.1, 0.0, "laplace", "r", parameters={"f": object()})
    with pytest.raises(ParameterError, match="dict"):
        led.spend("ds", 0.1, 0.0, "laplace", "r", parameters=[1, 2])  # type: ignore[arg-type]
    assert led.releases("ds") == []


def test_releases_oldest_first(led: Ledger) -> None:
    led.set_budget("a", epsilon=10.0)
    led.set_budget("b", epsilon=10.0)
    order = [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3"), ("b", "b2")]
    for ds, rid in order:
        led.spend(ds, 0.5, 0.0, "laplace", rid)
    a = led.releases("a")
    assert [r.request_id for r in a] == ["a1", "a2", "a3"]
    assert [r.id for r in a] == sorted(r.id for r in a)
    assert [r.time for r in a] == sorted(r.time for r in a)
    assert [r.request_id for r in led.all_releases()] == [rid for _, rid in order]
    assert led.releases("unknown") == []


def test_parallel_group_costs_its_max(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0, delta=1e-6)
    for key, eps, delta in [("north", 0.5, 1e-7), ("south", 0.3, 4e-7), ("east", 0.5, 0.0)]:
        rec = led.spend("ds", eps, delta, "laplace", f"g-{key}", parallel_group="g", partition_key=key)
        assert (rec.composition, rec.parallel_group, rec.partition_key) == ("parallel", "g", key)
    assert led.remaining("ds") == (0.5, 6e-7)
    led.spend("ds", 0.5, 0.0, "laplace", "seq")
    assert led.remaining("ds") == (0.0, 6e-7)
    led.spend(
        "ds", 0.4, 4e-7, "laplace", "g-west", parallel_group="g", partition_key="west"
    )  # below max: free
    with pytest.raises(BudgetExceeded, match="in parallel group 'g'"):
        led.spend("ds", 0.6, 0.0, "laplace", "g-up", parallel_group="g", partition_key="up")
    with pytest.raises(BudgetExceeded):  # a new group is a new sequential term
        led.spend("ds", 0.1, 0.0, "laplace", "h-1", parallel_group="h", partition_key="north")
    assert len(led.releases("ds")) == 5


def test_parallel_group_validation(led: Ledger) -> None:
    led.set_budget("ds", epsilon=1.0)
    led.spend("ds", 0.1, 0.0, "laplace", "p1", parallel_group="g", partition_key="k")
    with pytest.raises(LedgerError, match="Partition 'k' of parallel group 'g'"):
        led.spend("ds", 0.1, 0.0, "laplace", "p2", parallel_group="g", partition_key="k")
    with pytest.raises(ParameterError, match="both parallel_group and partition_key"):
        led.spend("ds", 0.1, 0.0, "laplace", "p3", parallel_group="g")
    with pytest.raises(ParameterError, match="both parallel_group and partition_key"):
        led.spend("ds", 0.1, 0.0, "laplace", "p4", partition_key="k2")
    assert len(led.releases("ds")) == 1


def test_remaining_matches_a_rational_reference(led: Ledger) -> None:
    """Random spends on a decimal grid: accept/refuse and remaining() agree with exact rational sums."""
    rng = np.random.default_rng(7)
    total = Decimal("2.5")
    led.set_budget("ds", epsilon=float(total))
    seq, groups = Decimal(0), {}
    for i in range(60):
        eps = Decimal(int(rng.integers(1, 40))) / 100
        group = [None, None, "g1", "g2"][int(rng.integers(0, 4))]
        kwargs = {} if group is None else {"parallel_group": group, "partition_key": f"p{i}"}
        new_groups = dict(groups)
        new_seq = seq + eps if group is None else seq
        if group is not None:
            new_groups[group] = max(groups.get(group, Decimal(0)), eps)
        fits = new_seq + sum(new_groups.values()) <= total
        if fits:
            led.spend("ds", float(eps), 0.0, "laplace", f"r{i}", **kwargs)
            seq, groups = new_seq, new_groups
        else:
            with pytest.raises(BudgetExceeded):
                led.spend("ds", float(eps), 0.0, "laplace", f"r{i}", **kwargs)
        assert Decimal(repr(led.remaining("ds")[0])) == total - seq - sum(groups.values())


def test_set_budget_validation(led: Ledger) -> None:
    for eps in [0, -1.0, float("nan"), float("inf"), "abc", None, True]:
        with pytest.raises(PolicyError, match="epsilon"):
            led.set_budget("ds", epsilon=eps, delta=0.0)  # type: ignore[arg-type]
    for delta in [-0.1, 1.0, 2.0, float("nan")]:
        with pytest.raises(PolicyError, match="delta"):
            led.set_budget("ds", epsilon=1.0, delta=delta)
    with pytest.raises(ParameterError, match="account"):
        led.set_budget("", epsilon=1.0)
    assert led.budget("ds") is None and led.budgets() == []


def test_set_budget_raises_and_lowers_but_not_below_spent(led: Ledger) -> None:
    first = led.set_budget("ds", epsilon=1.0, delta=1e-6)
    led.spend("ds", 0.1, 0.0, "laplace", "a")
    led.spend("ds", 0.2, 1e-7, "laplace", "b")
    with pytest.raises(LedgerError, match=r"eps=0.3, delta=1e-07 is already spent.*at least eps=0.3"):
        led.set_budget("ds", epsilon=0.25, delta=1e-6)
    with pytest.raises(LedgerError, match="already spent"):
        led.set_budget("ds", epsilon=1.0, delta=0.0)
    assert led.remaining("ds") == (0.7, 9e-7)
    lowered = led.set_budget("ds", epsilon=0.3, delta=1e-7)  # exactly what is spent
    assert (lowered.epsilon_left, lowered.delta_left, lowered.created) == (0.0, 0.0, first.created)
    assert lowered.updated >= first.updated
    raised = led.set_budget("ds", epsilon=2.0, delta=1e-6)
    assert (raised.epsilon_left, raised.delta_left) == (1.7, 9e-7)


def test_spend_validation(led: Ledger) -> None:
    with pytest.raises(BudgetNotSet, match=r"no privacy budget.*set_budget"):
        led.spend("nobudget", 0.1, 0.0, "laplace", "r")
    with pytest.raises(BudgetNotSet):
        led.remaining("nobudget")
    led.set_budget("ds", epsilon=1.0, delta=1e-6)
    for eps in [0.0, -0.5, float("inf")]:
        with pytest.raises(PolicyError, match="epsilon"):
            led.spend("ds", eps, 0.0, "laplace", "r")
    for delta in [-1e-9, 1.0]:
        with pytest.raises(PolicyError, match="delta"):
            led.spend("ds", 0.1, delta, "laplace", "r")
    with pytest.raises(ParameterError, match="diagnostic noise is never released"):
        led.spend("ds", 0.1, 0.0, "laplace", "r", sampling_mode="diagnostic")
    with pytest.raises(ParameterError, match="request_id"):
        led.spend("ds", 0.1, 0.0, "laplace", "")
    with pytest.raises(ParameterError, match="mechanism"):
        led.spend("ds", 0.1, 0.0, "", "r")
    assert led.releases("ds") == [] and led.remaining("ds") == (1.0, 1e-6)


def test_fresh_ledger_on_same_file_sees_earlier_records(url: str) -> None:
    first = Ledger.initialise(url)
    first.set_budget("ds", epsilon=1.0, delta=1e-6)
    recs = [first.spend("ds", 0.25, 1e-7, "laplace", f"r{i}") for i in range(3)]
    first.close()
    second = Ledger(url)
    try:
        assert second.releases("ds") == recs
        assert second.remaining("ds") == (0.25, 7e-7)
        assert second.spend("ds", 0.25, 1e-7, "laplace", "r0") == recs[0]
        with pytest.raises(BudgetExceeded):
            second.spend("ds", 0.5, 0.0, "laplace", "r3")
    finally:
        second.close()


def test_budgets_listing_and_dataframe(led: Ledger) -> None:
    led.set_budget("b", epsilon=2.0)
    led.set_budget("a", epsilon=1.0, delta=1e-6)
    led.spend("a", 0.5, 1e-7, "laplace", "a1", parameters={"k": 2})
    led.spend("b", 0.5, 0.0, "laplace", "b1")
    statuses = led.budgets()
    assert [s.dataset_id for s in statuses] == ["a", "b"]
    assert all(isinstance(s, BudgetStatus) for s in statuses)
    assert [(s.epsilon_total, s.epsilon_left, s.delta_left, s.n_releases) for s in statuses] == [
        (1.0, 0.5, 9e-7, 1),
        (2.0, 1.5, 0.0, 1),
    ]
    frame = led.to_dataframe()
    stored = [name for name in ReleaseRecord.__dataclass_fields__ if name != "inserted"]  # not a column
    assert list(frame.columns) == ["dataset_name", *stored]
    assert list(frame["request_id"]) == ["a1", "b1"]
    assert json.loads(frame["parameters"].iloc[0]) == {"k": 2}
    only_a = led.to_dataframe("a")
    assert list(only_a["request_id"]) == ["a1"] and only_a["epsilon"].tolist() == [0.5]
    assert led.to_dataframe("none").empty


def test_budget_row_is_locked_for_update_on_server_databases() -> None:
    sql = str(_lock_accounts_query(Account("ds")).compile(dialect=postgresql.dialect()))
    assert sql.rstrip().endswith("FOR UPDATE") and "ORDER BY accounts.account" in sql


def test_config_from_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DPCORE_LEDGER_URL", raising=False)
    monkeypatch.delenv("DPCORE_USER", raising=False)
    monkeypatch.setenv("DPCORE_DATA_DIR", str(tmp_path / "nested" / "data"))
    folder = config.data_dir()
    assert folder == (tmp_path / "nested" / "data").resolve() and folder.is_dir()
    assert config.ledger_url() == f"sqlite:///{(folder / 'ledger.db').as_posix()}"
    assert config.default_ledger_url() == config.ledger_url()
    assert config.local_user() == "local"
    led = Ledger()
    try:
        led.set_budget("ds", epsilon=1.0)
        assert led.spend("ds", 0.1, 0.0, "laplace", "r").user == "local"
    finally:
        led.close()
    assert (folder / "ledger.db").is_file()
    monkeypatch.setenv("DPCORE_USER", "bob")
    monkeypatch.setenv("DPCORE_LEDGER_URL", "postgresql+psycopg://u@db/ledger")
    assert (config.local_user(), config.ledger_url()) == ("bob", "postgresql+psycopg://u@db/ledger")
    monkeypatch.setenv("DPCORE_DATA_DIR", "")
    monkeypatch.chdir(tmp_path)
    assert config.data_dir() == (tmp_path / "data").resolve()
