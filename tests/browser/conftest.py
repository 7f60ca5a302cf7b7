"""End-to-end harness: ``streamlit run app.py`` on a free localhost port, driven by Debian's Chromium.

Each pytest(-xdist) worker starts its own server (session scope) with ``DPCORE_DATA_DIR`` and
``DPCORE_LEDGER_URL`` in a temporary folder and ``--server.maxUploadSize=1`` (1 MB, so the over-the-limit
file stays small). Chromium is the system one (``/usr/bin/chromium``), never a Playwright download;
without it every test here skips with the install command. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path(os.environ.get("DPCORE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UPLOAD_LIMIT_MB = 1
STARTUP_TIMEOUT_S = 60.0
APP_TIMEOUT_MS = 90_000  # a wait on page state: long enough for a rerun on a loaded 2-core machine
expect.set_options(timeout=APP_TIMEOUT_MS)  # assertions wait as long as actions (Playwright's default: 5 s)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is a browser test; skip them all when Chromium is missing."""
    here = Path(__file__).parent
    skip = pytest.mark.skip(
        reason=f"Chromium not found at {CHROMIUM}: install it with `sudo apt-get install chromium` "
        "(Debian/Ubuntu) to run the browser tests, or set DPCORE_CHROMIUM to its path."
    )
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if not CHROMIUM.exists():
                item.add_marker(skip)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    """A running app: its base URL and the folders it writes to."""

    url: str
    data_dir: Path
    ledger_url: str
    log: Path


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"streamlit did not become healthy in {STARTUP_TIMEOUT_S:.0f} s:\n{log.read_text()}")


def start_server(
    base: Path, port: int | None = None, extra_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], Server]:
    """``streamlit run app.py`` on ``port`` (a free one by default) with its data in ``base/data``
    (reused when it exists, as after a restart) and ``extra_args`` (e.g. a secrets file); returns once the
    server answers its health check."""
    data_dir = base / "data"
    data_dir.mkdir(exist_ok=True)
    ledger_url = f"sqlite:///{(data_dir / 'ledger.db').as_posix()}"
    port = port or free_port()
    env = {
        **os.environ,
        "DPCORE_DATA_DIR": str(data_dir),
        "DPCORE_LEDGER_URL": ledger_url,
        "DPCORE_USER": "e2e-curator",
        "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
        # one OpenMP/BLAS thread: with a browser and two test workers on two cores, scikit-learn's
        # spinning OpenMP threads otherwise make k-means 10-20x slower
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "ui.serve",  # as scripts/run-app: the engine imported before the server starts
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--server.maxUploadSize",
        str(UPLOAD_LIMIT_MB),
        "--browser.gatherUsageStats",
        "false",
        *extra_args,
    ]
    log = base / "streamlit.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
    except BaseException:
        stop_server(proc)
        raise
    return proc, Server(url=url, data_dir=data_dir, ledger_url=ledger_url, log=log)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server started by :func:`start_server` (terminate, then kill after 10 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``streamlit run app.py`` for this worker, stopped at the end of the session."""
    proc, running = start_server(tmp_path_factory.mktemp("e2e"))
    try:
        yield running
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium through Playwright (a fresh temporary profile per launch), one per worker.

    Every test in this folder uses this one: Playwright's sync API cannot start a second instance while
    this one runs its event loop in the same process.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def wait_for_app(page, timeout: int = APP_TIMEOUT_MS) -> None:
    """Wait as Streamlit's e2e utilities do: the app view is there and the script is not running.

    A short pause first lets a rerun triggered by the last interaction start (Streamlit's own
    ``wait_for_app_run`` does the same).
    """
    page.wait_for_timeout(150)
    page.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=timeout)
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"]', state="attached", timeout=timeout
    )
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-script-state="notRunning"]', state="attached", timeout=timeout
    )


def open_app(browser, server: Server):
    """A new browser context (its own Streamlit session) on the app's home page."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(APP_TIMEOUT_MS)
    page = context.new_page()
    page.goto(server.url)
    wait_for_app(page)
    return page


def screenshot(page, name: str) -> None:
    """Full-page screenshot into ``test-artifacts/<name>.png`` (for CI debugging)."""
    ARTIFACTS.mkdir(exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    page.screenshot(path=str(ARTIFACTS / f"{safe}.png"), full_page=True)


@pytest.fixture
def page(browser, server: Server, request: pytest.FixtureRequest):
    """A fresh session on the home page; a screenshot of its last state is kept in test-artifacts/."""
    pg = open_app(browser, server)
    try:
        yield pg
    finally:
        try:
            screenshot(pg, request.node.name)
        finally:
            pg.context.close()
