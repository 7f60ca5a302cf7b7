"""Batch jobs started from the server (:mod:`dpcore.outofcore.jobs`): a saved plan released on the whole
table by a child process that outlives its caller, with its status in a file, one debit per request id
however often (or however many times at once) it is started, and a database URL's secret kept out of
every file and of the child's command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from dpcore.data import fingerprint, infer_schema, prepare
from dpcore.data.sources import batch_source, from_command_line
from dpcore.errors import ParameterError
from dpcore.ledger import Ledger
from dpcore.location.plan_steps import PublicRegion
from dpcore.manifest import DEMO_NOTICE
from dpcore.outofcore import jobs
from dpcore.outofcore.jobs import JobSpec, JobStatus, job_status, start_job, stop_job
from dpcore.outofcore.run_plan import run_plan
from dpcore.outofcore.source import open_source
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import GeoIndistinguishability, PureDP
from dpcore.releases import stored_release
from tests.dpcore.outofcore.test_clustering import BOUNDS, table
from tests.dpcore.outofcore.test_locations import visits
from tests.dpcore.outofcore.test_run_plan import dashboard_release
from tests.dpcore.outofcore.test_run_plan_locations import location_plan

TIMEOUT_S = 300.0


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """The jobs folder; a job still running when the test ends (a failed test) is killed."""
    path = tmp_path / "jobs"
    yield path
    for status in path.glob("*.json"):
        try:
            os.killpg(json.loads(status.read_text())["pid"], signal.SIGKILL)
        except (ValueError, LookupError, TypeError, ProcessLookupError, PermissionError):
            pass  # not a running job's status


@pytest.fixture
def people(tmp_path: Path) -> tuple[dict, Path]:
    """A small Parquet table and the manifest of a demo release the dashboard made on it."""
    df = table(2000)
    df.loc[[4, 9], "a"] = np.nan
    path = tmp_path / "people.parquet"
    df.to_parquet(path, index=False)
    manifest, _ = dashboard_release(tmp_path, df)
    return manifest, path


def ledger_for(url: str, manifest: dict) -> Ledger:
    ledger = Ledger.initialise(url)
    ledger.set_budget(ReleasePlan.from_manifest(manifest).account, epsilon=5.0)
    return ledger


def spec(
    manifest: dict, source: str | Path, url: str, tmp_path: Path, request_id: str, table=None, query=None,
    **kw,
) -> JobSpec:
    """The job of ``manifest`` on ``source`` as the batch command names it (with ``table`` or ``query``)."""
    return JobSpec(
        manifest=manifest,
        source=batch_source(*from_command_line(str(source), table, query)),
        ledger_url=url,
        artifacts_dir=str(tmp_path / "artifacts"),
        user="batch",
        request_id=request_id,
        **kw,
    )


def wait_end(folder: Path, request_id: str) -> JobStatus:
    """Poll the job's status until it is no longer running (fails after TIMEOUT_S with its log)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        status = job_status(folder, request_id)
        assert status is not None
        if status.state != "running":
            return status
        time.sleep(0.05)
    log = (folder / f"{request_id}.log").read_text()
    pytest.fail(f"job {request_id} still running after {TIMEOUT_S} s; log:\n{log}")


