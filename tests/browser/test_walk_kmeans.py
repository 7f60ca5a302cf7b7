"""K-means in a real browser: compare mechanisms, release colored noise once, download, see it in the
ledger; then the same release in demo mode (marked DEMO everywhere, seed honoured).
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from dpcore.ledger import Ledger
from tests.browser.conftest import Server, wait_for_app
from tests.browser.e2e import (
    assert_no_exception,
    choose_radio,
    click,
    download,
    go,
    load_sample,
    main,
    prepare_with_data_bounds,
    sample_dataset_id,
    sample_fingerprint,
    select,
    set_budget,
    set_number,
)

pytestmark = pytest.mark.browser

COLORED = "Colored Gaussian (optimal)"
DEMO = "Demo mode (fixed seed, outputs marked DEMO - not a privacy release)"
RELEASE_MODE = "Release mode (secure sampling)"
DATASET_ID = sample_dataset_id()


def _release_files(page: Page) -> dict[str, bytes]:
    """Download every file of the shown release (CSV, JSON, manifest, HTML report)."""
    files = {}
    body = main(page)
    buttons = body.get_by_test_id("stDownloadButton")
    expect(buttons).to_have_count(4)
    for label in buttons.all_inner_texts():
        name = label.replace("download", "").strip()
        suggested, content = download(page, name)
        assert suggested == name
        files[name] = content
    return files


def _one(files: dict[str, bytes], suffix: str) -> tuple[str, bytes]:
    found = [(n, c) for n, c in files.items() if n.endswith(suffix) and not n.endswith("-manifest.json")]
    if suffix == "-manifest.json":
        found = [(n, c) for n, c in files.items() if n.endswith(suffix)]
    assert len(found) == 1, (suffix, sorted(files))
    return found[0]


def _check_release(files: dict[str, bytes], *, demo: bool, k: int) -> pd.DataFrame:
    csv_name, csv = _one(files, ".csv")
    table = pd.read_csv(io.BytesIO(csv))
    assert len(table) == k and table.notna().all().all()
    assert csv_name.startswith("DEMO-") == demo
    manifest = json.loads(_one(files, "-manifest.json")[1])
    assert manifest["mechanism"] == COLORED and manifest["epsilon"] == 0.5 and manifest["delta"] == 1e-6
    assert manifest["definition"] == "local_pdp" and manifest["dataset_fingerprint"].startswith(DATASET_ID)
    assert manifest["sampling_mode"] == ("demo" if demo else "secure")
    assert manifest["demo"] is demo and manifest["user"] == "e2e-curator"
    assert ("DEMO - not a privacy release" in json.dumps(manifest)) == demo
    bundle = json.loads(_one(files, f"{csv_name[:-4]}.json")[1])
    assert bundle["manifest"] == manifest and len(bundle["data"]) == k
    html = _one(files, "-report.html")[1].decode()
    assert COLORED in html and "0.5" in html and "not differential privacy" in html
    assert "<script src=" not in html  # self-contained: plotly.js inlined
    assert ("DEMO - not a privacy release" in html) == demo
    return table


def test_curator_walk_kmeans(page: Page, server: Server) -> None:
    expect(page.get_by_role("heading", name="Differentially private centroids and locations")).to_be_visible()
    sidebar = page.get_by_test_id("stSidebar")
    load_sample(page)
    body = main(page)
    expect(body.get_by_text("2,240 rows × 29 columns").first).to_be_visible()
    expect(sidebar.get_by_text("No privacy budget set yet").first).to_be_visible()
    prepare_with_data_bounds(page, ["Recency", "MntWines"])
    expect(body.get_by_text("2,240 rows × 2 features ready").first).to_be_visible()
    expect(body.get_by_text("public bounds taken from the data").first).to_be_visible()

    go(page, "Privacy policy")
    select(page, "Definition", "Local (ε, δ) guarantee for this dataset (not DP)")
    expect(body.get_by_text("NOT differential privacy").first).to_be_visible()
    set_budget(page, 3.0, 1e-5)
    expect(sidebar.get_by_text("Budget left (ε)").first).to_be_visible()
    ledger = Ledger(server.ledger_url)
    status = ledger.budget(DATASET_ID)
    assert (status.epsilon_total, status.delta_total, status.n_releases) == (3.0, 1e-5, 0)

    go(page, "K-means")
    expect(body.get_by_text("Diagnostics (non-private).").first).to_be_visible()
    set_number(page, "K (number of clusters)", 3)
    select(page, "Mechanism to release", COLORED)
    set_number(page, "ε to spend", 0.5)
    set_number(page, "δ to spend", "1e-6")
    click(page, "Release (spends ε = 0.5)")
    expect(body.get_by_text(f"Released {COLORED} at ε = 0.5").first).to_be_visible()
    _check_release(_release_files(page), demo=False, k=3)

    # demo mode: marked DEMO on the page, in the file names, manifest and report; the seed is honoured
    choose_radio(page, DEMO, scope=sidebar)
    set_number(page, "Demo seed", 7, scope=sidebar)
    expect(body.get_by_text("DEMO mode (seed 7)").first).to_be_visible()
    click(page, "Release (spends ε = 0.5)")
    expect(body.get_by_text("DEMO - not a privacy release: made with a fixed seed").first).to_be_visible()
    first = _check_release(_release_files(page), demo=True, k=3)
    body.get_by_text("Make another release with these settings").click()
    wait_for_app(page)
    click(page, "Release again")
    second = _check_release(_release_files(page), demo=True, k=3)
    pd.testing.assert_frame_equal(first, second)  # same seed, same noise
    choose_radio(page, RELEASE_MODE, scope=sidebar)
    expect(sidebar.get_by_label("Demo seed")).to_have_count(0)  # release mode takes no seed
    assert [r.sampling_mode for r in ledger.releases(DATASET_ID)] == ["secure", "demo", "demo"]
    ledger.close()

    # the comparison (diagnostics, no budget) runs last: its charts make every later rerun slower
    set_number(page, "Trials per ε", 2)
    click(page, "Run comparison")
    expect(body.get_by_test_id("stPlotlyChart").nth(2)).to_be_visible()
    assert_no_exception(page)

    go(page, "Ledger")
    metric = body.get_by_test_id("stMetric").filter(has_text=f"{DATASET_ID} (Sample: Marketing Campaign)")
    expect(metric).to_contain_text("ε 1.5")
    name, csv = download(page, "Download the ledger as CSV")
    assert name == "ledger.csv"
    rows = pd.read_csv(io.BytesIO(csv)).sort_values("time")
    assert rows["mechanism"].tolist() == [COLORED] * 3
    assert rows["sampling_mode"].tolist() == ["secure", "demo", "demo"]
    assert set(rows["user"]) == {"e2e-curator"} and set(rows["definition"]) == {"local_pdp"}
    assert rows["epsilon"].tolist() == [0.5] * 3 and rows["delta"].tolist() == [1e-6] * 3
    assert set(rows["dataset_fingerprint"]) == {sample_fingerprint()}
    zip_name, _ = download(page, "Download the release files (zip)")
    assert zip_name.startswith("release-")
    assert_no_exception(page)
