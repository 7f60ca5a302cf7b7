"""``adopt-dataset``: a budget written before dataset names carried budgets (its dataset id is the table's
fingerprint) gets a name once; its spends, request ids and remaining budget carry on under that name, the
same table is then released under it, and nothing is ever merged or lost (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from dpcore.__main__ import main
from dpcore.ledger import BudgetExceeded, Ledger, LedgerError, dataset_id_for_name
from dpcore.plan import policy_account
from dpcore.policy import PureDP
from ui.state import DEFAULT_POLICY

TABLE = "cd" * 32  # a table's fingerprint; older ledgers keyed its dataset by TABLE[:16]


def legacy_ledger(url: str) -> Ledger:
    led = Ledger.initialise(url)
    old = policy_account(TABLE[:16], DEFAULT_POLICY)
    demo = policy_account(TABLE[:16], PureDP(1.0), "demo")
    led.register_dataset(TABLE[:16], "customers.csv", TABLE)
    led.set_budget(old, 1.0, 1e-5)
    led.spend(old, 0.25, 0.0, "dp_lloyd", "old-1", fingerprint=TABLE)
    led.spend(old, 0.25, 0.0, "dp_lloyd", "old-2", fingerprint=TABLE)
    led.set_budget(demo, 3.0)
    led.spend(demo, 1.0, 0.0, "dp_lloyd", "old-demo", fingerprint=TABLE)
    return led


def test_adopting_moves_the_budget_and_the_table_is_released_under_the_name(ledger_url: str) -> None:
    led = legacy_ledger(ledger_url)
    named = policy_account(dataset_id_for_name("Customers"), DEFAULT_POLICY)
    led.set_budget(named, 1.0, 1e-5)
    with pytest.raises(LedgerError, match=f"adopt-dataset {TABLE[:16]} NAME"):  # the refusal names the fix
        led.spend(named, 0.5, 0.0, "dp_lloyd", "new-1", fingerprint=TABLE)
    with pytest.raises(LedgerError, match="already has 1 account"):  # a name in use: never merged
        led.adopt_dataset(TABLE[:16], "customers")
    assert led.budget(named) is not None and led.budget(named).epsilon_spent == 0.0
    fresh = "Customers 2019"
    new_id = led.adopt_dataset(TABLE[:16], fresh)
    assert new_id == dataset_id_for_name(fresh) and led.budgets(TABLE[:16]) == []
    moved = policy_account(new_id, DEFAULT_POLICY)
    assert led.remaining(moved) == pytest.approx((0.5, 1e-5))  # the old spends carry on
    assert {r.request_id for r in led.releases(moved)} == {"old-1", "old-2"}
    demo = policy_account(new_id, PureDP(1.0), "demo")
    assert [r.request_id for r in led.releases(demo)] == ["old-demo"] and led.remaining(demo)[0] == 2.0
    assert led.dataset_names()[new_id] == fresh and TABLE[:16] not in led.dataset_names()
    record = led.spend(moved, 0.5, 0.0, "dp_lloyd", "new-2", fingerprint=TABLE)  # the same table, now allowed
    assert record.account == moved.key and led.remaining(moved)[0] == 0.0
    with pytest.raises(BudgetExceeded):  # and the whole budget still binds
        led.spend(moved, 0.01, 0.0, "dp_lloyd", "new-3", fingerprint=TABLE)
    with pytest.raises(LedgerError, match="no account or release"):
        led.adopt_dataset(TABLE[:16], "again")
    led.close()


def test_the_command_line_adopts_and_refuses_with_one_line(ledger_url: str, capsys) -> None:
    legacy_ledger(ledger_url).close()
    assert main(["adopt-dataset", TABLE[:16], "Customers 2019", "--ledger", ledger_url]) == 0
    assert "is now 'Customers 2019'" in capsys.readouterr().out
    assert main(["adopt-dataset", TABLE[:16], "Other", "--ledger", ledger_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no account or release" in err and "Traceback" not in err
    led = Ledger(ledger_url)
    assert led.remaining(policy_account(dataset_id_for_name("customers 2019"), DEFAULT_POLICY))[0] == 0.5
    led.close()
