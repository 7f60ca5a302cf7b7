"""Privacy policy: definition, parameters, their plain-language meaning, and the dataset's total budget."""

import hashlib
import json
from collections.abc import Callable
from typing import Any

import streamlit as st

from dpcore import approvals
from dpcore.plan import policy_account
from dpcore.policy import (
    DEFINITIONS,
    METRICS,
    NEIGHBOURS,
    AttributeGraph,
    DistanceThresholdGraph,
    FullDomainGraph,
    GeoIndistinguishability,
    PartitionGraph,
    Policy,
    geo_radius_quantile,
    make_policy,
    truthful_probability,
)
from ui import roles, state
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.text import md

ensure_entrypoint()
roles.require("open the Privacy policy page", roles.OFFICER, roles.CURATOR)

GRAPHS = {
    "full_domain": "Full domain (bounded DP)",
    "partition": "Partition: values in the same block",
    "distance_threshold": "Distance threshold: values within θ",
    "attribute": "Attribute: records differing in at most c attributes",
}
BUDGET_CONFIRMED_KEY = "dp_budget_confirmed"  # set by Save budget's callback for the run of its click
RULE_CONFIRMED_KEY = "dp_rule_confirmed"  # set by Save approval rule's callback for the run of its click
BUDGET_ACCOUNT_KEY = "dp_budget_fields_account"  # the account whose totals the budget fields show
FLASH_KEY = "dp_policy_flash"
UNITS = {
    "row": "one row (each location is a different person's)",
    "user": "one user: all of their rows (Locations page with a user column)",
}
GRAPH_UNITS = (
    "θ and the block width are in the scaled feature space prepared on the Data page; with min-max "
    "scaling, 1.0 = half the public range (K-means applies them to the prepared features). With the "
    "great-circle metric (Locations page), θ is in metres."
)


def _defaults(current: Policy) -> dict[str, Any]:
    """Widget defaults from the policy in use; a value the curator typed is kept (``ui.state.persist``)."""
    graph = getattr(current, "graph", None)
    geo = current if isinstance(current, GeoIndistinguishability) else None
    return {
        "pol_definition": current.definition,
        "pol_eps": current.epsilon if geo is None else 1.0,
        "pol_delta": current.delta or 1e-6,
        "pol_neighbours": current.neighbours if current.neighbours in NEIGHBOURS else "unbounded",
        "pol_graph": graph.kind if graph is not None else "distance_threshold",
        "pol_block_width": getattr(graph, "block_width", 1.0),
        "pol_theta": getattr(graph, "theta", 1.0),
        "pol_metric": getattr(graph, "metric", "l2"),
        "pol_c": getattr(graph, "c", 1),
        "pol_geo_level": 1.0 if geo is None else geo.level,
        "pol_geo_radius": 1000.0 if geo is None else geo.radius_m,
    }


def _kept(key: str, valid: Callable[[Any], bool] | None = None) -> str:
    return state.persist(key, _defaults(state.policy())[key], valid)


def _graph_inputs(kind: str):
    if kind in ("partition", "distance_threshold"):
        st.caption(f"Units: {GRAPH_UNITS}")
    if kind == "partition":
        width = st.number_input(
            "Block width (scaled feature units)",
            step=0.5,
            format="%.4g",
            key=_kept("pol_block_width"),
            help=GRAPH_UNITS,
        )
        return PartitionGraph(width)
    if kind == "distance_threshold":
        theta = st.number_input(
            "θ (distance within which values stay hidden)",
            format="%.4g",
            key=_kept("pol_theta"),
            help=GRAPH_UNITS,
        )
        metric_key = _kept("pol_metric", METRICS.__contains__)
        metric = st.selectbox("Metric", list(METRICS), format_func=METRICS.__getitem__, key=metric_key)
        return DistanceThresholdGraph(theta, metric)
    if kind == "attribute":
        return AttributeGraph(st.number_input("c (attributes that may differ)", step=1, key=_kept("pol_c")))
    return FullDomainGraph()


