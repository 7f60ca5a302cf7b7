"""A table above the row limit is released from the dashboard on the whole table (AppTest): the release panel
starts the plan as a batch job on this server (``ui.batch_job``), shows it running, then shows the release
read back from the ledger, made from every row (not the sample). A reload and a second session find the same
release and spend nothing; a job that fails says why and can be started again; the request id is the batch
command's, so a terminal run of the same plan is the same release."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.artifacts import short_id
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan, policy_account
from tests.pages.test_sources import _folder_secrets, _load_folder_file, _ok, _open, _people
from tests.panel import release_button, request_id
from tests.prep_table import edit_table
from ui import batch_job
from ui.state import DEFAULT_POLICY

JOB_TIMEOUT = 180.0
HOLD_LOCK = (  # a process that holds a job's lock until it is ended, as a running job does
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "tables"
    root.mkdir()
    _people(400).to_parquet(root / "large.parquet")
    return root


def _prepared_sample(at: AppTest, *, demo_seed: int | None = None) -> None:
    """The large file loaded (a 100-row sample), age as the feature with public bounds, a budget set; on
    the K-means page (``demo_seed``: demo mode with that seed)."""
    _load_folder_file(at, "tables/large.parquet")
    ds = at.session_state["dp_dataset"]
    edit_table(at, features=["age", "income"], bounds={"age": ("18", "90"), "income": ("0", "100000")})
    at.button(key="data_prepare").click().run()
    mode = "secure"
    if demo_seed is not None:
        at.sidebar.radio(key="dp_mode").set_value("demo").run()
        at.sidebar.number_input(key="dp_seed").set_value(demo_seed).run()
        mode = "demo"
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(ds.dataset_id, DEFAULT_POLICY, mode), 5.0, 1e-5)
    ledger.close()
    at.switch_page("pages/kmeans.py").run()
    # K = 2: the default K = 4 on a 100-row sample drawn afresh each load can leave a one-row cluster, which
    # (rightly) shows an error that the Gaussian-covariance mechanisms are unavailable for that K
    at.number_input(key="km_k").set_value(2).run()
    _ok(at)


def _whole_table_button(at: AppTest):
    (button,) = [b for b in at.button if str(b.label).startswith("Release on the whole table")]
    return button


def _released(at: AppTest, rid: str | None = None) -> str:
    """Run the page until the release (of request ``rid``, if given) shows (the job's progress fragment
    reruns it in a browser)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    shown = "on the whole table by a batch job" + ("" if rid is None else " at ε = ")
    while time.monotonic() < deadline:
        done = [
            s.value
            for s in at.success
            if shown in s.value and (rid is None or f"request {short_id(rid)} by" in s.value)
        ]
        if done:
            return done[0]
        assert not at.error, [e.value for e in at.error]
        time.sleep(0.5)
        _ok(at.run())
    raise AssertionError("the batch job did not release in time")


def _record(at: AppTest):
    """The ledger record of the K-means panel's request."""
    ledger = Ledger(config.ledger_url())
    try:
        record = ledger.release_by_request(request_id(at, "kmeans"))
    finally:
        ledger.close()
    assert record is not None
    return record


def test_a_sample_is_released_on_the_whole_table_by_a_batch_job(folder: Path, tmp_path: Path) -> None:
    secrets = _folder_secrets(folder)
    at = _open(secrets)
    _prepared_sample(at, demo_seed=7)
    ds = at.session_state["dp_dataset"]
    assert ds.n_rows == 100 and ds.origin["rows"] == 400
    button = _whole_table_button(at)
    assert not button.disabled and "400 rows" in button.label
    button.click().run()
    _ok(at)
    rid = request_id(at, "kmeans")  # the batch command's default id for this plan
    assert batch_job.status(rid) is not None  # started: running, or already done
    message = _released(at)
    assert f"request {rid[:13]} by test-curator at" in message  # who released it, when
    record = _record(at)
    assert record.dataset_fingerprint == ds.fingerprint  # the whole table's account and fingerprint
    ledger = Ledger(config.ledger_url())
    (account,) = {r.account for r in ledger.releases(dataset_id=ds.dataset_id)}
    assert len(ledger.releases(dataset_id=ds.dataset_id)) == 1
    spent = ledger.budget(policy_account(ds.dataset_id, DEFAULT_POLICY, "demo")).epsilon_spent
    ledger.close()
    shown = next(df.value for df in at.dataframe if "cluster" in " ".join(map(str, df.value.columns)).lower())
    # the same plan (demo seed) run in process on the whole file gives the same release: every row was used
    manifest = at.session_state["dp_release::kmeans"].stored.release.manifest
    other = Ledger.initialise(f"sqlite:///{tmp_path / 'other.db'}")
    plan = ReleasePlan.from_manifest(manifest)
    other.set_budget(plan.account, 5.0, 1e-5)
    again = run_plan(manifest, folder / "large.parquet", ledger=other, artifacts_dir=tmp_path / "b", user="t")
    other.close()
    numeric = shown.select_dtypes("number").to_numpy()
    np.testing.assert_allclose(numeric, again.table.select_dtypes("number").to_numpy(), rtol=1e-12)
    assert spent == pytest.approx(plan.epsilon) and account == plan.account.key

    # a reload (a new session on the URL's token) shows the same release and offers no second first release
    reloaded = _open(secrets, token=at.query_params["s"], data_page=False)
    reloaded.switch_page("pages/kmeans.py").run()
    _ok(reloaded)
    assert any("on the whole table by a batch job" in s.value for s in reloaded.success)
    assert not [b for b in reloaded.button if str(b.label).startswith("Release on the whole table")]
    ledger = Ledger(config.ledger_url())
    assert len(ledger.releases(dataset_id=ds.dataset_id)) == 1  # nothing spent again
    ledger.close()


