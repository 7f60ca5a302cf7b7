"""ui.release.release_panel with a fake mechanism: one debit per request, refusals, DEMO marking, ledger."""

from __future__ import annotations

import io
import json
import random
import zipfile

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Account, Ledger
from dpcore.plan import ReleasePlan, policy_account
from tests.panel import again_checkbox, has_release_button, release_button, request_id
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60


def _release_script():
    import numpy as np
    import streamlit as st

    from dpcore.kmeans.registry import KMeansInputs
    from ui.release import current_plan, release_panel

    X = np.linspace(0.0, 1.0, 40).reshape(20, 2)
    if "eps" not in st.session_state:
        st.session_state["eps"] = 0.4
    eps = st.number_input("ε to spend", min_value=0.0, format="%.4g", key="eps")
    plan = current_plan("kmeans", "dp_lloyd", epsilon=eps, params={"n_clusters": 2})
    inputs = KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b"))
    release_panel(key="fake", plan=plan, inputs=inputs)


@pytest.fixture
def dataset() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9, 0.3]})
    return Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


def _account(dataset: Dataset, mode: str = "secure") -> Account:
    return policy_account(dataset.dataset_id, DEFAULT_POLICY, mode)  # type: ignore[arg-type]


@pytest.fixture
def ledger(dataset: Dataset) -> Ledger:
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(_account(dataset), 1.0, 0.0)
    return ledger


