"""Hostile input in a real browser: junk uploads through the file chooser, a file over the upload limit and
bad privacy parameters each get a clear message; the previous state is kept and no trace reaches the page.
"""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import UPLOAD_LIMIT_MB, wait_for_app
from tests.browser.e2e import (
    MARKETING,
    assert_no_exception,
    choose_radio,
    go,
    load_sample,
    main,
    set_number,
    table_uploader,
)

pytestmark = pytest.mark.browser

JUNK = np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes()
BAD_UPLOADS = [
    ("junk.csv", JUNK, "contains binary data, not text"),
    ("ragged.csv", b"a,b,c\n1,2,3\n4,5\n", "line 3 has 2 fields but the header has 3"),
    ("dupes.csv", b"x,y,x\n1,2,3\n4,5,6\n", "duplicate column names: 'x'"),
    ("header.csv", b"a,b\n", "has a header but no data rows"),
    ("fake.parquet", b"a,b\n1,2\n", "is named .parquet but is not a valid Parquet file"),
]


def _upload(page: Page, name: str, content: bytes, mime: str = "text/csv") -> None:
    table_uploader(page).set_input_files(files=[{"name": name, "mimeType": mime, "buffer": content}])
    wait_for_app(page)


def _still_marketing(page: Page) -> None:
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text(MARKETING).first).to_be_visible()
    expect(sidebar.get_by_text("2,240 rows").first).to_be_visible()


def test_bad_uploads_keep_the_previous_dataset(page: Page) -> None:
    load_sample(page)
    choose_radio(page, "Upload a file")
    for name, content, message in BAD_UPLOADS:
        _upload(page, name, content)
        expect(main(page).get_by_test_id("stAlertContentError").filter(has_text=message)).to_be_visible()
        expect(main(page).get_by_text(f"the dataset in use is still {MARKETING}").first).to_be_visible()
        _still_marketing(page)
        assert_no_exception(page)

    big = b"a,b\n" + b"1234567,7654321\n" * (UPLOAD_LIMIT_MB * 2**20 // 16 + 1000)
    assert len(big) > UPLOAD_LIMIT_MB * 2**20
    _upload(page, "big.csv", big)
    expect(main(page).get_by_text(f"File must be {UPLOAD_LIMIT_MB}.0MB or smaller.").first).to_be_visible()
    _still_marketing(page)
    assert_no_exception(page)

    _upload(page, "good.csv", "city;temp\nZürich;3\nBern;5\n".encode("cp1252"))
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("good.csv").first).to_be_visible()
    expect(main(page).get_by_text("Windows-1252, semicolon-separated").first).to_be_visible()
    expect(main(page).get_by_test_id("stAlertContentError")).to_have_count(0)


def test_bad_privacy_parameters_are_refused_on_the_page(page: Page) -> None:
    go(page, "Privacy policy")
    body = main(page)
    for eps in ("0", "-1"):
        set_number(page, "ε (epsilon)", eps)
        expect(body.get_by_text("epsilon must be a finite number > 0").first).to_be_visible()
        expect(body.get_by_text("Nothing was changed; the policy in use").first).to_be_visible()
    set_number(page, "ε (epsilon)", 1)
    set_number(page, "δ (delta)", "1")
    expect(body.get_by_text("delta must be in (0, 1)").first).to_be_visible()
    set_number(page, "δ (delta)", "1e-6")
    expect(page.get_by_test_id("stAlertContentError")).to_have_count(0)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("(ε, δ)-differential privacy · ε = 1, δ = 1e-06").first).to_be_visible()
    assert_no_exception(page)
