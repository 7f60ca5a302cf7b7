"""The release panel shared by the K-means and Locations pages; it shows and runs one release plan.

The page builds a :class:`dpcore.plan.ReleasePlan` with :func:`current_plan` (dataset, preparation, policy
and sampling mode come from the session; mechanism, eps, delta and parameters from the page). The panel
shows exactly that plan, its digest, its guarantee and the budget left on its ledger account, read from the
ledger on every run; the button is disabled, with the reason, when the plan cannot be released (no budget,
over budget, settings changed since the comparison).

What spends is bound to what was shown: every button that spends carries the plan's digest in its widget
key and, through its callback, the plan key and request id it was drawn with; a click whose run builds
another plan (a field committed by the same click, another tab's change) releases nothing and says so.
A plan is released once: its request ids are ``ReleasePlan.request_id(1)``, ``(2)``, ... and the panel reads
the plan's releases from the ledger on every run, so a rerun, a double click, a reload, a second tab or a
restart show the release made (the ledger debits a request id once); another release of the same plan
needs the explicit "Release this plan again". The order of work is :func:`dpcore.releases.make_release`'s:
run once, store the files, debit atomically, and only then show anything. When the dataset is a uniform
sample of a larger table, the release runs on the whole table as a batch job (:mod:`ui.batch_job`) under the
same request ids, and the panel shows the recorded release's stored preview.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.state.session_state import Serialized

from dpcore import config
from dpcore.artifacts import sha256_file, short_id, stored_file
from dpcore.errors import DPCoreError
from dpcore.ledger import Account, BudgetStatus, ReleaseRecord, relation_factor
from dpcore.manifest import DEMO_NOTICE, LOCAL_NOTICE
from dpcore.plan import ReleasePlan, policy_account, preparation_steps, registry
from dpcore.releases import Release, StoredPreview, make_release, plan_releases, stored_preview
from dpcore.steps import PrepStep
from ui import batch_job, datasets, requests_view, roles, state
from ui.errors import user_errors
from ui.text import md

__all__ = [
    "ARTIFACTS",
    "artifact_bytes",
    "artifacts_dir",
    "budget_left",
    "current_plan",
    "policy_budget",
    "release_panel",
    "show_release",
    "stale_reason",
]

ARTIFACTS = "artifacts"
PANEL_ROWS = 10_000  # rows of a released table the panel shows (a per-visit release can have millions)
CONFIRMED_PREFIX = "dp_confirmed::"
CHANGED = (
    "The settings changed since you confirmed: nothing was released and nothing was spent. Review what "
    "will run above and click again."
)
_MIME = {".csv": "text/csv", ".json": "application/json", ".html": "text/html"}


@dataclass
class PanelState:
    """A panel's current plan key and the release this session made of it (shown with its figures), or the
    stored preview of the plan's latest release found in the ledger (a reload, another tab, a batch job)."""

    intent: str
    result: Release | None = None
    stored: StoredPreview | None = None


@dataclass(frozen=True)
class Confirmation:
    """What a clicked spend button was drawn for: the plan's key and the request id it would release."""

    digest: str
    request_id: str


def _confirm(key: str, digest: str, request_id: str) -> None:
    """A spend button's callback: Streamlit calls it before the click's run with the arguments drawn on the
    button, i.e. the plan the curator saw when clicking (not the one the click's run may build from a field
    committed by the same click)."""
    st.session_state[CONFIRMED_PREFIX + key] = Confirmation(digest, request_id)


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
    used: Collection[str] | None = None,
    private: Mapping[str, Any] | None = None,
) -> ReleasePlan | None:
    """The plan of a release from the session (dataset, preparation, policy, mode) and the page's choices
    (``steps``: public inputs the page adds, e.g. the region; ``used``: the columns the release reads, by
    default the prepared features; ``private``: a private step the page adds, e.g. a region estimated
    privately, else the prepared features' private bounds); None, with the reason shown, when invalid. A
    missing-value step on columns the release does not read is recorded as having no effect on it."""
    ds = state.dataset()
    if ds is None:
        return None
    prepared = ds.prepared if domain == "kmeans" else None
    if used is None and prepared is not None:
        used = prepared.feature_names
    cleaning = preparation_steps(ds.cleaning, prepared, used=used)
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
            preparation=(*cleaning, *steps),
            mode=state.mode(),
            seed=state.demo_seed(),
            scope=scope,
            epsilon_source=state.epsilon_source(domain, mechanism, epsilon),
            private_bounds=private or ((prepared.private_bounds or {}) if prepared is not None else {}),
        )
    return None if outcome.failed else plan