def test_a_job_that_fails_says_why_spends_nothing_and_can_run_again_and_again(folder: Path) -> None:
    at = _open(_folder_secrets(folder))
    _prepared_sample(at)
    ds = at.session_state["dp_dataset"]
    original = pd.read_parquet(folder / "large.parquet")
    _people(402).to_parquet(folder / "large.parquet")  # the table changed after the sample was read
    _whole_table_button(at).click().run()
    deadline = time.monotonic() + JOB_TIMEOUT
    while not at.error and time.monotonic() < deadline:
        time.sleep(0.5)
        _ok(at.run())
    (error,) = [e.value for e in at.error]
    assert "did not release" in error and "fingerprint" in error
    ledger = Ledger(config.ledger_url())
    assert ledger.releases(dataset_id=ds.dataset_id) == []
    ledger.close()
    original.to_parquet(folder / "large.parquet")  # the table is back: the same request runs again
    button = _whole_table_button(at)
    assert not button.disabled
    button.click().run()
    _released(at)
    ledger = Ledger(config.ledger_url())
    assert len(ledger.releases(dataset_id=ds.dataset_id)) == 1
    ledger.close()
    first, second = request_id(at, "kmeans"), request_id(at, "kmeans", 2)
    # another release of the same plan: a new request, confirmed, run as a new job
    at.checkbox(key=f"kmeans_again_{second}").check().run()
    release_button(at, "kmeans", again=True).click().run()
    _ok(at)
    assert batch_job.status(second) is not None
    _released(at, second)
    ledger = Ledger(config.ledger_url())
    assert {r.request_id for r in ledger.releases(dataset_id=ds.dataset_id)} == {first, second}
    ledger.close()


def test_a_plan_a_batch_job_cannot_run_is_refused_with_the_reason(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "399")  # DP-Lloyd + MCMC reads the 400 rows in memory
    at = _open(_folder_secrets(folder))
    _prepared_sample(at)
    assert not any("A release must use the whole table" in w.value for w in at.warning)  # DP-Lloyd runs
    at.selectbox(key="km_rel_mech").set_value("dp_lloyd_mcmc").run()
    _ok(at)
    (refusal,) = [w.value for w in at.warning if "A release must use the whole table" in w.value]
    assert "reads the rows in memory and the table has 400 rows, above a batch job's limit of 399" in refusal
    button = _whole_table_button(at)
    assert button.disabled
    assert not [e for e in at.expander if "terminal" in str(e.label)]  # no plan offered for a batch job


def test_a_running_job_shows_its_progress_and_can_be_stopped(folder: Path) -> None:
    """A job still running (a process holding its lock, as a long job does) shows its progress and a stop
    button; stopping it ends the process, says nothing was released, and offers the release again."""
    at = _open(_folder_secrets(folder))
    _prepared_sample(at)
    rid = request_id(at, "kmeans")
    jobs = batch_job.jobs_dir()
    jobs.mkdir(parents=True, exist_ok=True)
    lock = jobs / f"{rid}.lock"
    holder = subprocess.Popen(  # its own session, as start_job gives a job
        [sys.executable, "-c", HOLD_LOCK, str(lock)], start_new_session=True, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        plan_key = at.session_state["dp_release::kmeans"].intent
        status = {"request_id": rid, "state": "running", "started": started, "finished": None}
        status |= {"message": None, "plan_key": plan_key, "pid": holder.pid}
        status["stage"] = "running DP-Lloyd (SuLQ)"
        (jobs / f"{rid}.json").write_text(json.dumps(status))
        _ok(at.run())
        (note,) = [i.value for i in at.info if "Releasing on the whole table" in i.value]
        assert "is running DP-Lloyd (SuLQ)" in note  # the job's stage
        assert not [b for b in at.button if str(b.label).startswith("Release on the whole table")]
        at.button(key=f"stop_job_{rid}").click().run()
        _ok(at)
        assert holder.wait(timeout=15) != 0  # the process was ended by the stop
        (error,) = [e.value for e in at.error]
        assert "did not release" in error and "stopped before it finished" in error
        assert not _whole_table_button(at).disabled  # it can be started again
    finally:
        if holder.poll() is None:
            holder.kill()
