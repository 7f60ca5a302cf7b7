"""The session plan kept server-side, so a reload, a deep link, a server restart or a second tab restore it.

The URL carries a session token (``?s=<32 hex digits>``, 128 random bits, issued by the server on the first
visit; a token the server does not know starts a new session, it is never adopted).
At the start of every run :func:`sync_session` restores the plan saved under the URL's token (first run
of a browser session only), puts the token back in the URL if a navigation dropped it, and saves what
changed (widget by widget, so two tabs of one session do not undo each other's changes).

The plan holds what the curator chose, never data or secrets: the dataset's reference (sample key,
blobs parameters, a data source spec: folder file, database table or SELECT, named by its connection, never
its URL; or the fingerprint of a table kept in the data folder) and its name (which carries the budget),
schema, missing-value steps, preparation choices (features, public bounds, scaling), the policy, and every
widget value kept by ``ui.state.persist`` (the sampling mode and demo seed among them). Restoring re-runs the
loading, cleaning and preparation from those choices; a step that no longer applies is reported, not guessed.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import streamlit as st

from dpcore import config
from dpcore.data import table_name
from dpcore.errors import DataError, DPCoreError
from dpcore.policy import policy_from_dict
from dpcore.sessions import SessionStore, is_token, load_stored_table, new_token, prune, store_table
from ui import datasets, state
from ui.errors import in_words, user_errors
from ui.text import md

__all__ = ["QUERY_PARAM", "plan", "sync_session", "token"]

QUERY_PARAM = "s"
TOKEN_KEY = "dp_session_token"
SAVED_KEY = "dp_session_saved"
NOTICE_KEY = "dp_session_notice"
VERSION = 1
_PLAIN = (bool, int, float, str, type(None))


@st.cache_resource(show_spinner=False)
def _store(url: str) -> SessionStore:
    """The session store, once per server process; sessions and uploads unused for longer than the
    retention (``DPCORE_SESSION_RETENTION_DAYS``) are removed when it opens."""
    store = SessionStore(url)
    try:
        prune(store)
    except DPCoreError:  # the retention setting or the database: the pages say what is wrong elsewhere
        logging.getLogger(__name__).warning("sessions were not pruned", exc_info=True)
    return store


def _owner() -> str:
    """Who may restore a plan: a hash of the user's name (not the name itself)."""
    return hashlib.sha256(state.user().encode("utf-8")).hexdigest()[:32]


def token() -> str | None:
    """This browser session's token (None before the first run has synced)."""
    return st.session_state.get(TOKEN_KEY)


# -- what is saved ---------------------------------------------------------------------------------


def _storable(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_storable(v) for v in value)
    return isinstance(value, _PLAIN)


def _widgets() -> dict[str, Any]:
    """Kept widget values (``ui.state.kept_values``) that can be stored."""
    return {name: value for name, value in state.kept_values().items() if _storable(value)}


def _dataset_plan(ds: state.Dataset) -> dict[str, Any]:
    if ds.origin is None:
        store_table(ds.raw, ds.fingerprint)  # no-op once the table is kept
    chosen = state.choices(ds)
    return {
        "name": ds.name,
        "source": ds.source,
        "origin": dict(ds.origin) if ds.origin is not None else None,
        "fingerprint": ds.fingerprint,
        "schema": chosen["schema"],
        "steps": chosen["steps"],
        "prepare": chosen["prepare"],
    }


def plan() -> dict[str, Any]:
    """The restorable plan of this browser session (JSON types and tuples only)."""
    ds = state.dataset()
    return {
        "version": VERSION,
        "owner": _owner(),
        "dataset": None if ds is None else _dataset_plan(ds),
        "policy": state.policy().to_dict(),
        "widgets": _widgets(),  # sampling mode and demo seed included
    }


# -- restoring -------------------------------------------------------------------------------------


