"""Ledger: every release newest first (with who approved it), the budget left per account of every
dataset and each account's budget history, release requests and their state, CSV exports and the stored
release files. Open to every role; datasets hidden from this user (``ui.roles``) are left out."""

import pandas as pd
import streamlit as st

from dpcore import approvals
from dpcore.artifacts import short_id
from dpcore.ledger import Ledger
from dpcore.safe_text import csv_bytes
from ui import roles, state
from ui.errors import user_errors
from ui.ledger_view import (
    accounts_frame,
    artifact_name,
    dataset_label,
    fingerprints,
    release_labels,
    releases_frame,
    unbounded_notes,
)
from ui.nav import ensure_entrypoint
from ui.release import artifact_bytes
from ui.requests_view import state_line
from ui.text import md

ensure_entrypoint()
roles.require("read the ledger", *roles.ALL_ROLES)

NUMBERS = {
    column: st.column_config.NumberColumn(column, format="%.4g")
    for column in ("ε", "δ", "ε left", "ε total", "δ left", "δ total")
}
IDS = {
    column: st.column_config.TextColumn(column, width="small")
    for column in (
        "request id", "part of request", "dataset id", "account", "artifact SHA-256", "dataset fingerprint"
    )
}
WORDS = {  # long sentences: cut to the column, shown in full on hover
    column: st.column_config.TextColumn(column, width="medium")
    for column in ("privacy definition", "neighbour relation")
}


def _budgets(ledger: Ledger, ds: state.Dataset | None) -> None:
    st.header("Budget left per account")
    st.caption(
        "Each dataset has one account per privacy definition and neighbour relation (with its unit: one row, "
        "or all rows of one user). A release also spends every account of its dataset whose relation it "
        "protects, converted (an unbounded ε is a bounded 2ε; a θ = 0.31 Blowfish release is also a θ = 0.30 "
        "one; a level within 1000.5 m costs 1000/1000.5 of it within 1000 m; one row's ε is m ε for a user "
        "with m rows), and is refused if any of them would overspend. Demo releases spend separate demo "
        "accounts. For geo-indistinguishability the budget is a level l within the protected radius r."
    )
    names = {**({ds.dataset_id: ds.name} if ds is not None else {}), **ledger.dataset_names()}
    by_dataset: dict[str, list] = {}
    for status in ledger.budgets():
        if roles.may_see_dataset(status.dataset_id):
            by_dataset.setdefault(status.dataset_id, []).append(status)
    history = approvals.history_frame(ledger)
    if not by_dataset:
        st.info("No dataset has a budget yet; set one on the Privacy policy page.")
    current = ds.dataset_id if ds is not None else None
    tables = fingerprints(ledger)
    for dataset_id in sorted(by_dataset, key=lambda d: (d != current, dataset_label(d, names).lower())):
        st.subheader(md(dataset_label(dataset_id, names)))
        st.caption(f"Dataset id `{dataset_id}`" + (" · the dataset in use" if dataset_id == current else ""))
        if len(tables.get(dataset_id, [])) > 1:
            shown = ", ".join(f"`{fp[:12]}`" for fp in tables[dataset_id])
            st.warning(
                f"Releases under this name were made on {len(tables[dataset_id])} different tables "
                f"(fingerprints {shown}, oldest first). They share this name's budget: check that they "
                "are versions of the same data."
            )
        st.dataframe(
            accounts_frame(by_dataset[dataset_id]),
            hide_index=True,
            column_config={**NUMBERS, **IDS, **WORDS},
        )
        for note in unbounded_notes(by_dataset[dataset_id]):
            st.warning(md(note))
        changes = history[history["dataset id"] == dataset_id]
        if not changes.empty:
            with st.expander(f"Budget history ({len(changes)} change(s): who, when, why)"):
                st.dataframe(
                    changes.iloc[::-1].drop(columns=["dataset", "dataset id"]),
                    hide_index=True,
                    column_config=NUMBERS,
                )
    shown = history[history["dataset id"].map(roles.may_see_dataset).astype(bool)]
    if not shown.empty:
        st.download_button(
            "Download the budget history as CSV",
            data=csv_bytes(shown),
            file_name="budget-history.csv",
            mime="text/csv",
            icon=":material/download:",
        )


