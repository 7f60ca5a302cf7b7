"""The curator's whole-table release in a real browser against the same plan run by ``run-plan``.

Run: .venv/bin/python benchmarks/bench_whole_table.py [--rows 2000000] [--features 4] [--dir DIR] [--keep]

Generates an n x d Parquet table of K = 4 Gaussian blobs (``dpcore.data.make_blobs``: centres in
[-10, 10]^d, sd 1; in a temporary folder unless --dir), allow-lists its folder (``DPCORE_DATA_FOLDERS``) and
keeps the app's default row limit (200,000 rows), so the Data page holds a labelled uniform sample and the
release panel offers "Release on the whole table". The app is started as ``scripts/run-app`` does
(``python -m ui.serve``, the repository's config; ``bench_ui.server``) with a temporary ``DPCORE_DATA_DIR``,
and headless Chromium walks it with the page defaults, timing each step until its text shows (checked every
100 ms): Data page load of the file (to the sample notice), features x1..xd with public bounds [-15, 15]
typed in and Prepare, a budget on the Privacy policy page, K-means open (to the whole-table button), then
the click on "Release on the whole table ..." (DP-Lloyd, K = 4, the policy's ε) until "Released ... on the
whole table by a batch job" shows. The job's own start and finish are read from its status file
(``<DPCORE_DATA_DIR>/jobs/plan-<key>.json``, times to the second).

The baseline, in the same process: the plan downloaded from the panel's "Or run it from a terminal"
expander, run as ``python -m dpcore run-plan`` in a subprocess with a new ``--request-id`` on the same
ledger (it spends ε again: the budget set allows both). Both include a Python start and the engine's
imports; the page also includes starting the job, the panel's poll every 2 s and reading the release back.

The last line reads ``whole-table release <x> s in the browser, <y> s by run-plan, ratio <r>, Data page load
<z> s`` (ratio = click-to-released / run-plan).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from bench_ui import VIEWPORT, server
from playwright.sync_api import Page, expect, sync_playwright
from scale_table import generated_table, table_arguments

from dpcore.data import make_blobs
from dpcore.data.sources import DEFAULT_MAX_ROWS, MAX_ROWS_ENV
from dpcore.ledger import Ledger
from dpcore.plan import ReleasePlan
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, wait_for_app
from tests.browser.e2e import (
    assert_no_exception,
    choose_radio,
    dictionary_of,
    go,
    import_dictionary,
    main,
    select,
    set_budget,
)

K = 4
SEED = 2026  # synthetic table, not a release
BOUND = 15.0  # public bounds [-15, 15]: the centres lie in [-10, 10], sd 1
BUDGET = 3.0  # the page's release (ε = 1) and the baseline's (ε = 1) both fit
FOLDER = "File in a data folder"
POLL_MS = 100
RELEASED = r"Released .+ on the whole table by a batch job at ε = "
FAILED = "The batch job on the whole table did not release"
# Falsy until the page body's text matches ``pattern``; {failed: alert text} if it shows ``fail``.
SHOWN = """
([pattern, fail]) => {
  const body = document.querySelector('[data-testid="stMain"]');
  if (!body) return false;
  const text = body.textContent;
  if (fail && text.includes(fail)) {
    const alerts = [...body.querySelectorAll('[data-testid="stAlertContentError"]')];
    return {failed: alerts.map((a) => a.innerText).join(' | ') || fail};
  }
  return new RegExp(pattern).test(text) ? {ok: true} : false;
}
"""


def generate(d: int):
    def write(path: Path, rows: int) -> None:
        make_blobs(rows, d, K, seed=SEED).to_parquet(path, index=False, row_group_size=1_000_000)

    return write


def step(name: str, seconds: float) -> float:
    print(f"  {name:<48} {seconds:8.2f} s", flush=True)
    return seconds


def until_shown(page: Page, pattern: str, timeout_s: float, fail: str | None = None) -> None:
    """Wait until the page body's text matches ``pattern``; raise with the page's error if ``fail`` shows."""
    handle = page.wait_for_function(SHOWN, arg=[pattern, fail], polling=POLL_MS, timeout=timeout_s * 1000)
    result = handle.json_value()
    if "failed" in result:
        raise SystemExit(f"the page says: {result['failed']}")


def timed(page: Page, name: str, action, pattern: str, timeout_s: float, fail: str | None = None) -> float:
    """Seconds from ``action()`` until ``pattern`` shows on the page (printed)."""
    start = time.perf_counter()
    action()
    until_shown(page, pattern, timeout_s, fail)
    return step(name, time.perf_counter() - start)


def browser_walk(page: Page, url: str, label: str, rows: int, d: int, plan_file: Path, timeout_s: float):
    """The curator's walk; returns (Data page load s, click-to-released s, wall time of the click)."""
    body = main(page)
    page.goto(url)
    wait_for_app(page)
    go(page, "Data")
    choose_radio(page, FOLDER)
    select(page, "File", label)
    notice = re.escape(f"uniform sample of {DEFAULT_MAX_ROWS:,} of the {rows:,} rows")
    load = body.get_by_role("button", name="Load this table")
    t_load = timed(page, "data: load the file (to the sample notice)", load.click, notice, timeout_s)
    features = [f"x{j + 1}" for j in range(d)]
    start = time.perf_counter()
    import_dictionary(page, dictionary_of(features, {f: (-BOUND, BOUND) for f in features}))
    step(f"data: import {d} features with their bounds", time.perf_counter() - start)
    ready = re.escape(f"{DEFAULT_MAX_ROWS:,} rows × {d} features ready")
    timed(page, "data: prepare", body.get_by_role("button", name="Prepare").click, ready, timeout_s)
    start = time.perf_counter()
    set_budget(page, BUDGET, 1e-5)
    step(f"privacy policy: set the budget (ε = {BUDGET:g})", time.perf_counter() - start)
    link = page.get_by_test_id("stSidebarNav").get_by_role("link", name="K-means", exact=True)
    whole = r"Release on the whole table \("
    timed(page, "kmeans: open (to the whole-table button)", link.click, whole, timeout_s)
    wait_for_app(page)
    body.get_by_text("Or run it from a terminal, as the operator").click()
    with page.expect_download() as info:
        body.get_by_role("button", name="Download the plan for the whole table").click()
    plan_file.write_bytes(Path(info.value.path()).read_bytes())
    button = body.get_by_role("button", name=re.compile(whole))
    print(f"  clicking: {button.inner_text().strip()}", flush=True)
    clicked = time.time()
    what = "kmeans: click to 'Released ... by a batch job'"
    t_release = timed(page, what, button.click, RELEASED, timeout_s, fail=FAILED)
    shown = time.time()
    expect(body.get_by_text(re.compile(RELEASED)).first).to_be_visible()
    assert_no_exception(page)
    return t_load, t_release, clicked, shown


