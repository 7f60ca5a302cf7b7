"""The Data page in a real browser: a 30-feature table prepared from an imported data dictionary and its
settings offered on the next load; the Source choice stays on the upload after leaving the page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_app, wait_for_app
from tests.browser.e2e import (
    assert_no_exception,
    breast_cancer_files,
    choose_radio,
    click,
    go,
    import_dictionary,
    main,
)

pytestmark = pytest.mark.browser
PEOPLE = b"age,income\n34,52000\n51,61000\n"


def test_breast_cancer_prepared_from_an_imported_dictionary_and_offered_again_on_the_next_load(
    page: Page, browser, server
) -> None:
    """30 features prepared from an imported data dictionary in 4 interactions (Upload a file, the file,
    the dictionary, Prepare); a second session loading the same file is offered the saved settings and
    applies them with one click."""
    table, dictionary = breast_cancer_files()
    go(page, "Data")
    choose_radio(page, "Upload a file")  # 1
    upload = main(page).get_by_test_id("stFileUploader").filter(has_text="Upload a table")
    files = [{"name": "breast-cancer.csv", "mimeType": "text/csv", "buffer": table}]
    upload.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(files=files)  # 2
    wait_for_app(page)
    expect(main(page).get_by_text("569 rows × 31 columns").first).to_be_visible()
    import_dictionary(page, dictionary, "breast-cancer-dictionary.csv")  # 3
    expect(main(page).get_by_text("Features (30): mean radius, mean texture").first).to_be_visible()
    click(page, "Prepare")  # 4
    expect(main(page).get_by_text("569 rows × 30 features ready").first).to_be_visible()
    expect(main(page).get_by_text("bounds source: curator").first).to_be_visible()
    expect(main(page).get_by_text("Settings kept on the server").first).to_be_visible()
    assert_no_exception(page)

    again = open_app(browser, server)  # another session: nothing carried over but the server's memory
    try:
        go(again, "Data")
        choose_radio(again, "Upload a file")
        box = main(again).get_by_test_id("stFileUploader").filter(has_text="Upload a table")
        box.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(files=files)
        wait_for_app(again)
        offer = main(again).get_by_role("button", name=re.compile(r"^Use the settings from \d{4}-\d\d-\d\d"))
        expect(offer).to_be_visible()
        expect(main(again).get_by_text("30 features, 30 with public bounds").first).to_be_visible()
        offer.click()
        wait_for_app(again)
        expect(main(again).get_by_text("569 rows × 30 features ready").first).to_be_visible()
        assert_no_exception(again)
    finally:
        again.context.close()


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