def _releases(ledger: Ledger, ds: state.Dataset | None) -> None:
    st.header("Releases, newest first")
    scope = "all"
    if ds is not None:
        scope = st.radio(
            "Show releases of",
            ["current", "all"],
            format_func={"current": f"the dataset in use ({md(ds.name)})", "all": "all datasets"}.get,
            horizontal=True,
            key=state.persist("ledger_scope", "current", ("current", "all").__contains__),
        )
    shown = ds.dataset_id if scope == "current" and ds is not None else None
    approvers = {r.request_id: r.approved_by for r in approvals.requests(ledger) if r.approved_by}
    frame = _visible(releases_frame(ledger, shown), approvers)
    if frame.empty:
        st.info("No releases yet. Releases are made on the K-means and Locations pages.")
        return
    st.dataframe(frame, hide_index=True, column_config={**NUMBERS, **IDS, **WORDS})
    st.caption(
        "Mode DEMO: made in demo mode with a fixed seed, on a demo account; not a privacy release. A row "
        "marked ↳ is a private step of the release above it (its own ε, debited with it)."
    )
    st.download_button(
        "Download the ledger as CSV",
        data=csv_bytes(_visible(releases_frame(ledger, shown, for_csv=True), approvers)),
        file_name="ledger.csv",
        mime="text/csv",
        icon=":material/download:",
    )
    _files(ledger, frame)


def _visible(frame: pd.DataFrame, approvers: dict[str, str]) -> pd.DataFrame:
    """The rows of datasets this user may see, with who approved each release (empty without approval)."""
    frame = frame[frame["dataset id"].map(roles.may_see_dataset).astype(bool)].copy()
    release = frame["part of request"].fillna(frame["request id"])  # a step was approved with its release
    frame.insert(frame.columns.get_loc("user") + 1, "approved by", release.map(approvers))
    return frame


def _requests(ledger: Ledger) -> None:
    """Release requests: the user's own (every request for an officer), newest first, with their state."""
    who = roles.current()
    officer = roles.OFFICER in who.roles
    found = [
        r
        for r in approvals.requests(ledger, requester=None if officer else who.user)
        if roles.may_see_dataset(r.dataset_id)
    ]
    if not found:
        return
    st.header("Release requests" if officer else "Your release requests")
    names = ledger.dataset_names()
    for request in found[:50]:
        released = ledger.release_by_request(request.request_id) is not None
        name = request.plan.get("dataset_name") or names.get(request.dataset_id, request.dataset_id)
        st.markdown(f"- **{md(name)}**: {state_line(request, released)}")


def _files(ledger: Ledger, frame: pd.DataFrame) -> None:
    labels = release_labels(frame[frame["artifact SHA-256"].notna()])
    if not labels:
        return
    st.subheader("Release files")
    ids = list(labels)  # newest first: the newest release is the default
    chosen = st.selectbox(
        "Release",
        ids,
        format_func=labels.__getitem__,
        key=state.persist("ledger_release", ids[0], ids.__contains__),
    )
    record = ledger.release_by_request(chosen)
    if record is None:
        return
    st.caption(f"Stored as `{artifact_name(record.artifact_path)}` · SHA-256 `{record.artifact_hash}`")
    content = artifact_bytes(record.artifact_path, record.artifact_hash)
    if content is None:
        st.warning("The stored file is missing or does not match the hash recorded in the ledger.")
        return
    demo = "DEMO-" if record.sampling_mode == "demo" else ""
    st.download_button(
        "Download the release files (zip)",
        data=content,
        file_name=f"{demo}release-{short_id(chosen)}.zip",
        mime="application/zip",
        icon=":material/download:",
    )


st.title("Ledger")
with user_errors("reading the budgets"):
    _budgets(state.ledger(), state.dataset())
with user_errors("reading the release requests"):
    _requests(state.ledger())
with user_errors("reading the releases"):
    _releases(state.ledger(), state.dataset())
