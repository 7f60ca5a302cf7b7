"""The Trajectories page (AppTest): road trips sample, true-trip map, comparison charts, one release on the
per-person account, bad time column."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from dpcore.policy import PureDP
from tests.panel import release_button
from tests.paths import ROOT
from ui.state import Dataset

TIMEOUT = 120
APP = str(ROOT / "app.py")


def _page(ds: Dataset | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if ds is not None:
        at.session_state["dp_dataset"] = ds
    at.run()
    at.switch_page("pages/trajectories.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _titles(at: AppTest) -> list[str]:
    return [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]


@pytest.fixture
def sample() -> AppTest:
    at = _page()
    assert any("No dataset yet" in i.value for i in at.info)
    at.button(key="traj_load_sample").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def test_the_sample_compares_and_releases_once_per_person(sample: AppTest) -> None:
    at = sample
    assert at.session_state["dp_dataset"].name == "Sample: Road trips (synthetic GPS)"
    assert at.selectbox(key="traj_person").value == "person" and at.selectbox(key="traj_time").value == "time"
    assert any("Diagnostics (non-private)" in w.value for w in at.warning)
    assert any("True trips (non-private)" in t for t in _titles(at))
    at.number_input(key="traj_trials").set_value(1)
    at.multiselect(key="traj_eps").set_value([1.0])
    at.button(key="traj_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    titles = " | ".join(_titles(at))
    assert "Utility vs ε" in titles and "True and synthetic trips" in titles and "Trip length" in titles
    ds = at.session_state["dp_dataset"]
    account = policy_account(ds.dataset_id, PureDP(1.0), per_user=2 * 60)
    assert account.relation.endswith("(at most 120 per user)")
    Ledger(config.ledger_url()).set_budget(account, 1.5)
    at.run()
    assert any("one person's trips added or removed" in i.value for i in at.info)
    release_button(at, "trajectories").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    ledger = Ledger(config.ledger_url())
    assert ledger.remaining(account)[0] == pytest.approx(0.5)
    (record,) = ledger.releases(dataset_id=ds.dataset_id)
    assert record.mechanism == "dpt"


def test_a_column_that_is_not_a_time_is_refused_with_the_fix() -> None:
    frame = pd.DataFrame(
        {"who": ["a", "a", "b"], "when": ["x", "y", "z"], "lat": [45.0] * 3, "lon": [7.0] * 3}
    )
    ds = Dataset(
        name="bad times", raw=frame, schema=infer_schema(frame), cleaned=frame, fingerprint=fingerprint(frame)
    )
    at = _page(ds)
    assert any("Choose the person, timestamp" in i.value for i in at.info)
    at.selectbox(key="traj_person").set_value("who")
    at.selectbox(key="traj_time").set_value("when").run()
    assert any("not timestamps" in e.value for e in at.error), [e.value for e in at.error]
