"""Batch jobs started from a server: a saved release plan run on the whole table in a process of its own.

A job is :func:`dpcore.outofcore.run_plan.run_plan` (what ``python -m dpcore run-plan`` runs) on the
:class:`JobSpec`'s source, debiting the ledger at ``ledger_url`` under the spec's request id, in a child
process started by :func:`start_job` as ``python -m dpcore.outofcore.jobs`` in a new session, so it outlives
the page that asked for it and a restart of the server. The spec (and with it a database URL that may hold a
password) reaches the child on its standard input only: never its command line, its environment or a file.

A job's files, in the jobs folder, are named by its request id:

* ``<request id>.json``: its status (:class:`JobStatus` and the child's pid), replaced atomically; "running"
  is written before the child starts, "done" or "failed" by the child when it ends;
* ``<request id>.lock``: locked (``flock``, exclusive) by the child for as long as it lives, so a "running"
  status whose lock is free belongs to a job that was killed: :func:`job_status` reports it "stopped";
* ``<request id>.log``: the child's output (its start, its end, and the traceback of an unexpected error;
  the user sees one line).

A request id is debited at most once, however often its job is started: one job at a time holds the lock
(a second start, from another tab or server process, returns the running job's status; a child that finds
the lock held exits without touching anything), and the ledger records a request id once
(:func:`dpcore.releases.make_release` returns a request already recorded without debiting it again), so
starting a failed or stopped job again is safe. The dashboard shows the finished release with
:func:`dpcore.releases.stored_release`.

The child reads one JSON object on its standard input: ``{"folder": jobs folder, "started": ISO time,
"lock_fd": the inherited locked descriptor or null, "spec": the JobSpec's fields}``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

import dpcore
from dpcore.artifacts import artifacts_folder, check_request_id
from dpcore.data.sources import is_url, source_from_batch
from dpcore.errors import DPCoreError, ParameterError
from dpcore.plan import ReleasePlan
from dpcore.url_text import url_redactor

__all__ = ["JobSpec", "JobStatus", "job_status", "start_job", "stop_job"]

State = Literal["running", "done", "failed", "stopped"]
#: How long a start or a child waits for a lock that a status check may hold for an instant.
LOCK_WAIT_S = 0.5
#: How long a start waits for the lock of a job whose end is written (its process is exiting).
END_WAIT_S = 5.0
#: How long :func:`stop_job` waits for a stopped job's process to end.
STOP_WAIT_S = 10.0
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class JobSpec:
    """What a job releases: the plan (``ReleasePlan.to_manifest()``) on ``source`` (a source spec with what
    reading it needs: :func:`dpcore.data.sources.batch_source`), debiting ``ledger_url`` under
    ``request_id``."""

    manifest: dict[str, Any]
    source: dict[str, Any]
    ledger_url: str
    artifacts_dir: str
    user: str
    request_id: str
    engine: Literal["duckdb", "spark"] = "duckdb"
    name: str = "release"


@dataclass(frozen=True)
class JobStatus:
    """A job's state; ``message`` is the one line a failed or stopped job shows the user."""

    request_id: str
    state: State
    started: str
    finished: str | None
    message: str | None
    plan_key: str
    stage: str | None = None  # what a running job is doing now (``run_plan``'s progress)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _files(folder: str | os.PathLike[str], request_id: str) -> tuple[Path, Path, Path]:
    """(status, lock, log) files of ``request_id``'s job in ``folder``."""
    base = Path(folder) / check_request_id(request_id)
    return base.with_suffix(".json"), base.with_suffix(".lock"), base.with_suffix(".log")


def _try_lock(fd: int, wait_s: float) -> bool:
    """Lock ``fd`` exclusively; retried for ``wait_s`` seconds (a status check holds it for an instant)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


@contextmanager
def _lock_file(path: Path, wait_s: float) -> Iterator[int | None]:
    """The open lock file's descriptor, locked, or None when another process holds it; closed on exit."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd if _try_lock(fd, wait_s) else None
    finally:
        os.close(fd)


def _write_status(path: Path, status: JobStatus, pid: int | None) -> None:
    """Replace the status file atomically (a reader sees the old or the new one, never a part); on a full
    disk, where no new file fits, rewrite it in place (its blocks hold the few hundred bytes)."""
    text = json.dumps({**asdict(status), "pid": pid})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.errno not in _DISK_FULL:
            raise
        path.write_text(text, encoding="utf-8")


