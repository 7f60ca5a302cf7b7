"""Real sign-in in Chromium: a real OpenID Connect provider (``oidc-provider-mock``) on 127.0.0.1, the app
configured with ``[auth]`` and ``[dpcore.roles]`` in a secrets file, users in different roles.

Walk 1 (four eyes): the curator signs in, finds no way to set a budget, requests a release above the
account's approval threshold, signs out; the officer signs in, approves it on the Requests page, and the
release is on the Ledger page with both names. Walk 2: a curator who opens the Privacy policy page gets
the officer-only refusal and no Save budget button; the budget is unchanged.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
import werkzeug.serving
from playwright.sync_api import Browser, Page, expect

from dpcore import approvals
from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from tests.browser.conftest import (
    APP_TIMEOUT_MS,
    Server,
    free_port,
    screenshot,
    start_server,
    stop_server,
    wait_for_app,
)
from tests.browser.e2e import assert_no_exception, click, go, main, sample_dataset_id, select, set_number
from ui.state import DEFAULT_POLICY

pytestmark = pytest.mark.browser

CURATOR, OFFICER = "carla@example.org", "olivia@example.org"
GRID = "Uniform density grid"
ACCOUNT = policy_account(sample_dataset_id("us_airports"), DEFAULT_POLICY)


@pytest.fixture
def provider() -> Iterator[str]:
    """A real OIDC provider on 127.0.0.1 (its own thread), with a curator and an officer; its base URL."""
    from oidc_provider_mock import User, app

    users = [
        User(sub=sub, claims={"email": f"{sub}@example.org", "email_verified": True, "name": sub.title()})
        for sub in ("carla", "olivia")
    ]
    server = werkzeug.serving.make_server("127.0.0.1", 0, app(user_claims=users), threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


@pytest.fixture
def signed_app(provider: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The app with sign-in through ``provider`` and roles; the airports DP account has a budget of 5 and
    needs approval above ε = 0.3."""
    base = tmp_path_factory.mktemp("roles")
    port = free_port()
    secrets = base / "secrets.toml"
    secrets.write_text(
        f"""[auth]
redirect_uri = "http://127.0.0.1:{port}/oauth2callback"
cookie_secret = "{"e2e-cookie-secret-" * 3}"
client_id = "dpcore-e2e"
client_secret = "e2e-secret"
server_metadata_url = "{provider}/.well-known/openid-configuration"

[dpcore.roles]
officer = ["{OFFICER}"]
curator = ["{CURATOR}"]
"""
    )
    proc, server = start_server(base, port, ("--secrets.files", str(secrets)))
    ledger = Ledger.initialise(server.ledger_url)  # the data folder's ledger, as the app makes it
    try:
        ledger.set_budget(ACCOUNT, 5.0, 0.0, user=OFFICER, reason="e2e budget")
        approvals.set_rule(ledger, ACCOUNT, "above", 0.3, user=OFFICER, reason="e2e review")
    finally:
        ledger.close()
    try:
        yield server
    finally:
        stop_server(proc)


def _sign_in(page: Page, server: Server, who: str) -> None:
    if not page.url.startswith(server.url):
        page.goto(server.url)
        wait_for_app(page)
    main(page).get_by_role("button", name="Sign in", exact=True).click()
    page.get_by_role("button", name=who, exact=True).click()  # the provider's form: a predefined user
    page.wait_for_url(f"{server.url}/**")
    wait_for_app(page)
    expect(page.get_by_test_id("stSidebar").get_by_text(f"{who}@example.org")).to_be_visible()


def _sign_out(page: Page, server: Server) -> None:
    """Sign out: the app deletes its identity cookie and sends the browser to the provider's end-session
    page, which returns to the app once confirmed."""
    page.get_by_test_id("stSidebar").get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="End session").click()
    page.wait_for_url(f"{server.url}/**")
    wait_for_app(page)
    expect(main(page).get_by_role("button", name="Sign in", exact=True)).to_be_visible()


def _new_page(browser: Browser) -> Page:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(APP_TIMEOUT_MS)
    return context.new_page()


def _four_eyes_walk(browser: Browser, signed_app: Server) -> tuple[str, float, str | None]:
    """The curator's request approved by the officer: (who released, eps, who approved) in the ledger."""
    page = _new_page(browser)
    try:
        _sign_in(page, signed_app, "carla")
        go(page, "Locations")
        click(page, "Load the US airports sample")
        select(page, "Mechanism to release", GRID)
        set_number(page, "ε to spend", 0.5)
        body = main(page)
        expect(body.get_by_role("button", name="Release (spends ε = 0.5)")).to_have_count(0)
        click(page, "Request approval to release (ε = 0.5)")
        expect(body.get_by_text("waiting for an officer's approval").first).to_be_visible()
        _sign_out(page, signed_app)

        _sign_in(page, signed_app, "olivia")
        go(page, "Requests")
        expect(body.get_by_text(f"US airports: {CURATOR}").first).to_be_visible()
        click(page, "Approve and release")
        expect(body.get_by_text("Approved and released").first).to_be_visible()
        go(page, "Ledger")
        expect(body.get_by_text(re.compile(f"by {CURATOR}.*approved by {OFFICER}")).first).to_be_visible()
        ledger = Ledger(signed_app.ledger_url)
        try:
            [record] = ledger.releases(ACCOUNT)
            [request] = approvals.requests(ledger)
        finally:
            ledger.close()
        assert_no_exception(page)
        return record.user, record.epsilon, request.approved_by
    finally:
        screenshot(page, "test_walk_roles_four_eyes")
        page.context.close()


def _curator_refused_walk(browser: Browser, signed_app: Server) -> list[str]:
    """The curator finds no budget or request controls: who has changed the budget, after."""
    page = _new_page(browser)
    try:
        _sign_in(page, signed_app, "carla")
        go(page, "Locations")
        click(page, "Load the US airports sample")
        go(page, "Privacy policy")
        body = main(page)
        expect(body.get_by_text("Budgets are set by a privacy officer").first).to_be_visible()
        expect(body.get_by_role("button", name="Save budget")).to_have_count(0)
        go(page, "Requests")
        expect(body.get_by_text("Only a privacy officer may open the Requests page").first).to_be_visible()
        ledger = Ledger(signed_app.ledger_url)
        try:
            return [e.user for e in ledger.budget_history(ACCOUNT)]
        finally:
            ledger.close()
    finally:
        screenshot(page, "test_walk_roles_curator_refused")
        page.context.close()


def test_sign_in_walks(browser: Browser, signed_app: Server) -> None:
    """Both walks on one app and provider (each in its own browser context): one server start."""
    assert _curator_refused_walk(browser, signed_app) == [OFFICER]  # the budget unchanged by the curator
    assert _four_eyes_walk(browser, signed_app) == (CURATOR, 0.5, OFFICER)