def _policy_inputs() -> Policy:
    definition = st.selectbox(
        "Definition",
        list(DEFINITIONS),
        format_func=lambda k: DEFINITIONS[k][0],
        key=_kept("pol_definition", DEFINITIONS.__contains__),
        help="Which neighbouring datasets the release protects, and how.",
    )
    st.caption(DEFINITIONS[definition][1])
    if definition == "geo_ind":
        st.caption(
            "Set here and only here: the Locations page's planar Laplace releases use this level and "
            "radius, and its budget counts levels within this radius."
        )
        level = st.number_input("Privacy level l", step=0.5, format="%.4g", key=_kept("pol_geo_level"))
        radius = st.number_input(
            "within radius r (metres)", step=50.0, format="%.6g", key=_kept("pol_geo_radius")
        )
        return GeoIndistinguishability.from_level(level, radius)
    eps = st.number_input("ε (epsilon)", step=0.1, format="%.4g", key=_kept("pol_eps"))
    delta = None
    if definition in ("approx_dp", "local_pdp"):
        delta = st.number_input("δ (delta)", step=1e-7, format="%.2e", key=_kept("pol_delta"))
    if definition in ("pure_dp", "approx_dp"):
        neighbours = st.radio(
            "Neighbouring datasets differ by",
            list(NEIGHBOURS),
            format_func=NEIGHBOURS.__getitem__,
            key=_kept("pol_neighbours", NEIGHBOURS.__contains__),
        )
        return make_policy(definition, epsilon=eps, delta=delta, neighbours=neighbours)
    if definition == "blowfish":
        graph_key = _kept("pol_graph", GRAPHS.__contains__)
        kind = st.selectbox("Policy graph", list(GRAPHS), format_func=GRAPHS.__getitem__, key=graph_key)
        return make_policy("blowfish", epsilon=eps, graph=_graph_inputs(kind))
    return make_policy(definition, epsilon=eps, delta=delta)


def _meaning(pol: Policy) -> None:
    st.subheader("What this means")
    st.info(pol.guarantee)
    st.markdown(pol.plain_language())
    if pol.definition == "geo_ind":
        qs = [0.5, 0.9, 0.95, 0.99]
        radii = geo_radius_quantile(pol.epsilon, qs)
        cols = st.columns(len(qs))
        for col, q, r in zip(cols, qs, radii, strict=True):
            col.metric(f"Noise radius, {q:.0%} of reports", f"{r:,.0f} m")
    else:
        st.metric("Truthful-answer probability", f"{truthful_probability(pol.epsilon):.2%}")
    if pol.definition == "local_pdp":
        st.warning(
            "This guarantee is NOT differential privacy: the noise is calibrated on this dataset's rows."
        )
    elif not pol.is_dp:
        st.caption("This is a relaxation of differential privacy: read the guarantee above before releasing.")


def _per_user() -> int | None:
    """The budget's unit: None for one row, m for all rows of one user with at most m (public) rows."""
    if state.policy().definition == "local_pdp":
        return None
    unit = st.radio(
        "Unit of protection",
        list(UNITS),
        format_func=UNITS.__getitem__,
        key=state.persist("pol_unit", "row", UNITS.__contains__),
        help="A per-user release (Locations page, with a user column and its public maximum m; Trajectories "
        "page, with m = most trips x most fixes per trip) spends a budget of its own; a per-row release "
        "counts m times its ε there, one user's rows being m rows.",
    )
    if unit == "row":
        return None
    most = st.number_input(
        "Most locations per user (public; the Locations page's maximum)",
        min_value=1,
        step=1,
        key=state.persist("pol_unit_m", 1, lambda v: isinstance(v, int) and v >= 1),
    )
    return int(most)


def _confirm(slot: str, digest: str) -> None:
    """A save button's callback: the digest of what was drawn on the button that was clicked."""
    st.session_state[slot] = digest