def budget_left(domain: str, mechanism: str, params: Mapping[str, Any], scope: str = "") -> float | None:
    """What is left (ε, or the level l) on the account a release of ``mechanism`` with ``params`` would
    debit now (0 when that account has no budget), or None when no such release can be formed here."""
    ds = state.dataset()
    if ds is None:
        return None
    try:
        spec = registry(domain)[mechanism]
        plan = ReleasePlan(
            domain=domain,
            mechanism=mechanism,
            epsilon=1.0,  # the account does not depend on ε or δ
            delta=1e-6 if spec.needs_delta else 0.0,
            policy=state.policy(),
            dataset_name=ds.name,
            fingerprint=ds.fingerprint,
            params=dict(params),
            mode=state.mode(),
            seed=state.demo_seed(),
            scope=scope,
        )
        status = state.ledger().budget(plan.account)
    except DPCoreError:
        return None
    return 0.0 if status is None else status.epsilon_left


def _panel(key: str, plan: ReleasePlan) -> PanelState:
    """The panel's state for ``plan`` (a new one when the plan changed)."""
    slot = state.RELEASE_PREFIX + key
    panel = st.session_state.get(slot)
    if panel is None or panel.intent != plan.key:
        panel = PanelState(intent=plan.key)
        st.session_state[slot] = panel
    return panel


def show_release(
    result: Release, key: str, *, stored: StoredPreview | None = None, whole_table: bool = False
) -> None:
    """A paid release: ledger confirmation, table, figures and download buttons (CSV, JSON, HTML). A release
    read back from the ledger (a reload, another tab, a batch job) is its ``stored`` preview: its first rows,
    each file read from the stored zip when downloaded, its charts in the HTML report."""
    rec = result.record
    note = " (already recorded: nothing was debited again)" if result.replayed and stored is None else ""
    where = " on the whole table by a batch job" if whole_table else ""
    unit = "level l" if rec.definition == "geo_ind" else "ε"
    delta = f", δ = {rec.delta:.3g}" if rec.delta else ""
    st.success(
        f"Released {result.manifest.get('mechanism_label', rec.mechanism)}{where} at {unit} = "
        f"{rec.epsilon:.4g}{delta}; recorded in the ledger as request {short_id(rec.request_id)} by "
        f"{md(rec.user)} at {rec.time[:19]} UTC{note}."
    )
    if result.manifest.get("demo"):
        st.warning(f"{DEMO_NOTICE}: made with a fixed seed; do not share it as a private release.")
    charts, values = st.columns([3, 2]) if result.figures else (st.container(), st.container())
    values.dataframe(result.table.head(PANEL_ROWS), hide_index=True)  # the released values, beside the chart
    n_rows = len(result.table) if stored is None else stored.n_rows
    if n_rows > PANEL_ROWS:
        values.caption(
            f"The first {PANEL_ROWS:,} of {n_rows:,} released rows; the CSV and JSON files below hold them "
            "all."
        )
    for i, fig in enumerate(result.figures):
        charts.plotly_chart(fig, key=f"{key}_release_fig_{i}")
    if stored is not None:
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


def _cost_text(plan: ReleasePlan, eps: float, delta: float) -> str:
    """An amount in the plan's own units: δ only for a plan that spends one (never for Blowfish or a
    geo-indistinguishability level, whose definitions have none)."""
    return f"{plan.unit} = {eps:.4g}" + (f", δ = {delta:.3g}" if plan.uses_delta and plan.delta else "")


def _blocked(
    plan: ReleasePlan, status: BudgetStatus | None, stale: str | None, related: list[BudgetStatus]
) -> str | None:
    """Why the plan cannot be released now, given its account's ``status`` and the dataset's other
    accounts (``related``, which the ledger also charges at their conversion factor) just read, or None."""
    if stale:
        return stale
    what = f"{plan.definition_label} ({plan.relation})" + (" in demo mode" if plan.mode == "demo" else "")
    if status is None:
        return f"No budget is set for {what} on this dataset: set one on the Privacy policy page."
    eps, delta = plan.cost
    if eps > status.epsilon_left or delta > status.delta_left:
        return (
            f"This release costs {_cost_text(plan, eps, delta)}, more than the budget left for {what}: "
            f"{_cost_text(plan, status.epsilon_left, status.delta_left)}."
        )
    for other in related:
        k = relation_factor(plan.account, Account.parse(other.account))
        if other.account == plan.account.key or k is None:
            continue
        if float(k * Fraction(repr(eps))) > other.epsilon_left:
            unit = "level l" if other.definition == "geo_ind" else "ε"
            return (
                f"This release also protects {other.definition}: {other.relation}, where the ledger "
                f"charges it {float(k):.4g} × {plan.unit} = {float(k) * eps:.4g}, more than the {unit} = "
                f"{other.epsilon_left:.4g} left there."
            )
    return None


