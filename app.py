"""Streamlit entry point: ``streamlit run app.py``. Registers the pages that exist and draws the sidebar."""

from __future__ import annotations

import logging

import sklearn.cluster  # noqa: F401  (loads its OpenMP runtime, so the thread limit below covers it)
import streamlit as st
from threadpoolctl import threadpool_limits

from ui import auth
from ui.nav import PAGE_CONFIG, mark_entrypoint, registered_pages
from ui.sidebar import render_sidebar

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@st.cache_resource
def _one_thread_per_computation() -> threadpool_limits:
    """Sessions run side by side; BLAS/OpenMP spin-waiting under contention made small matrix work
    10-50x slower on a 2-core machine (10 KMeans fits: 20 s vs 1.3 s), so each computation gets one."""
    return threadpool_limits(limits=1)


_one_thread_per_computation()
st.set_page_config(**PAGE_CONFIG)
auth.require_sign_in()  # optional OIDC sign-in (.streamlit/secrets.toml [auth]); a no-op when not configured
navigation = st.navigation(
    [st.Page(path, title=title, icon=icon) for path, title, icon in registered_pages()]
)
render_sidebar()
mark_entrypoint()
navigation.run()
