"""The release panel shared by the K-means and Locations pages.

One panel per page (``key``). Its request id is a uuid4 kept in session state for one *intent*
(dataset, mechanism, eps, delta, parameters, sampling mode, seed): a rerun or a double click reuses
it, so the ledger debits at most once. The id changes when the intent changes or after a release
completes (a second release with the same settings needs an explicit confirmation). The order of
work is :func:`dpcore.report.make_release`'s: run once, store the files, debit atomically, and only
then show anything.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from dpcore import config
from dpcore.policy import Policy
from dpcore.report import DEMO_NOTICE, LOCAL_NOTICE, Release, ReleaseRun, make_release, sha256_file
from ui import state
from ui.errors import user_errors

__all__ = ["ARTIFACTS", "artifact_bytes", "artifacts_dir", "intent_key", "release_panel", "show_release"]

ARTIFACTS = "artifacts"
_MIME = {".csv": "text/csv", ".json": "application/json", ".html": "text/html"}


@dataclass
class PanelState:
    """A panel's current intent, its request id, and the release made for it (None until paid)."""

    intent: str
    request_id: str
    result: Release | None = None


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


def intent_key(**fields: Any) -> str:
    """SHA-256 of the JSON of the fields that define a release request."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _panel(key: str, intent: str) -> PanelState:
    slot = state.RELEASE_PREFIX + key
    panel = st.session_state.get(slot)
    if panel is None or panel.intent != intent:
        panel = PanelState(intent=intent, request_id=uuid.uuid4().hex)
        st.session_state[slot] = panel
    return panel


def show_release(result: Release, key: str) -> None:
    """The paid release: ledger confirmation, table, figures and download buttons (CSV, JSON, HTML)."""
    rec = result.record
    note = " (already recorded: nothing was debited again)" if result.replayed else ""
    st.success(
        f"Released {rec.mechanism} at ε = {rec.epsilon:.4g}, δ = {rec.delta:.3g}; recorded in the ledger as "
        f"request {rec.request_id[:8]} at {rec.time[:19]} UTC{note}."
    )
    if result.manifest.get("demo"):
        st.warning(f"{DEMO_NOTICE}: made with a fixed seed; do not share it as a private release.")
    st.dataframe(result.table, hide_index=True)
    for i, fig in enumerate(result.figures):
        st.plotly_chart(fig, key=f"{key}_release_fig_{i}")
    names = sorted(result.files)
    for col, name in zip(st.columns(len(names)), names, strict=True):
        col.download_button(
            name,
            data=result.files[name],
            file_name=name,
            mime=_MIME.get(Path(name).suffix, "application/octet-stream"),
            key=f"{key}_download_{name}",
            on_click="ignore",
            icon=":material/download:",
        )


def release_panel(
    *,
    key: str,
    mechanism: str,
    guarantee: str,
    epsilon: float,
    delta: float,
    run: ReleaseRun,
    params: Mapping[str, Any],
    policy: Policy | None = None,
    calibration: str = "",
    bounds_source: str | None = None,
    title: str | None = None,
) -> Release | None:
    """Show the cost, the budget left and a Release button; on click, release once and show it.

    ``run(sampler)`` runs the mechanism once and returns (released table, Plotly figures, extra
    parameters for the manifest). ``params`` (JSON-able) are the settings that define the request, e.g.
    ``{"k": 4, "features": [...]}``. ``policy`` defaults to the current one (its definition and label
    go into the ledger and manifest). ``bounds_source`` defaults to the prepared data's. Returns the
    release made by this panel for the current settings (also after reruns), else None.
    """
    st.subheader("Release")
    ds = state.dataset()
    if ds is None:
        st.info("Load a dataset on the Data page before releasing.")
        return None
    pol = policy or state.policy()
    local = pol.definition == "local_pdp"
    st.markdown(f"**{mechanism}** · cost ε = {epsilon:.4g}, δ = {delta:.3g}")
    (st.warning if local else st.info)(guarantee)
    if local:
        st.warning(LOCAL_NOTICE)
    with user_errors("reading the budget"):
        status = state.ledger().budget(ds.dataset_id)
        if status is None:
            st.warning("This dataset has no privacy budget yet: set one on the Privacy policy page.")
        else:
            st.caption(
                f"Budget left for {ds.name}: ε = {status.epsilon_left:.4g}, δ = {status.delta_left:.3g}"
            )
            if epsilon > status.epsilon_left or delta > status.delta_left:
                st.warning("This release costs more than the budget left; the ledger will refuse it.")
    mode, seed = state.mode(), state.demo_seed()
    if mode == "demo":
        st.warning(f"DEMO mode (seed {seed}): the output will be marked '{DEMO_NOTICE}'.")
    intent = intent_key(
        dataset=ds.dataset_id,
        mechanism=mechanism,
        epsilon=float(epsilon),
        delta=float(delta),
        params=params,
        definition=pol.definition,
        mode=mode,
        seed=seed,
    )
    panel = _panel(key, intent)
    if panel.result is not None:
        shown = st.empty()  # the previous release, cleared below if a new request is made in this run
        with shown.container():
            show_release(panel.result, key)
        again = st.checkbox(
            "Make another release with these settings (a new request: spends the budget again)",
            # bound to this request: once it is spent the next one needs a fresh confirmation
            key=f"{key}_again_{panel.request_id}",
        )
        if not (again and st.button("Release again", key=f"{key}_release_again")):
            return panel.result
        shown.empty()  # a refused request must not leave the previous files on screen
        panel.request_id, panel.result = uuid.uuid4().hex, None
    elif not st.button(f"Release (spends ε = {epsilon:.4g})", type="primary", key=f"{key}_release"):
        return None
    with (
        user_errors(f"releasing {mechanism}") as outcome,
        st.spinner("Running the mechanism and recording it..."),
    ):
        prepared = ds.prepared
        result = make_release(
            state.ledger(),
            dataset_id=ds.dataset_id,
            request_id=panel.request_id,
            run=run,
            sampler=state.sampler(),
            mechanism=mechanism,
            guarantee=guarantee,
            definition=pol.definition,
            policy_label=pol.label,
            epsilon=epsilon,
            delta=delta,
            calibration=calibration,
            bounds_source=bounds_source
            or (prepared.bounds_source if prepared is not None else "not applicable"),
            fingerprint=ds.fingerprint,
            user=state.user(),
            parameters=params,
            artifacts_dir=artifacts_dir(),
            title=title or f"{mechanism}: released output",
            name=key,
            is_local=local,
        )
    if outcome.failed:
        return None
    panel.result = result
    st.rerun()
