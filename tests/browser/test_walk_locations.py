"""Locations in a real browser: load the airports sample, compare mechanisms, release a density grid once,
download it and find it in the ledger, debited once from the dataset's differential privacy account.
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from dpcore.ledger import Ledger
from dpcore.plan import ReleasePlan, policy_account
from dpcore.policy import DEFINITIONS
from tests.browser.conftest import Server
from tests.browser.e2e import (
    AIRPORTS,
    account_row,
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
from ui.state import DEFAULT_POLICY

pytestmark = pytest.mark.browser

GRID = "Uniform density grid"
REGION = "public region: lat 24.0..50.0, lon -125.0..-66.0"  # the sample's documented box, exactly


def test_locations_compare_release_download_and_ledger(page: Page, server: Server) -> None:
    go(page, "Locations")
    click(page, "Load the US airports sample")
    body = main(page)
    expect(body.get_by_text("Diagnostics (non-private).").first).to_be_visible()
    expect(page.get_by_test_id("stSidebar").get_by_text(AIRPORTS).first).to_be_visible()
    dataset_id = sample_dataset_id("us_airports")
    account = policy_account(dataset_id, DEFAULT_POLICY)  # ε-DP spends debit the default policy's account
    ledger = Ledger(server.ledger_url)
    before = ledger.budget(account)  # another test on this server may have spent some already
    spent, n_before = (before.epsilon_spent, before.n_releases) if before else (0.0, 0)
    for other in ledger.budgets(dataset_id):  # the ledger also charges the dataset's related accounts
        if other.account != account.key and other.mode == account.mode:  # (geo-indistinguishability, set
            ledger.set_budget(other.account, other.epsilon_spent + 10.0, other.delta_total)  # by other tests)
    set_budget(page, spent + 2.0, 0.0)

    go(page, "Locations")
    set_number(page, "Trials per ε", 1)
    click(page, "Run comparison")
    expect(body.get_by_text("Comparison done").first).to_be_visible()
    expect(body.get_by_test_id("stPlotlyChart").first).to_be_visible()
    assert_no_exception(page)

    select(page, "Mechanism to release", GRID)
    set_number(page, "ε to spend", 0.5)
    expect(body.get_by_test_id("stDownloadButton")).to_have_count(0)  # nothing to download before paying
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
    assert (manifest["mechanism"], manifest["mechanism_label"]) == ("uniform_grid", GRID)
    assert manifest["epsilon"] == 0.5 and manifest["delta"] == 0 and manifest["definition"] == "pure_dp"
    assert manifest["sampling_mode"] == "secure" and manifest["demo"] is False and manifest["seed"] is None
    assert manifest["account"] == account.key and manifest["user"] == "e2e-curator"
    # the region is a public input the curator gave (a preparation step), and nothing read from the data
    [region] = [s for s in manifest["preparation"] if s["kind"] == "public_region"]  # typed step
    assert (region["step"], region["data_derived"]) == (REGION, False)
    assert (region["lat_min"], region["lat_max"], region["lon_min"], region["lon_max"]) == (24, 50, -125, -66)
    columns = 'location columns: latitude "latitude", longitude "longitude", user none'
    words = [(s["step"], s["data_derived"]) for s in manifest["preparation"]]
    assert words == [(columns, False), (REGION, False)]
    assert not any(step["data_derived"] for step in manifest["preparation"])
    plan = ReleasePlan.from_manifest(manifest)  # rebuilt from the manifest: same guarantee, same account
    assert plan.account == account and plan.cost == (0.5, 0.0)
    html = download(page, html_name)[1].decode()
    assert GRID in html and REGION in html and "<script src=" not in html

    status = ledger.budget(account)  # debited once, by exactly the release's ε
    ledger.close()
    assert status.n_releases == n_before + 1
    assert status.epsilon_spent == pytest.approx(spent + 0.5) and status.epsilon_total == spent + 2.0

    go(page, "Ledger")
    expect(body.get_by_role("heading", name=AIRPORTS)).to_be_visible()  # budgets under the dataset's name
    row = account_row(page, account.key)
    assert (row["mode"], row["neighbour relation"], row["releases"]) == (
        "release",
        "one row added or removed",
        str(n_before + 1),
    )
    assert float(row["ε left"]) == pytest.approx(status.epsilon_left, rel=1e-3)
    assert float(row["ε total"]) == pytest.approx(spent + 2.0, rel=1e-3)
    table = pd.read_csv(io.BytesIO(download(page, "Download the ledger as CSV")[1]))
    [row] = table[table["request id"] == manifest["request_id"]].to_dict("records")
    assert (row["dataset"], row["dataset id"], row["mechanism"]) == (AIRPORTS, dataset_id, GRID)
    assert (row["ε"], row["δ"], row["mode"], row["user"]) == (0.5, 0, "release", "e2e-curator")
    assert (row["privacy definition"], row["account"]) == (DEFINITIONS["pure_dp"][0], account.key)
    assert isinstance(row["artifact SHA-256"], str) and len(row["artifact SHA-256"]) == 64
    assert_no_exception(page)
