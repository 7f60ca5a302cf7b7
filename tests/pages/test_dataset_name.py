"""The curator names the dataset on the Data page, and the name carries the privacy budget (AppTest):
a rename moves the session to the new name's account without resetting other settings, the budget set
under the new name is the one a release debits, the name survives a reload, a second table released under
a name debits that name's account (the Ledger page flags it), and an empty or overlong name is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.ledger import Ledger, LedgerError, dataset_id_for_name
from dpcore.plan import policy_account
from tests.panel import release_button
from tests.paths import ROOT
from tests.prep_table import edit_table, table_cells
from ui.state import DEFAULT_POLICY
from ui.text import md

TIMEOUT = 120
APP = str(ROOT / "app.py")
NAME = "Customers 2024"


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _csv(seed: int, n: int = 40) -> bytes:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.uniform(0, 1, n), "y": rng.uniform(0, 1, n)}).to_csv(index=False).encode()


def _open(token: str | None = None, secrets: dict[str, Any] | None = None) -> AppTest:
    """A new browser session (with the URL's ``token``) on the Data page."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (secrets or {}).items():
        at.secrets[key] = value
    if token is not None:
        at.query_params["s"] = token
    _ok(at.run())
    at.switch_page("pages/data.py").run()
    return _ok(at)


def _upload(at: AppTest, filename: str, data: bytes) -> None:
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value((filename, data, "text/csv")).run()
    assert _ok(at).session_state["dp_dataset"].name == filename


def _name_input(at: AppTest):
    return at.text_input(key=f"data_name_{at.session_state['dp_dataset'].dataset_id}")


def _rename(at: AppTest, name: str) -> None:
    _name_input(at).input(name)
    at.button(key="data_rename").click().run()
    _ok(at)


def _prepare(at: AppTest) -> None:
    """Features x and y with public bounds [0, 1], prepared."""
    edit_table(at, features=["x", "y"], bounds={"x": ("0", "1"), "y": ("0", "1")})
    at.button(key="data_prepare").click().run()
    assert _ok(at).session_state["dp_dataset"].prepared is not None


def _save_budget(at: AppTest, eps: float, delta: float) -> None:
    at.switch_page("pages/policy.py").run()
    at.number_input(key="pol_budget_eps").set_value(eps).run()
    at.number_input(key="pol_budget_delta").set_value(delta).run()
    at.text_input(key="pol_budget_reason").input("test budget").run()
    next(b for b in at.button if b.label == "Save budget").click().run()
    assert any("Budget saved" in s.value for s in _ok(at).success)


def _release(at: AppTest, eps: float) -> dict[str, str]:
    """Release DP-Lloyd at ``eps`` from the K-means page; returns the "What will run" table."""
    at.switch_page("pages/kmeans.py").run()
    at.number_input(key="km_rel_eps").set_value(eps).run()
    shown = dict(zip(_ok(at).table[-1].value.index, at.table[-1].value["value"], strict=True))
    release_button(at, "kmeans").click().run()
    assert not _ok(at).error, [e.value for e in at.error]
    return shown


def test_a_rename_changes_the_name_and_account_everywhere_and_keeps_the_other_settings() -> None:
    at = _open()
    _upload(at, "people.csv", _csv(1))
    old = at.session_state["dp_dataset"]
    assert _name_input(at).value == "people.csv"  # the default is the file's name
    edit_table(at, features=["x", "y"], bounds={"x": ("0", "1")}, units={"y": "cm"})

    _rename(at, f"  {NAME} ")
    ds = at.session_state["dp_dataset"]
    assert ds.name == NAME and ds.fingerprint == old.fingerprint  # stripped; the same table
    assert ds.dataset_id == dataset_id_for_name(NAME) != old.dataset_id
    assert f"**{NAME}**" in [m.value for m in at.sidebar.markdown]
    assert any(f"In use: {NAME}." in c.value for c in at.caption)
    assert _name_input(at).value == NAME
    # the settings kept under the old id follow the rename: nothing was reset
    assert [table_cells(at, f)["feature"] for f in ("x", "y")] == [True, True]
    assert (table_cells(at, "x")["lower"], table_cells(at, "x")["upper"]) == ("0", "1")
    assert table_cells(at, "y")["unit"] == "cm"
    at.switch_page("pages/ledger.py").run()
    at.switch_page("pages/data.py").run()
    assert [table_cells(_ok(at), f)["feature"] for f in ("x", "y")] == [True, True]
    assert at.radio(key="data_source").value == "Upload a file"


def test_a_rename_keeps_the_region_chosen_on_the_locations_page() -> None:
    at = _open()
    at.radio(key="data_source").set_value("Sample: US airports").run()
    at.button(key="data_load_sample").click().run()
    at.switch_page("pages/locations.py").run()
    suffix = _ok(at).session_state["dp_dataset"].dataset_id
    at.selectbox(key=f"loc_region_{suffix}").set_value("Custom (enter the box below)").run()
    at.number_input(key=f"loc_box_0_{suffix}").set_value(30.0).run()
    at.switch_page("pages/data.py").run()
    _rename(at, "Airports 2024")
    at.switch_page("pages/locations.py").run()
    suffix = _ok(at).session_state["dp_dataset"].dataset_id
    assert suffix == dataset_id_for_name("Airports 2024")
    assert at.selectbox(key=f"loc_region_{suffix}").value == "Custom (enter the box below)"
    assert at.number_input(key=f"loc_box_0_{suffix}").value == 30.0
    # still the airports sample: no offer to load it again (under its label, another budget)
    assert not [b for b in at.button if b.key == "loc_load_airports"]


def test_the_budget_set_under_the_new_name_is_the_one_a_release_debits(downloads: dict[str, bytes]) -> None:
    at = _open()
    _upload(at, "people.csv", _csv(2))
    _prepare(at)
    _rename(at, NAME)
    assert at.session_state["dp_dataset"].prepared is not None  # a rename keeps the prepared features
    _save_budget(at, 2.0, 1e-5)
    shown = _release(at, 0.5)
    assert shown["Dataset"] == NAME  # "What will run"
    ledger = Ledger(config.ledger_url())
    account = policy_account(dataset_id_for_name(NAME), DEFAULT_POLICY)
    assert ledger.remaining(account) == pytest.approx((1.5, 1e-5))
    (record,) = ledger.releases()
    assert record.account == account.key and ledger.dataset_names()[record.dataset_id] == NAME
    (manifest,) = [json.loads(v) for k, v in downloads.items() if k.endswith("-manifest.json")]
    assert manifest["dataset_name"] == NAME
    assert ledger.budget(policy_account(dataset_id_for_name("people.csv"), DEFAULT_POLICY)) is None
    at.switch_page("pages/ledger.py").run()
    assert NAME in [h.value for h in _ok(at).subheader]


def test_a_reload_restores_the_name_of_an_upload_and_of_a_folder_file(tmp_path: Path) -> None:
    at = _open()
    _upload(at, "people.csv", _csv(3))
    _rename(at, NAME)
    again = _open(at.query_params["s"])
    assert again.session_state["dp_dataset"].name == NAME
    assert f"**{NAME}**" in [m.value for m in again.sidebar.markdown]

    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "people.csv").write_bytes(_csv(4))
    secrets = {"dpcore": {"data_folders": [str(folder)], "max_rows": 1000}}
    at = _open(secrets=secrets)
    at.radio(key="data_source").set_value("File in a data folder").run()
    at.button(key="data_load_source").click().run()
    assert _ok(at).session_state["dp_dataset"].name == "tables/people.csv"
    _rename(at, "Survey")
    again = _open(at.query_params["s"], secrets=secrets)  # a source is read again under its label
    assert again.session_state["dp_dataset"].name == "Survey"


