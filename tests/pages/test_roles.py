"""Roles (ui.roles) and release approval in the app: every gate on the server side, against the attacks a
curator or viewer could try (typing into widget state, replaying a click drawn for an officer, deep links,
query parameters, forged session keys), and the four-eyes path from request to approved release.

AppTest injects ``at.secrets`` (``[auth]`` and ``[dpcore.roles]``) and ``at.user`` (the verified claims
``st.user`` returns), so these run the real role code; tests/browser/test_walk_roles.py signs in for real.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import approvals, config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Ledger, dataset_id_for_name
from dpcore.plan import policy_account
from tests.panel import has_release_button
from ui import roles
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60
AUTH = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "x" * 40,
    "client_id": "dashboard",
    "client_secret": "s3cret",
    "server_metadata_url": "https://id.example.org/.well-known/openid-configuration",
}
ROLES = {
    "officer": ["olivia@example.org", "omar@example.org"],
    "curator": ["Carla@Example.org"],
    "groups_claim": "groups",
    "groups": {"viewer": ["stakeholders"]},
}
OLIVIA = {"is_logged_in": True, "email": "olivia@example.org", "email_verified": True}
OMAR = {"is_logged_in": True, "email": "omar@example.org"}
CARLA = {"is_logged_in": True, "email": "carla@example.org"}
VIC = {"is_logged_in": True, "email": "vic@example.org", "groups": ["stakeholders"]}
NOBODY = {"is_logged_in": True, "email": "mallory@example.org", "groups": ["officer"]}


@pytest.fixture
def dataset() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9, 0.3]})
    return Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


ACCOUNT = policy_account(dataset_id_for_name("tiny"), DEFAULT_POLICY)


def _app(
    app_path: str, user: dict[str, Any] | None, dataset: Dataset | None = None, page: str = ""
) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    if user is not None:
        at.secrets["auth"] = AUTH
        at.secrets["dpcore"] = {"roles": ROLES}
        at.user = user
    if dataset is not None:
        at.session_state["dp_dataset"] = dataset
    at.run()
    if page:
        at.switch_page(page).run()
    return at


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_roles_come_from_the_configured_emails_and_groups() -> None:
    assert roles.roles_for(OLIVIA, ROLES)[0] == {"officer"}
    assert roles.roles_for(CARLA, ROLES)[0] == {"curator"}  # e-mails compare without case
    assert roles.roles_for(VIC, ROLES)[0] == {"viewer"}
    assert roles.roles_for(NOBODY, ROLES)[0] == frozenset()  # a group named like a role grants nothing
    unverified = {**OLIVIA, "email_verified": False}
    assert roles.roles_for(unverified, ROLES)[0] == frozenset()  # an unverified e-mail is not used
    assert roles.roles_for({**OMAR, "groups": "stakeholders"}, ROLES)[0] == {"officer", "viewer"}


def test_without_sign_in_the_local_user_holds_every_role_and_is_told_once(app_path: str) -> None:
    at = _app(app_path, None)
    notes = [i.value for i in at.sidebar.info]
    assert len(notes) == 1 and "all three roles" in notes[0]
    at.switch_page("pages/requests.py").run()
    assert not at.exception and not at.error and "No request is waiting" in at.info[0].value
    assert not [i for i in at.sidebar.info if "all three roles" in i.value]  # once per session


def test_a_signed_in_user_without_a_role_sees_only_the_refusal(app_path: str) -> None:
    at = _app(app_path, NOBODY)
    assert [t.value for t in at.title] == ["No access"]
    assert "mallory@example.org, who has no role" in _errors(at)[0]
    assert [b.label for b in at.button] == ["Sign out"]
    at.switch_page("pages/ledger.py").run()
    assert [t.value for t in at.title] == ["No access"] and not at.dataframe


def test_a_curator_cannot_set_a_budget_by_any_means(app_path: str, dataset: Dataset) -> None:
    at = _app(app_path, CARLA, dataset, "pages/policy.py")
    assert not at.exception and {"Save budget", "Save approval rule"}.isdisjoint(b.label for b in at.button)
    assert any("set by a privacy officer" in i.value for i in at.info)
    assert any(c.value == "Role: data curator" for c in at.sidebar.caption)
    # typed into the widget state, with a forged confirmation of the button's digest
    at.session_state["pol_budget_eps"] = 100.0
    at.session_state["pol_budget_reason"] = "more accuracy"
    at.session_state["dp_budget_confirmed"] = "0123456789abcdef"
    at.query_params["role"] = "officer"
    at.run()
    assert Ledger(config.ledger_url()).budget(ACCOUNT) is None
    # a Save budget click drawn while an officer was signed in, replayed after the identity changed
    at.user = OLIVIA
    at.run()
    at.text_input(key="pol_budget_reason").input("needs more").run()
    save = next(b for b in at.button if b.label == "Save budget")
    at.user = CARLA
    save.click().run()
    assert Ledger(config.ledger_url()).budget(ACCOUNT) is None and not at.exception


def test_an_officer_saves_a_budget_with_a_reason_and_the_history_shows_it(
    app_path: str, dataset: Dataset, downloads: dict[str, bytes]
) -> None:
    at = _app(app_path, OLIVIA, dataset, "pages/policy.py")
    next(b for b in at.button if b.label == "Save budget").click().run()
    assert any("Give a reason" in e for e in _errors(at))
    assert Ledger(config.ledger_url()).budget(ACCOUNT) is None
    at.text_input(key="pol_budget_reason").input("board decision 14").run()
    next(b for b in at.button if b.label == "Save budget").click().run()
    [event] = Ledger(config.ledger_url()).budget_history(ACCOUNT)
    assert (event.user, event.reason, event.epsilon_after) == ("olivia@example.org", "board decision 14", 3.0)
    at.switch_page("pages/ledger.py").run()
    history = next(d.value for d in at.dataframe if "reason" in d.value.columns)
    assert history["user"].tolist() == ["olivia@example.org"]
    exported = pd.read_csv(io.BytesIO(downloads["budget-history.csv"]))
    assert exported[["user", "reason", "ε after"]].values.tolist() == [
        ["olivia@example.org", "board decision 14", 3.0]
    ]


def test_a_viewer_reads_the_ledger_and_compares_in_demo_mode_only(app_path: str, dataset: Dataset) -> None:
    at = _app(app_path, VIC, dataset, "pages/ledger.py")
    assert not at.exception and not at.error
    for page in ("pages/policy.py", "pages/requests.py"):
        at.switch_page(page).run()
        assert not at.exception and any("Only a" in e for e in _errors(at)), page
        assert not at.number_input and not [b for b in at.button if b.label.startswith(("Save", "Approve"))]
    at.session_state["dp_mode"] = "secure"  # forged: the sampling mode stays demo for a viewer
    at.switch_page("pages/data.py").run()
    sources = at.radio(key="data_source").options
    assert "Upload a file" not in sources and "Synthetic blobs" in sources
    assert not at.sidebar.radio  # no sampling-mode choice


def _release_script() -> None:
    import numpy as np

    from dpcore.kmeans.registry import KMeansInputs
    from ui.release import current_plan, release_panel

    plan = current_plan("kmeans", "dp_lloyd", epsilon=0.4, params={"n_clusters": 2})
    inputs = KMeansInputs(np.linspace(0.0, 1.0, 40).reshape(20, 2), None, np.zeros(2), np.ones(2), ("a", "b"))
    release_panel(key="fake", plan=plan, inputs=inputs)


def _panel(user: dict[str, Any], dataset: Dataset) -> AppTest:
    at = AppTest.from_function(_release_script, default_timeout=TIMEOUT)
    at.secrets["auth"] = AUTH
    at.secrets["dpcore"] = {"roles": ROLES}
    at.user = user
    at.session_state["dp_dataset"] = dataset
    return at.run()


def test_four_eyes_request_approve_release(app_path: str, dataset: Dataset) -> None:
    ledger = Ledger(config.ledger_url())
    plan_account = policy_account(dataset.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(plan_account, 1.0, user="olivia@example.org", reason="start")
    approvals.set_rule(ledger, plan_account, "above", 0.3, user="olivia@example.org", reason="review")
    viewer = _panel(VIC, dataset)
    assert any("Only a" in i.value for i in viewer.info) and not viewer.button
    curator = _panel(CARLA, dataset)
    assert not has_release_button(curator, "fake")
    request = next(b for b in curator.button if b.key.startswith("fake_request_"))
    request.click().run()
    assert not curator.exception and not ledger.releases(plan_account)
    assert any("waiting for an officer's approval" in i.value for i in curator.info)
    assert not [b for b in curator.button if b.key.startswith("fake_request_")]  # asked once
    [pending] = approvals.requests(ledger)
    assert pending.requester == "carla@example.org" and pending.state == "pending"

    officer = _app(app_path, OLIVIA, None, "pages/requests.py")
    assert any("tiny: carla@example.org" in s.value for s in officer.subheader)
    assert any("dp_lloyd" in t.value.to_string() or "DP-Lloyd" in t.value.to_string() for t in officer.table)
    deny = next(b for b in officer.button if b.label == "Deny")
    deny.click().run()
    assert any("reason" in e for e in _errors(officer))  # a denial needs a reason; nothing recorded
    assert approvals.get(ledger, pending.ticket).state == "pending"
    # a curator opening the Requests page by deep link, with a forged decision in the session
    intruder = _app(app_path, CARLA, None, "pages/requests.py")
    intruder.session_state["dp_decision_confirmed"] = (pending.ticket, "approve")
    intruder.run()
    assert any("Only a privacy officer" in e for e in _errors(intruder)) and not intruder.main.button
    assert approvals.get(ledger, pending.ticket).state == "pending"

    next(b for b in officer.button if b.label == "Approve and release").click().run()
    assert not officer.exception and not _errors(officer), _errors(officer)
    assert any("Approved and released" in s.value for s in officer.success)
    [record] = ledger.releases(plan_account)
    assert record.user == "carla@example.org" and record.request_id == pending.request_id
    assert approvals.get(ledger, pending.ticket).approved_by == "olivia@example.org"
    curator.run()  # the requester's panel shows the release made (the same request id), nothing more to ask
    assert any("released once" in i.value for i in curator.info)
    assert len(ledger.releases(plan_account)) == 1
    ledger_page = _app(app_path, CARLA, dataset, "pages/ledger.py")
    shown = next(d.value for d in ledger_page.dataframe if "approved by" in d.value.columns)
    assert shown[["user", "approved by"]].values.tolist() == [["carla@example.org", "olivia@example.org"]]
    assert any("approved and released" in m.value for m in ledger_page.markdown)


def test_dataset_access_lists_hide_folders_and_ledger_rows(
    app_path: str, dataset: Dataset, tmp_path: Path
) -> None:
    open_folder, clinical = tmp_path / "open", tmp_path / "clinical"
    for folder in (open_folder, clinical):
        folder.mkdir()
        pd.DataFrame({"x": [1.0, 2.0]}).to_csv(folder / f"{folder.name}.csv", index=False)
    access = {str(clinical): ["group:clinical"], "dataset:tiny": ["group:clinical"]}
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(dataset.dataset_id, DEFAULT_POLICY), 1.0, user="olivia", reason="start")
    ledger.register_dataset(dataset.dataset_id, dataset.name, dataset.fingerprint)

    def data_page(user: dict[str, Any]) -> AppTest:
        at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
        at.secrets["auth"] = AUTH
        at.secrets["dpcore"] = {
            "roles": ROLES,
            "access": access,
            "data_folders": [str(open_folder), str(clinical)],
        }
        at.user = user
        at.run()
        at.switch_page("pages/data.py").run()
        at.radio(key="data_source").set_value("File in a data folder").run()
        return at

    carla = data_page(CARLA)
    assert carla.selectbox(key="data_source_folder_file_file").options == ["open/open.csv"]
    grouped = data_page({**CARLA, "groups": ["clinical"]})
    assert grouped.selectbox(key="data_source_folder_file_file").options == [
        "open/open.csv",
        "clinical/clinical.csv",
    ]
    carla.switch_page("pages/ledger.py").run()
    assert not carla.exception and "tiny" not in [h.value for h in carla.subheader]
    olivia = data_page(OLIVIA)  # an officer sees every dataset
    olivia.switch_page("pages/ledger.py").run()
    assert "tiny" in [h.value for h in olivia.subheader]
    # a curator's run loading from the hidden folder anyway (a restored session plan, a forged choice)
    forced = AppTest.from_function(_load_hidden, args=(str(clinical),), default_timeout=TIMEOUT)
    forced.secrets["auth"] = AUTH
    forced.secrets["dpcore"] = {"roles": ROLES, "access": access, "data_folders": [str(clinical)]}
    forced.user = CARLA
    forced.run()
    assert [m.value for m in forced.markdown] == ["refused: may not load"]


def _load_hidden(folder: str) -> None:
    import streamlit as st

    from dpcore.data.sources import FolderFile
    from dpcore.errors import DataError
    from ui import datasets

    try:
        datasets.load_source_dataset(FolderFile(folder, "clinical.csv"))
        st.markdown("loaded")
    except DataError as err:
        st.markdown("refused: may not load" if "may not load" in str(err) else str(err))


def test_an_approval_whose_release_did_not_finish_is_released_from_the_requests_page(
    app_path: str, dataset: Dataset
) -> None:
    ledger = Ledger(config.ledger_url())
    plan_account = policy_account(dataset.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(plan_account, 1.0, user="olivia@example.org", reason="start")
    approvals.set_rule(ledger, plan_account, "all", user="olivia@example.org", reason="review")
    curator = _panel(CARLA, dataset)
    next(b for b in curator.button if b.key.startswith("fake_request_")).click().run()
    [request] = approvals.requests(ledger)
    approvals.decide(
        ledger, request.ticket, approve=True, user="omar@example.org", reason="ok"
    )  # then a fault
    officer = _app(app_path, OLIVIA, None, "pages/requests.py")
    next(b for b in officer.button if b.label == "Release the approved request").click().run()
    assert not _errors(officer) and any("Approved and released" in s.value for s in officer.success)
    assert [r.user for r in ledger.releases(plan_account)] == ["carla@example.org"]
    officer.run()
    assert "Release the approved request" not in [b.label for b in officer.button]