def _panel(dataset: Dataset, **state) -> AppTest:
    at = AppTest.from_function(_release_script, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = dataset
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def test_release_debits_once_and_offers_downloads(dataset: Dataset, ledger: Ledger, downloads):
    at = _panel(dataset)
    assert not at.exception and not at.download_button  # nothing shown before paying
    rid = request_id(at, "fake")
    at.run()
    assert request_id(at, "fake") == rid  # stable across reruns: the plan's own id
    release_button(at, "fake").click().run()
    assert not at.exception and not at.error
    records = ledger.releases(dataset_id=dataset.dataset_id)
    assert [r.request_id for r in records] == [rid] and records[0].sampling_mode == "secure"
    assert records[0].user == "test-curator" and records[0].definition == "pure_dp"
    assert ledger.remaining(_account(dataset)) == pytest.approx((0.6, 0.0))
    names = sorted(b.label for b in at.download_button)
    stem = f"fake-{rid[:13]}"
    assert names == sorted(f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html"))
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["request_id"] == rid and manifest["parameters"]["n_clusters"] == 2
    assert manifest["guarantee"].startswith("Differential privacy with ε = 0.4")
    assert manifest["dataset_fingerprint"] == dataset.fingerprint and manifest["demo"] is False
    released = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    pd.testing.assert_frame_equal(released, at.session_state["dp_release::fake"].result.table)
    with zipfile.ZipFile(records[0].artifact_path) as stored:
        assert stored.read(f"{stem}.csv") == downloads[f"{stem}.csv"]

    at.run().run()  # reruns show the same release and spend nothing
    assert len(ledger.releases(dataset_id=dataset.dataset_id)) == 1
    assert not has_release_button(at, "fake", again=True)  # hidden behind a confirmation
    again_checkbox(at, "fake").check().run()
    release_button(at, "fake", again=True).click().run()  # an explicit second release is a new request
    second = ledger.releases(dataset_id=dataset.dataset_id)
    assert [r.request_id for r in second] == [rid, f"{rid}-2"]
    assert ledger.remaining(_account(dataset)) == pytest.approx((0.2, 0.0))


def test_a_session_that_lost_its_release_reads_it_from_the_ledger(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    release_button(at, "fake").click().run()
    panel = at.session_state["dp_release::fake"]
    first = panel.result
    panel.result = None  # as if the session lost the result after the debit (interrupted run)
    at.session_state["dp_release::fake"] = panel
    at.run()
    assert not at.exception and not has_release_button(at, "fake")  # no fresh button for a released plan
    assert any("This plan was released once" in i.value and "by test-curator" in i.value for i in at.info)
    assert sorted(b.label for b in at.download_button) == sorted(first.files)
    assert len(ledger.releases(dataset_id=dataset.dataset_id)) == 1


def test_over_budget_release_is_disabled_with_the_reason(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=1.5)
    assert any("more than the budget left" in w.value for w in at.warning)
    assert release_button(at, "fake").disabled
    assert ledger.releases(dataset_id=dataset.dataset_id) == []


def test_another_tab_spending_is_read_from_the_ledger(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=0.8)
    assert not release_button(at, "fake").disabled
    ledger.spend(_account(dataset), 0.5, 0.0, "dp_lloyd", "other-tab")  # a release made in another tab
    release_button(at, "fake").click().run()  # the run reads the ledger again before releasing
    assert not at.exception and release_button(at, "fake").disabled
    assert any("ε = 0.5" in w.value and "more than the budget left" in w.value for w in at.warning)
    assert not at.download_button and at.session_state["dp_release::fake"].result is None
    assert [r.request_id for r in ledger.releases(dataset_id=dataset.dataset_id)] == ["other-tab"]
    assert list((config.data_dir() / "artifacts").glob("*")) == []


def test_changing_parameters_starts_a_new_request(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    first = request_id(at, "fake")
    at.session_state["eps"] = 0.3
    at.run()
    assert request_id(at, "fake") != first


def test_demo_mode_marks_outputs_and_ledger(dataset: Dataset, ledger: Ledger, downloads):
    ledger.set_budget(_account(dataset, "demo"), 1.0)
    at = _panel(dataset, dp_mode="demo", dp_seed=11)
    assert any("DEMO mode (seed 11)" in w.value for w in at.warning)
    release_button(at, "fake").click().run()
    assert not at.error
    (record,) = ledger.releases(dataset_id=dataset.dataset_id)
    assert record.sampling_mode == "demo" and record.account == _account(dataset, "demo").key
    assert ledger.remaining(_account(dataset)) == (1.0, 0.0)  # the real budget is untouched
    assert {b.label[:5] for b in at.download_button} == {"DEMO-"}
    assert any("DEMO - not a privacy release" in w.value for w in at.warning)
    report = next(v for k, v in downloads.items() if k.endswith("-report.html")).decode()
    assert (
        "DEMO - not a privacy release" in report
        and '"demo": true' in next(v for k, v in downloads.items() if k.endswith("-manifest.json")).decode()
    )
    assert all(b"DEMO - not a privacy release" in body for body in downloads.values())  # inside every file


def test_no_budget_set_is_refused(dataset: Dataset):
    at = _panel(dataset)
    assert any("No budget is set" in w.value and "Privacy policy page" in w.value for w in at.warning)
    assert release_button(at, "fake").disabled


def test_ledger_page_links_the_release_artifact(app_path: str, dataset: Dataset, ledger: Ledger, downloads):
    at = _panel(dataset)
    release_button(at, "fake").click().run()
    (record,) = ledger.releases(dataset_id=dataset.dataset_id)
    page = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    page.session_state["dp_dataset"] = dataset
    page.run()
    page.switch_page("pages/ledger.py").run()
    assert not page.exception and not page.error
    assert any(record.artifact_hash in c.value for c in page.caption)
    zipped = downloads[f"release-{record.request_id[:13]}.zip"]
    assert zipfile.ZipFile(io.BytesIO(zipped)).namelist()
    exported = pd.read_csv(io.BytesIO(downloads["ledger.csv"]))
    assert exported["request id"].tolist() == [record.request_id]
    assert exported["artifact SHA-256"].tolist() == [record.artifact_hash]


def test_refused_release_again_shows_no_stale_downloads(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=0.6)
    release_button(at, "fake").click().run()
    assert len(at.download_button) == 4 and ledger.remaining(_account(dataset)) == pytest.approx((0.4, 0.0))
    assert again_checkbox(at, "fake").disabled  # 0.6 > 0.4 left
    refusal = "again is not possible now: This release costs ε = 0.6, more than the budget left"
    assert any(refusal in c.value for c in at.caption)
    assert not any("more than the budget left" in w.value for w in at.warning)  # not above the release
    assert not has_release_button(at, "fake", again=True)


def test_a_long_released_table_shows_its_first_rows_and_says_the_files_hold_all(
    dataset: Dataset, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
):
    import ui.release

    monkeypatch.setattr(ui.release, "PANEL_ROWS", 1)  # a per-visit release: millions of rows
    at = _panel(dataset)
    release_button(at, "fake").click().run()
    assert not at.exception
    (shown,) = at.dataframe
    assert len(shown.value) == 1  # DP-Lloyd with K = 2 released 2 rows
    assert any("The first 1 of 2 released rows" in c.value for c in at.caption)


# -- the panel as a contract: what the curator confirmed is what is released, exactly once ------------


def _rows(ledger: Ledger, dataset: Dataset) -> list[tuple[str, float]]:
    return [(r.request_id, r.epsilon) for r in ledger.releases(dataset_id=dataset.dataset_id)]


def test_a_value_committed_by_the_click_releases_nothing(dataset: Dataset, ledger: Ledger):
    """Typing 1 into the ε field without Enter and clicking the button drawn for ε = 0.1: Streamlit commits
    the field in the click's run; the panel builds another plan and must release nothing."""
    at = _panel(dataset, eps=0.1)
    shown = release_button(at, "fake")
    assert "ε = 0.1" in shown.label
    at.number_input(key="eps").set_value(1.0)
    shown.click().run()  # one run: the field's new value and the click
    assert not at.exception and _rows(ledger, dataset) == []
    assert any("settings changed since you confirmed" in w.value for w in at.warning)
    assert "ε = 1)" in release_button(at, "fake").label  # the new plan, to be confirmed anew
    release_button(at, "fake").click().run()
    assert _rows(ledger, dataset) == [(request_id(at, "fake"), 1.0)]


def test_a_click_that_reaches_the_server_after_the_fields_rerun_releases_nothing_and_says_so(
    dataset: Dataset, ledger: Ledger
):
    """The field's commit ran first and replaced the button (its widget and callback are gone); the click
    on the old button arrives in the next run: nothing is released, and the panel says why."""
    at = _panel(dataset, eps=0.1)
    shown = release_button(at, "fake")
    at.number_input(key="eps").set_value(1.0).run()  # the blur's own rerun, finished
    shown.click().run()  # the click on the button as the browser still showed it
    assert not at.exception and _rows(ledger, dataset) == []
    assert any("settings changed since you confirmed" in w.value for w in at.warning)
    assert "ε = 1)" in release_button(at, "fake").label


def test_double_click_and_a_click_on_a_stale_button_spend_once(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    button = release_button(at, "fake")
    button.click().run()
    button.click().run()  # the second event of a double click, on the button as it was drawn
    at.run()
    assert _rows(ledger, dataset) == [(request_id(at, "fake"), 0.4)]
    assert not has_release_button(at, "fake")


def test_reload_and_a_second_tab_show_the_release_and_never_repeat_it(dataset: Dataset, ledger: Ledger):
    first, second = _panel(dataset), _panel(dataset)  # two tabs on the same plan
    stale = release_button(second, "fake")
    release_button(first, "fake").click().run()
    stale.click().run()  # drawn before the first tab released: the same request, nothing spent again
    assert _rows(ledger, dataset) == [(request_id(first, "fake"), 0.4)]
    assert not second.exception and second.download_button
    reloaded = _panel(dataset)  # a reload: a new session, the same plan
    assert not has_release_button(reloaded, "fake") and reloaded.download_button
    assert any("This plan was released once" in i.value for i in reloaded.info)
    again_checkbox(reloaded, "fake").check().run()
    assert "spends ε = 0.4 more" in release_button(reloaded, "fake", again=True).label
    release_button(reloaded, "fake", again=True).click().run()
    rid = request_id(first, "fake")
    assert _rows(ledger, dataset) == [(rid, 0.4), (f"{rid}-2", 0.4)]
    assert any("released 2 times" in i.value for i in _panel(dataset).info)


@pytest.mark.parametrize("seed", range(4))
def test_random_edits_and_clicks_release_only_confirmed_plans(dataset: Dataset, ledger: Ledger, seed: int):
    """Random sequences of edits (committed with the click or before it), reruns, confirmations and clicks:
    every ledger row is a plan whose button was on screen when clicked (its digest and its ε), and a plan
    is released at most once plus once per click on its "Release this plan again"."""
    rng = random.Random(seed)
    ledger.set_budget(_account(dataset), 100.0, 0.0)
    at = _panel(dataset)
    clicked: dict[str, list[str]] = {}  # digest of a clicked button's plan -> the roles clicked
    eps_of: dict[str, float] = {}  # digest -> the ε its button showed
    for _ in range(14):
        op = rng.choice(["edit", "edit_and_click", "click", "click", "rerun", "again"])
        buttons = [b for b in at.button if b.key and b.key.startswith("fake_release")]
        if op in ("edit", "edit_and_click"):
            at.number_input(key="eps").set_value(rng.choice([0.1, 0.2, 0.5]))
        if op in ("click", "edit_and_click") and buttons:
            shown = buttons[0]
            role, digest = shown.key[len("fake_") :].rsplit("_", 1)
            clicked.setdefault(digest, []).append(role)
            eps_of[digest] = float(shown.label.split("ε = ")[1].split(" ")[0].rstrip(")"))
            shown.click()
        elif op == "again" and (boxes := [c for c in at.checkbox if c.key.startswith("fake_again_")]):
            boxes[0].check()
        at.run()
        assert not at.exception
    per_plan: dict[str, int] = {}
    for row in ledger.releases(dataset_id=dataset.dataset_id):
        with zipfile.ZipFile(row.artifact_path) as stored:
            name = next(n for n in stored.namelist() if n.endswith("-manifest.json"))
            digest = ReleasePlan.from_manifest(json.loads(stored.read(name))).digest
        assert digest in clicked and eps_of[digest] == row.epsilon  # a plan that was shown and clicked
        per_plan[digest] = per_plan.get(digest, 0) + 1
    for digest, count in per_plan.items():
        assert count <= 1 + clicked[digest].count("release_again")


def _stale_trigger_script():
    """The panel's run when the browser's click names a spend button the server no longer has: Streamlit
    holds the incoming trigger under the old widget id, with no widget (and no callback) left for it."""
    import numpy as np
    import streamlit as st
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    from streamlit.runtime.state.session_state import Serialized

    from dpcore.kmeans.registry import KMeansInputs
    from ui.release import current_plan, release_panel

    wid = "$$ID-0123456789abcdef0123456789abcdef-fake_release_" + "0" * 16
    states = get_script_run_ctx().session_state._state._new_widget_state.states
    if st.session_state.get("stale"):
        states[wid] = Serialized(WidgetState(id=wid, trigger_value=True))
    X = np.linspace(0.0, 1.0, 40).reshape(20, 2)
    plan = current_plan("kmeans", "dp_lloyd", epsilon=0.4, params={"n_clusters": 2})
    release_panel(key="fake", plan=plan, inputs=KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b")))
    states.pop(wid, None)  # as Streamlit drops a widget state that no widget of the run claims


def test_a_click_on_a_button_the_server_replaced_releases_nothing_and_says_so(
    dataset: Dataset, ledger: Ledger
):
    at = AppTest.from_function(_stale_trigger_script, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = dataset
    at.run()
    assert not any("settings changed" in w.value for w in at.warning)
    at.session_state["stale"] = True
    at.run()
    assert not at.exception and any("settings changed since you confirmed" in w.value for w in at.warning)
    assert _rows(ledger, dataset) == []


def test_a_release_that_another_account_of_the_dataset_cannot_pay_for_is_refused_before_the_click(
    dataset: Dataset, ledger: Ledger
):
    """An unbounded-DP ε is a bounded 2 ε: the ledger charges the bounded account too, so the panel reads
    that account's budget and refuses up front, instead of after the click."""
    from dpcore.policy import PureDP

    bounded = policy_account(dataset.dataset_id, PureDP(1.0, neighbours="bounded"))
    ledger.set_budget(bounded, 0.7, 0.0)
    at = _panel(dataset)  # ε = 0.4 unbounded: 0.8 on the bounded account
    assert release_button(at, "fake").disabled
    refusal = "where the ledger charges it 2 × ε = 0.8, more than the ε = 0.7 left"
    assert any(refusal in w.value for w in at.warning)
    ledger.set_budget(bounded, 0.8, 0.0)
    at.run()
    assert not release_button(at, "fake").disabled
    release_button(at, "fake").click().run()
    assert _rows(ledger, dataset) == [(request_id(at, "fake"), 0.4)]
