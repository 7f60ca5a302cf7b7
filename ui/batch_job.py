"""Releases of a table above the row limit: the release panel runs the plan as a batch job on the whole
table, on this server, and shows the release once the job has recorded it.

The dashboard holds a uniform sample of such a table (diagnostics only). The release itself is the batch
command's (``python -m dpcore run-plan``), started by :func:`dpcore.outofcore.jobs.start_job` in its own
process: DuckDB reads the whole source out of core, the mechanism's passes run there (a mechanism without
them reads the prepared rows into memory, up to ``DPCORE_JOB_MEMORY_ROWS``), and the release is debited and
stored like any other. Its request id is the plan's (``ReleasePlan.request_id``; for a first release the
batch command's default, ``plan-`` and the first 32 hex digits of the plan's key), so a reload, a second
tab, a server restart or the same plan run from a terminal all find the one job and the one ledger entry
(the ledger debits a request id once). A job's status lives in ``<DPCORE_DATA_DIR>/jobs``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from dpcore import config
from dpcore.plan import ReleasePlan
from ui import datasets, state

if TYPE_CHECKING:  # the engines (Ibis, DuckDB) load only when a sample's release panel needs them
    from dpcore.outofcore.jobs import JobStatus

JOBS = "jobs"
POLL_S = 1.0


def jobs_dir() -> Path:
    """Folder of the batch jobs' status files and logs: ``<DPCORE_DATA_DIR>/jobs``."""
    return config.data_dir() / JOBS


def status(request_id: str) -> JobStatus | None:
    """The job of ``request_id`` (running, done, failed or stopped), or None if none was started."""
    from dpcore.outofcore.jobs import job_status

    return job_status(jobs_dir(), request_id)


def start(
    plan: ReleasePlan,
    request_id: str,
    *,
    name: str,
    artifacts_dir: Path,
    origin: Mapping[str, Any] | None = None,
    user: str | None = None,
) -> JobStatus:
    """Start the batch job releasing ``plan`` on the whole table of the current dataset's source, or of
    ``origin`` (an approved request's, recorded with it) for ``user`` (a running or finished job of
    ``request_id`` is returned as it is, nothing is started twice)."""
    from dpcore.outofcore.jobs import JobSpec, start_job

    ds = state.dataset()
    if origin is None:
        origin = (ds.origin or {}) if ds is not None else {}
    spec = JobSpec(
        manifest=plan.to_manifest(),
        source=datasets.job_source(origin),
        ledger_url=config.ledger_url(),
        artifacts_dir=str(artifacts_dir),
        user=state.user() if user is None else user,
        request_id=request_id,
        name=name,
    )
    return start_job(spec, jobs_dir())


def _elapsed(started: str) -> str:
    """Time since an ISO UTC instant, as minutes and seconds."""
    begun = dt.datetime.fromisoformat(started)
    if begun.tzinfo is None:
        begun = begun.replace(tzinfo=dt.UTC)
    seconds = max(0, int((dt.datetime.now(dt.UTC) - begun).total_seconds()))
    return f"{seconds // 60} min {seconds % 60:02d} s"


@st.fragment(run_every=POLL_S)
def progress(request_id: str) -> None:
    """While the job of ``request_id`` runs: what it is doing and for how long, read again every
    :data:`POLL_S` seconds, and a button that stops it; once it has ended, the whole page runs again to
    show the outcome."""
    job = status(request_id)
    if job is None or job.state != "running":
        st.rerun()
    doing = job.stage or "starting"
    st.info(
        f"Releasing on the whole table: a batch job on this server, started at {job.started[11:19]} UTC "
        f"({_elapsed(job.started)} ago), is {doing}. You can leave this page or reload it: the job goes on, "
        "and the release shows here (and on the Ledger page) once it is recorded.",
        icon=":material/hourglass_top:",
    )
    if st.button(
        "Stop the job",
        key=f"stop_job_{request_id}",
        help="Ends the job's process. Nothing is spent unless it had already recorded the release.",
    ):
        from dpcore.outofcore.jobs import stop_job

        stop_job(jobs_dir(), request_id)
        st.rerun()
