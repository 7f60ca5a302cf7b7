"""The curator's Locations walk in Chromium with an uploaded file the app does not ship (Los Angeles visits).

Upload ``tests/data/la_points.csv``, set geo-indistinguishability (level 1 within 500 m, budget 3 levels),
choose a custom public box around Los Angeles, the user column and HS on the Locations page, compare, leave
the page and come back, reload, release planar Laplace once, then open a second tab: nothing resets, the
release stays in the box and the geo account shows 2 of 3 levels left everywhere.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from playwright.sync_api import Locator, Page, expect

from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from dpcore.policy import GeoIndistinguishability
from tests.browser.conftest import Server, screenshot, wait_for_app
from tests.browser.e2e import (
    BUDGET_REASON,
    assert_no_exception,
    choose_radio,
    click,
    download,
    go,
    main,
    release_file_names,
    select,
    set_number,
    table_uploader,
)
from tests.paths import DATA as TEST_DATA

pytestmark = pytest.mark.browser

DATA = TEST_DATA / "la_points.csv"
NAME = DATA.name
GEO = "Geo-indistinguishability (level l within radius r)"
CUSTOM = "Custom (enter the box below)"
BOX = {  # a public box around Los Angeles, wider than the data
    "South edge (lat min)": 33.6,
    "North edge (lat max)": 34.4,
    "West edge (lon min)": -118.9,
    "East edge (lon max)": -117.9,
}
HS = "city (25,000)"
PLANAR = "Planar Laplace (per location)"
PRILOCATION = "PriLocation (users' visits)"
MOST = 5  # public most locations per user
USER_LABEL = "User column (a user's locations are protected together)"
HS_LABEL = "Hierarchy level to protect HS (metres)"
MOST_LABEL = "Most locations per user (public)"
STALE = "The settings changed since this comparison ran"


def _kept_rows() -> int:
    """Rows a release keeps: min(visits, MOST) per user of the file."""
    counts = pd.read_csv(DATA)["user"].value_counts()
    return int(np.minimum(counts, MOST).sum())


def _input(page: Page, test_id: str, label: str) -> Locator:
    return main(page).get_by_test_id(test_id).filter(has_text=label).locator("input").first


EXPECTED = {  # (widget test id, label) -> the value shown
    ("stSelectbox", "Latitude column (degrees)"): "latitude",  # inferred from the column names
    ("stSelectbox", "Longitude column (degrees)"): "longitude",
    **{("stNumberInput", label): f"{edge:.4f}" for label, edge in BOX.items()},
    ("stSelectbox", "Public region"): CUSTOM,
    ("stSelectbox", USER_LABEL): "user",
    ("stSelectbox", HS_LABEL): HS,
    ("stSelectbox", "Mechanism to release"): PLANAR,
    ("stNumberInput", MOST_LABEL): str(MOST),
}


def _expect_settings(page: Page) -> None:
    """The Locations page shows every setting the curator chose (region box, user column, HS, mechanism,
    most locations per user), waiting for a rerun to draw them."""
    for (test_id, label), value in EXPECTED.items():
        expect(_input(page, test_id, label), f"{label} should be {value}").to_have_value(value)


def _charts(page: Page, count: int | None = None) -> list[str]:
    """Title and traces (all their values) of every chart drawn on the page, as JSON; with ``count``, once
    that many charts have rendered (after a reload they appear one by one).

    The axis ranges are left out (a map at equal ground scale widens one to fit its container), and so
    are bold tags: Streamlit's chart theme wraps a title in <b> again each time a chart in columns is
    drawn anew.
    """
    charts = main(page).get_by_test_id("stPlotlyChart")
    expect(charts.first).to_be_visible()
    if count is not None:
        expect(charts).to_have_count(count)
    spec = "el => JSON.stringify([el.layout.title.text.replace(/<\\/?b>/g, ''), el.data])"
    return [charts.nth(i).locator(".js-plotly-plot").evaluate(spec) for i in range(charts.count())]


def _left_in_sidebar(page: Page, left: float) -> None:
    expect(page.get_by_test_id("stSidebar").get_by_test_id("stMetricValue")).to_have_text(f"{left:g}")


def _budget_left(page: Page, left: float) -> None:
    """The sidebar and the release panel both read `left` levels from the geo account."""
    _left_in_sidebar(page, left)
    caption = main(page).get_by_text("Budget left on this account (geo_ind").first
    expect(caption).to_contain_text(f"level l = {left:g}")


def _region(page: Page) -> Locator:
    return main(page).get_by_role("heading", name="Public region", exact=True)


def _shot(page: Page, target: Locator, name: str) -> None:
    """Scroll ``target`` into view (the app scrolls inside its own container), then take the screenshot."""
    target.scroll_into_view_if_needed()
    screenshot(page, name)


def test_curator_walk_uploaded_la_locations(page: Page, server: Server) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    body, sidebar = main(page), page.get_by_test_id("stSidebar")

    # 1. Data: upload the file; latitude/longitude inferred, no missing values
    go(page, "Data")
    choose_radio(page, "Upload a file")
    table_uploader(page).set_input_files(str(DATA))
    wait_for_app(page)
    expect(sidebar.get_by_text(NAME).first).to_be_visible()
    n_rows = len(pd.read_csv(DATA))
    expect(body.get_by_text(f"{n_rows} rows × 3 columns").first).to_be_visible()
    expect(body.get_by_text("No missing or infinite values in the current table.")).to_be_visible()
    assert_no_exception(page)
    _shot(page, body.get_by_text("No missing or infinite values"), "upload-la-1-data")

    # 2. Privacy policy: level 1 within 500 m, a budget of 3 levels; the sidebar says the same
    go(page, "Privacy policy")
    select(page, "Definition", GEO)
    set_number(page, "Privacy level l", 1)
    set_number(page, "within radius r (metres)", 500)
    choose_radio(page, "one user: all of their rows (Locations page with a user column)")  # its own account
    set_number(page, "Most locations per user (public; the Locations page's maximum)", MOST)
    set_number(page, "Total level l for this dataset", 3)
    set_number(page, BUDGET_REASON, "e2e budget")
    expect(main(page).get_by_label("Total δ for this dataset (0 for pure DP)")).to_have_count(0)  # no δ here
    click(page, "Save budget")
    expect(body.get_by_text("Budget saved").first).to_be_visible()
    expect(sidebar.get_by_text("level 1 within 500 m").first).to_be_visible()
    _left_in_sidebar(page, 3)
    screenshot(page, "upload-la-2-policy")

    # 3. Locations: no region is chosen for an uploaded file; the curator enters a box around LA
    go(page, "Locations")
    expect(body.get_by_text("Choose a public region for this dataset").first).to_be_visible()
    expect(_input(page, "stSelectbox", "Public region")).to_have_value("")  # not silently Contiguous US
    expect(body.get_by_test_id("stPlotlyChart")).to_have_count(0)
    select(page, "Public region", CUSTOM)
    for label, edge in BOX.items():
        set_number(page, label, edge)
    select(page, USER_LABEL, "user")
    select(page, HS_LABEL, HS)
    expect(body.get_by_text("lie outside the public region")).to_have_count(0)
    expect(body.get_by_text("level l = 1 within r = 500 m", exact=False).first).to_be_visible()
    expect(body.get_by_label("Privacy level l")).to_have_count(0)  # set on the Privacy policy page only
    set_number(page, "Trials per ε", 1)
    click(page, "Run comparison")
    expect(body.get_by_text("Comparison done").first).to_be_visible()
    select(page, "Mechanism to release", PLANAR)
    set_number(page, MOST_LABEL, MOST)
    _expect_settings(page)
    charts = _charts(page)
    expect(body.get_by_text(STALE)).to_have_count(0)
    release = body.get_by_role("button", name="Release (spends level l = 1)")
    expect(release).to_be_enabled()
    _budget_left(page, 3)
    assert_no_exception(page)
    _shot(page, _region(page), "upload-la-3-locations-region")
    _shot(page, body.get_by_test_id("stPlotlyChart").first, "upload-la-3-locations-compared")
    _shot(page, release, "upload-la-3-release-panel")

    # 4. Leave for the Ledger and come back: every setting and the charts are kept
    go(page, "Ledger")
    go(page, "Locations")
    _expect_settings(page)
    assert _charts(page, len(charts)) == charts
    expect(body.get_by_text(STALE)).to_have_count(0)
    expect(release).to_be_enabled()
    _shot(page, _region(page), "upload-la-4-back-from-ledger")

    # 5. Reload (same ?s= token): the dataset, policy and settings come back
    url = page.url
    assert "s=" in url
    page.reload()
    wait_for_app(page)
    assert page.url == url
    expect(sidebar.get_by_text(NAME).first).to_be_visible()
    expect(sidebar.get_by_text("level 1 within 500 m").first).to_be_visible()
    _expect_settings(page)
    assert _charts(page, len(charts)) == charts  # the last comparison comes back with the plan
    expect(body.get_by_text(STALE)).to_have_count(0)
    # the release still checks the restored comparison: PriLocation with another HS is disabled, naming HS
    select(page, "Mechanism to release", PRILOCATION)
    select(page, HS_LABEL, "state (300,000)")
    reason = body.get_by_text(f"The {HS_LABEL} changed since the last comparison").first
    expect(reason).to_be_visible()
    expect(body.get_by_role("button", name=re.compile(r"^Release \(spends"))).to_be_disabled()
    _shot(page, reason, "upload-la-5-reloaded-hs-changed")
    select(page, HS_LABEL, HS)
    select(page, "Mechanism to release", PLANAR)
    expect(release).to_be_enabled()
    _shot(page, _region(page), "upload-la-5-reloaded")

    # 6. Release planar Laplace once (release mode): inside the box, one row per kept visit, in the ledger
    expect(sidebar.get_by_role("radio", name="Release mode (secure sampling)")).to_be_checked()
    expect(release).to_be_enabled()
    release.click()
    wait_for_app(page)
    expect(body.get_by_text(f"Released {PLANAR} at level l = 1").first).to_be_visible()
    labels = release_file_names(page)
    [csv_name] = [n for n in labels if n.endswith(".csv")]
    [manifest_name] = [n for n in labels if n.endswith("-manifest.json")]
    assert not csv_name.startswith("DEMO-")
    table = pd.read_csv(io.BytesIO(download(page, csv_name)[1]))
    assert list(table.columns) == ["lat", "lon"] and len(table) == _kept_rows()
    lat_lo, lat_hi, lon_lo, lon_hi = BOX.values()
    assert table["lat"].between(lat_lo, lat_hi).all() and table["lon"].between(lon_lo, lon_hi).all()
    manifest = json.loads(download(page, manifest_name)[1])
    assert manifest["dataset_name"] == NAME and manifest["sampling_mode"] == "secure"
    assert manifest["epsilon"] == 1 and manifest["parameters"]["radius_m"] == 500
    assert manifest["parameters"]["max_per_user"] == MOST
    region = manifest["details"]["region"]
    assert (region["lat_min"], region["lat_max"], region["lon_min"], region["lon_max"]) == tuple(BOX.values())
    _budget_left(page, 2)
    _shot(page, body.get_by_text(f"Released {PLANAR}").first, "upload-la-6-released")

    go(page, "Ledger")
    expect(body.get_by_role("heading", name=NAME)).to_be_visible()  # budgets listed under the file's name
    picker = _input(page, "stSelectbox", "Release").input_value()
    assert NAME in picker and PLANAR in picker and manifest["request_id"][:8] in picker  # newest by default
    rows = pd.read_csv(io.BytesIO(download(page, "Download the ledger as CSV")[1]))
    assert rows["time (UTC)"].is_monotonic_decreasing  # newest first
    newest = rows.iloc[0]
    assert newest["request id"] == manifest["request_id"]
    assert (newest["dataset"], newest["mechanism"], newest["mode"]) == (NAME, PLANAR, "release")
    assert newest["ε"] == 1 and newest["privacy definition"].startswith("geo-indistinguishability")
    _left_in_sidebar(page, 2)
    ledger = Ledger(server.ledger_url)
    ds_id = newest["dataset id"]
    geo = GeoIndistinguishability.from_level(1, 500)
    status = ledger.budget(policy_account(ds_id, geo, "secure", MOST))  # the per-user account
    ledger.close()
    assert (status.epsilon_total, status.epsilon_left, status.n_releases) == (3, 2, 1)
    screenshot(page, "upload-la-6-ledger")

    # 7. A second tab on the same URL: same dataset, settings and budget left
    second = page.context.new_page()
    second.goto(url)
    wait_for_app(second)
    # the session is restored (its dataset in the sidebar) before the curator moves on
    expect(second.get_by_test_id("stSidebar").get_by_text(NAME).first).to_be_visible()
    go(second, "Locations")
    _expect_settings(second)
    assert _charts(second) == charts
    _budget_left(second, 2)
    assert_no_exception(second)
    _shot(second, _region(second), "upload-la-7-second-tab")
