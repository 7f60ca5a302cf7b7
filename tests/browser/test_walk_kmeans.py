"""K-means in a real browser: release colored noise once, download, see it in the ledger, debited once from
the dataset's local-guarantee account; then the same release in demo mode (its own demo account, marked DEMO
everywhere, seed honoured); compare mechanisms last.
"""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from dpcore.artifacts import short_id
from dpcore.ledger import Account, Ledger
from dpcore.manifest import DEMO_NOTICE
from dpcore.plan import ReleasePlan, policy_account
from dpcore.policy import make_policy
from tests.browser.conftest import Server, wait_for_app
from tests.browser.e2e import (
    MARKETING,
    account_row,
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
    zip_members,
)

pytestmark = pytest.mark.browser

COLORED = "Colored Gaussian (optimal)"
COST = "ε = 0.5, δ = 1e-06"  # what the colored release at ε = 0.5, δ = 1e-6 spends
RELEASE = f"Release (spends {COST})"
DEMO = "Demo mode (fixed seed, outputs marked DEMO - not a privacy release)"
RELEASE_MODE = "Release mode (secure sampling)"
DATASET_ID = sample_dataset_id()
FINGERPRINT = sample_fingerprint()
LOCAL = make_policy("local_pdp", epsilon=1.0, delta=1e-6)  # the account does not depend on ε and δ
ACCOUNT = policy_account(DATASET_ID, LOCAL)
DEMO_ACCOUNT = policy_account(DATASET_ID, LOCAL, "demo")


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
    if demo:  # the mark travels inside the file, not only in its name
        assert table.columns[0] == "notice" and set(table["notice"]) == {DEMO_NOTICE}
    else:
        assert "notice" not in table.columns
    manifest = json.loads(_one(files, "-manifest.json")[1])
    assert (manifest["mechanism"], manifest["mechanism_label"]) == ("colored", COLORED)
    assert manifest["epsilon"] == 0.5 and manifest["delta"] == 1e-6
    assert manifest["definition"] == "local_pdp" and manifest["dataset_fingerprint"] == FINGERPRINT
    assert manifest["sampling_mode"] == ("demo" if demo else "secure")
    assert manifest["seed"] == (7 if demo else None)
    assert manifest["demo"] is demo and manifest["user"] == "e2e-curator"
    assert manifest["account"] == (DEMO_ACCOUNT if demo else ACCOUNT).key  # demo spends its own account
    assert manifest["is_local"] is True and "not differential privacy" in manifest["local_notice"]
    assert ("DEMO - not a privacy release" in json.dumps(manifest)) == demo
    # the bounds were read from the data: the plan records it, and the guarantee says it does not cover it
    assert any(s["data_derived"] for s in manifest["preparation"])
    assert "does not cover that preparation" in manifest["guarantee"]
    assert ReleasePlan.from_manifest(manifest).account.key == manifest["account"]
    bundle = json.loads(_one(files, f"{csv_name[:-4]}.json")[1])
    assert bundle["manifest"] == manifest and len(bundle["data"]) == k
    html = _one(files, "-report.html")[1].decode()
    assert COLORED in html and "0.5" in html and "not differential privacy" in html
    assert "<script src=" not in html  # self-contained: plotly.js inlined
    assert ("DEMO - not a privacy release" in html) == demo
    return table.drop(columns="notice") if demo else table


