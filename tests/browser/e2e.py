"""Small Playwright helpers for the dashboard: navigation inside one session, widgets, downloads."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from dpcore.data import fingerprint
from dpcore.data import load_sample as load_sample_table
from dpcore.ledger import dataset_id_for_name
from tests.browser.conftest import wait_for_app
from ui.datasets import SAMPLE_CHOICES

TRACE = re.compile(r"Traceback \(most recent call last\)|File \"/|\b\w+(Error|Exception|Warning): ")
MARKETING = "Sample: Marketing Campaign"
AIRPORTS = "Sample: US airports"


BUDGET_REASON = "Reason for this budget (recorded in the ledger with your name)"

def sample_fingerprint(name: str = "marketing_campaign") -> str:
    """SHA-256 fingerprint of a bundled sample's table."""
    return fingerprint(load_sample_table(name))


def sample_dataset_id(name: str = "marketing_campaign") -> str:
    """Ledger id of a bundled sample: from the name the Data page gives it (its label), which carries the
    budget."""
    return dataset_id_for_name(next(label for label, key in SAMPLE_CHOICES.items() if key == name))


def go(page: Page, title: str) -> None:
    """Open a page through the sidebar navigation (keeps the Streamlit session and its state)."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
    wait_for_app(page)
    expect(page.get_by_role("heading", level=1).first).to_be_visible()


def main(page: Page) -> Locator:
    """The page body (not the sidebar)."""
    return page.get_by_test_id("stMain")


def click(page: Page, name: str, *, exact: bool = False) -> None:
    main(page).get_by_role("button", name=name, exact=exact).click()
    wait_for_app(page)


def load_sample(page: Page, label: str = MARKETING) -> None:
    go(page, "Data")
    main(page).get_by_test_id("stRadio").first.get_by_text(label, exact=True).click()
    wait_for_app(page)
    click(page, f"Load {label}")
    expect(main(page).get_by_text("fingerprint").first).to_be_visible()


def multiselect(page: Page, label: str, options: list[str]) -> None:
    """Pick ``options`` in the multiselect labelled ``label``."""
    box = main(page).get_by_test_id("stMultiSelect").filter(has_text=label)
    for option in options:
        box.locator("input").first.click()
        box.locator("input").first.fill(option)
        page.get_by_role("option", name=option, exact=True).click()
        wait_for_app(page)
        page.keyboard.press("Escape")
    for option in options:
        expect(box.get_by_label(option, exact=True).first).to_be_visible()


def set_number(page: Page, label: str, value: float | str, *, scope: Locator | None = None) -> None:
    """Type into a number input and commit it (Enter), then wait for the rerun."""
    box = (scope or main(page)).get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")
    wait_for_app(page)


def choose_radio(page: Page, option: str, *, scope: Locator | None = None) -> None:
    (scope or main(page)).get_by_test_id("stRadio").get_by_text(option, exact=True).click()
    wait_for_app(page)


def select(page: Page, label: str, option: str, *, scope: Locator | None = None) -> None:
    """Choose ``option`` in the selectbox labelled ``label`` (retried if a rerun closes the list)."""
    box = (scope or main(page)).get_by_test_id("stSelectbox").filter(has_text=label)
    choice = page.get_by_role("option", name=option, exact=True)
    for attempt in range(3):
        wait_for_app(page)
        box.locator("input").first.click()
        try:
            choice.click(timeout=3_000)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
            if attempt == 2:
                raise
    wait_for_app(page)
    expect(box.locator("input").first).to_have_value(option)


def table_uploader(page: Page) -> Locator:
    """The Data page's file input for a table (not the data dictionary's, drawn once a table is loaded)."""
    box = main(page).get_by_test_id("stFileUploader").filter(has_text="Upload a table")
    return box.get_by_test_id("stFileUploaderDropzoneInput")


def import_dictionary(page: Page, text: str, name: str = "dictionary.csv") -> None:
    """On the Data page: import a data dictionary CSV (one upload) and wait until it is applied."""
    box = main(page).get_by_test_id("stFileUploader").filter(has_text="Import a data dictionary")
    chooser = box.get_by_test_id("stFileUploaderDropzoneInput")
    chooser.set_input_files(files=[{"name": name, "mimeType": "text/csv", "buffer": text.encode()}])
    wait_for_app(page)
    expect(main(page).get_by_text(f"Imported {name}").first).to_be_visible()


def dictionary_of(features: list[str], bounds: dict[str, tuple[float, float]] | None = None) -> str:
    """A data dictionary making ``features`` the features, with public ``bounds`` for some of them."""
    rows = ["column,feature,lower,upper"]
    for name in features:
        lo, hi = (bounds or {}).get(name, ("", ""))
        rows.append(f"{name},true,{lo},{hi}")
    return "\n".join(rows) + "\n"


def prepare_with_data_bounds(
    page: Page, features: list[str], scaling: str = "Min-max to [-1, 1] using the public bounds"
) -> None:
    """On the Data page: import the features, allow data-derived bounds (with its warning), Prepare."""
    import_dictionary(page, dictionary_of(features))
    main(page).get_by_text("Use bounds from the data (leaks information: not private").click()
    wait_for_app(page)
    expect(main(page).get_by_text("reveal the extreme values").first).to_be_visible()
    choose_radio(page, scaling)
    click(page, "Prepare")
    expect(main(page).get_by_text("features ready").first).to_be_visible()


def set_budget(page: Page, epsilon: float, delta: float) -> None:
    go(page, "Privacy policy")
    set_number(page, "Total ε for this dataset", epsilon)
    set_number(page, "Total δ for this dataset (0 for pure DP)", delta)
    set_number(page, BUDGET_REASON, "e2e budget")
    click(page, "Save budget")
    expect(main(page).get_by_text("Budget saved").first).to_be_visible()


def download(page: Page, name: str, scope: Locator | None = None) -> tuple[str, bytes]:
    """Click the download button ``name``; return the suggested file name and the bytes."""
    with page.expect_download() as info:
        (scope or main(page)).get_by_role("button", name=name).first.click()
    dl = info.value
    path = dl.path()
    return dl.suggested_filename, Path(path).read_bytes()


def release_file_names(page: Page) -> list[str]:
    """The file names on the shown release's download buttons, once its manifest button has rendered.

    The "Released ..." message can render before the buttons, so read them only after the manifest's.
    """
    buttons = main(page).get_by_test_id("stDownloadButton")
    expect(buttons.filter(has_text="-manifest.json")).to_be_visible()
    return [t.replace("download", "").strip() for t in buttons.all_inner_texts()]


def zip_members(content: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def manifest_of(json_bytes: bytes) -> dict[str, Any]:
    doc = json.loads(json_bytes)
    return doc.get("manifest", doc)


def table_rows(frame: Locator) -> list[dict[str, str]]:
    """The rows an ``st.dataframe`` draws, as header -> cell text, read from the accessible table the grid
    keeps inside its canvas (only the rows in view: enough for the short tables checked here)."""
    expect(frame.locator("table[role=grid] td").first).to_be_attached()
    return frame.locator("table[role=grid]").first.evaluate(
        """table => {
            const heads = [...table.querySelectorAll("thead th")].map(th => th.textContent);
            return [...table.querySelectorAll("tbody tr")].map(tr => Object.fromEntries(
                [...tr.querySelectorAll("td")].map((td, i) => [heads[i], td.textContent])));
        }"""
    )


def account_row(page: Page, account_key: str) -> dict[str, str]:
    """The Ledger page's budget row of one account (its "account" column is ``account_key``)."""
    frames = main(page).get_by_test_id("stDataFrame").filter(  # budget tables only: the page also draws
        has=page.locator("table[role=grid] thead th", has_text="ε left")  # tables that may be empty
    )
    expect(frames.first).to_be_visible()
    rows = [r for i in range(frames.count()) for r in table_rows(frames.nth(i))]
    rows = [r for r in rows if r.get("account") == account_key]
    assert len(rows) == 1, f"{len(rows)} budget rows for account {account_key!r} on the Ledger page"
    return rows[0]


