"""Trajectories in a real browser: upload a file of GPS fixes the test generates, set the public limits,
compare DPT with both baselines, release DPT once in secure mode, download its GeoJSON and manifest, and
find the release on the Ledger page, debited once from the dataset's per-person account."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from dpcore.ledger import Ledger, dataset_id_for_name
from dpcore.plan import policy_account
from dpcore.policy import PureDP
from dpcore.trajectory.roads import DEFAULT_REGION, road_trips
from tests.browser.conftest import Server, wait_for_app
from tests.browser.e2e import (
    account_row,
    assert_no_exception,
    choose_radio,
    click,
    download,
    go,
    main,
    release_file_names,
    set_number,
    table_uploader,
)

pytestmark = pytest.mark.browser

M, L = 2, 40
BOX = {
    "South edge (lat min)": DEFAULT_REGION.lat_min,
    "North edge (lat max)": DEFAULT_REGION.lat_max,
    "West edge (lon min)": DEFAULT_REGION.lon_min,
    "East edge (lon max)": DEFAULT_REGION.lon_max,
}
DPT = "DPT synthetic trips"


def test_trajectories_upload_compare_release_and_ledger(page: Page, server: Server, tmp_path: Path) -> None:
    fixes = road_trips(80, seed=21)
    fixes["time"] = fixes["time"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    data = tmp_path / "walk_fixes.csv"
    fixes.to_csv(data, index=False)
    body = main(page)

    go(page, "Data")
    choose_radio(page, "Upload a file")
    table_uploader(page).set_input_files(str(data))
    wait_for_app(page)
    expect(page.get_by_test_id("stSidebar").get_by_text(data.name).first).to_be_visible()

    go(page, "Trajectories")
    expect(body.get_by_text("Diagnostics (non-private).").first).to_be_visible()
    expect(body.get_by_text(f"{len(fixes):,} fixes · 80 people").first).to_be_visible()
    for label, edge in BOX.items():
        set_number(page, label, edge)
    set_number(page, "Most trips per person (public)", M)
    set_number(page, "Most fixes per trip (public)", L)
    expect(body.get_by_text("trips of").first).to_be_visible()
    set_number(page, "Trials per ε", 1)
    click(page, "Run comparison")
    charts = body.get_by_test_id("stPlotlyChart")
    expect(charts).to_have_count(5)  # true trips, utility vs eps, side by side, two histograms
    assert_no_exception(page)

    dataset_id = dataset_id_for_name(data.name)
    account = policy_account(dataset_id, PureDP(1.0), per_user=M * L)
    ledger = Ledger(server.ledger_url)
    ledger.set_budget(account, 2.0)
    set_number(page, "ε to spend", 0.5)
    expect(body.get_by_text("one person's trips added or removed").first).to_be_visible()
    click(page, "Release (spends ε = 0.5)")
    expect(body.get_by_text(f"Released {DPT} at ε = 0.5").first).to_be_visible()
    names = release_file_names(page)
    assert sorted(n.rsplit(".", 1)[-1] for n in names) == ["csv", "geojson", "html", "json", "json"]
    [geo_name] = [n for n in names if n.endswith(".geojson")]
    [manifest_name] = [n for n in names if n.endswith("-manifest.json")]
    geo = json.loads(download(page, geo_name)[1])
    assert geo["type"] == "FeatureCollection" and geo["features"]
    assert {f["geometry"]["type"] for f in geo["features"]} <= {"LineString", "Point"}
    manifest = json.loads(download(page, manifest_name)[1])
    assert manifest["mechanism"] == "dpt" and manifest["sampling_mode"] == "secure" and not manifest["demo"]
    assert manifest["account"] == account.key and "one person's trips" in manifest["guarantee"]
    assert not any(step["data_derived"] for step in manifest["preparation"])
    status = ledger.budget(account)
    ledger.close()
    assert status.n_releases == 1 and status.epsilon_spent == pytest.approx(0.5)

    go(page, "Ledger")
    expect(body.get_by_role("heading", name=data.name)).to_be_visible()
    row = account_row(page, account.key)
    assert row["releases"] == "1" and float(row["ε left"]) == pytest.approx(1.5, rel=1e-3)
    assert_no_exception(page)
