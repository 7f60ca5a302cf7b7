"""A curator picks a Parquet file from an operator's allow-listed folder, or a database table, on the Data
page and releases DP-Lloyd from it in a real browser: the release and the ledger name the source and its
fingerprint (for the file, the one an upload of it gives). A file above the row limit loads as a labelled
uniform sample, and its release runs on the whole file as a batch job on the server. The server gets the
folder through ``DPCORE_DATA_FOLDERS``, the row limit through ``DPCORE_MAX_ROWS``, and the database through a
secrets file (``STREAMLIT_SECRETS_FILES``) with ``[dpcore] databases`` and ``[connections.warehouse]``."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, Page, expect

from dpcore.data import fingerprint, load_table, make_blobs
from dpcore.data.sources import DatabaseQuery, DatabaseTable, load_source
from dpcore.ledger import Ledger, ReleaseRecord
from tests.browser.conftest import (
    Server,
    open_app,
    screenshot,
    start_server,
    stop_server,
    wait_for_app,
)
from tests.browser.e2e import (
    assert_no_exception,
    choose_radio,
    click,
    dictionary_of,
    download,
    go,
    import_dictionary,
    main,
    release_file_names,
    select,
    set_budget,
    set_number,
)

pytestmark = pytest.mark.browser

FOLDER = "File in a data folder"
MAX_ROWS = 1500
JOB_TIMEOUT_MS = 120_000  # a whole-table batch job: a new Python process, DuckDB passes, the ledger


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The allow-listed folder: a 1,200-row and a 4,000-row table of synthetic blobs; a file next to it."""
    base = tmp_path_factory.mktemp("sources")
    root = base / "tables"
    root.mkdir()
    make_blobs(1200, 2, 3, seed=11).to_parquet(root / "blobs.parquet")
    make_blobs(4000, 2, 3, seed=12).to_parquet(root / "big.parquet")
    make_blobs(10, 2, 1, seed=13).to_parquet(base / "outside.parquet")
    return root


@pytest.fixture(scope="module")
def warehouse(tables: Path) -> str:
    """A SQLite database with a 900-row table of synthetic blobs, and the secrets file naming it."""
    url = f"sqlite:///{tables.parent / 'warehouse.db'}"
    engine = sa.create_engine(url)
    make_blobs(900, 2, 3, seed=14).to_sql("blobs", engine, index=False)
    engine.dispose()
    (tables.parent / "secrets.toml").write_text(
        f'[dpcore]\ndatabases = ["warehouse"]\n\n[connections.warehouse]\nurl = "{url}"\n'
    )
    return url


@contextlib.contextmanager
def _sources_env(tables: Path) -> Iterator[None]:
    """The environment a server of these walks starts in: the allow-listed folder, the row limit and the
    secrets file naming the database."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DPCORE_DATA_FOLDERS", str(tables))
        env.setenv("DPCORE_MAX_ROWS", str(MAX_ROWS))
        env.setenv("STREAMLIT_SECRETS_FILES", str(tables.parent / "secrets.toml"))
        yield


@pytest.fixture(scope="module")
def server(tables: Path, warehouse: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server (allow-listed folder, database, row limit); the harness's ``page`` opens it."""
    with _sources_env(tables):
        proc, running = start_server(tmp_path_factory.mktemp("e2e-sources"))
    try:
        yield running
    finally:
        stop_server(proc)


def _bounded_features(page: Page) -> None:
    """Features x1, x2 with public bounds [-15, 15] typed in."""
    import_dictionary(page, dictionary_of(["x1", "x2"], {"x1": (-15, 15), "x2": (-15, 15)}))


def _load_select(page: Page, sql: str) -> None:
    """The Data page's database source: ``sql`` typed as the SELECT, then loaded."""
    go(page, "Data")
    choose_radio(page, "Database query (one SELECT)")
    box = main(page).get_by_role("textbox", name="SELECT query")
    box.fill(sql)
    box.press("Control+Enter")
    wait_for_app(page)
    click(page, "Load this table")


def _shown_fingerprint(page: Page) -> str:
    """The 16 hex digits of the dataset's fingerprint on the Data page (not the database read's note, which
    also names the fingerprint and changes with the time of the read)."""
    line = main(page).get_by_text(re.compile(r"fingerprint [0-9a-f]{16}")).first.inner_text()
    found = re.search(r"fingerprint ([0-9a-f]{16})", line)
    assert found is not None, line
    return found[1]


def _load(page: Page, label: str) -> None:
    go(page, "Data")
    choose_radio(page, FOLDER)
    select(page, "File", label)
    click(page, "Load this table")


def _recorded(server: Server, digest: str) -> list[ReleaseRecord]:
    """The ledger's releases of the table with fingerprint ``digest``."""
    ledger = Ledger(server.ledger_url)
    try:
        return [r for r in ledger.releases() if r.dataset_fingerprint == digest]
    finally:
        ledger.close()


