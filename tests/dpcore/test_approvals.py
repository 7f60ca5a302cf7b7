"""Budget authority and release approval in the ledger database (dpcore.ledger budget events,
dpcore.approvals), on SQLite and the real PostgreSQL server: the history of an account is exactly the
changes made, even under concurrent changes, and no row of it can be rewritten or deleted; two officers
approving one request at once release and debit it once; a budget lowered while a request waits refuses it
at release time with the reason."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from dpcore import approvals
from dpcore.__main__ import main
from dpcore.errors import ParameterError
from dpcore.kmeans.registry import KMeansInputs
from dpcore.ledger import Account, Ledger, LedgerBusy, LedgerError
from dpcore.plan import ReleasePlan
from dpcore.policy import PureDP

ACCOUNT = Account("toy", "dp", "unbounded")
INPUTS = KMeansInputs(
    np.random.default_rng(0).uniform(0, 1, (60, 2)), None, np.zeros(2), np.ones(2), ("a", "b")
)


@pytest.fixture
def led(ledger_url: str):
    ledger = Ledger.initialise(ledger_url)
    yield ledger
    ledger.close()


def _plan(epsilon: float = 0.4) -> ReleasePlan:
    return ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=epsilon,
        policy=PureDP(1.0),
        dataset_name="toy",
        fingerprint="ab" * 32,
        params={"n_clusters": 2},
    )


def test_budget_history_is_exactly_the_changes_made_and_cannot_be_rewritten(led: Ledger) -> None:
    led.set_budget(ACCOUNT, 1.0, 1e-6, user="olivia", reason="initial budget")
    led.set_budget(ACCOUNT, 2.5, 1e-6, user="omar", reason="second study approved")
    with pytest.raises(ParameterError):
        led.set_budget(ACCOUNT, 3.0, user="omar", reason=7)  # type: ignore[arg-type]
    history = led.budget_history(ACCOUNT)
    assert [(e.user, e.reason, e.epsilon_before, e.epsilon_after) for e in history] == [
        ("olivia", "initial budget", None, 1.0),
        ("omar", "second study approved", 1.0, 2.5),
    ]
    assert history[0].time < history[1].time
    for sql in ("UPDATE budget_events SET reason = 'x'", "DELETE FROM budget_events"):
        with (
            pytest.raises((sa.exc.DBAPIError, LedgerError), match="append-only"),
            led._tx(write=True) as conn,
        ):
            conn.execute(sa.text(sql))
    assert led.budget_history(ACCOUNT) == history


def test_concurrent_budget_changes_each_leave_one_event_in_order(led: Ledger) -> None:
    led.set_budget(ACCOUNT, 1.0, user="olivia", reason="start")
    barrier, errors = threading.Barrier(4), []

    def change(worker: int) -> None:
        barrier.wait()
        for step in range(3):
            try:
                led.set_budget(
                    ACCOUNT, 2.0 + worker + step / 10, user=f"officer{worker}", reason=f"{worker}.{step}"
                )
            except LedgerError as err:  # LedgerBusy: nothing changed, no event
                errors.append(err)

    threads = [threading.Thread(target=change, args=(w,)) for w in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    history = led.budget_history(ACCOUNT)
    assert len(history) == 1 + 12 - len(errors)
    for before, after in itertools.pairwise(history):  # each event starts where the last ended
        assert after.epsilon_before == before.epsilon_after
    assert led.budget(ACCOUNT).epsilon_total == history[-1].epsilon_after


def test_ledger_history_command_prints_every_change(led: Ledger, capsys: pytest.CaptureFixture[str]) -> None:
    led.set_budget(ACCOUNT, 1.0, user="olivia", reason="initial, with a comma")
    assert main(["ledger-history", "--ledger", str(led.url.render_as_string(hide_password=False))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("time (UTC),dataset,account,user,reason")
    assert len(out) == 2 and "olivia" in out[1] and '"initial, with a comma"' in out[1]


def _request(led: Ledger, tmp_path: Path, plan: ReleasePlan, **kw) -> approvals.Request:
    ticket_inputs = approvals.store_inputs(INPUTS, tmp_path / "requests")
    return approvals.submit(
        led,
        request_id=plan.request_id(),
        account=plan.account,
        manifest=plan.to_manifest(),
        epsilon=plan.epsilon,
        delta=plan.delta,
        requester="carla",
        guarantee=plan.guarantee,
        expected_error="median relative error 0.12",
        inputs=ticket_inputs,
        **kw,
    )


def test_rules_decide_which_releases_need_approval(led: Ledger) -> None:
    assert approvals.rule(led, ACCOUNT).rule == "none"
    approvals.set_rule(led, ACCOUNT, "above", 0.5, user="olivia", reason="big releases are reviewed")
    current = approvals.rule(led, ACCOUNT)
    assert (current.rule, current.threshold, current.user) == ("above", 0.5, "olivia")
    assert current.needs_approval(0.6) and not current.needs_approval(0.5)
    approvals.set_rule(led, ACCOUNT, "all", user="olivia", reason="audit period")
    assert approvals.rule(led, ACCOUNT).needs_approval(0.01)
    with pytest.raises(ParameterError):
        approvals.set_rule(led, ACCOUNT, "above", user="olivia", reason="no threshold")


def test_two_officers_approving_at_once_release_and_debit_once(led: Ledger, tmp_path: Path) -> None:
    plan = _plan()
    led.set_budget(plan.account, 1.0, user="olivia", reason="start")
    request = _request(led, tmp_path, plan)
    assert request.state == "pending" and _request(led, tmp_path, plan).ticket == request.ticket
    with pytest.raises(LedgerError, match="second person"):
        approvals.decide(led, request.ticket, approve=True, user="carla", reason="")
    barrier, results, errors = threading.Barrier(2), [], []

    def approve(officer: str) -> None:
        barrier.wait()
        for attempt in range(5):  # a lock held past LOCK_WAIT_S on a loaded machine: click again
            try:
                decided = approvals.decide(led, request.ticket, approve=True, user=officer, reason="ok")
                results.append(approvals.release(led, decided, user=officer, artifacts_dir=tmp_path / "a"))
                return
            except LedgerBusy:
                if attempt == 4:
                    errors.append("busy five times")
            except Exception as err:  # shown by the assertion below
                errors.append(err)
                return

    threads = [threading.Thread(target=approve, args=(o,)) for o in ("olivia", "omar")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == [] and len(results) == 2 and results[0].record.request_id == results[1].record.request_id
    assert len(led.releases(plan.account)) == 1 and led.budget(plan.account).epsilon_spent == 0.4
    final = approvals.get(led, request.ticket)
    assert final.state == "released" and final.approved_by in ("olivia", "omar")
    assert final.requester == "carla" and led.releases(plan.account)[0].user == "carla"
    with pytest.raises(LedgerError, match="released"):
        approvals.decide(led, request.ticket, approve=False, user="omar", reason="too late")


def test_budget_lowered_while_waiting_is_refused_at_release_time(led: Ledger, tmp_path: Path) -> None:
    plan = _plan(0.4)
    led.set_budget(plan.account, 1.0, user="olivia", reason="start")
    request = _request(led, tmp_path, plan)
    led.set_budget(plan.account, 0.3, user="omar", reason="budget cut")
    approved = approvals.decide(led, request.ticket, approve=True, user="olivia", reason="fine")
    with pytest.raises(LedgerError, match=r"exceed|more than"):
        approvals.release(led, approved, user="olivia", artifacts_dir=tmp_path / "artifacts")
    refused = approvals.get(led, request.ticket)
    assert refused.state == "refused" and "0.3" in refused.reason and not led.releases(plan.account)


def test_denied_and_expired_requests(led: Ledger, tmp_path: Path) -> None:
    plan = _plan()
    led.set_budget(plan.account, 1.0, user="olivia", reason="start")
    with pytest.raises(LedgerError, match="more than the budget left"):
        _request(led, tmp_path, _plan(1.5))
    request = _request(led, tmp_path, plan)
    with pytest.raises(ParameterError):
        approvals.decide(led, request.ticket, approve=False, user="olivia", reason=" ")
    denied = approvals.decide(led, request.ticket, approve=False, user="olivia", reason="not this quarter")
    assert (denied.state, denied.reason, denied.decided_by) == ("denied", "not this quarter", "olivia")
    again = _request(led, tmp_path, plan, ttl=timedelta(0))  # a new ticket for the same release
    assert again.ticket != request.ticket and again.state == "expired"
    with pytest.raises(LedgerError, match="expired"):
        approvals.decide(led, again.ticket, approve=True, user="olivia", reason="")
    assert [r.state for r in approvals.requests(led, requester="carla")] == ["expired", "denied"]


def test_tampered_inputs_are_never_loaded(led: Ledger, tmp_path: Path) -> None:
    plan = _plan()
    led.set_budget(plan.account, 1.0, user="olivia", reason="start")
    request = _request(led, tmp_path, plan)
    Path(request.inputs_path).write_bytes(b"not the stored inputs")
    approved = approvals.decide(led, request.ticket, approve=True, user="olivia", reason="ok")
    with pytest.raises(LedgerError, match="does not match"):
        approvals.release(led, approved, user="olivia", artifacts_dir=tmp_path / "artifacts")
    assert not led.releases(plan.account)


def test_expected_error_reads_the_comparison_at_the_nearest_epsilon() -> None:
    import pandas as pd

    sweep = pd.DataFrame(
        {
            "mechanism": ["dp_lloyd"] * 4 + ["other"] * 2,
            "epsilon": [0.5, 0.5, 1.0, 1.0, 0.5, 0.5],
            "trial": [0, 1, 0, 1, 0, 1],
            "wcss_loss": [0.2, 0.4, 0.1, 0.3, 9.0, 9.0],
        }
    )
    text = approvals.expected_error(sweep, "dp_lloyd", 0.6)
    assert (
        text.startswith("At the compared ε = 0.5 (nearest 0.6), median of 2 trials")
        and "wcss_loss 0.3" in text
    )
    assert "did not include" in approvals.expected_error(sweep, "planar_laplace", 0.6)
    assert approvals.expected_error(None, "dp_lloyd", 0.6).startswith("No comparison")