def _budget() -> None:
    confirmed = st.session_state.pop(BUDGET_CONFIRMED_KEY, None)
    st.header("Total budget for this dataset and policy")
    ds = state.dataset()
    if ds is None:
        st.info("Load a dataset on the Data page to set its budget.")
        return
    flash = st.session_state.pop(FLASH_KEY, None)
    if flash:
        st.success(flash)
    status = None
    account = policy_account(ds.dataset_id, state.policy(), state.mode(), _per_user())
    unit = "level l" if account.definition == "geo_ind" else "ε"
    uses_delta = account.definition in ("dp", "local_pdp")
    demo = " (**demo account**: demo releases never spend the real budget)" if account.mode == "demo" else ""
    radius = getattr(state.policy(), "radius_m", None)
    levels = f"; spends are levels within {radius:,.0f} m" if radius is not None else ""
    st.caption(
        f"Budgets are kept per privacy definition and neighbour relation, never added across them. This one: "
        f"**{state.policy().label}**, neighbours: {account.relation}{demo}{levels}."
    )
    with user_errors("reading the ledger") as read:
        ledger = state.ledger()
        status = ledger.budget(account)
        if status is None:
            st.caption(
                f"{md(ds.name)} has no budget for this policy yet; its releases are refused until set."
            )
        else:
            a, b, c = st.columns(3)
            a.metric(f"Total {unit}", f"{status.epsilon_total:.4g}")
            b.metric(f"Spent {unit}", f"{status.epsilon_spent:.4g}")
            c.metric(f"Left {unit}", f"{status.epsilon_left:.4g}")
            deltas = (
                f"δ: total {status.delta_total:.3g}, spent {status.delta_spent:.3g}, "
                f"left {status.delta_left:.3g} · "
                if uses_delta
                else ""
            )
            st.caption(f"{deltas}{status.n_releases} release(s)")
    if read.failed:  # the message says what is wrong with the ledger; the policy above still works
        return
    officer = roles.refusal("set or change a budget", roles.OFFICER) is None
    if officer:
        _budget_form(ds, ledger, account, status, confirmed, unit, uses_delta)
    else:
        st.info(
            "Budgets are set by a privacy officer: you can release within this budget, and request more "
            "from an officer.",
            icon=":material/shield_person:",
        )
    with user_errors("reading the approval rule") as read:
        _approval_rule(ledger, account, unit, officer)
    with user_errors("reading the budget history"):
        history = approvals.history_frame(ledger, ds.dataset_id)
        history = history[history["account"] == account.key]
        if not history.empty:
            st.subheader("Budget history of this account")
            shown = history.iloc[::-1].drop(columns=["dataset", "account", "dataset id"])
            st.dataframe(shown, hide_index=True)


def _budget_form(ds, ledger, account, status, confirmed, unit: str, uses_delta: bool) -> None:
    """The officer's Save budget form: totals and a reason, bound by digest to the button clicked."""
    if st.session_state.get(BUDGET_ACCOUNT_KEY) != account.key:  # another dataset or policy: its own totals
        st.session_state[BUDGET_ACCOUNT_KEY] = account.key
        st.session_state["pol_budget_eps"] = status.epsilon_total if status else 3.0
        st.session_state["pol_budget_delta"] = status.delta_total if status else 1e-5
    eps_total = st.number_input(
        f"Total {unit} for this dataset", step=0.5, format="%.4g", key="pol_budget_eps"
    )
    delta_total = (
        st.number_input(
            "Total δ for this dataset (0 for pure DP)", step=1e-6, format="%.2e", key="pol_budget_delta"
        )
        if uses_delta
        else 0.0  # Blowfish and geo-indistinguishability have no δ
    )
    reason = st.text_input(
        "Reason for this budget (recorded in the ledger with your name)",
        key="pol_budget_reason",
        max_chars=2000,
        placeholder="e.g. approved by the data protection board, ref. DPB-2026-14",
    )
    st.caption(
        "Every release debits this budget (sequential releases add up their ε and δ); a release that would "
        "exceed it is refused. The budget can be raised, never lowered below what is spent."
    )
    shown = hashlib.sha256(json.dumps([account.key, float(eps_total), float(delta_total), reason]).encode())
    digest = shown.hexdigest()[:16]  # the budget on screen: a click saves this one or nothing
    clicked = st.button(
        "Save budget",
        type="primary",
        key=f"pol_save_{digest}",
        on_click=_confirm,
        args=(BUDGET_CONFIRMED_KEY, digest),
        help=f"Sets {unit} = {float(eps_total):.4g}" + (f", δ = {delta_total:.3g}" if uses_delta else ""),
    )
    if confirmed is not None and confirmed != digest:
        st.warning(
            "The budget fields changed since you clicked (a value typed without Enter is committed by the "
            "click): nothing was saved. Check the totals above and click Save budget again."
        )
    if not (clicked and confirmed == digest):
        return
    refused = roles.refusal("set or change a budget", roles.OFFICER)  # checked again on the click's run
    if refused is not None:
        st.error(refused)
        return
    if not reason.strip():
        st.error("Give a reason for this budget (recorded in the ledger with your name): nothing was saved.")
        return
    with user_errors("saving the budget") as outcome:
        ledger.register_dataset(ds.dataset_id, ds.name, ds.fingerprint)
        saved = ledger.set_budget(account, eps_total, delta_total, user=state.user(), reason=reason)
    if not outcome.failed:
        delta = f", δ = {saved.delta_total:.3g}" if uses_delta else ""
        st.session_state[FLASH_KEY] = (
            f"Budget saved: {unit} = {saved.epsilon_total:.4g}{delta} (left {unit} = "
            f"{saved.epsilon_left:.4g})."
        )
        st.rerun()