def _raw_table(saved: dict[str, Any]):
    origin = saved.get("origin") or {}
    if "sample" in origin:
        return state.sample_table(origin["sample"])
    if "blobs" in origin:
        return state.blobs_table(**origin["blobs"])
    return load_stored_table(saved["fingerprint"])


def _restore_dataset(saved: dict[str, Any]) -> None:
    name = table_name(saved["name"])  # a name that cannot carry a budget is not restored
    origin = saved.get("origin") or {}
    if "source" in origin:  # a folder file or a database: read again (the same sample rows, if sampled)
        ds = datasets.restore_source_dataset(origin)
    else:
        raw = _raw_table(saved)
        ds = state.set_dataset(name, raw, source=saved["source"], origin=saved.get("origin"))
    if ds.fingerprint != saved["fingerprint"]:
        raise DataError(f"'{ds.name}' is not the table this session used; load it again on the Data page.")
    if ds.name != name:  # a source is loaded under its label: the curator's name comes back
        ds = state.update_dataset(name=name)
    state.apply_choices(saved)


def _restore(saved: dict[str, Any]) -> list[str]:
    """Put a saved plan into this session; returns what could not be restored, in words."""
    problems = []
    for name, value in saved.get("widgets", {}).items():
        st.session_state[state.KEEP_PREFIX + name] = value
    try:
        state.set_policy(policy_from_dict(saved["policy"]))
    except (DPCoreError, KeyError, TypeError) as err:
        problems.append(f"the privacy policy ({in_words(err)})")
    if saved.get("dataset"):
        try:
            _restore_dataset(saved["dataset"])
        except (DPCoreError, KeyError, TypeError, ValueError) as err:
            problems.append(f"the dataset ({in_words(err)})")
            if state.dataset() is None:  # not saved over: a later reload reads the source again
                saved["dataset"] = None
    return problems


def _start(given: str | None) -> str:
    """This browser session's token: the URL's (restoring its plan) or a new one."""
    if not is_token(given):
        return new_token()
    saved = _store(config.ledger_url()).load(given)  # type: ignore[arg-type]
    if saved is None:  # never adopted: a token is issued by this server, not chosen by a browser
        st.toast("This session link is unknown or has expired: a new session starts.")
        return new_token()
    if saved.get("owner") != _owner():
        st.toast("This link belongs to another user's session: a new session starts.")
        return new_token()
    problems = _restore(saved)
    st.session_state[SAVED_KEY] = saved  # what this tab saves from now on: its own changes only
    if problems:
        st.session_state[NOTICE_KEY] = "Session restored, except " + "; ".join(problems) + "."
    else:
        st.toast("Session restored: dataset, policy and settings as you left them.")
    return given  # type: ignore[return-value]


def sync_session() -> None:
    """Call at the start of every run, before any widget: restore, keep the token in the URL, save."""
    current = token()
    if current is None:
        with user_errors("restoring the saved session"):
            current = _start(st.query_params.get(QUERY_PARAM))
        current = current or new_token()
        st.session_state[TOKEN_KEY] = current
    if st.query_params.get(QUERY_PARAM) != current:
        st.query_params[QUERY_PARAM] = current
    if NOTICE_KEY in st.session_state:
        st.warning(md(st.session_state.pop(NOTICE_KEY)))
    recalled = state.recall_notice()
    if recalled:
        st.info(md(recalled), icon=":material/history:")
    with user_errors("saving the session"):
        now = plan()
        changes = _changes(now, st.session_state.get(SAVED_KEY, {}))
        if changes:
            _store(config.ledger_url()).update(current, changes, merge=("widgets",))
            st.session_state[SAVED_KEY] = now


def _changes(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What this tab changed since it last saved: whole entries, and single widget values (so another
    tab of the same session keeps the widget values it changed meanwhile)."""
    out = {k: v for k, v in now.items() if k != "widgets" and before.get(k) != v}
    kept = before.get("widgets", {})
    widgets = {k: v for k, v in now["widgets"].items() if k not in kept or kept[k] != v}
    return {**out, "widgets": widgets} if widgets else out
