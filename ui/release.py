"""The release panel shared by the K-means and Locations pages; it shows and runs one release plan.

The page builds a :class:`dpcore.plan.ReleasePlan` with :func:`current_plan` (dataset, preparation, policy
and sampling mode come from the session; mechanism, eps, delta and parameters from the page). The panel
shows exactly that plan, its guarantee and the budget left on its ledger account, read from the ledger on
every run; the button is disabled, with the reason, when the plan cannot be released (no budget, over
budget, settings changed since the comparison). Its request id is a uuid4 kept for one plan (its key): a
rerun or a double click reuses it, so the ledger debits at most once; a second release of the same plan
needs an explicit confirmation. The order of work is :func:`dpcore.report.make_release`'s: run once, store
the files, debit atomically, and only then show anything. When the dataset is a uniform sample of a larger
table, the release runs on the whole table as a batch job (:mod:`ui.batch_job`) whose first request id is the
batch command's for the plan, and the panel shows the recorded release's stored preview.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dpcore import config
from dpcore.ledger import BudgetStatus
from dpcore.plan import PrepStep, ReleasePlan, policy_account, preparation_steps
from dpcore.report import (
    DEMO_NOTICE,
    LOCAL_NOTICE,
    Release,
    StoredPreview,
    make_release,
    sha256_file,
    stored_file,
    stored_preview,
)
from ui import batch_job, datasets, state
from ui.errors import user_errors
from ui.text import md

__all__ = [
    "ARTIFACTS",
    "artifact_bytes",
    "artifacts_dir",
    "current_plan",
    "policy_budget",
    "release_panel",
    "show_release",
    "stale_reason",
]

ARTIFACTS = "artifacts"
PANEL_ROWS = 10_000  # rows of a released table the panel shows (a per-visit release can have millions)
_MIME = {".csv": "text/csv", ".json": "application/json", ".html": "text/html"}


@dataclass
class PanelState:
    """A panel's current plan key, its request id, and the release made for it (None until paid); a
    whole-table release is kept as its ``stored`` preview (first rows, files read on download)."""

    intent: str
    request_id: str
    result: Release | None = None
    stored: StoredPreview | None = None


def artifacts_dir() -> Path:
    """Folder of stored release files: ``<DPCORE_DATA_DIR>/artifacts``."""
    return config.data_dir() / ARTIFACTS


def artifact_bytes(path: str | None, expected_sha256: str | None) -> bytes | None:
    """A stored artifact's bytes if it lies in :func:`artifacts_dir` and matches its ledger hash."""
    if not path or not expected_sha256:
        return None
    file = Path(path).resolve()
    if not file.is_relative_to(artifacts_dir().resolve()) or not file.is_file():
        return None
    return file.read_bytes() if sha256_file(file) == expected_sha256 else None


def policy_budget() -> tuple[str, Any] | None:
    """(account label, budget status or None) of the current policy's account, read from the ledger."""
    ds = state.dataset()
    if ds is None:
        return None
    account = policy_account(ds.dataset_id, state.policy(), state.mode())
    demo = " (demo account)" if account.mode == "demo" else ""
    label = f"{account.definition}: {account.relation}{demo}"
    return label, state.ledger().budget(account)


def current_plan(
    domain: str,
    mechanism: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    params: Mapping[str, Any] | None = None,
    scope: str = "",
    steps: tuple[PrepStep, ...] = (),
) -> ReleasePlan | None:
    """The plan of a release from the session (dataset, preparation, policy, mode) and the page's choices
    (``steps``: public inputs the page adds, e.g. the region); None, with the reason shown, when invalid."""
    ds = state.dataset()
    if ds is None:
        return None
    prepared = ds.prepared if domain == "kmeans" else None
    with user_errors("checking the release plan") as outcome:
        plan = ReleasePlan(
            domain=domain,
            mechanism=mechanism,
            epsilon=epsilon,
            delta=delta,
            policy=state.policy(),
            dataset_name=ds.name,
            fingerprint=ds.fingerprint,
            params=dict(params or {}),
            preparation=(*preparation_steps(ds.cleaning, prepared), *steps),
            mode=state.mode(),
            seed=state.demo_seed(),
            scope=scope,
        )
    return None if outcome.failed else plan