def _prepare_and_release(page: Page, rows: int) -> dict:
    """Features x1, x2 with public bounds [-15, 15], a budget, DP-Lloyd with K = 3 at ε = 1; the manifest."""
    body = main(page)
    _bounded_features(page)
    click(page, "Prepare")
    expect(body.get_by_text(f"{rows:,} rows × 2 features ready").first).to_be_visible()
    set_budget(page, 2.0, 1e-5)
    go(page, "K-means")
    set_number(page, "K (number of clusters)", 3)
    click(page, "Release (spends ε = 1)")
    expect(body.get_by_text("Released DP-Lloyd (SuLQ) at ε = 1").first).to_be_visible()
    names = release_file_names(page)
    (manifest_name,) = [n for n in names if n.endswith("-manifest.json")]
    return json.loads(download(page, manifest_name)[1])


def test_release_from_a_parquet_file_in_an_allow_listed_folder(
    page: Page, server: Server, tables: Path
) -> None:
    digest = fingerprint(load_table((tables / "blobs.parquet").read_bytes(), filename="blobs.parquet"))
    go(page, "Data")
    choose_radio(page, FOLDER)
    box = main(page).get_by_test_id("stSelectbox").filter(has_text="File")
    box.locator("input").first.click()
    options = page.get_by_role("option").all_inner_texts()
    assert sorted(options) == ["tables/big.parquet", "tables/blobs.parquet"]  # nothing outside the folder
    page.keyboard.press("Escape")
    wait_for_app(page)
    _load(page, "tables/blobs.parquet")
    body = main(page)
    expect(body.get_by_text("1,200 rows × 2 columns").first).to_be_visible()
    expect(body.get_by_text(digest[:16]).first).to_be_visible()  # the fingerprint an upload would have
    manifest = _prepare_and_release(page, 1200)
    assert manifest["dataset_fingerprint"] == digest and manifest["dataset_name"] == "tables/blobs.parquet"
    assert manifest["mechanism"] == "dp_lloyd" and manifest["sampling_mode"] == "secure"
    assert [(r.mechanism, r.epsilon) for r in _recorded(server, digest)] == [("dp_lloyd", 1.0)]
    assert_no_exception(page)

    # above the row limit: a labelled sample, under the whole table's fingerprint, not released from
    _load(page, "tables/big.parquet")
    expect(body.get_by_text(f"uniform sample of {MAX_ROWS:,} of the 4,000 rows").first).to_be_visible()
    big = fingerprint(load_table(tables / "big.parquet"))
    expect(body.get_by_text(big[:16]).first).to_be_visible()
    _bounded_features(page)
    click(page, "Prepare")
    set_budget(page, 2.0, 1e-5)
    go(page, "K-means")
    set_number(page, "K (number of clusters)", 3)
    expect(body.get_by_role("button", name="Release (spends ε = 1)")).to_have_count(0)  # not the sample
    whole = "Release on the whole table (4,000 rows; spends ε = 1)"
    click(page, whole)  # a batch job on this server
    released = body.get_by_text("Released DP-Lloyd (SuLQ) on the whole table by a batch job at ε = 1")
    expect(released.first).to_be_visible(timeout=JOB_TIMEOUT_MS)
    (record,) = _recorded(server, big)
    assert record.request_id.startswith("plan-") and record.mechanism == "dp_lloyd"
    names = release_file_names(page)
    (manifest_name,) = [n for n in names if n.endswith("-manifest.json")]
    manifest = json.loads(download(page, manifest_name)[1])
    assert manifest["dataset_fingerprint"] == big and manifest["request_id"] == record.request_id
    page.reload()  # the same plan after a reload: the one release, shown again, nothing spent twice
    wait_for_app(page)
    go(page, "K-means")
    expect(released.first).to_be_visible()
    expect(body.get_by_role("button", name=whole)).to_have_count(0)
    assert len(_recorded(server, big)) == 1
    assert_no_exception(page)


def test_release_from_a_database_table(page: Page, server: Server, warehouse: str) -> None:
    engine = sa.create_engine(warehouse)
    digest = load_source(DatabaseTable("warehouse", "blobs"), engine=engine).fingerprint
    engine.dispose()
    go(page, "Data")
    choose_radio(page, "Database table")
    select(page, "Table", "blobs")
    click(page, "Load this table")
    body = main(page)
    expect(body.get_by_text("900 rows × 2 columns").first).to_be_visible()
    expect(body.get_by_text(digest[:16]).first).to_be_visible()
    manifest = _prepare_and_release(page, 900)
    assert manifest["dataset_fingerprint"] == digest and manifest["dataset_name"] == "warehouse: blobs"
    assert [r.mechanism for r in _recorded(server, digest)] == ["dp_lloyd"]
    assert_no_exception(page)


