"""The Data page in a real browser: a bound typed after pressing Prepare lands in the field clicked, and the
Source choice stays on the upload after leaving the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_for_app
from tests.browser.e2e import assert_no_exception, click, go, load_sample, main, multiselect

pytestmark = pytest.mark.browser
PEOPLE = b"age,income\n34,52000\n51,61000\n"


def _type_bound(page: Page, label: str, text: str) -> None:
    """Click the field and type, as a curator does (no fill), then leave it with Tab."""
    main(page).get_by_label(label, exact=True).click()
    page.keyboard.type(text)
    page.keyboard.press("Tab")
    wait_for_app(page)


def test_bounds_typed_after_prepare_land_in_the_field_clicked(page: Page) -> None:
    load_sample(page)
    multiselect(page, "Features to cluster on", ["Recency", "MntWines"])
    _type_bound(page, "Lower bound of MntWines", "0")
    _type_bound(page, "Upper bound of MntWines", "1500")
    click(page, "Prepare")  # refused: Recency has no bounds yet
    expect(main(page).get_by_text("No public bounds").first).to_be_visible()
    _type_bound(page, "Lower bound of Recency", "0")
    _type_bound(page, "Upper bound of Recency", "99")
    for label, value in [
        ("Lower bound of Recency", "0"),
        ("Upper bound of Recency", "99"),
        ("Lower bound of MntWines", "0"),
        ("Upper bound of MntWines", "1500"),
    ]:
        expect(main(page).get_by_label(label, exact=True)).to_have_value(value)
    click(page, "Prepare")
    expect(main(page).get_by_text("2,240 rows × 2 features ready").first).to_be_visible()
    expect(main(page).get_by_text("bounds source: curator").first).to_be_visible()
    assert_no_exception(page)


def test_source_stays_on_the_upload_after_leaving_the_page(page: Page) -> None:
    go(page, "Data")
    main(page).get_by_test_id("stRadio").first.get_by_text("Upload a file", exact=True).click()
    wait_for_app(page)
    chooser = main(page).get_by_test_id("stFileUploaderDropzoneInput")
    chooser.set_input_files(files=[{"name": "people.csv", "mimeType": "text/csv", "buffer": PEOPLE}])
    wait_for_app(page)
    expect(page.get_by_test_id("stSidebar").get_by_text("people.csv").first).to_be_visible()
    go(page, "Ledger")
    go(page, "Data")
    source = main(page).get_by_test_id("stRadio").first
    expect(source.get_by_role("radio", name="Upload a file")).to_be_checked()
    expect(main(page).get_by_text("In use: people.csv").first).to_be_visible()
    assert_no_exception(page)
