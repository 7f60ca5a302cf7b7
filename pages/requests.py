"""Requests: release requests waiting for an officer, newest first, each plan as the release panel shows it;
approve (the release runs exactly as planned) or deny with a reason. Officers only."""

import streamlit as st

from dpcore import approvals
from ui import roles, state
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.requests_view import approve, render_request, state_line

ensure_entrypoint()
roles.require("open the Requests page (approve or deny releases)", roles.OFFICER)

CONFIRMED_KEY = "dp_decision_confirmed"
FLASH_KEY = "dp_requests_flash"


def _confirm(ticket: str, verdict: str) -> None:
    """A decision button's callback: the request and verdict drawn on the button that was clicked."""
    st.session_state[CONFIRMED_KEY] = (ticket, verdict)


def _decide(request: approvals.Request, verdict: str) -> None:
    refused = roles.refusal("approve or deny a release", roles.OFFICER)  # on the click's own run
    if refused is not None:
        st.error(refused)
        return
    reason = st.session_state.get(f"req_reason_{request.ticket}", "")
    with user_errors("recording the decision") as outcome:
        decided = approvals.decide(
            state.ledger(), request.ticket, approve=verdict == "approve", user=state.user(), reason=reason
        )
    if outcome.failed:
        return
    message = f"Denied request of {decided.requester}."
    if verdict == "approve":
        with user_errors("releasing the approved request") as outcome:
            message = approve(decided)
        if outcome.failed:
            return
    st.session_state[FLASH_KEY] = message
    st.rerun()


def _retry(request: approvals.Request) -> None:
    """Run an approved request's release again (the same request id: debited once, whoever runs it)."""
    refused = roles.refusal("release an approved request", roles.OFFICER)
    if refused is not None:
        st.error(refused)
        return
    with user_errors("releasing the approved request") as outcome:
        message = approve(request)
    if not outcome.failed:
        st.session_state[FLASH_KEY] = message
        st.rerun()


def _pending(request: approvals.Request, confirmed: tuple[str, str] | None) -> None:
    st.text_input(
        "Reason (required to deny; recorded with your name)",
        key=f"req_reason_{request.ticket}",
        max_chars=2000,
    )
    mine = request.requester == state.user()
    if mine:
        st.caption("You made this request: another officer decides it.")
    left, right = st.columns(2)
    for column, verdict, label in ((left, "approve", "Approve and release"), (right, "deny", "Deny")):
        clicked = column.button(
            label,
            key=f"req_{verdict}_{request.ticket}",
            type="primary" if verdict == "approve" else "secondary",
            disabled=mine,
            on_click=_confirm,
            args=(request.ticket, verdict),
        )
        if clicked and confirmed == (request.ticket, verdict):
            _decide(request, verdict)


st.title("Requests")
flash = st.session_state.pop(FLASH_KEY, None)
if flash:
    st.success(flash)
confirmed = st.session_state.pop(CONFIRMED_KEY, None)
with user_errors("reading the requests"):
    ledger = state.ledger()
    names = ledger.dataset_names()
    everything = approvals.requests(ledger)
    waiting = [r for r in everything if r.state == "pending"]
    st.caption(
        "Releases that an account's approval rule (Privacy policy page) sends to an officer. Approving runs "
        "the plan exactly as requested, under its request id, so it is released and debited once."
    )
    if not waiting:
        st.info("No request is waiting for a decision.")
    for request in waiting:  # newest first
        with st.container(border=True):
            name = request.plan.get("dataset_name") or names.get(request.dataset_id, request.dataset_id)
            st.subheader(f"{name}: {request.requester}")
            st.markdown(state_line(request))
            render_request(request, request.ticket)
            _pending(request, confirmed)
    stuck = [  # approved, but its release did not finish (a fault after the approval): run it again
        r
        for r in everything
        if r.state == "approved"
        and not (r.origin or {}).get("whole")
        and ledger.release_by_request(r.request_id) is None
    ]
    for request in stuck:
        with st.container(border=True):
            st.markdown(state_line(request))
            clicked = st.button(
                "Release the approved request",
                key=f"req_retry_{request.ticket}",
                on_click=_confirm,
                args=(request.ticket, "retry"),
            )
            if clicked and confirmed == (request.ticket, "retry"):
                _retry(request)
    decided = [r for r in everything if r.state != "pending"]
    if decided:
        st.header("Decided and expired, newest first")
        for request in decided:
            released = ledger.release_by_request(request.request_id) is not None
            st.markdown(f"- {state_line(request, released)}")