def _read_status(path: Path, request_id: str) -> JobStatus | None:
    """The status in ``path``; None if there is none; a malformed file is a "failed" status saying so."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        status = JobStatus(**{k: data[k] for k in JobStatus.__dataclass_fields__ if k != "stage"})
        stage = data.get("stage")
        status = replace(status, stage=stage if isinstance(stage, str) else None)
        datetime.fromisoformat(status.started)
        if status.state not in get_args(State) or status.request_id != request_id:
            raise ValueError("a field has a wrong value")
        if not isinstance(status.plan_key, str):
            raise TypeError("the plan key is not text")
        return status
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as err:
        problem = f"{type(err).__name__}: {err}"
    try:
        when = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    except OSError:
        when = _now()
    return JobStatus(
        request_id, "failed", when, when,
        f"The status file of batch job {request_id} is unreadable ({problem}); nothing was released unless "
        "the Ledger page lists this request. Starting the job again is safe: a request is debited once.",
        "",
    )


def _lock_free(lock: Path) -> bool:
    """True when no process holds ``lock`` (probed for an instant)."""
    with _lock_file(lock, 0.0) as fd:
        return fd is not None


def job_status(folder: str | os.PathLike[str], request_id: str) -> JobStatus | None:
    """The status of ``request_id``'s job in ``folder``, or None if none was started there. A "running"
    job whose process is gone (killed, the machine restarted: its lock is free) is reported "stopped"."""
    path, lock, _ = _files(folder, request_id)
    status = _read_status(path, request_id)
    if status is None or status.state != "running" or not _lock_free(lock):
        return status
    status = _read_status(path, request_id)  # a job writes its end before it frees its lock: read again
    if status is None or status.state != "running":
        return status
    message = (
        "The batch job stopped before it finished (its process ended: a restart or a kill). Nothing was "
        f"released unless the Ledger page lists request {request_id}. Starting it again is safe: the ledger "
        "debits a request at most once."
    )
    return JobStatus(request_id, "stopped", status.started, None, message, status.plan_key, status.stage)


def _checked_plan(spec: JobSpec) -> ReleasePlan:
    """The spec's plan, rebuilt and checked to run as a batch job, else ``ParameterError``."""
    from dpcore.outofcore.run_plan import batch_refusal

    try:
        plan = ReleasePlan.from_manifest(spec.manifest)
    except DPCoreError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ParameterError(
            f"The release plan is not valid ({type(err).__name__}: {err}); a plan is not edited by hand: "
            "make it again on the dashboard."
        ) from None
    refusal = batch_refusal(plan)
    if refusal is not None:
        raise ParameterError(refusal)
    if spec.engine not in ("duckdb", "spark"):
        raise ParameterError(f"Unknown engine {spec.engine!r}; a batch job runs on duckdb or spark.")
    return plan


def start_job(spec: JobSpec, folder: str | os.PathLike[str]) -> JobStatus:
    """Start ``spec``'s job (see the module docstring) and return its "running" status; a job of the same
    request id that is running or done is returned as it is and nothing starts. Refuses (``ParameterError``)
    an invalid request id, an invalid plan or one a batch job cannot run, before starting anything."""
    rid = check_request_id(spec.request_id)
    plan = _checked_plan(spec)
    path, lock, log = _files(folder, rid)
    spec = JobSpec(**{**asdict(spec), "artifacts_dir": str(artifacts_folder(spec.artifacts_dir))})
    path.parent.mkdir(parents=True, exist_ok=True)
    ended = _read_status(path, rid)  # a job that wrote its end holds its lock until it exits: wait for it
    wait = END_WAIT_S if ended is not None and ended.state != "running" else LOCK_WAIT_S
    with _lock_file(lock, wait) as fd:
        current = _read_status(path, rid) if fd is not None else job_status(folder, rid)
        if fd is None or (current is not None and current.state == "done"):  # running or done: as it is
            if current is not None and current.plan_key not in ("", plan.key):
                raise ParameterError(
                    f"Request {rid} already has a batch job of another plan ({current.state}); "
                    "release this plan under a new request id."
                )
            if fd is None and (current is None or current.state != "running"):  # started by hand
                current = JobStatus(rid, "running", _now(), None, None, plan.key)
            assert current is not None
            return current
        started = _now()
        payload = json.dumps({"folder": str(path.parent.resolve()), "started": started, "lock_fd": fd,
                              "spec": asdict(spec)})
        root = str(Path(dpcore.__file__).resolve().parent.parent)
        paths = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": paths}
        with open(log, "ab") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "dpcore.outofcore.jobs"],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, pass_fds=(fd,),
            )
        status = JobStatus(rid, "running", started, None, None, plan.key)
        _write_status(path, status, child.pid)  # before the child reads its spec: it cannot end first
        assert child.stdin is not None
        try:
            child.stdin.write(payload.encode())
            child.stdin.close()
        except BrokenPipeError:  # it died at start: its log says why, its free lock makes it "stopped"
            pass
    return status  # the child inherited the locked descriptor: the lock stays held while it lives


