"""Issue 25, findings 7 and 8: a configured database that is the ledger's own database is refused as a
source, however its URL is spelled, and the ledger's tables are never listed from any source (before, the
Data page listed ``sessions``, ``accounts``, ``account_releases``); a database read is capped in rows and
bytes before pandas sees it, and its time limit stops the query in the database (before, one SELECT of 200
values of 10 MB took the server to about 7 GB, and a 15 s limit let a query run 63.5 s). Small limits keep
each test to a few seconds; SQLite and the test PostgreSQL server alike."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

import dpcore.data.sources as sources
from dpcore.data.sources import DatabaseQuery, DatabaseTable, list_tables, load_source
from dpcore.errors import DataError
from dpcore.ledger import Ledger
from dpcore.outofcore.source import open_source
from dpcore.sessions import SessionStore
from tests.postgres_server import scratch_database

LEDGER_NAMES = {"ledger_instance", "datasets", "accounts", "account_releases", "sessions"}
REFUSED = r"leads to the ledger's own database.*cannot be a data source.*\[connections\.w\].*read-only role"
HOLDS_LEDGER = r"holds a dpcore ledger.*cannot be a data source.*read-only role"


def _same(a: str, b: str) -> bool:
    return sources.same_database(a, b)


# -- finding 7: the ledger's database is not a source -----------------------------------------------


def test_urls_of_the_same_database_are_recognised_however_spelled(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(b"")
    (tmp_path / "link.db").symlink_to(ledger)
    os.link(ledger, tmp_path / "hard.db")
    url = f"sqlite:///{ledger}"
    same = [
        f"sqlite+pysqlite:///{ledger}",
        f"sqlite:///{tmp_path}/sub/../ledger.db",
        f"sqlite:///{tmp_path}//./ledger.db",
        f"sqlite:///{tmp_path / 'link.db'}",
        f"sqlite:///{tmp_path / 'hard.db'}",
        f"sqlite:///file:{ledger}?mode=ro&uri=true",
    ]
    for other in same:
        assert _same(other, url), other
    for other in (f"sqlite:///{tmp_path / 'other.db'}", "sqlite://", "sqlite:///:memory:"):
        assert not _same(other, url), other

    pg = "postgresql+psycopg://dpcore:pw@db.example.org:5432/dpcore"
    for other in (
        "postgresql://reader:secret@DB.Example.org/dpcore",
        "postgresql+psycopg2://reader@db.example.org.:5432/dpcore?sslmode=require",
        "postgresql+psycopg://reader@/dpcore?host=db.example.org&port=5432",
    ):
        assert _same(other, pg), other
    for other in (
        "postgresql://reader@db.example.org/warehouse",
        "postgresql://reader@db.example.org:5433/dpcore",
        "postgresql://reader@other.example.org/dpcore",
        "mysql://reader@db.example.org/dpcore",
        "sqlite:///dpcore",
    ):
        assert not _same(other, pg), other
    local = "postgresql+psycopg://dpcore@localhost/dpcore"
    for other in (
        "postgresql://reader@127.0.0.1:5432/dpcore",
        "postgresql://reader@[::1]/dpcore",
        "postgresql://reader@/dpcore?host=/var/run/postgresql",
        "postgresql://reader@/dpcore",
    ):
        assert _same(other, local), other


def _ledger_with_sessions(url: str) -> None:
    Ledger.initialise(url)._engine.dispose()
    SessionStore(url).close()


def _variant(url: str) -> str:
    """The same database as ``url``, spelled another way, with a password and a query value."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        folder, name = os.path.split(parsed.database)
        return f"sqlite+pysqlite:///{folder}/./{name}?timeout=7"
    return f"postgresql://reader:s3cr3t@localhost:5432/{parsed.database}?connect_timeout=9"


def test_the_ledgers_database_is_refused_as_a_source_however_spelled(ledger_url: str) -> None:
    _ledger_with_sessions(ledger_url)
    for url in (ledger_url, _variant(ledger_url)):
        with pytest.raises(DataError, match=REFUSED) as err:
            sources.refuse_ledger_database(url, ledger_url, "w")
        assert "s3cr3t" not in str(err.value) and "9" not in str(err.value)


