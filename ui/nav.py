"""The page list and the entry-point guard.

``PAGES`` holds (path relative to app.py, title, icon); only pages whose file exists are registered.

Streamlit 1.67 treats a ``pages/`` folder next to the entry script as an old-style multipage app until
``st.navigation`` has run once in the server process: a first request for ``/policy`` (a bookmark after
a restart, or ``AppTest.switch_page``) executes ``pages/policy.py`` alone, without app.py's page
config and sidebar. ``app.py`` marks each run with :func:`mark_entrypoint`; every page starts with
:func:`ensure_entrypoint`, which, when the mark is missing, draws the page config and sidebar itself
and switches Streamlit to ``st.navigation`` mode for the following runs (no rerun, so a click that
started this run is not lost).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

ROOT = Path(__file__).resolve().parent.parent
PAGES: tuple[tuple[str, str, str], ...] = (
    ("pages/home.py", "Home", ":material/home:"),
    ("pages/data.py", "Data", ":material/table:"),
    ("pages/policy.py", "Privacy policy", ":material/shield:"),
    ("pages/kmeans.py", "K-means", ":material/scatter_plot:"),
    ("pages/locations.py", "Locations", ":material/map:"),
    ("pages/ledger.py", "Ledger", ":material/receipt_long:"),
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


def mark_entrypoint() -> None:
    """Called by app.py on every run, just before the page runs."""
    st.session_state[_ENTRY_KEY] = True


def ensure_entrypoint() -> None:
    """First line of every page: draw app.py's page config and sidebar when the page runs on its own."""
    if st.session_state.pop(_ENTRY_KEY, False):
        return
    from ui.sidebar import render_sidebar

    PagesManager.uses_pages_directory = False  # what st.navigation itself sets on its first call
    st.set_page_config(**PAGE_CONFIG)
    render_sidebar()