def test_a_second_table_under_a_name_debits_that_names_budget_and_is_flagged() -> None:
    at = _open()
    _upload(at, "a.csv", _csv(5))
    _prepare(at)
    _rename(at, "Shared")
    _save_budget(at, 2.0, 1e-5)
    _release(at, 0.5)
    first = at.session_state["dp_dataset"].fingerprint

    at.switch_page("pages/data.py").run()
    _upload(at, "b.csv", _csv(6))
    _prepare(at)
    _rename(at, "Shared")
    second = at.session_state["dp_dataset"].fingerprint
    assert second != first
    _release(at, 0.5)
    ledger = Ledger(config.ledger_url())
    account = policy_account(dataset_id_for_name("Shared"), DEFAULT_POLICY)
    assert ledger.remaining(account) == pytest.approx((1.0, 1e-5))  # both releases debit "Shared"
    assert {r.dataset_fingerprint for r in ledger.releases(account)} == {first, second}
    at.switch_page("pages/ledger.py").run()
    (warning,) = [w.value for w in _ok(at).warning if "different tables" in w.value]
    assert "2 different tables" in warning and f"`{first[:12]}`" in warning and f"`{second[:12]}`" in warning


def test_an_empty_or_overlong_name_is_refused_and_the_name_kept() -> None:
    at = _open()
    _upload(at, "people.csv", _csv(7))
    _rename(at, "   ")
    assert any("The dataset name is empty" in e.value for e in at.error)
    assert at.session_state["dp_dataset"].name == "people.csv"
    _rename(at, "n" * 101)
    assert any("has 101 characters; use at most 100" in e.value for e in at.error)
    assert at.session_state["dp_dataset"].name == "people.csv"
    hostile = "*bold* [link](http://x)"
    _rename(at, hostile)
    assert at.session_state["dp_dataset"].name == hostile
    assert f"**{md(hostile)}**" in [m.value for m in at.sidebar.markdown]  # shown literally


# -- ledgers written before names carried the budget -------------------------------------------------


def test_a_table_released_under_a_fingerprint_keyed_account_is_refused_saying_why(tmp_path: Path) -> None:
    """Before names carried budgets, a dataset's id was its fingerprint's first 16 hex digits; no name
    reaches that account, so the refusal must not send the curator to a name that is refused again."""
    led = Ledger.initialise(f"sqlite:///{(tmp_path / 'l.db').as_posix()}")
    table = "ab" * 32
    legacy = policy_account(table[:16], DEFAULT_POLICY)
    led.register_dataset(table[:16], "customers.csv", table)
    led.set_budget(legacy, 1.0, 1e-5)
    led.spend(legacy, 0.5, 0.0, "dp_lloyd", "old-1", fingerprint=table)
    now = policy_account(dataset_id_for_name("customers.csv"), DEFAULT_POLICY)  # the same name today
    led.set_budget(now, 1.0, 1e-5)
    with pytest.raises(LedgerError) as err:
        led.spend(now, 0.5, 0.0, "dp_lloyd", "new-1", fingerprint=table)
    message = str(err.value)
    assert "'customers.csv'" in message and f"id {table[:16]}" in message
    assert "keyed by the table's fingerprint" in message and "Nothing was debited" in message
    assert "Release it under the name" not in message  # that name is the one just refused
    assert led.releases(now) == [] and led.remaining(legacy) == pytest.approx((0.5, 1e-5))
    named = policy_account(dataset_id_for_name("customers v2"), DEFAULT_POLICY)  # any other name: refused too
    led.set_budget(named, 1.0, 1e-5)
    with pytest.raises(LedgerError, match="keyed by the table's fingerprint"):
        led.spend(named, 0.5, 0.0, "dp_lloyd", "new-2", fingerprint=table)
    led.close()
