"""Locations in a real browser: load the airports sample, compare mechanisms, release a density grid once,
download it and find it in the ledger.
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from dpcore.ledger import Ledger
from tests.browser.conftest import Server
from tests.browser.e2e import (
    AIRPORTS,
    assert_no_exception,
    click,
    download,
    go,
    main,
    sample_dataset_id,
    select,
    set_budget,
    set_number,
)

pytestmark = pytest.mark.browser

GRID = "Uniform density grid"


def test_locations_compare_release_download_and_ledger(page: Page, server: Server) -> None:
    go(page, "Locations")
    click(page, "Load the US airports sample")
    body = main(page)
    expect(body.get_by_text("Diagnostics (non-private).").first).to_be_visible()
    expect(page.get_by_test_id("stSidebar").get_by_text(AIRPORTS).first).to_be_visible()
    dataset_id = sample_dataset_id("us_airports")
    ledger = Ledger(server.ledger_url)
    before = ledger.budget(dataset_id)  # another test on this server may have spent some already
    spent = before.epsilon_spent if before else 0.0
    ledger.close()
    set_budget(page, spent + 2.0, 0.0)

    go(page, "Locations")
    set_number(page, "Trials per ε", 1)
    click(page, "Run comparison")
    expect(body.get_by_text("Comparison done").first).to_be_visible()
    expect(body.get_by_test_id("stPlotlyChart").first).to_be_visible()
    assert_no_exception(page)

    select(page, "Mechanism to release", GRID)
    set_number(page, "ε to spend", 0.5)
    click(page, "Release (spends ε = 0.5)")
    expect(body.get_by_text(f"Released {GRID} at ε = 0.5").first).to_be_visible()
    buttons = body.get_by_test_id("stDownloadButton")
    expect(buttons).to_have_count(4)
    labels = [t.replace("download", "").strip() for t in buttons.all_inner_texts()]
    [csv_name] = [n for n in labels if n.endswith(".csv")]
    [html_name] = [n for n in labels if n.endswith("-report.html")]
    [manifest_name] = [n for n in labels if n.endswith("-manifest.json")]
    assert not csv_name.startswith("DEMO-")
    table = pd.read_csv(io.BytesIO(download(page, csv_name)[1]))
    assert list(table.columns) == ["lat_lo", "lat_hi", "lon_lo", "lon_hi", "noisy_count"]
    assert len(table) > 1 and (table["lat_lo"] >= 24).all() and (table["lat_hi"] <= 50).all()
    manifest = json.loads(download(page, manifest_name)[1])
    assert manifest["mechanism"] == GRID and manifest["epsilon"] == 0.5 and manifest["delta"] == 0
    assert manifest["sampling_mode"] == "secure" and manifest["demo"] is False
    assert manifest["bounds_source"] == "curator (public region box)"
    html = download(page, html_name)[1].decode()
    assert GRID in html and "<script src=" not in html

    go(page, "Ledger")
    metric = main(page).get_by_test_id("stMetric").filter(has_text=f"{dataset_id} (Sample: US airports)")
    expect(metric).to_contain_text("ε 1.5")
    table = pd.read_csv(io.BytesIO(download(page, "Download the ledger as CSV")[1]))
    row = table[table["dataset_id"] == dataset_id].sort_values("time").iloc[-1]
    assert (row["mechanism"], row["epsilon"], row["sampling_mode"]) == (GRID, 0.5, "secure")
    assert row["user"] == "e2e-curator"
    assert_no_exception(page)