def start_and_wait_started(job: JobSpec, folder: Path) -> tuple[int, float]:
    """Start ``job`` and wait until its child logs that it started; (its pid, the test's deadline)."""
    start_job(job, folder)
    pid = json.loads((folder / f"{job.request_id}.json").read_text())["pid"]
    deadline = time.monotonic() + TIMEOUT_S
    while "started" not in (folder / f"{job.request_id}.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid, deadline


def debits(ledger: Ledger, request_id: str) -> int:
    return sum(r.request_id == request_id for r in ledger.all_releases())


def starts(folder: Path, request_id: str) -> int:
    """How many children ran the job (each logs one "started" line)."""
    return (folder / f"{request_id}.log").read_text().count(f"job {request_id}: started")


def test_a_job_releases_once_and_the_stored_release_is_the_in_process_one(
    people, tmp_path: Path, folder: Path, ledger_url: str
) -> None:
    manifest, path = people
    plan = ReleasePlan.from_manifest(manifest)
    ledger = ledger_for(ledger_url, manifest)
    first = start_job(spec(manifest, path, ledger_url, tmp_path, "job-1", name="kmeans"), folder)
    assert first.state == "running" and first.plan_key == plan.key and first.finished is None
    assert job_status(folder, "job-1") == first  # written before start_job returned
    done = wait_end(folder, "job-1")
    assert done.state == "done" and done.message is None and done.finished >= done.started
    assert debits(ledger, "job-1") == 1 and ledger.budget(plan.account).epsilon_spent == 1.0
    stored = stored_release(ledger, "job-1")
    assert stored is not None and stored.record.user == "batch"
    assert Path(stored.record.artifact_path).parent == (tmp_path / "artifacts").resolve()
    # the same release as run_plan in this process (demo seed) on a ledger of its own
    memory = ledger_for(f"sqlite:///{tmp_path / 'memory.db'}", manifest)
    expected = run_plan(
        manifest, path, ledger=memory, artifacts_dir=tmp_path / "m", user="u", name="kmeans",
        request_id="job-1",
    )
    assert set(stored.table.pop("notice")) == {DEMO_NOTICE}  # the stored files mark a demo in every row
    # the stored JSON keeps 15 significant digits; the CSV every digit
    pd.testing.assert_frame_equal(stored.table, expected.table, check_exact=False, rtol=1e-14, atol=0)
    csv = next(k for k in expected.files if k.endswith(".csv"))
    assert stored.files[csv] == expected.files[csv]
    # a done job is returned as it is: nothing starts, nothing is debited again
    assert start_job(spec(manifest, path, ledger_url, tmp_path, "job-1"), folder) == done
    assert starts(folder, "job-1") == 1 and debits(ledger, "job-1") == 1
    assert stored_release(ledger, "no-such-request") is None
    ledger.close()
    memory.close()


def test_a_job_on_another_table_fails_with_the_fingerprint_message(
    people, tmp_path: Path, folder: Path
) -> None:
    manifest, path = people
    other = tmp_path / "other.parquet"
    pd.read_parquet(path).assign(b=lambda d: d["b"] + 1e-9).to_parquet(other, index=False)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = ledger_for(url, manifest)
    start_job(spec(manifest, other, url, tmp_path, "job-2"), folder)
    failed = wait_end(folder, "job-2")
    assert failed.state == "failed" and failed.finished is not None
    assert "not the table the plan was made on" in failed.message and "\n" not in failed.message
    assert "Traceback" not in (folder / "job-2.log").read_text()
    account = ReleasePlan.from_manifest(manifest).account
    assert ledger.all_releases() == [] and ledger.budget(account).epsilon_spent == 0.0
    ledger.close()


@pytest.fixture
def big(tmp_path: Path) -> tuple[dict, Path]:
    """A table big enough (1M rows, K = 20, 20 rounds) that its job runs for seconds after it starts."""
    rng = np.random.default_rng(5)
    df = pd.DataFrame(rng.uniform(-10, 10, (1_000_000, 3)), columns=list("abc"))
    path = tmp_path / "big.parquet"
    df.to_parquet(path, index=False)
    head = df.head(50)
    prep = prepare(head, infer_schema(head), list(BOUNDS), scaling="minmax", bounds=BOUNDS)
    plan = ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd", epsilon=1.0, policy=PureDP(1.0), dataset_name="big",
        fingerprint=fingerprint(df), params={"n_clusters": 20, "n_iter": 20},
        preparation=preparation_steps([], prep), mode="demo", seed=3,
    )
    return plan.to_manifest(), path


def test_a_killed_job_is_stopped_and_starting_it_again_debits_once(big, tmp_path: Path, folder: Path) -> None:
    manifest, path = big
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = ledger_for(url, manifest)
    job = spec(manifest, path, url, tmp_path, "job-3")
    pid, deadline = start_and_wait_started(job, folder)
    os.killpg(pid, signal.SIGKILL)  # the whole session: the server restarted, the machine went down
    while (stopped := job_status(folder, "job-3")).state == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stopped.state == "stopped" and "Starting it again is safe" in stopped.message
    assert "done" not in (folder / "job-3.log").read_text()  # killed mid-run, before its end
    assert debits(ledger, "job-3") == 0 and not list((tmp_path / "artifacts").glob("*.zip"))
    again = start_job(job, folder)
    assert again.state == "running" and again.started >= stopped.started
    assert wait_end(folder, "job-3").state == "done"
    account = ReleasePlan.from_manifest(manifest).account
    assert debits(ledger, "job-3") == 1 and ledger.budget(account).epsilon_spent == 1.0
    ledger.close()


