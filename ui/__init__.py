"""Shared Streamlit helpers for the dashboard pages: session state, sidebar, error display, releases."""
