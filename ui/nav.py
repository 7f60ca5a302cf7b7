"""The page list and how every run starts.

``PAGES`` holds (path relative to app.py, title, icon); only pages whose file exists are registered.

Every run starts with :func:`start_run`: page config, sign-in, the session plan (``ui.session``: restore
on a reload, a deep link or a second tab, keep the token in the URL, save changes), ``st.navigation`` over
``PAGES`` and the shared sidebar. app.py calls it through :func:`run_app`.

Streamlit 1.67 runs a ``pages/`` folder next to the entry script as an old-style multipage app until
``st.navigation`` has run once in the server process: the first request after a restart for ``/kmeans``
(a bookmark, a deep link, a tab reconnecting) executes ``pages/kmeans.py`` alone, under a navigation
built from the file names ("app, data, home, kmeans..."), and AppTest runs every page that way. So every
page starts with :func:`ensure_entrypoint`: when app.py did not run, it runs :func:`start_run` itself,
whose ``st.navigation`` replaces the file-name navigation with the real one in this run and switches
Streamlit to ``st.navigation`` for every later run. No rerun, so a click that started this run is kept.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.navigation.page import StreamlitPage
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui import auth, roles
from ui.session import sync_session
from ui.sidebar import render_sidebar

ROOT = Path(__file__).resolve().parent.parent
PAGES: tuple[tuple[str, str, str], ...] = (
    ("pages/home.py", "Home", ":material/home:"),
    ("pages/data.py", "Data", ":material/table:"),
    ("pages/policy.py", "Privacy policy", ":material/shield:"),
    ("pages/kmeans.py", "K-means", ":material/scatter_plot:"),
    ("pages/locations.py", "Locations", ":material/map:"),
    ("pages/trajectories.py", "Trajectories", ":material/route:"),
    ("pages/ledger.py", "Ledger", ":material/receipt_long:"),
    ("pages/present.py", "Present", ":material/slideshow:"),
    ("pages/requests.py", "Requests", ":material/approval:"),
)
PAGE_CONFIG = {
    "page_title": "DP release dashboard",
    "page_icon": str(ROOT / "assets" / "favicon.png"),  # a bundled file: no icon fetched from the network
    "layout": "wide",
}
_ENTRY_KEY = "dp_entrypoint_ran"


def registered_pages() -> list[tuple[str, str, str]]:
    """The entries of ``PAGES`` whose file exists (no stub pages in the navigation)."""
    return [page for page in PAGES if (ROOT / page[0]).exists()]


def start_run() -> StreamlitPage:
    """Page config, sign-in, session plan, navigation and sidebar; returns the page to run."""
    st.set_page_config(**PAGE_CONFIG)
    auth.require_sign_in()  # optional OIDC sign-in (secrets.toml [auth]); a no-op when not configured
    roles.require_any_role()  # signed in, but in none of [dpcore.roles]: a refusal and Sign out
    sync_session()
    page = st.navigation([st.Page(path, title=title, icon=icon) for path, title, icon in registered_pages()])
    render_sidebar()
    return page


def run_app() -> None:
    """app.py's whole run: :func:`start_run`, then the chosen page (told that app.py ran)."""
    page = start_run()
    st.session_state[_ENTRY_KEY] = True
    page.run()


def ensure_entrypoint() -> None:
    """First line of every page: run :func:`start_run` when the page runs without app.py.

    Inside a page Streamlit scopes element ids to the page; the shared part is drawn under the entry
    script's scope, as in app.py's runs, so the sidebar's widgets keep their ids (and values) next run.
    """
    if st.session_state.pop(_ENTRY_KEY, False):
        return
    ctx = get_script_run_ctx()
    if ctx is None:  # bare `python pages/x.py`: nothing to scope
        start_run()
        return
    with ctx.run_with_active_hash(ctx.pages_manager.main_script_hash):
        start_run()
