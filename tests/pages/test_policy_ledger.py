"""Privacy policy page (validation, meaning, budget), sidebar budget and the Ledger page with CSV export."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Ledger
from dpcore.location.contribution import PER_LOCATION, scope_sentence
from dpcore.plan import ReleasePlan, policy_account
from dpcore.policy import ApproxDP, GeoIndistinguishability, PureDP
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60


@pytest.fixture
def small_dataset() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9, 0.3], "y": [1.0, 2.0, 3.0, 4.0]})
    return Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


def _policy_page(app_path: str, dataset: Dataset | None = None) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    if dataset is not None:
        at.session_state["dp_dataset"] = dataset
    at.run()
    at.switch_page("pages/policy.py").run()
    if dataset is not None:
        at.text_input(key="pol_budget_reason").input("test budget")
    return at.run()


def test_invalid_epsilon_shows_error_and_keeps_policy(app_path: str):
    at = _policy_page(app_path)
    at.number_input(key="pol_eps").set_value(0.0).run()
    assert not at.exception
    assert any("epsilon must be a finite number > 0" in e.value for e in at.error)
    assert "dp_policy" not in at.session_state  # still the default ApproxDP(1, 1e-6)
    at.number_input(key="pol_eps").set_value(1.0).run()
    at.number_input(key="pol_delta").set_value(1.5).run()
    assert any("delta must be in (0, 1)" in e.value for e in at.error)


def test_valid_policies_are_stored_with_their_meaning(app_path: str):
    at = _policy_page(app_path)
    at.selectbox(key="pol_definition").set_value("pure_dp").run()
    at.number_input(key="pol_eps").set_value(0.5).run()
    assert not at.exception and not at.error
    assert at.session_state["dp_policy"] == PureDP(0.5)
    truthful = next(m for m in at.metric if m.label == "Truthful-answer probability")
    assert truthful.value == "62.25%"  # e^0.5 / (1 + e^0.5)
    at.radio(key="pol_neighbours").set_value("bounded").run()
    assert at.session_state["dp_policy"] == PureDP(0.5, "bounded")

    at.selectbox(key="pol_definition").set_value("geo_ind").run()
    at.number_input(key="pol_geo_level").set_value(2.0).run()
    at.number_input(key="pol_geo_radius").set_value(400.0).run()
    assert at.session_state["dp_policy"] == GeoIndistinguishability.from_level(2.0, 400.0)
    radii = [m for m in at.metric if m.label.startswith("Noise radius")]
    assert len(radii) == 4 and radii[0].value.endswith(" m")

    at.selectbox(key="pol_definition").set_value("local_pdp").run()
    assert any("NOT differential privacy" in w.value for w in at.warning)


def test_blowfish_graph_validation(app_path: str):
    at = _policy_page(app_path)
    at.selectbox(key="pol_definition").set_value("blowfish").run()
    at.selectbox(key="pol_graph").set_value("partition").run()
    at.number_input(key="pol_block_width").set_value(0.0).run()
    assert any("block_width must be a finite number > 0" in e.value for e in at.error)
    at.number_input(key="pol_block_width").set_value(2.5).run()
    assert not at.error and at.session_state["dp_policy"].graph.block_width == 2.5
    units = "in the scaled feature space prepared on the Data page; with min-max scaling, 1.0 = half the"
    assert any(units in c.value for c in at.caption)  # the K-means page applies them to scaled features
    assert at.number_input(key="pol_block_width").label == "Block width (scaled feature units)"


def test_budget_saved_shows_in_sidebar_and_ledger(app_path: str, small_dataset: Dataset, downloads):
    at = _policy_page(app_path, small_dataset)
    at.number_input(key="pol_budget_eps").set_value(0.0).run()
    at.button[0].click().run()
    assert any("must be > 0" in e.value for e in at.error)
    ledger = Ledger(config.ledger_url())
    account = policy_account(small_dataset.dataset_id, DEFAULT_POLICY)
    assert ledger.budget(account) is None  # nothing saved

    at.number_input(key="pol_budget_eps").set_value(2.0).run()
    at.number_input(key="pol_budget_delta").set_value(1e-5).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert ledger.remaining(account) == (2.0, 1e-5)
    assert ledger.budget(small_dataset.dataset_id) is None  # the budget belongs to the policy's account
    assert any("Budget saved" in s.value for s in at.success)
    assert [m.value for m in at.metric if m.label.endswith("ε")][:3] == ["2", "0", "2"]

    at.switch_page("pages/home.py").run()
    assert [m.value for m in at.sidebar.metric] == ["2"]  # budget left in the shared sidebar

    ledger.spend(account, 0.5, 1e-6, "ManualLaplace", "req-manual-1", parameters={"k": 2})
    at.switch_page("pages/ledger.py").run()
    assert not at.exception and not at.error
    assert "tiny" in [h.value for h in at.subheader]  # budgets grouped under the dataset's name
    accounts = next(d.value for d in at.dataframe if "ε left" in d.value.columns)
    assert accounts["ε left"].tolist() == [1.5]
    shown = next(d.value for d in at.dataframe if "request id" in d.value.columns)
    assert shown["mechanism"].tolist() == ["ManualLaplace"] and shown["user"].tolist() == ["test-curator"]
    exported = pd.read_csv(io.BytesIO(downloads["ledger.csv"]))
    assert exported["request id"].tolist() == ["req-manual-1"] and exported["dataset"].tolist() == ["tiny"]
    assert exported["ε"].tolist() == [0.5] and exported["δ"].tolist() == [1e-6]
    assert exported["dataset id"].tolist() == [small_dataset.dataset_id]


def test_default_policy_is_approx_dp(app_path: str):
    at = _policy_page(app_path)
    assert at.selectbox(key="pol_definition").value == "approx_dp"
    assert at.number_input(key="pol_eps").value == 1.0 and at.number_input(key="pol_delta").value == 1e-6
    assert ApproxDP(1.0, 1e-6).guarantee in [i.value for i in at.info]


LEDGER_FAULTS = {  # fault -> (how to cause it, what the page must say)
    "corrupt database file": ("corrupt", "file is not a database"),
    "data folder is a file": ("data_dir_file", "DPCORE_DATA_DIR (…/file) cannot be used"),
    "malformed ledger URL": ("not a url", "malformed"),
    "missing database driver": ("postgresql+psycopg2://u@h/db", "driver that is not installed"),
}


@pytest.mark.parametrize("fault", list(LEDGER_FAULTS))
@pytest.mark.parametrize("page", ["pages/policy.py", "pages/ledger.py"])
def test_ledger_faults_are_clear_messages_and_the_page_keeps_working(
    app_path, small_dataset, isolated_data_dir, monkeypatch, page, fault
):
    how, message = LEDGER_FAULTS[fault]
    if how == "corrupt":
        (isolated_data_dir / "ledger.db").write_bytes(b"not a database " * 500)
    elif how == "data_dir_file":
        (isolated_data_dir / "file").write_text("a file, not a folder")
        monkeypatch.setenv("DPCORE_DATA_DIR", str(isolated_data_dir / "file"))
        monkeypatch.delenv("DPCORE_LEDGER_URL")
    else:
        monkeypatch.setenv("DPCORE_LEDGER_URL", how)
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = small_dataset
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert errors and all(message in e for e in errors), errors
    assert not [e for e in errors if "Something went wrong" in e or str(isolated_data_dir) in e]
    if page == "pages/policy.py":  # the policy itself still works
        at.selectbox(key="pol_definition").set_value("pure_dp").run()
        assert at.session_state["dp_policy"] == PureDP(1.0) and not at.exception


def test_a_ledger_file_deleted_while_the_app_runs_is_reported_not_restarted(
    app_path, small_dataset, isolated_data_dir
):
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = small_dataset
    at.run()
    at.switch_page("pages/policy.py").run()
    at.text_input(key="pol_budget_reason").input("test budget").run()
    at.button[0].click().run()  # save the default budget: the ledger now exists and has spent nothing
    assert any("Budget saved" in s.value for s in at.success)
    for suffix in ("", "-wal", "-shm"):
        (isolated_data_dir / f"ledger.db{suffix}").unlink(missing_ok=True)
    for page in ("pages/policy.py", "pages/ledger.py"):
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        assert any("deleted or replaced while in use" in e for e in errors), errors
        assert not [m for m in at.metric if m.label == "Total ε"]  # no fresh budget shown


def test_the_policy_page_budgets_the_accounts_location_releases_debit(app_path: str, small_dataset: Dataset):
    """A great-circle distance-threshold Blowfish policy budgets the account a Blowfish location release at
    its θ debits (issue 19: they never matched), and the per-user unit the account of a per-user release."""
    at = _policy_page(app_path, small_dataset)
    at.selectbox(key="pol_definition").set_value("blowfish").run()
    at.selectbox(key="pol_graph").set_value("distance_threshold").run()
    at.selectbox(key="pol_metric").set_value("haversine").run()
    at.number_input(key="pol_theta").set_value(50_000.0).run()
    at.number_input(key="pol_budget_eps").set_value(2.0).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    policy = at.session_state["dp_policy"]
    params = {"theta_m": 50_000.0, "max_per_user": 3}
    fp = small_dataset.fingerprint
    plans = [
        ReleasePlan("location", mech, 1.0, policy, "tiny", fp, params=params, scope=scope)
        for mech in ("blowfish_mean", "blowfish_hotspots")
        for scope in (PER_LOCATION, scope_sentence(True, 3))
    ]
    ledger = Ledger(config.ledger_url())
    assert ledger.budget(plans[0].account).epsilon_total == 2.0
    assert ledger.budget(plans[1].account) is None  # the per-user releases spend a budget of their own
    at.radio(key="pol_unit").set_value("user").run()
    at.number_input(key="pol_unit_m").set_value(3).run()
    at.number_input(key="pol_budget_eps").set_value(4.0).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert [ledger.budget(p.account).epsilon_total for p in plans] == [2.0, 4.0, 2.0, 4.0]


def test_the_ledger_page_says_when_accounts_are_not_bounded_together(app_path: str, small_dataset: Dataset):
    ledger = Ledger(config.ledger_url())
    bounded = policy_account(small_dataset.dataset_id, PureDP(1.0, "bounded"))
    unbounded = policy_account(small_dataset.dataset_id, PureDP(1.0))
    for account in (bounded, unbounded):
        ledger.set_budget(account, 1.0)
    ledger.spend(unbounded, 0.25, 0.0, "ManualLaplace", "r1")
    at = _policy_page(app_path, small_dataset).switch_page("pages/ledger.py").run()
    assert not at.exception
    accounts = next(d.value for d in at.dataframe if "ε left" in d.value.columns)
    assert sorted(accounts["ε left"].tolist()) == [0.5, 0.75]  # the bounded account: 2 x 0.25
    (note,) = [w.value for w in at.warning if "Not bounded together" in w.value]
    assert "(one row's value replaced by any other value) are not charged to the" in note
    assert note.endswith(
        "account (one row added or removed), because nothing bounds what they reveal under its "
        "relation; a person's total across these accounts is not bounded."
    )


def test_the_sidebar_never_says_no_budget_beside_an_account_that_has_one(
    app_path: str, small_dataset: Dataset
):
    """A local (PDP) release's account has a budget, the DP policy's has none: the sidebar says which account
    has none and lists the one that has a budget (the panel's), instead of 'No privacy budget set yet'."""
    from dpcore.policy import make_policy

    local = policy_account(small_dataset.dataset_id, make_policy("local_pdp", epsilon=1.0, delta=1e-6))
    Ledger(config.ledger_url()).set_budget(local, 1.25, 1e-5)
    at = _policy_page(app_path, small_dataset)
    captions = [c.value for c in at.sidebar.caption]
    assert not any("No privacy budget set yet" in c for c in captions)
    assert any("No budget yet for this policy's account" in c for c in captions)
    assert [m.value for m in at.sidebar.metric] == ["1.25"]
    assert any(c == f"Account: local_pdp: {local.relation}" for c in captions)


def test_no_delta_is_asked_for_a_definition_without_one(app_path: str, small_dataset: Dataset):
    at = _policy_page(app_path, small_dataset)
    assert any(n.label.startswith("Total δ") for n in at.number_input)  # differential privacy has one
    at.selectbox(key="pol_definition").set_value("geo_ind").run()
    assert not at.exception and not any(n.label.startswith("Total δ") for n in at.number_input)
    assert any(n.label == "Total level l for this dataset" for n in at.number_input)
    next(b for b in at.button if b.label == "Save budget").click().run()
    assert any(s.value.startswith("Budget saved: level l = 3") and "δ" not in s.value for s in at.success)


def test_a_budget_typed_and_committed_by_the_click_is_not_saved(app_path: str, small_dataset: Dataset):
    """The Save budget button saves the totals that were on screen when it was clicked, or nothing: a value
    typed without Enter and committed by the click itself is not granted under a button drawn for another."""
    at = _policy_page(app_path, small_dataset)
    at.number_input(key="pol_budget_eps").set_value(2.0).run()
    save = next(b for b in at.button if b.label == "Save budget")
    at.number_input(key="pol_budget_eps").set_value(20.0)
    save.click().run()  # one run: the field's new value and the click on the button drawn for 2
    account = policy_account(small_dataset.dataset_id, DEFAULT_POLICY)
    assert Ledger(config.ledger_url()).budget(account) is None
    assert any("nothing was saved" in w.value for w in at.warning)
    next(b for b in at.button if b.label == "Save budget").click().run()  # now drawn for 20: confirmed
    assert Ledger(config.ledger_url()).budget(account).epsilon_total == 20.0