def test_stop_job_ends_a_running_job_and_leaves_a_finished_one_alone(
    big, tmp_path: Path, folder: Path
) -> None:
    manifest, path = big
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = ledger_for(url, manifest)
    job = spec(manifest, path, url, tmp_path, "job-stop")
    pid, deadline = start_and_wait_started(job, folder)
    while (running := job_status(folder, "job-stop")).stage is None or "fingerprint" in running.stage:
        assert running.state == "running" and time.monotonic() < deadline
        time.sleep(0.02)
    assert running.stage.startswith("running DP-Lloyd") and "DuckDB" in running.stage  # what the page shows
    assert json.loads((folder / "job-stop.json").read_text())["pid"] == pid  # still its process, to stop
    log = (folder / "job-stop.log").read_text()
    fingerprint_pass = log.index("reading every row of the source once for its fingerprint")
    assert fingerprint_pass < log.index("running DP-Lloyd")
    stopped = stop_job(folder, "job-stop")
    assert stopped is not None and stopped.state == "stopped"  # its process ended within the wait
    assert "done" not in (folder / "job-stop.log").read_text()
    assert debits(ledger, "job-stop") == 0
    assert stop_job(folder, "job-stop") == stopped  # not running: left as it is
    assert stop_job(folder, "no-such-job") is None
    start_job(job, folder)
    done = wait_end(folder, "job-stop")
    assert done.state == "done" and stop_job(folder, "job-stop") == done
    assert debits(ledger, "job-stop") == 1
    ledger.close()


def test_starting_again_right_after_a_failure_waits_for_the_ended_process(
    people, tmp_path: Path, folder: Path
) -> None:
    """A failed job's process holds its lock until it exits; a start in that moment (the curator clicks
    again at once) waits for it and runs, instead of returning the old failure."""
    manifest, path = people
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = ledger_for(url, manifest)
    folder.mkdir(parents=True)
    plan_key = ReleasePlan.from_manifest(manifest).key
    failed = JobStatus("job-again", "failed", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00",
                       "The source's fingerprint is not the plan's.", plan_key)
    (folder / "job-again.json").write_text(json.dumps({**asdict(failed), "pid": None}))
    holder = subprocess.Popen(  # the ended job's process, exiting: it holds the lock for a moment more
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(1.0)\n",
         str(folder / "job-again.lock")],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
    again = start_job(spec(manifest, path, url, tmp_path, "job-again"), folder)
    holder.wait(timeout=10)
    assert again.state == "running" and again.started > failed.started  # a new run, not the old failure
    assert wait_end(folder, "job-again").state == "done" and debits(ledger, "job-again") == 1
    ledger.close()


def test_two_starts_at_once_run_one_job_and_debit_once(
    people, tmp_path: Path, folder: Path, ledger_url: str
) -> None:
    manifest, path = people
    ledger = ledger_for(ledger_url, manifest)
    job = spec(manifest, path, ledger_url, tmp_path, "job-4")
    barrier = threading.Barrier(2)
    returned: list[JobStatus] = []
    ended: list[JobStatus] = []

    def tab() -> None:
        barrier.wait()
        returned.append(start_job(job, folder))
        ended.append(wait_end(folder, "job-4"))

    threads = [threading.Thread(target=tab) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s.state for s in returned] == ["running", "running"]
    assert [s.state for s in ended] == ["done", "done"]
    assert starts(folder, "job-4") == 1 and debits(ledger, "job-4") == 1
    assert ledger.budget(ReleasePlan.from_manifest(manifest).account).epsilon_spent == 1.0
    ledger.close()


