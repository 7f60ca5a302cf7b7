"""Two browser sessions releasing against one budget account at the same moment: the same plan is released
once (both show that one release), two plans that do not both fit never overspend, and each session sees
the other's releases on its Ledger page.
"""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from playwright.sync_api import Browser, Page, expect

from dpcore.artifacts import short_id
from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from dpcore.policy import GeoIndistinguishability
from tests.browser.conftest import Server, open_app, screenshot, wait_for_app
from tests.browser.e2e import (
    assert_no_exception,
    click,
    download,
    go,
    main,
    sample_dataset_id,
    select,
    set_number,
)

pytestmark = pytest.mark.browser

GEO = "Geo-indistinguishability (level l within radius r)"
LEVEL, RADIUS_M = 1, 1000  # the Privacy policy page's geo defaults, typed in explicitly
RELEASE = f"Release (spends level l = {LEVEL})"  # planar Laplace, the Locations page's first mechanism
REQUEST = re.compile(r"recorded in the ledger as request (plan-[0-9a-f]{8}(?:-[0-9]+)?)")


def _ready(page: Page) -> None:
    """Airports loaded, geo-indistinguishability (level 1 within 1,000 m), planar Laplace ready to release."""
    go(page, "Locations")
    click(page, "Load the US airports sample")
    go(page, "Privacy policy")
    select(page, "Definition", GEO)
    set_number(page, "Privacy level l", LEVEL)
    set_number(page, "within radius r (metres)", RADIUS_M)
    go(page, "Locations")
    expect(main(page).get_by_role("button", name=RELEASE)).to_be_enabled()  # the account has a budget


def _outcome(page: Page, previous: str | None) -> str | None:
    """The request id prefix of the release this page just made (not ``previous``), or None if refused."""
    body = main(page)
    refused = body.get_by_test_id("stAlertContentError").filter(has_text="Budget exceeded")
    for _ in range(120):
        wait_for_app(page)
        if refused.count():
            return None
        found = REQUEST.findall(body.inner_text())
        if found and found[-1] != previous:
            return found[-1]
        page.wait_for_timeout(250)
    text = body.inner_text()
    alerts = body.locator('[data-testid^="stAlertContent"]').all_inner_texts()
    panel = text[text.rfind("What will run") :]
    raise AssertionError(f"no release outcome; alerts {alerts}; the release panel:\n{panel}")


def _both_click(pages: list[Page], name: str, previous: list[str | None]) -> list[str | None]:
    buttons = [main(p).get_by_role("button", name=name) for p in pages]
    for b in buttons:
        expect(b).to_be_visible()
    for b in buttons:  # dispatch both clicks before either run finishes
        b.click()
    return [_outcome(p, prev) for p, prev in zip(pages, previous, strict=True)]


def test_two_sessions_never_overspend(browser: Browser, server: Server) -> None:
    pages = [open_app(browser, server), open_app(browser, server)]
    try:
        dataset_id = sample_dataset_id("us_airports")
        account = policy_account(dataset_id, GeoIndistinguishability.from_level(LEVEL, RADIUS_M))
        ledger = Ledger.initialise(server.ledger_url)  # the operator's step; a no-op once the app made it
        before = ledger.budget(account)
        spent = before.epsilon_spent if before else 0.0
        ledger.set_budget(account, spent + 3.0, before.delta_total if before else 0.0)
        n_before = len(ledger.releases(account))
        for p in pages:
            _ready(p)

        first = _both_click(pages, RELEASE, [None, None])  # the same plan in both: one request, one spend
        assert first[0] is not None and first == [first[0], first[0]], first
        assert len(ledger.releases(account)) == n_before + 1

        # now two plans that fit alone (2 left) but not together: level 1 again, and level 1.5
        other = pages[1]
        go(other, "Privacy policy")
        set_number(other, "Privacy level l", 1.5)
        go(other, "Locations")
        main(pages[0]).get_by_text("Release this plan again (a new request").click()
        wait_for_app(pages[0])
        again = f"Release this plan again (spends level l = {LEVEL} more)"
        buttons = [
            main(pages[0]).get_by_role("button", name=again),
            main(other).get_by_role("button", name="Release (spends level l = 1.5)"),
        ]
        for b in buttons:
            expect(b).to_be_enabled()
        for b in buttons:  # dispatch both clicks before either run finishes
            b.click()
        second = [_outcome(p, prev) for p, prev in zip(pages, first, strict=True)]
        assert sum(r is not None for r in second) == 1, second
        loser = pages[second.index(None)]
        message = main(loser).get_by_test_id("stAlertContentError").first.inner_text()
        assert "Budget exceeded" in message and "raise the budget" in message

        status = ledger.budget(account)
        records = ledger.releases(account)
        ledger.close()
        assert len(records) == n_before + 2
        assert status.epsilon_spent <= status.epsilon_total
        assert status.epsilon_spent == pytest.approx(spent + 1.0 + (1.0 if second[0] else 1.5))
        ours = {short_id(r.request_id) for r in records[n_before:]}
        assert ours == {first[0], *(r for r in second if r)}

        for p in pages:
            go(p, "Ledger")
            table = pd.read_csv(io.BytesIO(download(p, "Download the ledger as CSV")[1]))
            shown = {short_id(rid) for rid in table.loc[table["account"] == account.key, "request id"]}
            assert ours <= shown  # its own releases and the other session's
            assert_no_exception(p)
    finally:
        for i, p in enumerate(pages):
            screenshot(p, f"test_two_sessions_never_overspend_{i}")
            p.context.close()