def _status(ledger: Ledger, account: Account) -> tuple[float, float, float, int]:
    status = ledger.budget(account)
    assert status is not None, f"no budget on {account.key}"
    return status.epsilon_total, status.epsilon_spent, status.delta_total, status.n_releases


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
    assert _status(ledger, ACCOUNT) == (3.0, 0.0, 1e-5, 0)
    assert ledger.budget(DEMO_ACCOUNT) is None  # the real budget is not a demo budget

    go(page, "K-means")
    expect(body.get_by_text("Diagnostics (non-private).").first).to_be_visible()
    set_number(page, "K (number of clusters)", 3)
    select(page, "Mechanism to release", COLORED)
    set_number(page, "ε to spend", 0.5)
    set_number(page, "δ to spend", "1e-6")
    expect(body.get_by_test_id("stDownloadButton")).to_have_count(0)  # nothing to download before paying
    click(page, RELEASE)
    expect(body.get_by_text(f"Released {COLORED} at ε = 0.5").first).to_be_visible()
    _check_release(_release_files(page), demo=False, k=3)
    assert _status(ledger, ACCOUNT) == (3.0, 0.5, 1e-5, 1)  # debited once

    # demo mode: its own account (refused until it has a budget), marked DEMO on the page, in the file
    # names, every file and the ledger; the seed is honoured
    choose_radio(page, DEMO, scope=sidebar)
    set_number(page, "Demo seed", 7, scope=sidebar)
    expect(body.get_by_text("DEMO mode (seed 7)").first).to_be_visible()
    expect(body.get_by_role("button", name=RELEASE)).to_be_disabled()
    expect(body.get_by_text("No budget is set for").first).to_contain_text("in demo mode")
    set_budget(page, 2.0, 1e-5)
    expect(body.get_by_text("demo account").first).to_be_visible()
    assert _status(ledger, DEMO_ACCOUNT) == (2.0, 0.0, 1e-5, 0)
    go(page, "K-means")
    click(page, RELEASE)
    expect(body.get_by_text("DEMO - not a privacy release: made with a fixed seed").first).to_be_visible()
    first = _check_release(_release_files(page), demo=True, k=3)
    body.get_by_text("Release this plan again (a new request").click()
    wait_for_app(page)
    click(page, f"Release this plan again (spends {COST} more)")
    # wait on page state: the second request's confirmation (its files replace the first's)
    second_request = re.compile(r"recorded in the ledger as request plan-[0-9a-f]{8}-2 by")
    expect(body.get_by_text(second_request).first).to_be_visible()
    second = _check_release(_release_files(page), demo=True, k=3)
    pd.testing.assert_frame_equal(first, second)  # same seed, same noise
    choose_radio(page, RELEASE_MODE, scope=sidebar)
    expect(sidebar.get_by_label("Demo seed")).to_have_count(0)  # release mode takes no seed
    records = ledger.releases(dataset_id=DATASET_ID)
    assert [r.sampling_mode for r in records] == ["secure", "demo", "demo"]
    assert [r.account for r in records] == [ACCOUNT.key, DEMO_ACCOUNT.key, DEMO_ACCOUNT.key]
    assert _status(ledger, ACCOUNT) == (3.0, 0.5, 1e-5, 1)  # demo releases never touch the real budget
    assert _status(ledger, DEMO_ACCOUNT) == (2.0, 1.0, 1e-5, 2)
    ledger.close()

    # the comparison (diagnostics, no budget) runs last: its charts make every later rerun slower
    set_number(page, "Trials per ε", 2)
    click(page, "Run comparison")
    expect(body.get_by_test_id("stPlotlyChart").nth(2)).to_be_visible()
    assert_no_exception(page)

    go(page, "Ledger")
    expect(body.get_by_role("heading", name=MARKETING)).to_be_visible()  # budgets under the dataset's name
    real, demo = account_row(page, ACCOUNT.key), account_row(page, DEMO_ACCOUNT.key)
    assert (real["mode"], real["ε left"], real["ε total"], real["releases"]) == ("release", "2.5", "3", "1")
    assert (demo["mode"], demo["ε left"], demo["ε total"], demo["releases"]) == ("DEMO", "1", "2", "2")
    name, csv = download(page, "Download the ledger as CSV")
    assert name == "ledger.csv"
    rows = pd.read_csv(io.BytesIO(csv))[::-1]  # newest first on the page and in the file
    assert rows["mechanism"].tolist() == [COLORED] * 3
    assert rows["mode"].tolist() == ["release", "DEMO", "DEMO"]
    assert rows["account"].tolist() == [ACCOUNT.key, DEMO_ACCOUNT.key, DEMO_ACCOUNT.key]
    assert set(rows["user"]) == {"e2e-curator"} and set(rows["dataset"]) == {MARKETING}
    assert set(rows["privacy definition"]) == {"local (ε, δ) bound, this dataset only (not DP)"}
    assert rows["ε"].tolist() == [0.5] * 3 and rows["δ"].tolist() == [1e-6] * 3
    assert set(rows["dataset fingerprint"]) == {FINGERPRINT}
    newest = rows["request id"].iloc[-1]
    zip_name, content = download(page, "Download the release files (zip)")  # the newest release by default
    assert zip_name == f"DEMO-release-{short_id(newest)}.zip"
    members = zip_members(content)
    assert len(members) == 4 and all(DEMO_NOTICE.encode() in data for data in members.values())
    assert_no_exception(page)
