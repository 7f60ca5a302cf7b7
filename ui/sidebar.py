"""The sidebar shown on every page: current dataset, its remaining budget, policy and sampling mode."""

from __future__ import annotations

import streamlit as st

from dpcore.policy import GeoIndistinguishability
from ui import auth, datasets, roles, state
from ui.errors import user_errors
from ui.release import policy_budget
from ui.text import md

MODE_LABELS = {
    "secure": "Release mode (secure sampling)",
    "demo": "Demo mode (fixed seed, outputs marked DEMO - not a privacy release)",
}


def _dataset_section() -> None:
    st.subheader("Dataset")
    ds = state.dataset()
    if ds is None:
        st.caption("No dataset loaded: choose one on the Data page.")
        return
    st.markdown(f"**{md(ds.name)}**")
    sample = datasets.sample_label(ds)
    if sample:
        st.warning(sample)
    dropped = ds.n_rows - len(ds.cleaned)
    rows = f"{len(ds.cleaned):,} rows" + (f" ({dropped:,} dropped)" if dropped else "")
    st.caption(f"{rows} · {ds.raw.shape[1]} columns · fingerprint `{ds.fingerprint[:12]}`")
    if ds.prepared is not None:
        p = ds.prepared
        st.caption(f"Prepared: {p.n_samples:,} rows × {p.n_features} features (scaling: {p.scaling})")
    with user_errors("reading the ledger"):
        _budgets(ds)


def _budgets(ds: state.Dataset) -> None:
    """Every budget of this dataset in the current sampling mode, the current policy's account first: the
    release panel's account is one of them, so the sidebar never says "no budget" beside a panel that
    spends one."""
    found = policy_budget()
    mode = state.mode()
    statuses = [s for s in state.ledger().budgets(ds.dataset_id) if s.mode == mode]
    if not statuses:
        demo = " in demo mode" if mode == "demo" else ""
        st.caption(f"No privacy budget set yet for this dataset{demo} (Privacy policy page).")
        return
    first = None if found is None or found[1] is None else found[1].account
    statuses.sort(key=lambda s: s.account != first)
    if found is not None and found[1] is None:
        st.caption(f"No budget yet for this policy's account ({found[0]}); other accounts:")
    for status in statuses:
        unit = "level l" if status.definition == "geo_ind" else "ε"
        st.caption(f"Account: {status.definition}: {status.relation}" + (" (demo)" if mode == "demo" else ""))
        st.metric(
            f"Budget left ({unit})",
            f"{status.epsilon_left:.4g}",
            help=f"Total {unit} = {status.epsilon_total:.4g}; spent {status.epsilon_spent:.4g} "
            f"in {status.n_releases} release(s).",
        )
        if status.delta_total:
            st.caption(f"δ left {status.delta_left:.3g} of {status.delta_total:.3g}")


def _mode_section() -> None:
    st.subheader("Sampling")
    if not roles.has(roles.OFFICER, roles.CURATOR):
        st.caption("Demo mode (fixed seed, outputs marked DEMO): viewers compare in demo mode only.")
        return
    st.radio(
        "Sampling mode",
        options=list(MODE_LABELS),
        format_func=MODE_LABELS.__getitem__,
        key=state.persist(state.MODE_KEY, "secure", MODE_LABELS.__contains__),
        help="Releases use the OS entropy source and OpenDP's exact samplers. Demo mode fixes a seed so "
        "stakeholder demos are reproducible; anyone with the seed can remove its noise.",
    )
    if state.mode() == "demo":
        st.number_input("Demo seed", min_value=0, step=1, key=state.persist(state.SEED_KEY, 0))
        st.warning("DEMO mode: outputs are reproducible and marked DEMO. They are not a privacy release.")


def render_sidebar() -> None:
    """Draw the shared sidebar (call once per run, before the page).

    With sign-in configured, a signed-out session stops here at the sign-in prompt (this also guards a
    page that runs without app.py, see ``ui.nav.ensure_entrypoint``).
    """
    auth.require_sign_in()
    with st.sidebar:
        auth.render_account()
        roles.render_roles()
        _dataset_section()
        pol = state.policy()
        st.subheader("Privacy policy")
        if isinstance(pol, GeoIndistinguishability):
            st.caption(f"{pol.label} · level {pol.level:.3g} within {pol.radius_m:,.0f} m")
        else:
            delta = f", δ = {pol.delta:.2g}" if pol.delta else ""
            st.caption(f"{pol.label} · ε = {pol.epsilon:.3g}{delta}")
        _mode_section()
