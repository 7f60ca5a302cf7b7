"""The Present page: a shipped sample's story with no click, the current dataset's story in demo mode only
(labelled), and for a real dataset in release mode no chart computed from its rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema, make_blobs, prepare
from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60
PAGE = "pages/present.py"


def _charts(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _title(chart: dict) -> str:
    return chart["layout"]["title"]["text"].replace("<br>", " ")


@pytest.fixture(scope="module")
def blobs() -> Dataset:
    raw = make_blobs(n_samples=240, n_features=2, centers=3, seed=5)
    schema = infer_schema(raw)
    prep = prepare(raw, schema, ["x1", "x2"], scaling="minmax", bounds={"x1": (-12, 12), "x2": (-12, 12)})
    return Dataset("Payroll 2025", raw, schema, raw, fingerprint(raw), prepared=prep)


def _open(app_path: str, **state) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    return at.switch_page(PAGE).run()


def test_a_fresh_app_shows_the_marketing_story_at_once_and_the_airports_in_km(app_path: str):
    at = _open(app_path)
    assert not at.exception and not at.error
    assert at.selectbox(key="present_story").value == "Sample: Marketing Campaign"
    charts = _charts(at)
    assert len(charts) == 3
    assert _title(charts[0]).startswith("How much worse the customer segments fit")
    assert "more privacy" in charts[0]["layout"]["xaxis"]["title"]["text"]
    sentences = [m.value for m in at.markdown]
    assert any(
        "At ε = 1, the customer segments fit the data" in s and "worse than without privacy" in s
        for s in sentences
    )
    assert any("right at most 73% of the time" in s for s in sentences)
    assert any("Nothing has been released from this dataset yet" in c.value for c in at.caption)
    assert at.get("download_button")[0].proto.label == "Download this story"
    at.selectbox(key="present_story").set_value("Sample: US airports").run()
    at.select_slider(key="present_eps").set_value(0.5).run()
    assert any("At ε = 0.5, centres move by" in m.value and " km" in m.value for m in at.markdown)
    assert not at.warning  # a shipped sample is no demo


def test_the_current_dataset_is_told_in_demo_mode_only_and_labelled(app_path: str, blobs: Dataset):
    at = _open(app_path, dp_dataset=blobs, dp_mode="demo")
    at.selectbox(key="present_story").set_value("Current dataset: Payroll 2025").run()
    assert not at.exception and not at.error
    assert any("DEMO MODE" in w.value and "Payroll 2025" in w.value for w in at.warning)
    assert len(_charts(at)) == 3
    assert any("the clusters fit the data" in m.value for m in at.markdown)


def test_a_real_dataset_in_release_mode_shows_no_chart_from_its_rows(app_path: str, blobs: Dataset):
    ledger = Ledger(config.ledger_url())
    account = policy_account(blobs.dataset_id, DEFAULT_POLICY, "secure")
    ledger.set_budget(account, 2.0, 1e-5)
    ledger.register_dataset(blobs.dataset_id, blobs.name, blobs.fingerprint)
    ledger.spend(
        account, 0.5, 0.0, "dp_lloyd", "r1", user="local", fingerprint=blobs.fingerprint, definition="pure_dp"
    )
    at = _open(app_path, dp_dataset=blobs)
    at.selectbox(key="present_story").set_value("Current dataset: Payroll 2025").run()
    assert not at.exception and not at.error
    assert any("real dataset in release mode" in i.value for i in at.info)
    charts = _charts(at)
    assert len(charts) == 1 and _title(charts[0]).startswith("What ε means")
    names = [trace["name"] for trace in charts[0]["data"]]
    assert names == [
        "coin flip (no information)",
        "attacker's best guess",
        "already spent on this dataset (ε = 0.5)",
    ]
    released = at.dataframe[0].value
    assert isinstance(released, pd.DataFrame) and list(released["ε"]) == [0.5]
    assert not any("worse than without privacy" in m.value for m in at.markdown)
    assert any("Released " in c.value and "DP-Lloyd (SuLQ) at ε = 0.5" in c.value for c in at.caption)