def test_a_database_url_s_secret_is_in_no_file_and_not_on_the_command_line(
    tmp_path: Path, folder: Path
) -> None:
    secret = "S3cretToken-2f9d41"
    db = tmp_path / "warehouse.db"
    df = table(2000)
    engine = sa.create_engine(f"sqlite:///{db}")
    df.to_sql("people", engine, index=False)
    engine.dispose()
    source = f"sqlite:///{db}?token={secret}"
    with open_source(f"sqlite:///{db}", table="people") as src:
        digest = src.fingerprint
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS)
    plan = ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd", epsilon=1.0, policy=PureDP(1.0), dataset_name="warehouse",
        fingerprint=digest, params={"n_clusters": 3}, preparation=preparation_steps([], prep), mode="demo",
        seed=5,
    )
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = ledger_for(url, plan.to_manifest())
    start_job(spec(plan.to_manifest(), source, url, tmp_path, "job-5", table="people"), folder)
    pid = json.loads((folder / "job-5.json").read_text())["pid"]
    cmdline = Path(f"/proc/{pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes() and time.monotonic() < deadline:  # empty for an instant inside exec
        time.sleep(0.001)
    assert cmdline.read_bytes().split(b"\0")[1:3] == [b"-m", b"dpcore.outofcore.jobs"]
    for part in ("cmdline", "environ"):
        assert secret.encode() not in Path(f"/proc/{pid}/{part}").read_bytes()
    assert wait_end(folder, "job-5").state == "done" and debits(ledger, "job-5") == 1
    # a SELECT the database refuses: its error names the URL; the message and the log do not hold the secret
    start_job(spec(plan.to_manifest(), source, url, tmp_path, "job-6", query="SELECT * FROM nope"), folder)
    failed = wait_end(folder, "job-6")
    assert failed.state == "failed" and "no such table: nope" in failed.message
    files = list(folder.iterdir())
    assert {f.suffix for f in files} >= {".json", ".log", ".lock"}
    for file in files:
        assert secret.encode() not in file.read_bytes(), file.name
    ledger.close()


def test_start_job_refuses_what_a_batch_job_cannot_run_before_starting_anything(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(jobs.subprocess, "Popen", no_process)
    path = tmp_path / "visits.parquet"
    visits(200).rename(columns={"lat": "Latitude", "lon": "Longitude", "user": "person id"}).to_parquet(path)
    geo = location_plan(
        path, "planar_laplace", params={"radius_m": 1000.0}, policy=GeoIndistinguishability(0.001, 1000.0)
    )
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    old = (PublicRegion(24.3963, 49.3844, -124.849, -66.8854),)  # no columns: a plan made before them
    unreadable = location_plan(path, "uniform_grid", steps=old)  # no location columns: cannot replay
    with pytest.raises(ParameterError, match="location columns"):
        start_job(spec(unreadable.to_manifest(), path, url, tmp_path, "old"), folder)
    manifest = geo.to_manifest()
    del manifest["mechanism"]
    with pytest.raises(ParameterError, match="not valid"):
        start_job(spec(manifest, path, url, tmp_path, "broken"), folder)
    with pytest.raises(ParameterError, match="not a valid file name"):
        start_job(spec(geo.to_manifest(), path, url, tmp_path, "../escape"), folder)
    assert not folder.exists()


def test_a_malformed_status_file_is_a_failed_status(tmp_path: Path, folder: Path) -> None:
    assert job_status(folder, "nothing") is None
    folder.mkdir()
    for i, text in enumerate(("{not json", json.dumps({"state": "running"}), "[]")):
        (folder / f"bad-{i}.json").write_text(text)
        status = job_status(folder, f"bad-{i}")
        assert status is not None and status.state == "failed" and "unreadable" in status.message


def test_an_unexpected_error_is_one_line_for_the_user_and_a_traceback_for_the_operator(
    people, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dpcore.outofcore.run_plan as batch

    def broken(*args, **kwargs):
        raise RuntimeError("internal detail from sqlite:////db?token=T0kenValue99")

    monkeypatch.setattr(batch, "run_plan", broken)
    manifest, _ = people
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger_for(url, manifest).close()
    job = spec(manifest, "sqlite:////db?token=T0kenValue99", url, tmp_path, "job-7", table="people")
    state, message = jobs._run(job, "job-7.log", lambda _stage: None)
    assert state == "failed" and message == (
        "The batch job stopped on an unexpected error (RuntimeError); the operator can read its log on the "
        "server: job-7.log"
    )
    log = capsys.readouterr().out  # the child's output is its log
    assert "Traceback" in log and "internal detail" in log and "T0kenValue99" not in log


def test_a_job_ending_while_its_status_is_read_is_done_not_stopped(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status is read ("running"), then the job writes its end and frees its lock, then the lock is
    probed: the job ended, it was not killed (a page polling it said "stopped" for an instant)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job-end.json"
    running = JobStatus("job-end", "running", jobs._now(), None, None, "k")
    jobs._write_status(path, running, os.getpid())
    probe = jobs._lock_free

    def the_job_ends_first(lock: Path) -> bool:
        jobs._write_status(path, JobStatus("job-end", "done", running.started, jobs._now(), None, "k"), None)
        return probe(lock)  # nothing holds it: the child unlocked after writing its end

    monkeypatch.setattr(jobs, "_lock_free", the_job_ends_first)
    assert job_status(folder, "job-end").state == "done"