def _panel(key: str, plan: ReleasePlan, whole_table: bool) -> PanelState:
    """The panel's state for ``plan``: a new request id when the plan changed (a whole table's first
    request is the batch command's id for the plan, :func:`ui.batch_job.first_request_id`)."""
    slot = state.RELEASE_PREFIX + key
    panel = st.session_state.get(slot)
    if panel is None or panel.intent != plan.key:
        first = batch_job.first_request_id(plan) if whole_table else uuid.uuid4().hex
        panel = PanelState(intent=plan.key, request_id=first)
        st.session_state[slot] = panel
    return panel


def show_release(result: Release, key: str, *, stored: StoredPreview | None = None) -> None:
    """The paid release: ledger confirmation, table, figures and download buttons (CSV, JSON, HTML); a
    whole table's release (made by a batch job) is its ``stored`` preview: its first rows, each file read
    from the stored zip when downloaded, its charts in the HTML report."""
    whole_table = stored is not None
    rec = result.record
    note = " (already recorded: nothing was debited again)" if result.replayed and not whole_table else ""
    where = " on the whole table by a batch job" if whole_table else ""
    st.success(
        f"Released {result.manifest.get('mechanism_label', rec.mechanism)}{where} at "
        f"{'level l' if rec.definition == 'geo_ind' else 'ε'} = {rec.epsilon:.4g}, "
        f"δ = {rec.delta:.3g}; recorded in the ledger as request {_short(rec.request_id)} by {rec.user} at "
        f"{rec.time[:19]} UTC{note}."
    )
    if result.manifest.get("demo"):
        st.warning(f"{DEMO_NOTICE}: made with a fixed seed; do not share it as a private release.")
    st.dataframe(result.table.head(PANEL_ROWS), hide_index=True)
    n_rows = len(result.table) if stored is None else stored.n_rows
    if n_rows > PANEL_ROWS:
        st.caption(
            f"The first {PANEL_ROWS:,} of {n_rows:,} released rows; the CSV and JSON files below hold them "
            "all."
        )
    for i, fig in enumerate(result.figures):
        st.plotly_chart(fig, key=f"{key}_release_fig_{i}")
    if whole_table:
        st.caption("Its charts are in the HTML report below.")
    names = sorted(result.files) if stored is None else sorted(stored.names)
    for col, name in zip(st.columns(len(names)), names, strict=True):
        content = (
            result.files[name]
            if stored is None
            else functools.partial(stored_file, stored.path, name, result.record.artifact_hash or "")
        )
        col.download_button(
            name,
            data=content,
            file_name=name,
            mime=_MIME.get(Path(name).suffix, "application/octet-stream"),
            key=f"{key}_download_{name}",
            on_click="ignore",
            icon=":material/download:",
        )


def _short(request_id: str) -> str:
    """A request id as the panel shows it: 8 hex digits (a batch plan's id keeps its ``plan-`` prefix)."""
    return "plan-" + request_id[5:13] if request_id.startswith("plan-") else request_id[:8]


def stale_reason(compared: Mapping[str, Any] | None, current: Mapping[str, Any]) -> str | None:
    """Why a release differs from the last comparison (settings named), or None when it matches or no
    comparison ran: a release must use what the curator compared, not values that changed since."""
    if compared is None:
        return None
    changed = [name for name, value in current.items() if compared.get(name) != value]
    if not changed:
        return None
    return (
        f"The {', '.join(changed)} changed since the last comparison: run the comparison again (or set "
        "them back) so the release uses what you compared."
    )


def _blocked(plan: ReleasePlan, status: BudgetStatus | None, stale: str | None) -> str | None:
    """Why the plan cannot be released now, given its account's ``status`` just read, or None."""
    if stale:
        return stale
    what = f"{plan.definition_label} ({plan.relation})" + (" in demo mode" if plan.mode == "demo" else "")
    if status is None:
        return f"No budget is set for {what} on this dataset: set one on the Privacy policy page."
    eps, delta = plan.cost
    if eps > status.epsilon_left or delta > status.delta_left:
        return (
            f"This release costs {plan.unit} = {eps:.4g}, δ = {delta:.3g}, more than the budget left for "
            f"{what}: {plan.unit} = {status.epsilon_left:.4g}, δ = {status.delta_left:.3g}."
        )
    return None


