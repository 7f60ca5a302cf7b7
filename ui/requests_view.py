"""Release requests in the dashboard: the release panel's "Request approval" control and the state of a
plan's requests, a request rendered as the release panel renders its plan, and an officer's decision.

The rule, the requests and their states live in the ledger database (:mod:`dpcore.approvals`), read on
every run, so the requester sees a request's state across reloads and restarts. Every control checks the
role of this run's verified identity (:mod:`ui.roles`) when it acts, not only when it is drawn; buttons
carry the digest of what they were drawn for, as the release panel's do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
import plotly.io as pio
import streamlit as st

from dpcore import approvals
from dpcore.artifacts import short_id
from dpcore.errors import DPCoreError
from dpcore.plan import ReleasePlan
from ui import batch_job, roles, state
from ui.errors import user_errors
from ui.text import md

__all__ = [
    "Evidence",
    "approve",
    "needs_approval",
    "render_request",
    "request_control",
    "state_line",
    "sweep_evidence",
]

CONFIRMED_PREFIX = "dp_request_confirmed::"
STATE_WORDS = {
    "pending": "waiting for an officer's approval",
    "approved": "approved, being released",
    "released": "approved and released",
    "denied": "denied",
    "refused": "approved, but refused at release time",
    "expired": "expired without a decision",
}
#: Called when a request is made: (expected error in words, the comparison's Plotly figure or None).
Evidence = Callable[[], tuple[str, Any]]


def sweep_evidence(
    frame: pd.DataFrame | None, mechanism: str, epsilon: float, figure: Callable[[], Any] | None = None
) -> Evidence:
    """The evidence of a comparison table ``frame`` (None: no comparison) for a release of ``mechanism``
    at ``epsilon``: :func:`dpcore.approvals.expected_error` and the chart ``figure`` draws."""
    return lambda: (
        approvals.expected_error(frame, mechanism, epsilon),
        None if frame is None or figure is None else figure(),
    )


def needs_approval(plan: ReleasePlan) -> approvals.ApprovalRule | None:
    """The account's rule when a release of ``plan`` needs an officer's approval, else None."""
    rule = approvals.rule(state.ledger(), plan.account)
    return rule if rule.needs_approval(plan.epsilon) else None


def _when(iso: str | None) -> str:
    return "" if not iso else f"{iso[:16].replace('T', ' ')} UTC"


def state_line(request: approvals.Request, released: bool = False) -> str:
    """One sentence: the request's state, who decided, when and why."""
    current = "released" if released and request.state == "approved" else request.state
    line = f"Request {short_id(request.request_id)} by {md(request.requester)} ({_when(request.created)}): "
    line += STATE_WORDS[current]
    if request.approved_by and current != "approved":
        line += f"; approved by {md(request.approved_by)}"
    if request.decided_by and current in ("denied", "refused", "released"):
        line += f"; {current} by {md(request.decided_by)} at {_when(request.decided_at)}"
    if request.reason:
        line += f". Reason: {md(request.reason)}"
    if current == "pending":
        line += f". Expires {_when(request.expires)}"
    return line + "."


def _confirm(key: str, digest: str) -> None:
    st.session_state[CONFIRMED_PREFIX + key] = digest


def request_control(
    key: str,
    plan: ReleasePlan,
    request_id: str,
    inputs: Any,
    blocked: str | None,
    rule: approvals.ApprovalRule,
    *,
    whole: bool,
    origin: Mapping[str, Any] | None,
    evidence: Evidence | None,
) -> None:
    """Under a plan whose release needs approval: the state of its latest request for ``request_id`` and,
    unless one is pending or approved, the button that asks for one (the plan exactly as shown)."""
    confirmed = st.session_state.pop(CONFIRMED_PREFIX + key, None)
    ledger = state.ledger()
    found = approvals.requests(ledger, request_id=request_id)
    threshold = f" above {plan.unit} = {rule.threshold:.4g}" if rule.rule == "above" else ""
    st.caption(
        f"An officer's approval is needed for releases{threshold} on this account ({rule.user or 'officer'})."
    )
    if found:
        latest = found[0]
        (st.info if latest.state in ("pending", "approved") else st.warning)(
            state_line(latest), icon=":material/approval:"
        )
        if latest.state in ("pending", "approved"):
            return
    cost = f"{plan.unit} = {plan.epsilon:.4g}" + (
        f", δ = {plan.delta:.3g}" if plan.uses_delta and plan.delta else ""
    )
    clicked = st.button(
        f"Request approval to release ({cost})",
        type="primary",
        key=f"{key}_request_{plan.digest}",
        disabled=blocked is not None,
        help=blocked or f"Sends exactly the plan shown above (digest {plan.digest}) to an officer.",
        on_click=_confirm,
        args=(key, plan.key),
    )
    if not (clicked and confirmed == plan.key) or blocked is not None:
        return
    refused = roles.refusal("request a release", roles.OFFICER, roles.CURATOR)
    if refused is not None:
        st.error(refused)
        return
    with user_errors("requesting approval") as outcome:
        error, chart = (
            evidence() if evidence is not None else ("No comparison was run before this request.", None)
        )
        stored = None if whole else approvals.store_inputs(inputs, approvals.inputs_dir())
        approvals.submit(
            ledger,
            request_id=request_id,
            account=plan.account,
            manifest=plan.to_manifest(),
            epsilon=plan.epsilon,
            delta=plan.delta,
            requester=state.user(),
            guarantee=plan.guarantee,
            expected_error=error,
            chart=None if chart is None else chart.to_json(),
            inputs=stored,
            origin={"name": key, "whole": whole, "dataset": dict(origin or {})},
        )
    if not outcome.failed:
        st.rerun()


def render_request(request: approvals.Request, key: str) -> None:
    """The request's plan as the release panel shows a plan, its guarantee, expected error and chart."""
    try:
        plan = ReleasePlan.from_manifest(request.plan)
    except DPCoreError as err:
        st.error(f"This request's plan cannot be read ({err}); deny it.")
        return
    rows = [(setting, md(value)) for setting, value in plan.summary_rows()]
    st.table(pd.DataFrame(rows, columns=["setting", "value"]).set_index("setting"))
    st.caption(f"Plan digest: {plan.digest} · request id {request.request_id}")
    (st.info if plan.spec.is_dp else st.warning)(md(request.guarantee))
    st.markdown(f"**Expected error (the curator's comparison):** {md(request.expected_error)}")
    if request.chart:
        st.plotly_chart(pio.from_json(request.chart), key=f"request_chart_{key}")
    if (request.origin or {}).get("whole"):
        st.caption("Runs on the whole table as a batch job once approved.")


def approve(request: approvals.Request) -> str:
    """Run an approved request: its release exactly as planned (or its whole-table batch job); a message."""
    from ui.release import artifacts_dir

    origin = request.origin or {}
    if origin.get("whole"):
        plan = ReleasePlan.from_manifest(request.plan)
        batch_job.start(
            plan,
            request.request_id,
            name=str(origin.get("name", plan.domain)),
            artifacts_dir=artifacts_dir(),
            origin=origin.get("dataset") or {},
            user=request.requester,
        )
        return "Approved: the batch job on the whole table started; its release shows on the Ledger page."
    result = approvals.release(state.ledger(), request, user=state.user(), artifacts_dir=artifacts_dir())
    return f"Approved and released as request {short_id(result.record.request_id)}."