def stop_job(
    folder: str | os.PathLike[str], request_id: str, wait_s: float = STOP_WAIT_S
) -> JobStatus | None:
    """Stop ``request_id``'s running job: SIGTERM to its process group (the session :func:`start_job` gave
    it), then wait up to ``wait_s`` seconds for its lock to be free; returns its status then ("stopped", or
    what it wrote if it ended first). A job not running is left as it is. The ledger's debit is one
    transaction, so a stop either leaves the request unspent or, after the debit, a release whose files
    :func:`dpcore.releases.stored_release` publishes."""
    path, lock, _ = _files(folder, request_id)
    status = job_status(folder, request_id)
    if status is None or status.state != "running":
        return status
    try:
        pid = json.loads(path.read_text(encoding="utf-8")).get("pid")
    except (OSError, ValueError):
        pid = None
    if not isinstance(pid, int) or pid <= 1:  # finishing (its final status is being written): let it
        return status
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):  # it ended meanwhile, or is no longer its process group
        pass
    deadline = time.monotonic() + wait_s
    while not _lock_free(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    return job_status(folder, request_id)


def _redactor(spec: JobSpec) -> Callable[[str], str]:
    """A function removing the passwords and query values of the job's database URLs (its source's, its
    ledger's) from a text: :func:`dpcore.url_text.url_redactor`."""
    urls = [*dict(spec.source.get("urls") or {}).values(), spec.ledger_url]
    return url_redactor(*filter(is_url, urls))


def _run(spec: JobSpec, log_name: str, progress: Callable[[str], None]) -> tuple[State, str | None]:
    """Run the job's release (``progress``: each stage of ``run_plan``); ("done", None) or ("failed", the
    line the user sees)."""
    from dpcore.ledger import Ledger
    from dpcore.outofcore.run_plan import run_plan

    redact = _redactor(spec)
    try:
        source, context = source_from_batch(spec.source)
        ledger = Ledger(spec.ledger_url)
        try:
            run_plan(
                spec.manifest, source, ledger=ledger, artifacts_dir=spec.artifacts_dir, user=spec.user,
                engine=spec.engine, context=context, request_id=spec.request_id, name=spec.name,
                progress=progress,
            )
        finally:
            ledger.close()
    except DPCoreError as err:
        return "failed", redact(" ".join(str(err).split()))
    except Exception as err:  # the user gets one line, the operator the traceback in the log
        if isinstance(err, OSError) and err.errno in _DISK_FULL:  # no room for a traceback in the log
            return "failed", (
                "The batch job stopped: the server's disk is full (no space left for its artifacts, status "
                "or log). Nothing was released unless the Ledger page lists this request; free some space "
                "(or ask the operator to) and start it again, which is safe: a request is debited once."
            )
        print(redact(traceback.format_exc()), flush=True)
        return "failed", (
            f"The batch job stopped on an unexpected error ({type(err).__name__}); the operator can read its "
            f"log on the server: {log_name}"
        )
    return "done", None


def main() -> int:
    """The child: lock the job, run it unless it is done, write its final status."""
    payload = json.loads(sys.stdin.read())
    spec = JobSpec(**payload["spec"])
    folder = Path(payload["folder"])
    path, lock, log = _files(folder, spec.request_id)
    inherited = payload.get("lock_fd")
    fd = inherited if inherited is not None else os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    if not _try_lock(fd, LOCK_WAIT_S):
        return 0  # another job of this request runs: it writes the status
    current = _read_status(path, spec.request_id)
    if current is not None and current.state == "done":
        return 0
    plan_key = ReleasePlan.from_manifest(spec.manifest).key
    print(f"{_now()} job {spec.request_id}: started (pid {os.getpid()}, plan {plan_key[:16]})", flush=True)
    running = JobStatus(spec.request_id, "running", payload["started"], None, None, plan_key)

    def progress(stage: str) -> None:  # the page shows it; the log keeps it with its time
        print(f"{_now()} job {spec.request_id}: {stage}", flush=True)
        _write_status(path, replace(running, stage=stage), os.getpid())

    state, message = _run(spec, log.name, progress)
    final = JobStatus(spec.request_id, state, payload["started"], _now(), message, plan_key)
    _write_status(path, final, None)
    fcntl.flock(fd, fcntl.LOCK_UN)  # ended: a new start need not wait for this process to exit
    print(f"{_now()} job {spec.request_id}: {state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
