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
from dpcore.ledger import Ledger
from ui.state import Dataset

TIMEOUT = 60


def _release_script():
    import numpy as np
    import pandas as pd
    import streamlit as st

    from ui.release import release_panel

    def run(sampler):
        st.session_state["runs"] = st.session_state.get("runs", 0) + 1
        x = np.array([1.0, 2.0]) + sampler.laplace(2, 1.0)
        return pd.DataFrame({"centre": [0, 1], "x": x}), [], {"noise_scale": 1.0}

    release_panel(
        key="fake",
        mechanism="FakeLaplace",
        guarantee="ε-DP for one row added or removed (test mechanism).",
        epsilon=st.session_state.get("eps", 0.4),
        delta=0.0,
        run=run,
        params={"k": 2},
    )


@pytest.fixture
def dataset() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9, 0.3]})
    return Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


@pytest.fixture
def ledger(dataset: Dataset) -> Ledger:
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(dataset.dataset_id, 1.0, 0.0)
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
    records = ledger.releases(dataset.dataset_id)
    assert [r.request_id for r in records] == [request_id] and records[0].sampling_mode == "secure"
    assert records[0].user == "test-curator" and records[0].definition == "approx_dp"
    assert ledger.remaining(dataset.dataset_id) == pytest.approx((0.6, 0.0))
    assert at.session_state["runs"] == 1
    names = sorted(b.label for b in at.download_button)
    stem = f"fake-{request_id[:8]}"
    assert names == sorted(f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html"))
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["request_id"] == request_id and manifest["parameters"] == {"k": 2, "noise_scale": 1.0}
    assert manifest["dataset_fingerprint"] == dataset.fingerprint and manifest["demo"] is False
    released = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    pd.testing.assert_frame_equal(released, at.session_state["dp_release::fake"].result.table)
    with zipfile.ZipFile(records[0].artifact_path) as stored:
        assert stored.read(f"{stem}.csv") == downloads[f"{stem}.csv"]

    at.run().run()  # reruns show the same release and spend nothing
    assert len(ledger.releases(dataset.dataset_id)) == 1 and at.session_state["runs"] == 1
    assert "fake_release_again" not in [b.key for b in at.button]  # hidden behind a confirmation
    next(c for c in at.checkbox if c.key.startswith("fake_again")).check().run()
    at.button(key="fake_release_again").click().run()  # an explicit second release is a new request
    second = ledger.releases(dataset.dataset_id)
    assert len(second) == 2 and second[1].request_id != request_id
    assert ledger.remaining(dataset.dataset_id) == pytest.approx((0.2, 0.0))


def test_rerun_of_a_paid_request_replays_it(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    at.button(key="fake_release").click().run()
    panel = at.session_state["dp_release::fake"]
    first = panel.result
    panel.result = None  # as if the session lost the result after the debit (interrupted run)
    at.session_state["dp_release::fake"] = panel
    at.run()
    at.button(key="fake_release").click().run()
    assert len(ledger.releases(dataset.dataset_id)) == 1
    replay = at.session_state["dp_release::fake"].result
    assert replay.replayed and replay.files == first.files
    assert at.session_state["runs"] == 1  # the mechanism did not run again
    assert any("nothing was debited again" in s.value for s in at.success)


def test_over_budget_release_is_refused_without_outputs(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=1.5)
    assert any("costs more than the budget left" in w.value for w in at.warning)
    at.button(key="fake_release").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Budget exceeded for dataset")
    assert "asked eps=1.5" in errors[0] and "left eps=1" in errors[0]
    assert not at.download_button and at.session_state["dp_release::fake"].result is None
    assert ledger.releases(dataset.dataset_id) == [] and ledger.remaining(dataset.dataset_id) == (1.0, 0.0)
    assert list((config.data_dir() / "artifacts").glob("*")) == []


def test_changing_parameters_starts_a_new_request(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset)
    first = at.session_state["dp_release::fake"].request_id
    at.session_state["eps"] = 0.3
    at.run()
    assert at.session_state["dp_release::fake"].request_id != first


def test_demo_mode_marks_outputs_and_ledger(dataset: Dataset, ledger: Ledger, downloads):
    at = _panel(dataset, dp_mode="demo", dp_seed=11)
    assert any("DEMO mode (seed 11)" in w.value for w in at.warning)
    at.button(key="fake_release").click().run()
    assert not at.error
    (record,) = ledger.releases(dataset.dataset_id)
    assert record.sampling_mode == "demo"
    assert {b.label[:5] for b in at.download_button} == {"DEMO-"}
    assert any("DEMO - not a privacy release" in w.value for w in at.warning)
    report = next(v for k, v in downloads.items() if k.endswith("-report.html")).decode()
    assert (
        "DEMO - not a privacy release" in report
        and '"demo": true' in next(v for k, v in downloads.items() if k.endswith("-manifest.json")).decode()
    )


def test_no_budget_set_is_refused(dataset: Dataset):
    at = _panel(dataset)
    assert any("no privacy budget yet" in w.value for w in at.warning)
    at.button(key="fake_release").click().run()
    assert any("has no privacy budget" in e.value for e in at.error)
    assert "runs" not in at.session_state


def test_ledger_page_links_the_release_artifact(app_path: str, dataset: Dataset, ledger: Ledger, downloads):
    at = _panel(dataset)
    at.button(key="fake_release").click().run()
    (record,) = ledger.releases(dataset.dataset_id)
    page = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    page.session_state["dp_dataset"] = dataset
    page.run()
    page.switch_page("pages/ledger.py").run()
    assert not page.exception and not page.error
    assert any(record.artifact_hash in c.value for c in page.caption)
    zipped = downloads[f"release-{record.request_id[:8]}.zip"]
    assert zipfile.ZipFile(io.BytesIO(zipped)).namelist()
    exported = pd.read_csv(io.BytesIO(downloads["ledger.csv"]))
    assert exported["request_id"].tolist() == [record.request_id]
    assert exported["artifact_hash"].tolist() == [record.artifact_hash]


def test_refused_release_again_shows_no_stale_downloads(dataset: Dataset, ledger: Ledger):
    at = _panel(dataset, eps=0.6)
    at.button(key="fake_release").click().run()
    assert len(at.download_button) == 4 and ledger.remaining(dataset.dataset_id) == pytest.approx((0.4, 0.0))
    next(c for c in at.checkbox if c.key.startswith("fake_again")).check().run()
    at.button(key="fake_release_again").click().run()  # 0.6 > 0.4 left: the ledger refuses it
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Budget exceeded for dataset")
    assert not at.download_button and not at.dataframe and not at.success  # nothing of the previous release
    assert len(ledger.releases(dataset.dataset_id)) == 1 and at.session_state["runs"] == 2
    at.run()
    assert not at.download_button and at.button(key="fake_release")  # a fresh request, not yet paid
