"""The release panel as a contract, raced in Chromium: what the curator saw when clicking is what is
released, exactly once.

Each step waits on page state (the button's label, the panel's messages, the ledger's rows), never on a
fixed sleep. The test runs its own server, which it restarts.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, expect

from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from tests.browser.conftest import APP_TIMEOUT_MS, screenshot, start_server, stop_server, wait_for_app
from tests.browser.e2e import (
    assert_no_exception,
    click,
    go,
    main,
    sample_dataset_id,
    select,
    set_budget,
    set_number,
)
from ui.state import DEFAULT_POLICY

pytestmark = pytest.mark.browser

GRID = "Uniform density grid"
CHANGED = "The settings changed since you confirmed: nothing was released"
RELEASED_ONCE = "This plan was released once"
OUTCOME_MS = APP_TIMEOUT_MS  # a release on a loaded 2-core machine


def _rows(ledger_url: str) -> list[tuple[str, float]]:
    """(request id, ε) of the airports sample's differential privacy account, oldest first."""
    ledger = Ledger(ledger_url)
    try:
        account = policy_account(sample_dataset_id("us_airports"), DEFAULT_POLICY)
        return [(r.request_id, r.epsilon) for r in ledger.releases(account)]
    finally:
        ledger.close()


def _panel_settled(page: Page, label: str) -> None:
    """The release panel shows the Release button ``label`` (the plan the page shows now)."""
    expect(main(page).get_by_role("button", name=label, exact=True)).to_be_enabled(timeout=OUTCOME_MS)


def _ready(page: Page) -> None:
    go(page, "Locations")
    click(page, "Load the US airports sample")
    set_budget(page, 5.0, 0.0)
    go(page, "Locations")
    select(page, "Mechanism to release", GRID)
    set_number(page, "ε to spend", 0.1)
    _panel_settled(page, "Release (spends ε = 0.1)")


def test_the_panel_releases_what_was_on_screen_once(browser: Browser, tmp_path: Path) -> None:
    proc, server = start_server(tmp_path)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.set_default_timeout(APP_TIMEOUT_MS)
        page = context.new_page()
        page.goto(server.url)
        wait_for_app(page)
        _ready(page)
        body = main(page)

        # 1. type 1 without Enter, click the button that says 0.1: nothing is released
        body.get_by_label("ε to spend", exact=True).fill("1")
        body.get_by_role("button", name="Release (spends ε = 0.1)", exact=True).click()
        expect(body.get_by_text(CHANGED).first).to_be_visible(timeout=OUTCOME_MS)
        _panel_settled(page, "Release (spends ε = 1)")
        assert _rows(server.ledger_url) == []
        screenshot(page, "contract-typed-not-committed")

        # 2. the new plan, confirmed by a click on its own button: released at ε = 1, once
        click(page, "Release (spends ε = 1)")
        expect(body.get_by_text(f"Released {GRID} at ε = 1;").first).to_be_visible(timeout=OUTCOME_MS)
        ((first_id, first_eps),) = _rows(server.ledger_url)
        assert first_eps == 1.0 and first_id.startswith("plan-")

        # 3. a double click on a new plan's button: one release
        set_number(page, "ε to spend", 0.2)
        _panel_settled(page, "Release (spends ε = 0.2)")
        body.get_by_role("button", name="Release (spends ε = 0.2)", exact=True).dblclick()
        expect(body.get_by_text(f"Released {GRID} at ε = 0.2;").first).to_be_visible(timeout=OUTCOME_MS)
        wait_for_app(page)
        rows = _rows(server.ledger_url)
        assert [eps for _, eps in rows] == [1.0, 0.2], rows

        # 4. reload, Back, a second tab: the release is shown, no fresh button, nothing spent
        page.reload()
        wait_for_app(page)
        go(page, "Locations")
        expect(body.get_by_text(RELEASED_ONCE).first).to_be_visible(timeout=OUTCOME_MS)
        expect(body.get_by_role("button", name="Release (spends ε = 0.2)", exact=True)).to_have_count(0)
        go(page, "Ledger")
        page.go_back()
        wait_for_app(page)
        expect(body.get_by_text(RELEASED_ONCE).first).to_be_visible(timeout=OUTCOME_MS)
        tab = context.new_page()
        tab.goto(page.url)
        wait_for_app(tab)
        expect(main(tab).get_by_text(RELEASED_ONCE).first).to_be_visible(timeout=OUTCOME_MS)
        expect(main(tab).get_by_role("button", name="Release (spends ε = 0.2)", exact=True)).to_have_count(0)
        tab.close()
        assert len(_rows(server.ledger_url)) == 2

        # 5. a server restart: still the one release; another needs the explicit "again"
        stop_server(proc)
        proc, server = start_server(tmp_path, port=urlparse(server.url).port)
        page.goto(page.url)
        wait_for_app(page)
        expect(body.get_by_text(RELEASED_ONCE).first).to_be_visible(timeout=OUTCOME_MS)
        body.get_by_text("Release this plan again (a new request").click()
        wait_for_app(page)
        click(page, "Release this plan again (spends ε = 0.2 more)")
        expect(body.get_by_text("released 2 times").first).to_be_visible(timeout=OUTCOME_MS)
        rows = _rows(server.ledger_url)
        assert [eps for _, eps in rows] == [1.0, 0.2, 0.2] and rows[2][0] == rows[1][0] + "-2", rows
        print("ledger rows (request id, ε):", rows)  # for the record: pytest -s shows them
        assert_no_exception(page)
        screenshot(page, "contract-released-again")
    finally:
        context.close()
        stop_server(proc)
