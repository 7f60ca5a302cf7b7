"""The session survives a reload, a second tab, a server restart and a deep link, in Chromium.

This test runs its own server (it restarts it) on a fixed port with a data folder that outlives it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    APP_TIMEOUT_MS,
    screenshot,
    start_server,
    stop_server,
    wait_for_app,
)
from tests.browser.e2e import MARKETING, go, load_sample, main, prepare_with_data_bounds, select, set_number

pytestmark = pytest.mark.browser

TITLES = ["Home", "Data", "Privacy policy", "K-means", "Locations", "Ledger"]
GEO = "Geo-indistinguishability (level l within radius r)"
# Streamlit's frontend first tries the page's own path as the server's base path, then the root: a deep
# link to /kmeans always asks /kmeans/_stcore/health and /kmeans/_stcore/host-config once (404) first.
BASE_PATH_PROBES = ("/kmeans/_stcore/health", "/kmeans/_stcore/host-config")


def _token(page: Page) -> str:
    return parse_qs(urlparse(page.url).query)["s"][0]


def _restored(page: Page, token: str) -> None:
    """The page shows the saved session: real navigation, sidebar dataset, preparation and policy."""
    wait_for_app(page)
    nav = page.get_by_test_id("stSidebarNav")
    for title in TITLES:
        expect(nav.get_by_role("link", name=title, exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="app", exact=True)).to_have_count(0)  # no file-name navigation
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text(MARKETING).first).to_be_visible()
    expect(sidebar.get_by_text("Prepared: 2,240 rows × 2 features").first).to_be_visible()
    expect(sidebar.get_by_text("level 2 within 500 m").first).to_be_visible()
    assert _token(page) == token


def test_session_survives_reload_second_tab_restart_and_deep_link(browser: Browser, tmp_path: Path) -> None:
    proc, server = start_server(tmp_path)
    context = browser.new_context(viewport={"width": 1440, "height": 900})  # the worker's Chromium
    try:
        context.set_default_timeout(APP_TIMEOUT_MS)
        page = context.new_page()
        page.goto(server.url)
        wait_for_app(page)
        token = _token(page)
        assert len(token) == 32
        load_sample(page)
        prepare_with_data_bounds(page, ["Recency", "MntWines"])
        go(page, "Privacy policy")
        select(page, "Definition", GEO)
        set_number(page, "Privacy level l", 2)
        set_number(page, "within radius r (metres)", 500)
        go(page, "Locations")
        _restored(page, token)  # the token stays in the URL across the navigation

        page.reload()
        _restored(page, token)
        expect(page.get_by_role("heading", level=1)).to_have_text("Locations")
        screenshot(page, "reload-restored")

        second = context.new_page()
        second.goto(page.url)
        _restored(second, token)
        screenshot(second, "second-tab-restored")

        stop_server(proc)
        proc, server = start_server(tmp_path, port=urlparse(server.url).port)
        deep = context.new_page()
        failed: list[str] = []
        deep.on("response", lambda r: failed.append(urlparse(r.url).path) if r.status >= 400 else None)
        deep.goto(f"{server.url}/kmeans?s={token}")
        _restored(deep, token)
        expect(deep.get_by_role("heading", level=1)).to_have_text("K-means")
        expect(deep.get_by_test_id("stSidebar").get_by_text("Sampling mode").first).to_be_visible()
        assert set(failed) <= set(BASE_PATH_PROBES), failed
        screenshot(deep, "deep-link-after-restart")
        go(deep, "Data")
        expect(main(deep).get_by_text("Features (2): Recency, MntWines.").first).to_be_visible()
        assert _token(deep) == token
    finally:
        context.close()
        stop_server(proc)
