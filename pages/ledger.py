"""Ledger: every release, the budget left per dataset, CSV export and the stored release artifacts."""

import streamlit as st

from ui import state
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.release import artifact_bytes

ensure_entrypoint()

COLUMNS = [
    "time",
    "user",
    "dataset_id",
    "dataset_fingerprint",
    "mechanism",
    "definition",
    "calibration",
    "epsilon",
    "delta",
    "sampling_mode",
    "composition",
    "request_id",
    "artifact_hash",
    "parameters",
]

st.title("Ledger")
ledger = state.ledger()
ds = state.dataset()

with user_errors("reading the budgets"):
    st.header("Budget left per dataset")
    budgets = ledger.budgets()
    if not budgets:
        st.info("No dataset has a budget yet; set one on the Privacy policy page.")
    for start in range(0, len(budgets), 4):
        for col, status in zip(st.columns(4), budgets[start : start + 4], strict=False):
            current = ds is not None and status.dataset_id == ds.dataset_id
            col.metric(
                f"{status.dataset_id}" + (f" ({ds.name})" if current else ""),
                f"ε {status.epsilon_left:.4g}",
                help=f"Total ε {status.epsilon_total:.4g}, δ {status.delta_total:.3g}; left δ "
                f"{status.delta_left:.3g}; {status.n_releases} release(s).",
            )

with user_errors("reading the releases"):
    st.header("Releases")
    scope = "all"
    if ds is not None:
        scope = st.radio(
            "Show releases of",
            ["current", "all"],
            format_func={"current": f"the current dataset ({ds.name})", "all": "all datasets"}.get,
            horizontal=True,
            key=state.persist("ledger_scope", "current", ("current", "all").__contains__),
        )
    frame = ledger.to_dataframe(ds.dataset_id if scope == "current" and ds is not None else None)
    if frame.empty:
        st.info("No releases yet. Releases are made on the K-means and Locations pages.")
    else:
        st.dataframe(frame[COLUMNS], hide_index=True)
        st.download_button(
            "Download the ledger as CSV",
            data=frame.to_csv(index=False).encode(),
            file_name="ledger.csv",
            mime="text/csv",
            icon=":material/download:",
        )
        stored = frame[frame["artifact_path"].notna()]
        if not stored.empty:
            st.subheader("Release files")
            labels = {
                r.request_id: f"{r.time[:19]} · {r.mechanism} · ε {r.epsilon:.4g} · {r.request_id[:8]}"
                for r in stored.itertuples()
            }
            ids = list(labels)
            picked = state.persist("ledger_release", ids[0], ids.__contains__)
            chosen = st.selectbox("Release", ids, format_func=labels.__getitem__, key=picked)
            row = stored[stored["request_id"] == chosen].iloc[0]
            st.caption(f"Stored at `{row['artifact_path']}` · SHA-256 `{row['artifact_hash']}`")
            content = artifact_bytes(row["artifact_path"], row["artifact_hash"])
            if content is None:
                st.warning("The stored file is missing or does not match the hash recorded in the ledger.")
            else:
                st.download_button(
                    "Download the release files (zip)",
                    data=content,
                    file_name=f"release-{chosen[:8]}.zip",
                    mime="application/zip",
                    icon=":material/download:",
                )