def release_panel(
    *, key: str, plan: ReleasePlan | None, inputs: Any, stale: str | None = None
) -> Release | None:
    """Show ``plan`` (exactly what will run), its guarantee and budget, and a Release button; on click,
    release once and show it. ``stale`` (a reason) disables the button, e.g. when the settings differ
    from the last comparison. Returns the release made for this plan (also after reruns), else None."""
    st.subheader("Release")
    if state.dataset() is None:
        st.info("Load a dataset on the Data page before releasing.")
        return None
    if plan is None:
        st.info("Fix the settings above to release (the reason is shown above).")
        return None
    st.markdown("**What will run** (exactly these values):")
    rows = [(setting, md(value)) for setting, value in plan.summary_rows()]  # st.table renders Markdown
    st.table(pd.DataFrame(rows, columns=["setting", "value"]).set_index("setting"))
    (st.info if plan.spec.is_dp else st.warning)(md(plan.guarantee))
    if not plan.spec.is_dp:
        st.warning(LOCAL_NOTICE)
    if plan.mode == "demo":
        st.warning(f"DEMO mode (seed {plan.seed}): the output will be marked '{DEMO_NOTICE}' in every file.")
    blocked = None
    with user_errors("reading the budget"):
        status = state.ledger().budget(plan.account)
        blocked = datasets.release_refusal(state.dataset(), plan) or _blocked(plan, status, stale)
        if status is not None:
            st.caption(
                f"Budget left on this account ({plan.account.definition}: {plan.relation}): "
                f"{plan.unit} = {status.epsilon_left:.4g}, δ = {status.delta_left:.3g}"
            )
    whole = datasets.sample_of(state.dataset()) is not None  # the release runs on the whole table
    panel = _panel(key, plan, whole)
    if blocked:
        st.warning(blocked)
    if whole and panel.result is None:
        with user_errors("reading the release from the ledger"):  # a job done here, in a tab or a terminal
            panel.stored = stored_preview(state.ledger(), panel.request_id, PANEL_ROWS)
            panel.result = None if panel.stored is None else panel.stored.release
    if panel.result is not None:
        shown = st.empty()  # the previous release, cleared below if a new request is made in this run
        with shown.container():
            show_release(panel.result, key, stored=panel.stored if whole else None)
        again = st.checkbox(
            "Make another release with these settings (a new request: spends the budget again)",
            # bound to this request: once it is spent the next one needs a fresh confirmation
            key=f"{key}_again_{panel.request_id}",
            disabled=blocked is not None,
        )
        if not (again and st.button("Release again", key=f"{key}_release_again")):
            return panel.result
        shown.empty()  # a refused request must not leave the previous files on screen
        panel.request_id, panel.result, panel.stored = uuid.uuid4().hex, None, None
    elif whole:
        if not _whole_table_button(panel.request_id, plan, key, blocked):
            return None
    elif not st.button(
        f"Release (spends {plan.unit} = {plan.epsilon:.4g})",
        type="primary",
        key=f"{key}_release",
        disabled=blocked is not None,
        help=blocked,
    ):
        return None
    if whole:
        with user_errors("starting the batch job on the whole table") as outcome:
            batch_job.start(plan, panel.request_id, name=key, artifacts_dir=artifacts_dir())
        if not outcome.failed:
            st.rerun()
        return None
    with (
        user_errors(f"releasing {plan.spec.label}") as outcome,
        st.spinner("Running the mechanism and recording it..."),
    ):
        result = make_release(
            state.ledger(),
            plan,
            inputs,
            request_id=panel.request_id,
            user=state.user(),
            artifacts_dir=artifacts_dir(),
            name=key,
        )
    if outcome.failed:
        return None
    panel.result = result
    st.rerun()


def _whole_table_button(request_id: str, plan: ReleasePlan, key: str, blocked: str | None) -> bool:
    """A sample's release control: the running job's progress (no button), or the button that starts the
    batch job on the whole table (again, after a failed or stopped one, whose reason is shown); True when
    clicked."""
    datasets.offer_whole_table_plan(plan, key)
    job = batch_job.status(request_id)
    if job is not None and job.state == "running":
        batch_job.progress(request_id)
        return False
    if job is not None and job.state in ("failed", "stopped"):
        st.error(f"The batch job on the whole table did not release: {job.message}")
    ds = state.dataset()
    rows = f"{ds.origin['rows']:,} rows" if ds is not None and ds.origin else "all rows"
    return st.button(
        f"Release on the whole table ({rows}; spends {plan.unit} = {plan.epsilon:.4g})",
        type="primary",
        key=f"{key}_release",
        disabled=blocked is not None,
        help=blocked
        or "Runs as a batch job on this server on every row (DuckDB); the release shows here when recorded.",
    )