def test_a_database_holding_the_ledger_lists_and_reads_nothing(ledger_url: str) -> None:
    """The second line of defence, whatever the URL: the database's own tables say it holds a ledger."""
    _ledger_with_sessions(ledger_url)
    engine = sa.create_engine(ledger_url)
    try:
        for timeout in (None, 5):
            with pytest.raises(DataError, match=HOLDS_LEDGER):
                list_tables(engine, timeout_s=timeout)
        for spec in (
            DatabaseTable("w", "sessions"),
            DatabaseTable("w", "accounts"),
            DatabaseQuery("w", "SELECT * FROM sessions"),
            DatabaseQuery("w", "SELECT 1 AS one"),
        ):
            with pytest.raises(DataError, match=HOLDS_LEDGER):
                load_source(spec, engine=engine, timeout_s=5)
    finally:
        engine.dispose()


@pytest.fixture
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A data source without a ledger: SQLite, or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'w.db'}"
        return
    with scratch_database(request.getfixturevalue("postgres_server"), "w") as url:
        yield url


BOTH = pytest.mark.parametrize("warehouse_url", ["sqlite", "postgresql"], indirect=True)


@BOTH
def test_tables_named_as_the_ledgers_are_never_listed(warehouse_url: str) -> None:
    engine = sa.create_engine(warehouse_url)
    try:
        for name in sorted(LEDGER_NAMES - {"ledger_instance"} | {"people"}):
            pd.DataFrame({"x": [1.0]}).to_sql(name, engine, index=False)
        assert list_tables(engine) == list_tables(engine, timeout_s=5) == ["people"]
        with pytest.raises(DataError, match=r"has no table 'sessions'; choose one from the list"):
            load_source(DatabaseTable("w", "sessions"), engine=engine)
        assert load_source(DatabaseTable("w", "people"), engine=engine).n_rows == 1
    finally:
        engine.dispose()
    assert sources.LEDGER_TABLES == LEDGER_NAMES


def test_the_data_page_refuses_a_connection_to_the_ledgers_database(tmp_path: Path) -> None:
    """The ledger's database configured as a source, spelled another way: the Data page names the
    problem and the fix and lists no table (before: sessions, accounts, account_releases, ...)."""
    from tests.pages.test_sources import DATABASE, _ok, _open

    ledger = os.environ["DPCORE_LEDGER_URL"]
    _ledger_with_sessions(ledger)
    secrets: dict[str, Any] = {
        "dpcore": {"databases": ["w"]},
        "connections": {"w": {"url": _variant(ledger)}},
    }
    at = _open(secrets)
    at.radio(key="data_source").set_value(DATABASE).run()
    _ok(at)
    shown = " ".join(e.value for e in at.error)
    assert "leads to the ledger's own database" in shown and "read-only role" in shown, shown
    assert not [s for s in at.selectbox if s.key == "data_source_database_table_table_w"]


# -- finding 8: rows and bytes capped before pandas, the time limit in the database -----------------


