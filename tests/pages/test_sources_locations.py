"""A large location table from an allow-listed folder (AppTest): the Locations page works on the labelled
sample and releases on the whole table as a batch job on the server, from the same ledger account and with
the page's columns, per-user cap and public region; the plan it offers for a terminal is the same request."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, load_table
from dpcore.ledger import Ledger
from dpcore.location.plan_steps import read_location_steps
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan, policy_account
from dpcore.policy import Policy
from tests.pages.test_sources import _folder_secrets, _load_folder_file, _ok, _open
from tests.pages.test_whole_table import _released
from ui.state import DEFAULT_POLICY, POLICY_KEY, Dataset


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "tables"
    root.mkdir()
    rng = np.random.default_rng(8)
    n = 900
    visits = pd.DataFrame(
        {
            "latitude": rng.uniform(30.0, 45.0, n),
            "longitude": rng.uniform(-110.0, -80.0, n),
            "user": [f"p{u}" for u in rng.integers(0, 150, n)],
        }
    )
    visits.to_parquet(root / "visits.parquet")
    return root


def locations_page(
    folder: Path, mechanism: str, policy: Policy, delta: float = 0.0
) -> tuple[AppTest, Dataset]:
    """The 900-row visits table loaded as a 300-row sample, ``policy`` chosen (as on the Privacy policy
    page) with a budget of eps 5 and ``delta`` on its account, and ``mechanism`` per user (at most 3
    locations each) in the contiguous US on the Locations page; the page and the dataset."""
    at = _open(_folder_secrets(folder, max_rows=300))
    _load_folder_file(at, "tables/visits.parquet")
    ds = at.session_state["dp_dataset"]
    at.session_state[POLICY_KEY] = policy
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(ds.dataset_id, policy, per_user=3), 5.0, delta)  # per-user account
    ledger.close()
    at.switch_page("pages/locations.py").run()
    at.selectbox(key="loc_user").set_value("user").run()
    at.selectbox(key=f"loc_region_{ds.dataset_id}").set_value("Contiguous US (24, 50, -125, -66)").run()
    at.selectbox(key="loc_rel_mech").set_value(mechanism).run()
    at.number_input(key="loc_max_per_user").set_value(3).run()
    return _ok(at), ds


def test_a_grid_plan_from_a_sample_releases_on_the_whole_table(
    folder: Path, downloads: dict[str, bytes], tmp_path: Path
) -> None:
    at, ds = locations_page(folder, "adaptive_grid", DEFAULT_POLICY, delta=1e-5)
    assert ds.n_rows == 300 and ds.fingerprint == fingerprint(load_table(folder / "visits.parquet"))
    assert not [b for b in at.button if str(b.label).startswith("Release (spends")]  # not the sample
    (release,) = [b for b in at.button if str(b.label).startswith("Release on the whole table (900 rows")]
    assert not release.disabled and not any("A release must use" in w.value for w in at.warning)
    (name,) = [n for n in downloads if n.startswith("plan-")]
    manifest = json.loads(downloads[name])
    plan = ReleasePlan.from_manifest(manifest)
    assert plan.mechanism == "adaptive_grid" and plan.fingerprint == ds.fingerprint
    assert plan.params["max_per_user"] == 3 and plan.scope == "per user (at most 3 locations each)"
    lat, lon, user, region = read_location_steps(plan.preparation)
    assert (lat, lon, user) == ("latitude", "longitude", "user")
    assert (region.lat_min, region.lat_max, region.lon_min, region.lon_max) == (24.0, 50.0, -125.0, -66.0)
    release.click().run()  # the panel runs it as a batch job on this server
    _released(at)  # polled as a browser's progress fragment would
    ledger = Ledger(config.ledger_url())
    (record,) = ledger.releases(dataset_id=ds.dataset_id)
    assert record.request_id == f"plan-{plan.key[:32]}" and record.mechanism == "adaptive_grid"
    # the downloaded plan run from a terminal is the same request: the same release, nothing spent again
    rel = run_plan(
        manifest, folder / "visits.parquet", ledger=ledger, artifacts_dir=tmp_path / "b", user="batch"
    )
    assert rel.replayed and rel.record.request_id == record.request_id
    assert (
        rel.record.account == plan.account.key and ledger.budget(plan.account).epsilon_spent == plan.epsilon
    )
    details = rel.manifest["details"]
    assert details["max_per_user"] == 3 and details["region"] == region.to_dict()
    assert rel.manifest["dataset_fingerprint"] == ds.fingerprint  # the whole table (run_plan checks)
    ledger.close()


def test_a_mechanism_that_reads_the_rows_in_memory_is_offered_within_the_job_s_limit(
    folder: Path, downloads: dict[str, bytes]
) -> None:
    """PriLocation has no out-of-core passes: the batch job reads the whole table's 900 rows into memory
    (below its row limit, not the page's 300), so the panel offers its release and its plan."""
    at = _open(_folder_secrets(folder, max_rows=300))
    _load_folder_file(at, "tables/visits.parquet")
    ds = at.session_state["dp_dataset"]
    at.switch_page("pages/locations.py").run()
    at.selectbox(key=f"loc_region_{ds.dataset_id}").set_value("Contiguous US (24, 50, -125, -66)").run()
    at.selectbox(key="loc_rel_mech").set_value("prilocation").run()
    _ok(at)
    assert not any("A release must use" in w.value for w in at.warning)
    (name,) = [n for n in downloads if n.startswith("plan-")]
    plan = ReleasePlan.from_manifest(json.loads(downloads[name]))
    assert plan.mechanism == "prilocation" and plan.fingerprint == ds.fingerprint
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(plan.account, 5.0)  # the Blowfish account the plan debits
    ledger.close()
    _ok(at.run())
    (release,) = [b for b in at.button if str(b.label).startswith("Release on the whole table (900 rows")]
    assert not release.disabled
