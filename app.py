"""Streamlit entry point: ``streamlit run app.py``. Restores the session, registers the pages, draws the
sidebar and runs the chosen page (``ui.nav.run_app``)."""

from __future__ import annotations

import importlib
import logging
import os
import threading

# One OpenMP thread per computation in every thread. The variable is read once, when scikit-learn first
# loads the OpenMP runtime; omp_set_num_threads (threadpoolctl) binds only the thread that calls it, and
# every Streamlit run and background job has its own thread, where 2 spinning OpenMP threads on a busy
# 2-core machine made 5 KMeans fits 25 s instead of 1 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import streamlit as st
from threadpoolctl import threadpool_limits

from ui.nav import run_app
from ui.serve import ENGINE_MODULES

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Without ui.serve (a plain ``streamlit run app.py``) the engine is imported in the background after the
# first run, so the first page shows without waiting for scikit-learn and Plotly.


@st.cache_resource(show_spinner=False)
def _one_thread_per_computation() -> threadpool_limits:
    """One BLAS thread (OpenBLAS's limit is process-wide; OpenMP's comes from OMP_NUM_THREADS above)."""
    return threadpool_limits(limits=1)


def _import_all() -> None:
    for name in ENGINE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # the page that needs it reports the error to the curator
            logging.getLogger(__name__).exception("warm-up import of %s failed", name)


@st.cache_resource(show_spinner=False)
def _warm_up() -> threading.Thread:
    """Once per server process: import ``ENGINE_MODULES`` in a daemon thread (a no-op under ui.serve)."""
    thread = threading.Thread(target=_import_all, name="dpcore-warm-up", daemon=True)
    thread.start()
    return thread


_one_thread_per_computation()
try:
    run_app()
finally:
    _warm_up()