def _frames(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of each frame pandas builds from a database read."""
    built: list[int] = []
    import pandas.io.sql

    for module in (sources.database, pandas.io.sql):
        wrap = getattr(module, "_wrap_result", None)
        if wrap is None:
            continue

        def counted(data: Any, *args: Any, _wrap: Any = wrap, **kwargs: Any) -> pd.DataFrame:
            built.append(len(data))
            return _wrap(data, *args, **kwargs)

        monkeypatch.setattr(module, "_wrap_result", counted)
    return built


ROWS_OF = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {n}) "
HUGE = {
    "sqlite": ROWS_OF.format(n=200) + "SELECT n, hex(zeroblob(10000000)) AS s FROM c",
    "postgresql": "SELECT n, repeat('x', 10000000) AS s FROM generate_series(1, 200) AS n",
}
ROW_REFUSED = r"has a row of more than 256 KB \(its values' bytes\).*columns you need.*substr"


@BOTH
def test_a_select_of_huge_values_is_refused_before_pandas_sees_a_row(
    warehouse_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 values of 10 MB (20 MB once in hexadecimal): refused at the first row, in the database (SQLite's
    length limit, PostgreSQL's row check), on the Data page and in the batch job alike."""
    engine = sa.create_engine(warehouse_url)
    built = _frames(monkeypatch)
    sql = HUGE[engine.dialect.name]
    try:
        start = time.monotonic()
        with pytest.raises(DataError, match=ROW_REFUSED):
            load_source(DatabaseQuery("w", sql), engine=engine, timeout_s=15)
        assert time.monotonic() - start < 3
        assert built == []
        start = time.monotonic()
        with pytest.raises(DataError, match=ROW_REFUSED):
            with open_source(warehouse_url, query=sql):
                pass
        assert time.monotonic() - start < 3
    finally:
        engine.dispose()


@pytest.mark.parametrize("warehouse_url", ["postgresql"], indirect=True)
def test_a_stored_row_that_compresses_well_is_measured_as_it_arrives(
    warehouse_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1 MB text stored compressed (a few kB on the server's disk) is larger once read: the reader measures
    each row before pandas sees it."""
    engine = sa.create_engine(warehouse_url)
    built = _frames(monkeypatch)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE big AS SELECT n, repeat('x', 1000000) AS s FROM generate_series(1, 3) n"
            )
        with pytest.raises(DataError, match=ROW_REFUSED):
            load_source(DatabaseTable("w", "big"), engine=engine, timeout_s=15)
        assert built == []
    finally:
        engine.dispose()


@BOTH
def test_the_rows_kept_from_a_read_are_capped_in_bytes_as_they_arrive(
    warehouse_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows under the row limit, too many bytes in all (400 rows of 20 kB against a 1 MB limit): the read
    stops once the kept rows pass the limit, in chunks of at most 256 kB, with the limit and the fix named;
    a read under the limit loads."""
    monkeypatch.setattr(sources.database, "MAX_SQL_BYTES", 2**20, raising=False)
    monkeypatch.setattr(sources.database, "SQL_CHUNK_BYTES", 2**18, raising=False)
    engine = sa.create_engine(warehouse_url)
    built = _frames(monkeypatch)
    value = "hex(zeroblob(10000))" if engine.dialect.name == "sqlite" else "repeat('x', 20000)"
    series = ROWS_OF.format(n=400) + f"SELECT n, {value} AS s FROM c"
    try:
        with pytest.raises(DataError, match=r"takes more than 1 MB in memory.*columns you need.*max_rows"):
            load_source(DatabaseQuery("w", series), engine=engine, timeout_s=15)
        assert built and max(built) * 20_000 <= 2**18 + 2**18 and sum(built) * 20_000 < 2 * 2**20, built
        small = series.replace("n < 400", "n < 20")
        assert load_source(DatabaseQuery("w", small), engine=engine, timeout_s=15).n_rows == 20
    finally:
        engine.dispose()


def test_sqlites_time_limit_interrupts_a_step_the_progress_handler_does_not_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The progress handler looks at the clock between virtual-machine instructions; a timer calls
    ``interrupt()`` at the limit for what runs between two looks (here the handler is made to look almost
    never): the query stops at the limit, not when it ends (about 10 s)."""
    monkeypatch.setattr(sources.database, "SQLITE_STEPS", 2**31 - 1)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    sql = ROWS_OF.format(n=30_000_000) + "SELECT COUNT(*) AS n FROM c"
    try:
        start = time.monotonic()
        with pytest.raises(DataError, match=r"stopped after the database time limit of 0.5 s"):
            load_source(DatabaseQuery("w", sql), engine=engine, timeout_s=0.5)
        assert time.monotonic() - start < 2
        assert load_source(DatabaseQuery("w", "SELECT 1 AS one"), engine=engine, timeout_s=5).n_rows == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize("warehouse_url", ["postgresql"], indirect=True)
def test_postgresqls_time_limit_stops_a_slow_read_of_large_values_on_the_server(warehouse_url: str) -> None:
    engine = sa.create_engine(warehouse_url)
    sql = "SELECT n, repeat('x', 100000) AS s, pg_sleep(0.2) IS NULL AS z FROM generate_series(1, 200) AS n"
    try:
        start = time.monotonic()
        with pytest.raises(DataError, match=r"stopped after the database time limit of 1 s"):
            load_source(DatabaseQuery("w", sql), engine=engine, timeout_s=1)
        assert time.monotonic() - start < 2
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == "0"
    finally:
        engine.dispose()