def _latest(panel: PanelState, record: ReleaseRecord) -> StoredPreview | None:
    """The preview of ``record`` (the plan's latest release) unless this session made it (then None: the
    panel shows its own result, with figures); kept in the panel so reruns read the zip once."""
    if panel.result is not None and panel.result.record.request_id == record.request_id:
        return None
    if panel.stored is None or panel.stored.release.record.request_id != record.request_id:
        panel.stored = stored_preview(state.ledger(), record.request_id, PANEL_ROWS)
    return panel.stored


def _clicked_elsewhere(key: str, digest: str) -> bool:
    """Whether this run carries a click on one of panel ``key``'s spend buttons drawn for another plan.

    Such a click reaches the server when the browser clicked a button that a rerun (a field committed by
    the same click) has replaced: once that rerun has finished, the old button's widget is gone and no
    callback runs, so only its trigger tells. Reads Streamlit's incoming widget states (an internal of the
    pinned version; a change there makes this False, never a release)."""
    ctx = get_script_run_ctx()
    try:
        states = ctx.session_state._state._new_widget_state.states  # type: ignore[union-attr]
    except AttributeError:
        return False
    pattern = re.compile(rf"-{re.escape(key)}_(?:release|release_again)_(?!{digest})[0-9a-f]{{16}}$")
    return any(
        pattern.search(wid) and isinstance(w, Serialized) and w.value.trigger_value
        for wid, w in states.items()
    )


def _spend_button(
    label: str, key: str, role: str, plan: ReleasePlan, request_id: str, blocked: str | None
) -> bool:
    """A button that spends, ``<key>_<role>_<digest>``: its widget key carries the plan's digest, so a click
    on a button drawn for another plan never reads as a click on this one, and its callback records what it
    was drawn for."""
    return st.button(
        label,
        type="primary",
        key=f"{key}_{role}_{plan.digest}",
        disabled=blocked is not None,
        help=blocked or f"Releases exactly the plan shown above (digest {plan.digest}), once.",
        on_click=_confirm,
        args=(key, plan.key, request_id),
    )