def test_a_select_source_survives_leaving_the_page_a_reload_a_second_tab_and_a_restart(
    browser: Browser, tables: Path, warehouse: str, tmp_path: Path
) -> None:
    """A curator types a SELECT over a table above the row limit: the source choice, the SELECT text and
    the labelled sample stay when the curator leaves the Data page and comes back, reloads the page,
    works on another source in a second tab, and after a server restart (this test's own server)."""
    engine = sa.create_engine(warehouse)
    make_blobs(2000, 2, 3, seed=15).to_sql("visits", engine, index=False, if_exists="replace")
    engine.dispose()
    sql = "SELECT x1, x2 FROM visits WHERE x1 > -100"
    note = f"uniform sample of {MAX_ROWS:,} of the 2,000 rows"

    def shows_the_select(page: Page) -> None:
        body = main(page)
        expect(body.get_by_role("textbox", name="SELECT query")).to_have_value(sql)
        expect(body.get_by_text(note).first).to_be_visible()
        sidebar = page.get_by_test_id("stSidebar")
        expect(sidebar.get_by_text(f"Uniform sample of {MAX_ROWS:,}").first).to_be_visible()
        assert_no_exception(page)

    with _sources_env(tables):
        proc, server = start_server(tmp_path)
        try:
            page = open_app(browser, server)
            _load_select(page, sql)
            shows_the_select(page)
            digest = _shown_fingerprint(page)
            go(page, "K-means")
            go(page, "Data")
            shows_the_select(page)
            page.reload()
            wait_for_app(page)
            shows_the_select(page)

            other = open_app(browser, server)  # a second tab, its own session, on a folder file
            _load(other, "tables/blobs.parquet")
            expect(main(other).get_by_text("1,200 rows × 2 columns").first).to_be_visible()
            page.reload()
            wait_for_app(page)
            shows_the_select(page)
            other.context.close()

            stop_server(proc)
            proc, server = start_server(tmp_path, port=urlparse(server.url).port)
            page.goto(page.url)
            wait_for_app(page)
            shows_the_select(page)
            assert _shown_fingerprint(page) == digest  # the same rows after the restart's new read
            screenshot(page, "select-source-after-restart")
            page.context.close()
        finally:
            stop_server(proc)


def test_a_select_above_the_row_limit_is_released_on_the_whole_table_across_a_server_restart(
    browser: Browser, tables: Path, warehouse: str, tmp_path: Path
) -> None:
    """A SELECT over a table above the row limit: "Release on the whole table" starts the batch job (the
    database URL reaches it through a pipe), the server restarts while it runs, and after the restart the
    page shows the one release, made from every row the SELECT returns."""
    rows = 600_000
    engine = sa.create_engine(warehouse)
    trips = make_blobs(rows, 2, 3, seed=16)
    trips.to_sql("trips", engine, index=False, if_exists="replace", chunksize=50_000)
    engine.dispose()
    sql = "SELECT x1, x2 FROM trips"
    engine = sa.create_engine(warehouse)
    digest = load_source(DatabaseQuery("warehouse", sql), engine=engine, max_rows=MAX_ROWS).fingerprint
    engine.dispose()
    with _sources_env(tables):
        proc, server = start_server(tmp_path)
        try:
            page = open_app(browser, server)
            _load_select(page, sql)
            body = main(page)
            note = f"uniform sample of {MAX_ROWS:,} of the {rows:,} rows"
            expect(body.get_by_text(note).first).to_be_visible()
            _bounded_features(page)
            click(page, "Prepare")
            set_budget(page, 2.0, 1e-5)
            go(page, "K-means")
            set_number(page, "K (number of clusters)", 3)
            click(page, f"Release on the whole table ({rows:,} rows; spends ε = 1)")
            expect(body.get_by_text("Releasing on the whole table").first).to_be_visible()
            stop_server(proc)  # the server restarts while the job reads the table
            stopped_at = time.time()
            proc, server = start_server(tmp_path, port=urlparse(server.url).port)
            page.goto(page.url)
            wait_for_app(page)
            go(page, "K-means")
            released = body.get_by_text("Released DP-Lloyd (SuLQ) on the whole table by a batch job at ε = 1")
            expect(released.first).to_be_visible(timeout=JOB_TIMEOUT_MS)
            (record,) = _recorded(server, digest)  # the whole SELECT's fingerprint, one debit
            assert record.request_id.startswith("plan-")
            (status,) = (tmp_path / "data" / "jobs").glob("plan-*.json")
            finished = json.loads(status.read_text())["finished"]
            assert dt.datetime.fromisoformat(finished).timestamp() >= stopped_at - 1  # it outlived the server
            assert_no_exception(page)
            page.context.close()
        finally:
            stop_server(proc)
