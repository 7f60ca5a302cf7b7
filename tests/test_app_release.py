"""ui.release.release_panel with a fake mechanism: one debit per request, refusals, DEMO marking, ledger."""

from __future__ import annotations

import io
import json
import zipfile

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Account, Ledger
from dpcore.plan import policy_account
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60


def _release_script():
    import numpy as np
    import streamlit as st

    from dpcore.kmeans.registry import KMeansInputs
    from ui.release import current_plan, release_panel

    X = np.linspace(0.0, 1.0, 40).reshape(20, 2)
    eps = st.session_state.get("eps", 0.4)
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
    request_id = at.session_state["dp_release::fake"].request_id
    at.run()
    assert at.session_state["dp_release::fake"].request_id == request_id  # stable across reruns
    at.button(key="fake_release").click().run()
    assert not at.exception and not at.error
    records = ledger.releases(dataset_id=dataset.dataset_id)
    assert [r.request_id for r in records] == [request_id] and records[0].sampling_mode == "secure"
    assert records[0].user == "test-curator" and records[0].definition == "pure_dp"
    assert ledger.remaining(_account(dataset)) == pytest.approx((0.6, 0.0))
    names = sorted(b.label for b in at.download_button)
    stem = f"fake-{request_id[:8]}"
    assert names == sorted(f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html"))
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["request_id"] == request_id and manifest["parameters"]["n_clusters"] == 2
    assert manifest["guarantee"].startswith("Differential privacy with ε = 0.4")
    assert manifest["dataset_fingerprint"] == dataset.fingerprint and manifest["demo"] is False
    released = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    pd.testing.assert_frame_equal(released, at.session_state["dp_release::fake"].result.table)
    with zipfile.ZipFile(records[0].artifact_path) as stored:
        assert stored.read(f"{stem}.csv") == downloads[f"{stem}.csv"]

    at.run().run()  # reruns show the same release and spend nothing
    assert len(ledger.releases(dataset_id=dataset.dataset_id)) == 1
    assert "fake_release_again" not in [b.key for b in at.button]  # hidden behind a confirmation
    next(c for c in at.checkbox if c.key.startswith("fake_again")).check().run()
    at.button(key="fake_release_again").click().run()  # an explicit second release is a new request
    second = ledger.releases(dataset_id=dataset.dataset_id)
    assert len(second) == 2 and second[1].request_id != request_id
    assert ledger.remaining(_account(dataset)) == pytest.approx((0.2, 0.0))


def test_rerun_of_a_paid_request_replays_it(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    at.button(key="fake_release").click().run()
    panel = at.session_state["dp_release::fake"]
    first = panel.result
    panel.result = None  # as if the session lost the result after the debit (interrupted run)
    at.session_state["dp_release::fake"] = panel
    at.run()
    at.button(key="fake_release").click().run()
    assert len(ledger.releases(dataset_id=dataset.dataset_id)) == 1
    replay = at.session_state["dp_release::fake"].result
    assert replay.replayed and replay.files == first.files
    assert any("nothing was debited again" in s.value for s in at.success)


def test_over_budget_release_is_disabled_with_the_reason(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=1.5)
    assert any("more than the budget left" in w.value for w in at.warning)
    assert at.button(key="fake_release").disabled
    assert ledger.releases(dataset_id=dataset.dataset_id) == []


def test_another_tab_spending_is_read_from_the_ledger(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=0.8)
    assert not at.button(key="fake_release").disabled
    ledger.spend(_account(dataset), 0.5, 0.0, "dp_lloyd", "other-tab")  # a release made in another tab
    at.button(key="fake_release").click().run()  # the run reads the ledger again before releasing
    assert not at.exception and at.button(key="fake_release").disabled
    assert any("ε = 0.5" in w.value and "more than the budget left" in w.value for w in at.warning)
    assert not at.download_button and at.session_state["dp_release::fake"].result is None
    assert [r.request_id for r in ledger.releases(dataset_id=dataset.dataset_id)] == ["other-tab"]
    assert list((config.data_dir() / "artifacts").glob("*")) == []


def test_changing_parameters_starts_a_new_request(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    first = at.session_state["dp_release::fake"].request_id
    at.session_state["eps"] = 0.3
    at.run()
    assert at.session_state["dp_release::fake"].request_id != first


def test_demo_mode_marks_outputs_and_ledger(dataset: Dataset, ledger: Ledger, downloads):
    ledger.set_budget(_account(dataset, "demo"), 1.0)
    at = _panel(dataset, dp_mode="demo", dp_seed=11)
    assert any("DEMO mode (seed 11)" in w.value for w in at.warning)
    at.button(key="fake_release").click().run()
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
    assert at.button(key="fake_release").disabled


def test_ledger_page_links_the_release_artifact(app_path: str, dataset: Dataset, ledger: Ledger, downloads):
    at = _panel(dataset)
    at.button(key="fake_release").click().run()
    (record,) = ledger.releases(dataset_id=dataset.dataset_id)
    page = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    page.session_state["dp_dataset"] = dataset
    page.run()
    page.switch_page("pages/ledger.py").run()
    assert not page.exception and not page.error
    assert any(record.artifact_hash in c.value for c in page.caption)
    zipped = downloads[f"release-{record.request_id[:8]}.zip"]
    assert zipfile.ZipFile(io.BytesIO(zipped)).namelist()
    exported = pd.read_csv(io.BytesIO(downloads["ledger.csv"]))
    assert exported["request id"].tolist() == [record.request_id]
    assert exported["artifact SHA-256"].tolist() == [record.artifact_hash]


def test_refused_release_again_shows_no_stale_downloads(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=0.6)
    at.button(key="fake_release").click().run()
    assert len(at.download_button) == 4 and ledger.remaining(_account(dataset)) == pytest.approx((0.4, 0.0))
    assert next(c for c in at.checkbox if c.key.startswith("fake_again")).disabled  # 0.6 > 0.4 left
    assert any("more than the budget left" in w.value for w in at.warning)
    assert "fake_release_again" not in [b.key for b in at.button]


def test_a_long_released_table_shows_its_first_rows_and_says_the_files_hold_all(
    dataset: Dataset, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
):
    import ui.release

    monkeypatch.setattr(ui.release, "PANEL_ROWS", 1)  # a per-visit release: millions of rows
    at = _panel(dataset)
    at.button(key="fake_release").click().run()
    assert not at.exception
    (shown,) = at.dataframe
    assert len(shown.value) == 1  # DP-Lloyd with K = 2 released 2 rows
    assert any("The first 1 of 2 released rows" in c.value for c in at.caption)