def job_times(jobs: Path, request_id: str, clicked: float, shown: float) -> None:
    """Print the job's start and finish from its status file (to the second), and the gaps around them."""
    status_file = jobs / f"{request_id}.json"
    status = json.loads(status_file.read_text(encoding="utf-8"))
    if status["state"] != "done":
        raise SystemExit(f"job {request_id} is {status['state']}: {status['message']}")
    started = datetime.fromisoformat(status["started"]).timestamp()
    finished = datetime.fromisoformat(status["finished"]).timestamp()
    print(f"  job {request_id} (status file): started {status['started'][11:19]}, finished "
          f"{status['finished'][11:19]} UTC: {finished - started:.0f} s (to the second)")
    print(f"    click -> job started {started - clicked:+.1f} s (the start truncated to the second); "
          f"status file written -> release shown {shown - status_file.stat().st_mtime:.2f} s")


def run_plan(plan_file: Path, source: Path, data_dir: Path, ledger_url: str) -> tuple[float, str]:
    """Seconds of ``python -m dpcore run-plan`` on the plan with a new request id; its request id."""
    rid = f"bench-{uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "dpcore", "run-plan", str(plan_file), "--source", str(source),
           "--ledger", ledger_url, "--artifacts", str(data_dir / "artifacts"), "--user", "bench-curator",
           "--request-id", rid]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run-plan exited with {done.returncode}: {done.stdout}{done.stderr}")
    for line in done.stdout.splitlines():
        print(f"    {line}")
    return step("run-plan: the same plan, a new request id", seconds), rid


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table_arguments(ap)
    ap.set_defaults(rows=2_000_000)
    ap.add_argument("--features", type=int, default=4, help="d, columns of the table (default 4)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for each step")
    args = ap.parse_args()
    if args.rows <= DEFAULT_MAX_ROWS:
        raise SystemExit(f"--rows must be above the row limit ({DEFAULT_MAX_ROWS:,}): a table up to it loads "
                         "whole and is released in memory, not on the whole table by a batch job.")
    if not CHROMIUM.exists():
        raise SystemExit(f"Chromium not found at {CHROMIUM}: apt-get install chromium (DPCORE_CHROMIUM)")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    name = f"blobs-{args.rows}x{args.features}.parquet"
    with generated_table(args, name, generate(args.features)) as path:
        os.environ["DPCORE_DATA_FOLDERS"] = str(path.parent)
        os.environ.pop(MAX_ROWS_ENV, None)  # the default row limit
        with tempfile.TemporaryDirectory(prefix="bench-whole-") as tmp:
            data_dir = Path(tmp)
            ledger_url = f"sqlite:///{(data_dir / 'ledger.db').as_posix()}"
            plan_file = data_dir / "plan.json"
            with server(data_dir) as url, sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
                try:
                    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
                    context.set_default_timeout(120_000)
                    page = context.new_page()
                    label = f"{path.parent.name}/{path.name}"
                    t_load, t_page, clicked, shown = browser_walk(
                        page, url, label, args.rows, args.features, plan_file, args.timeout
                    )
                    context.close()
                finally:
                    browser.close()
                plan = ReleasePlan.from_manifest(json.loads(plan_file.read_text(encoding="utf-8")))
                page_rid = f"plan-{plan.key[:32]}"  # the panel's request id (ReleasePlan.request_id)
                job_times(data_dir / "jobs", page_rid, clicked, shown)
                t_cli, cli_rid = run_plan(plan_file, path, data_dir, ledger_url)
            ledger = Ledger(ledger_url)
            try:
                ours = [r for r in ledger.releases() if r.dataset_fingerprint == plan.fingerprint]
                spent = sorted(r.request_id for r in ours)
            finally:
                ledger.close()
            if spent != sorted([page_rid, cli_rid]):
                raise SystemExit(f"the ledger holds {spent}, expected the page's and run-plan's requests")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"whole-table release {t_page:.2f} s in the browser, {t_cli:.2f} s by run-plan, "
          f"ratio {t_page / t_cli:.2f}, Data page load {t_load:.2f} s")


if __name__ == "__main__":
    run()