def errors_on_page(page: Page) -> list[str]:
    return [t.strip() for t in main(page).get_by_test_id("stAlertContentError").all_inner_texts()]


def assert_no_exception(page: Page) -> None:
    """No Streamlit exception box and no Python traceback text anywhere on the page."""
    expect(page.get_by_test_id("stException")).to_have_count(0)
    body = page.locator("body").inner_text()
    found = TRACE.search(body)
    assert found is None, f"{found.group(0)!r} reached the page:\n{body[:2000]}"


def breast_cancer_files() -> tuple[bytes, str]:
    """Breast cancer (scikit-learn's bundled copy: 569 rows, 30 features and the diagnosis) as an upload,
    and a data dictionary a curator could hold for it: every feature with public bounds 0 and a round
    number above the documented maximum, its unit, the diagnosis a categorical non-feature."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer(as_frame=True)
    table = bunch.frame.rename(columns={"target": "diagnosis"})
    table["diagnosis"] = table["diagnosis"].map({0: "malignant", 1: "benign"})
    rows = ["column,kind,feature,lower,upper,unit"]
    for name in bunch.feature_names:
        top = float(table[name].max())
        upper = 10 ** np.ceil(np.log10(top)) if top > 0 else 1
        unit = "mm" if name.endswith("radius") or name.endswith("perimeter") else ""
        rows.append(f"{name},numeric,true,0,{upper:g},{unit}")
    rows.append("diagnosis,categorical,false,,,")
    return table.to_csv(index=False).encode(), "\n".join(rows) + "\n"