def release_panel(
    *,
    key: str,
    plan: ReleasePlan | None,
    inputs: Any,
    stale: str | None = None,
    evidence: requests_view.Evidence | None = None,
) -> Release | None:
    """Show ``plan`` (exactly what will run, with its digest), its guarantee and budget, and a Release
    button; a click releases the plan that was on screen when the curator clicked, or nothing. ``stale``
    (a reason) disables the button, e.g. when the settings differ from the last comparison.

    A plan is released once: its request ids are :meth:`~dpcore.plan.ReleasePlan.request_id` 1, 2, ...,
    and the panel reads the plan's releases from the ledger on every run, so a reload, a second tab or a
    server restart show the release already made; another one needs "Release this plan again". Returns
    the plan's latest release, else None.

    Only a curator or an officer (``ui.roles``) releases. When the account's approval rule covers the plan,
    the button asks an officer's approval instead (:mod:`ui.requests_view`; ``evidence``: the comparison's
    expected error and chart, stored with the request)."""
    confirmed: Confirmation | None = st.session_state.pop(CONFIRMED_PREFIX + key, None)
    st.subheader("Release")
    refused = roles.refusal("release data", roles.OFFICER, roles.CURATOR)
    if refused is not None:  # a viewer: comparisons in demo mode only
        st.info(refused, icon=":material/visibility:")
        return None
    if state.dataset() is None:
        st.info("Load a dataset on the Data page before releasing.")
        return None
    if plan is None:
        if confirmed is not None:
            st.warning(CHANGED)
        st.info("Fix the settings above to release (the reason is shown above).")
        return None
    st.markdown("**What will run** (exactly these values):")
    rows = [(setting, md(value)) for setting, value in plan.summary_rows()]  # st.table renders Markdown
    st.table(pd.DataFrame(rows, columns=["setting", "value"]).set_index("setting"))
    st.caption(f"Plan digest: {plan.digest} (the Release button releases this plan and no other).")
    (st.info if plan.spec.is_dp else st.warning)(md(plan.guarantee))
    if not plan.spec.is_dp:
        st.warning(LOCAL_NOTICE)
    if plan.mode == "demo":
        st.warning(f"DEMO mode (seed {plan.seed}): the output will be marked '{DEMO_NOTICE}' in every file.")
    blocked: str | None = "The ledger could not be read."
    made: list[ReleaseRecord] = []
    with user_errors("reading the budget"):
        status = state.ledger().budget(plan.account)
        related = [s for s in state.ledger().budgets(plan.dataset_id) if s.mode == plan.mode]
        made = plan_releases(state.ledger(), plan)
        blocked = datasets.release_refusal(state.dataset(), plan) or _blocked(plan, status, stale, related)
        if status is not None:
            st.caption(
                f"Budget left on this account ({plan.account.definition}: {plan.relation}): "
                f"{_cost_text(plan, status.epsilon_left, status.delta_left)}"
            )
    whole = datasets.sample_of(state.dataset()) is not None  # the release runs on the whole table
    panel = _panel(key, plan)
    if (confirmed is not None and confirmed.digest != plan.key) or _clicked_elsewhere(key, plan.digest):
        st.warning(CHANGED)  # the click was on a button drawn for another plan: nothing is released
        confirmed = None
    next_id = plan.request_id(len(made) + 1)
    rule = None
    with user_errors("reading the approval rule"):
        rule = requests_view.needs_approval(plan)
    shown: Release | None = None
    if made:
        with user_errors("reading the release from the ledger"):
            stored = _latest(panel, made[-1])
            shown = panel.result if stored is None else stored.release
            if stored is not None or len(made) > 1:
                times = "once" if len(made) == 1 else f"{len(made)} times (the latest is shown)"
                st.info(
                    f"This plan was released {times}: at {made[-1].time[11:16]} UTC on {made[-1].time[:10]} "
                    f"by {md(made[-1].user)}. Nothing more is spent unless you release it again below.",
                    icon=":material/task_alt:",
                )
            show_release(shown, key, stored=stored, whole_table=whole)
        if rule is not None:
            _request(key, plan, next_id, inputs, blocked, rule, whole, evidence)
            return shown
        clicked = _again(key, plan, next_id, blocked, whole)
    else:
        if blocked:
            st.warning(blocked)
        if rule is not None:
            _request(key, plan, next_id, inputs, blocked, rule, whole, evidence)
            return shown
        if whole:
            clicked = _whole_table_button(next_id, plan, key, blocked)
        else:
            label = f"Release (spends {_cost_text(plan, *plan.cost)})"
            clicked = _spend_button(label, key, "release", plan, next_id, blocked)
    if not clicked or confirmed is None or blocked is not None:
        return shown
    refused = roles.refusal("release data", roles.OFFICER, roles.CURATOR)  # on the click's own run
    if refused is not None or rule is not None:
        st.error(refused or "This release needs an officer's approval: nothing was released.")
        return shown
    if confirmed.request_id != next_id:  # drawn before a release of this plan made elsewhere: shown above
        return shown
    if whole:
        with user_errors("starting the batch job on the whole table") as outcome:
            batch_job.start(plan, next_id, name=key, artifacts_dir=artifacts_dir())
        if not outcome.failed:
            st.rerun()
        return shown
    with (
        user_errors(f"releasing {plan.spec.label}") as outcome,
        st.spinner("Running the mechanism and recording it..."),
    ):
        result = make_release(
            state.ledger(),
            plan,
            inputs,
            request_id=next_id,
            user=state.user(),
            artifacts_dir=artifacts_dir(),
            name=key,
        )
    if outcome.failed:
        return shown
    panel.result, panel.stored = result, None
    st.rerun()


def _request(
    key: str,
    plan: ReleasePlan,
    request_id: str,
    inputs: Any,
    blocked: str | None,
    rule: Any,
    whole: bool,
    evidence: requests_view.Evidence | None,
) -> None:
    ds = state.dataset()
    origin = (ds.origin or {}) if ds is not None else {}
    requests_view.request_control(
        key, plan, request_id, inputs, blocked, rule, whole=whole, origin=origin, evidence=evidence
    )


def _again(key: str, plan: ReleasePlan, next_id: str, blocked: str | None, whole: bool) -> bool:
    """Under a plan's release: the explicit confirmation and button for one more release of the same plan
    (a new request id, a new spend), or the running job of that request; True when clicked."""
    if whole:
        job = batch_job.status(next_id)
        if job is not None and job.state == "running":
            batch_job.progress(next_id)
            return False
    cost = _cost_text(plan, *plan.cost)
    again = st.checkbox(
        f"Release this plan again (a new request: spends {cost} more)",
        key=f"{key}_again_{next_id}",  # bound to the next request: each release asks anew
        disabled=blocked is not None,
        help=None if blocked is None else f"Not now: {blocked}",
    )
    if blocked is not None:
        st.caption(f"Releasing it again is not possible now: {blocked}")
    if not again:
        return False
    label = f"Release this plan again (spends {cost} more)"
    return _spend_button(label, key, "release_again", plan, next_id, blocked)


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
    label = f"Release on the whole table ({rows}; spends {_cost_text(plan, *plan.cost)})"
    return _spend_button(label, key, "release", plan, request_id, blocked)