def _approval_rule(ledger, account, unit: str, officer: bool) -> None:
    """The account's approval rule; an officer changes it (with a reason), bound by digest like the budget."""
    confirmed = st.session_state.pop(RULE_CONFIRMED_KEY, None)
    current = approvals.rule(ledger, account)
    st.subheader("Release approval")
    said = approvals.RULES[current.rule] + (
        f" ({unit} > {current.threshold:.4g})" if current.threshold is not None else ""
    )
    by = f" Set by {md(current.user)} at {current.time[:16].replace('T', ' ')} UTC." if current.user else ""
    st.caption(f"Now: **{said}**.{by} The officer who approves must not be the curator who asked.")
    if not officer:
        return
    choice = st.selectbox(
        "Approval rule for this account",
        list(approvals.RULES),
        index=list(approvals.RULES).index(current.rule),
        format_func=approvals.RULES.__getitem__,
        key=f"pol_rule_{account.key}",
    )
    threshold = None
    if choice == "above":
        threshold = st.number_input(
            f"Releases with {unit} above this need approval",
            min_value=0.0,
            value=current.threshold if current.threshold is not None else 0.5,
            step=0.1,
            format="%.4g",
            key=f"pol_rule_threshold_{account.key}",
        )
    reason = st.text_input("Reason for this rule", key=f"pol_rule_reason_{account.key}", max_chars=2000)
    digest = hashlib.sha256(json.dumps([account.key, choice, threshold, reason]).encode()).hexdigest()[:16]
    clicked = st.button(
        "Save approval rule",
        key=f"pol_rule_save_{digest}",
        on_click=_confirm,
        args=(RULE_CONFIRMED_KEY, digest),
    )
    if not (clicked and confirmed == digest):
        return
    refused = roles.refusal("set an approval rule", roles.OFFICER)
    if refused is not None:
        st.error(refused)
        return
    if not reason.strip():
        st.error("Give a reason for the approval rule (it is recorded with your name): nothing was saved.")
        return
    with user_errors("saving the approval rule") as outcome:
        approvals.set_rule(ledger, account, choice, threshold, user=state.user(), reason=reason)
    if not outcome.failed:
        st.session_state[FLASH_KEY] = f"Approval rule saved: {approvals.RULES[choice]}."
        st.rerun()


st.title("Privacy policy")
current = state.policy()
with user_errors("checking the policy") as checked:
    chosen = _policy_inputs()
if checked.failed:
    st.caption(
        f"Nothing was changed; the policy in use is still: {current.label}, ε = {current.epsilon:.4g}."
    )
else:
    if chosen != current:
        state.set_policy(chosen)
        st.rerun()
    _meaning(chosen)
_budget()
