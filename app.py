"""Streamlit entry point: ``streamlit run app.py``. Registers the pages that exist and draws the sidebar."""

from __future__ import annotations

import logging

import streamlit as st

from ui import auth
from ui.nav import PAGE_CONFIG, mark_entrypoint, registered_pages
from ui.sidebar import render_sidebar

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
st.set_page_config(**PAGE_CONFIG)
auth.require_sign_in()  # optional OIDC sign-in (.streamlit/secrets.toml [auth]); a no-op when not configured
navigation = st.navigation(
    [st.Page(path, title=title, icon=icon) for path, title, icon in registered_pages()]
)
render_sidebar()
mark_entrypoint()
navigation.run()
