"""SQL databases (the operator's connections): reading a table or one SELECT in a read-only transaction,
listing tables, and refusing the ledger's own database; the database kinds' shared reader.

A query must parse as exactly one SELECT with no data-modifying part (:func:`validate_select`) and runs in a
read-only transaction where the database has one (PostgreSQL, SQLite); a table must be one the database
lists. Rows are read in the order of all their columns, so the fingerprint does not depend on the
database's scan order. The Data page's reads and table lists stop at the operator's time limit
(``query_timeout_s``, :func:`sql_chunks`, :func:`list_tables`); the operator's batch job reads without one.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pandas as pd
import sqlalchemy as sa
import sqlglot
from pandas.io.sql import _wrap_result  # pandas' own rows-to-frame step (read_sql's)
from sqlglot import exp

from dpcore.data.io import check_dates, column_name
from dpcore.data.sources import common
from dpcore.data.sources.registry import BatchChunks, LoadedSource, SourceContext, SourceSpec
from dpcore.errors import DataError, ParameterError
from dpcore.url_text import url_redactor

SQLITE_STEPS = 10_000  # SQLite virtual-machine instructions between two looks at the clock (well under 1 ms)
MAX_SQL_ROW_BYTES = 2**18  # one row of a database read: its values' bytes (Data page and batch job alike)
SQL_CHUNK_BYTES = 2**24  # a chunk of a database read ends at this many bytes of values (or at its rows)
MAX_SQL_BYTES = common.MAX_TEXT_MB * 2**20  # bytes of values the Data page keeps from one database read
#: The ledger's tables (dpcore.ledger, and dpcore.sessions' ``sessions``): never listed as a data source.
LEDGER_TABLES = frozenset({"ledger_instance", "datasets", "accounts", "account_releases", "sessions"})
_TOO_BIG = "dpcore_row_too_big"  # the text PostgreSQL's row check fails to cast, naming the refusal
_SIZED = (str, bytes, bytearray, memoryview)
_SQLGLOT_DIALECTS = {"postgresql": "postgres", "mssql": "tsql", "sqlite": "sqlite", "mysql": "mysql"}
_WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.Into,
    exp.Lock,
    exp.Set,
    exp.Pragma,
    exp.Copy,
    exp.TruncateTable,
)


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


def _query_value(url: sa.URL, key: str) -> str | None:
    value = url.query.get(key)
    return (value[0] if value else None) if isinstance(value, tuple) else value


def _sqlite_path(url: sa.URL) -> Path | None:
    """The file a SQLite URL opens (a ``file:`` URI's path too), symbolic links resolved; None in memory."""
    database = url.database or ""
    if database.startswith("file:"):
        parts = urlsplit(database)
        if "mode=memory" in parts.query:
            return None
        database = unquote(parts.path)
    if not database or database == ":memory:" or _query_value(url, "mode") == "memory":
        return None
    return Path(database).expanduser().resolve()


def _addresses(host: str) -> set[str]:
    """Where ``host`` leads: "local" for this machine (a unix socket folder, a loopback name or address),
    else its lowercase name and the addresses it resolves to (none when it does not resolve)."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if not host or host.startswith("/") or host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return {"local"}
    found = {host}
    try:
        found |= {str(info[4][0]).split("%")[0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError, ValueError):
        pass
    local = set()
    for text in found:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue
        if address.is_loopback or address.is_unspecified:
            local.add("local")
    return found | local


def _server_database(url: sa.URL) -> tuple[str, str, int, str]:
    """(kind, host, port, database) of a server URL, with the defaults a driver fills in (PostgreSQL: libpq's
    PGHOST, PGPORT, PGDATABASE, the user name)."""
    kind = url.get_backend_name()
    kind = "postgresql" if kind == "postgres" else kind
    pg = kind == "postgresql"
    env = os.environ if pg else {}
    host = url.host or _query_value(url, "host") or env.get("PGHOST") or ""
    port = url.port or _query_value(url, "port") or env.get("PGPORT") or _DEFAULT_PORTS.get(kind, 0)
    user = url.username or _query_value(url, "user") or env.get("PGUSER") or ""
    database = url.database or _query_value(url, "dbname") or env.get("PGDATABASE") or (user if pg else "")
    try:
        number = int(port)
    except ValueError:
        number = -1
    return kind, host, number, database


def same_database(url: str | sa.URL, other: str | sa.URL) -> bool:
    """Whether two SQLAlchemy URLs lead to the same database, however they are spelled: SQLite, the same
    file (symbolic and hard links followed, ``file:`` URIs read); a server, the same kind, host (by name or
    address, this machine's loopback names, addresses and unix sockets alike), port (its default when
    absent) and database, whatever the driver, user, password and other options."""
    a, b = sa.make_url(url), sa.make_url(other)
    if a.get_backend_name() == "sqlite" or b.get_backend_name() == "sqlite":
        if a.get_backend_name() != b.get_backend_name():
            return False
        files = _sqlite_path(a), _sqlite_path(b)
        if files[0] is None or files[1] is None:
            return False
        if files[0] == files[1]:
            return True
        try:
            return os.path.samefile(*files)
        except OSError:
            return False
    kind_a, host_a, port_a, db_a = _server_database(a)
    kind_b, host_b, port_b, db_b = _server_database(b)
    if (kind_a, port_a, db_a) != (kind_b, port_b, db_b):
        return False
    return host_a.lower() == host_b.lower() or bool(_addresses(host_a) & _addresses(host_b))


def refuse_ledger_database(url: str | sa.URL, ledger_url: str | sa.URL, connection: str) -> None:
    """``DataError`` when the configured database ``connection`` at ``url`` is the ledger's own database
    (:func:`same_database`), which holds every curator's budgets, releases and session tokens."""
    if same_database(url, ledger_url):
        raise DataError(
            f"The database connection '{connection}' leads to the ledger's own database (the same server "
            "and database as DPCORE_LEDGER_URL), which holds every curator's budgets, releases and session "
            f"tokens, so it cannot be a data source. Point [connections.{connection}] in "
            ".streamlit/secrets.toml at the database that holds the data, with a read-only role (no "
            "superuser, no pg_signal_backend)."
        )


def ledger_error() -> DataError:
    return DataError(
        "This database holds a dpcore ledger (its table ledger_instance), with every curator's budgets, "
        "releases and session tokens, so it cannot be a data source. Point the connection in "
        ".streamlit/secrets.toml at the database that holds the data, with a read-only role (no superuser, "
        "no pg_signal_backend)."
    )


def validate_select(sql: str, dialect: str = "") -> str:
    """``sql`` without a trailing semicolon, if it is exactly one SELECT (UNION, CTEs allowed) with no
    data-modifying or locking part (INSERT/UPDATE/DELETE/MERGE in a CTE, SELECT INTO, FOR UPDATE, DDL,
    SET, PRAGMA); ``DataError`` otherwise."""
    text = sql.strip()
    if not text:
        raise DataError("The query is empty; type one SELECT statement.")
    try:
        statements = [s for s in sqlglot.parse(text, read=_SQLGLOT_DIALECTS.get(dialect)) if s is not None]
    except sqlglot.errors.TokenError as err:  # its text quotes the query, which may hold data
        raise DataError(
            "The query has a quote, a quoted name or a comment that is not closed (a ' or \" without its "
            "pair); close it and type one SELECT statement."
        ) from err
    except sqlglot.errors.ParseError as err:  # its text quotes the query: only where, in words
        where = next(iter(err.errors), {})
        at = f" near line {where.get('line')}, column {where.get('col')}" if where.get("line") else ""
        raise DataError(
            f"The query could not be parsed{at} (a word, comma or bracket out of place); type one SELECT "
            "statement."
        ) from err
    if len(statements) != 1:
        raise DataError(
            f"The query holds {len(statements)} statements; type exactly one SELECT (no ';' between "
            "statements)."
        )
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise DataError(f"Only a SELECT can be run here, not {tree.key.upper()}; type one SELECT statement.")
    bad = next((node for node in tree.walk() if isinstance(node, _WRITES)), None)
    if bad is not None:
        raise DataError(
            f"The query contains {bad.key.upper()}, which could change the database; only a read-only "
            "SELECT can be run here."
        )
    return text.rstrip(";").rstrip()


def list_tables(bind: sa.Engine | sa.Connection, timeout_s: float | None = None) -> list[str]:
    """Tables and views of the database's default schema, by name, never the ledger's
    (:data:`LEDGER_TABLES`); a database holding a ledger (its table ``ledger_instance``) is refused with a
    ``DataError``. With ``timeout_s`` (an engine's listing, as the Data page lists them) the listing runs in
    a transaction rolled back after it and is stopped that many seconds after it starts (:class:`_Deadline`),
    with a ``DataError`` naming the fix."""

    def names(conn: sa.Engine | sa.Connection) -> list[str]:
        found = sa.inspect(conn)
        listed = {*found.get_table_names(), *found.get_view_names()}
        if "ledger_instance" in listed:
            raise ledger_error()
        return sorted(listed - LEDGER_TABLES)

    deadline = _Deadline(timeout_s, "the table list")
    try:
        if timeout_s is None or not isinstance(bind, sa.Engine):
            return names(bind)
        with bind.connect() as conn:
            conn.begin()
            try:
                deadline.arm(conn)
                return names(conn)
            finally:
                deadline.disarm()
                conn.rollback()
    except sa.exc.SQLAlchemyError as err:
        if deadline.stopped(err):
            raise DataError(
                f"Listing the database's tables was stopped after the time limit of {timeout_s:g} s; the "
                "database is slow to answer. Try again later, or ask the operator to raise [dpcore] "
                "query_timeout_s."
            ) from err
        why = url_redactor(bind.engine.url)(_first_line(err))  # a driver may quote the URL's values
        raise DataError(f"Could not list the tables ({why}); check the connection.") from err


def _first_line(err: BaseException) -> str:
    return str(getattr(err, "orig", None) or err).splitlines()[0]


def _read_only(conn: sa.Connection) -> None:
    """Make the connection's open transaction read-only where the database supports it."""
    name = conn.dialect.name
    if name == "postgresql":
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    elif name == "sqlite":
        conn.exec_driver_sql("PRAGMA query_only = ON")


class _Deadline:
    """The end of a read allowed ``limit_s`` seconds from now (None: no end), enforced by the database
    where it can be. PostgreSQL cancels a statement still running at the end (``SET LOCAL
    statement_timeout`` to the time left, set again before the count, the rows and each chunk; local to
    the read's transaction, so the pooled connection keeps no limit). SQLite's progress handler, on the DBAPI
    connection, interrupts it (the clock is read every ``SQLITE_STEPS`` instructions; the handler is
    removed when the read ends), and a timer calls its ``interrupt()`` at the end, for a step that runs long
    between two looks (a sort of large rows, a function on a large value). Every dialect is also checked
    before each fetch, so elsewhere (MySQL, SQL Server, ...) the read stops at the first fetch after the end,
    but a statement the database does not return from is waited for."""

    def __init__(self, limit_s: float | None, label: str) -> None:
        self.limit_s, self.label = limit_s, label
        self.end = math.inf if limit_s is None else time.monotonic() + limit_s
        self.fired = False  # the limit stopped the read (SQLite's interrupt or the check between chunks)
        self._handler: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()  # the timer interrupts only a connection the read still holds

    def left_ms(self) -> int:
        """Milliseconds left; the time-limit ``DataError`` once none are."""
        left = math.ceil((self.end - time.monotonic()) * 1000)
        if left <= 0:
            self.fired = True
            raise self.error()
        return left

    def error(self) -> DataError:
        return DataError(
            f"The read of '{self.label}' was stopped after the database time limit of {self.limit_s:g} s. "
            "Narrow it: select only the columns and rows you need (add a WHERE clause; no join without a "
            "condition), or ask the operator to raise [dpcore] query_timeout_s. The batch job (python -m "
            "dpcore run-plan) reads a whole table without this limit."
        )

    def arm(self, conn: sa.Connection) -> None:
        """Limit what ``conn`` runs next to the time left."""
        if self.limit_s is None:
            return
        left = self.left_ms()
        if conn.dialect.name == "postgresql":
            plain = {"stream_results": False}  # the rows' reader makes the connection stream: not for a SET
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {left:d}", execution_options=plain)
        elif self._handler is None and conn.dialect.name == "sqlite":
            self._handler = conn.connection.driver_connection
            self._handler.set_progress_handler(self._interrupt, SQLITE_STEPS)
            self._timer = threading.Timer(left / 1000, self._interrupt_now)  # a long step: a sort, hex()
            self._timer.daemon = True
            self._timer.start()

    def _interrupt(self) -> int:
        self.fired = self.fired or time.monotonic() >= self.end
        return int(self.fired)

    def _interrupt_now(self) -> None:
        with self._lock:
            if self._handler is not None:
                self.fired = True
                self._handler.interrupt()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._handler is not None:
                self._handler.set_progress_handler(None, 0)
                self._handler = None

    def stopped(self, err: BaseException) -> bool:
        """Whether the limit stopped the read that raised ``err`` (PostgreSQL: query_canceled, 57014)."""
        orig = getattr(err, "orig", err)
        code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        return self.fired or (code == "57014" and time.monotonic() >= self.end - 0.1)


def row_check(conn: sa.Connection, name: str) -> str:
    """A condition true for every row of ``name`` (a table or the query's alias) that PostgreSQL fails
    on, before the row leaves the server, when the row is larger than ``MAX_SQL_ROW_BYTES`` (an invalid
    cast naming ``_TOO_BIG``); empty elsewhere (SQLite's length limit refuses such a row itself)."""
    if conn.dialect.name != "postgresql":
        return ""
    size = f"pg_column_size({name}.*)"  # the failing cast depends on the row: not folded when planned
    too_big = f"CAST('{_TOO_BIG}' || {size} AS integer)"
    return f"CASE WHEN {size} > {int(MAX_SQL_ROW_BYTES):d} THEN {too_big} ELSE 1 END = 1"


@contextmanager
def sql_chunks(
    spec: DatabaseSource,
    engine: sa.Engine,
    chunk_rows: int = common.BATCH_ROWS,
    timeout_s: float | None = None,
) -> Iterator[tuple[int, Iterator[pd.DataFrame]]]:
    """(number of rows, the rows in chunks) of a database table or SELECT, in the order of all their
    columns (named as ``load_table`` names them), read in one read-only transaction (rolled back on leaving
    the ``with`` block). Database errors raise ``DataError``. The chunks' types vary as pandas infers them
    per chunk; :class:`~dpcore.data.fingerprint.FingerprintStream` resolves them as a whole read would.

    Rows are fetched a few at a time and measured as they arrive, before pandas sees them: a chunk ends at
    ``chunk_rows`` rows or ``SQL_CHUNK_BYTES`` bytes of values, and a row above ``MAX_SQL_ROW_BYTES`` is
    refused, by the database itself on SQLite (its length limit) and PostgreSQL (:func:`row_check`), and
    here on every database, with a ``DataError`` naming the limit and the fix.

    With ``timeout_s`` the whole read (table check, count, rows) is stopped that many seconds after it
    starts, by the database itself on PostgreSQL and SQLite, between fetches elsewhere (:class:`_Deadline`),
    with a ``DataError`` naming the limit and the fix. None (the batch job's reads): no limit."""
    deadline = _Deadline(timeout_s, spec.label)
    try:
        with engine.connect() as conn:
            conn.begin()
            length = None
            try:
                _read_only(conn)
                if conn.dialect.name == "sqlite":  # no value or sorted row longer than a row may be
                    length = conn.connection.driver_connection
                    length_was = length.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, int(MAX_SQL_ROW_BYTES))
                deadline.arm(conn)
                count, rows = spec.selects(conn)
                deadline.arm(conn)
                total = int(conn.execute(count).scalar_one())
                deadline.arm(conn)
                result = conn.execution_options(stream_results=True).execute(rows)
                chunks = _fetched(result, spec.label, chunk_rows, deadline, conn)
                yield total, (_plain(chunk.rename(columns=column_name), spec.label) for chunk in chunks)
            finally:
                deadline.disarm()
                conn.rollback()
                if length is not None:
                    length.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length_was)
                if conn.dialect.name == "sqlite":
                    conn.exec_driver_sql("PRAGMA query_only = OFF")
    except (sa.exc.SQLAlchemyError, pd.errors.DatabaseError) as err:  # pandas wraps the SQLAlchemy error
        cause = err.__cause__ or err
        if deadline.stopped(cause):
            raise deadline.error() from err
        if _too_big(cause):
            raise _row_error(spec.label) from err
        why = url_redactor(engine.url)(_first_line(cause))  # a driver may quote its values
        fix = spec.refused_fix
        if "operator" in why:  # rows are read in the order of all their columns: json cannot be sorted
            fix = "read it with a SELECT that casts that column to text, CAST(... AS TEXT),"
        raise DataError(
            f"The database refused the read of '{spec.label}' ({why}); {fix} and load it again."
        ) from err


def _too_big(err: BaseException) -> bool:
    """Whether the database refused a row above ``MAX_SQL_ROW_BYTES`` (SQLite: SQLITE_TOOBIG; PostgreSQL:
    :func:`row_check`'s cast)."""
    orig = getattr(err, "orig", err)
    return getattr(orig, "sqlite_errorname", None) == "SQLITE_TOOBIG" or _TOO_BIG in str(orig)


def _row_error(label: str) -> DataError:
    return DataError(
        f"'{label}' has a row of more than {MAX_SQL_ROW_BYTES / 1024:,.0f} KB (its values' bytes), the most "
        "one row of a database read may hold. Select only the columns you need and shorten long texts (e.g. "
        "substr(note, 1, 1000)) and load it again."
    )


def _fetched(
    result: sa.CursorResult, label: str, chunk_rows: int, deadline: _Deadline, conn: sa.Connection
) -> Iterator[pd.DataFrame]:
    """The rows of ``result`` as frames of at most ``chunk_rows`` rows and about ``SQL_CHUNK_BYTES`` bytes
    (one empty frame when there are none), fetched within the time left as many rows at a time as fit in
    the chunk's bytes left if each were as large as a row may be (``MAX_SQL_ROW_BYTES``, at least one), each
    row measured (:func:`_measured`) before pandas sees it."""
    columns = list(result.keys())
    rows: list[Any] = []
    size, yielded = 0, False
    while True:
        deadline.arm(conn)
        fits = int((SQL_CHUNK_BYTES - size) // MAX_SQL_ROW_BYTES)  # rows of the largest size still fitting
        batch = result.fetchmany(max(1, min(fits, chunk_rows - len(rows))))
        if batch:
            size += _measured(batch, label)
            rows += batch
        if rows and (not batch or len(rows) >= chunk_rows or size >= SQL_CHUNK_BYTES):
            frame, rows, size, yielded = _wrap_result(rows, columns), [], 0, True
            yield frame
        if not batch:
            break
    if not yielded:
        yield _wrap_result([], columns)


def _measured(batch: Sequence[Any], label: str) -> int:
    """The bytes of the values in ``batch`` (a text's or bytes' length, 8 for any other value); a row
    above ``MAX_SQL_ROW_BYTES`` raises the row's ``DataError``."""
    widths = np.zeros(len(batch), dtype=np.int64)
    for column in zip(*batch, strict=True):
        if any(issubclass(t, _SIZED) for t in set(map(type, column))):
            widths += np.fromiter(
                (len(v) if isinstance(v, _SIZED) else 8 for v in column), dtype=np.int64, count=len(batch)
            )
        else:
            widths += 8
    if len(batch) and int(widths.max()) > MAX_SQL_ROW_BYTES:
        raise _row_error(label)
    return int(widths.sum())


_PLAIN = (str, int, float, bool, np.generic, decimal.Decimal, dt.date, dt.time, dt.timedelta, uuid.UUID)


def _plain(chunk: pd.DataFrame, label: str) -> pd.DataFrame:
    """``chunk``, if every cell of its object columns is one plain value (text, number, date or time)
    and its timestamps fit pandas; ``DataError`` naming a column of lists, documents, bytes or addresses
    (which would be read whole on one path and fail on another) or of dates such as 9999-12-31."""
    check_dates(chunk, label)
    for name, values in chunk.items():
        if not pd.api.types.is_object_dtype(values):
            continue
        odd = next((v for v in values if v is not None and not isinstance(v, _PLAIN)), None)
        if odd is not None:
            raise DataError(
                f"'{label}': column '{name}' holds {type(odd).__name__} values, not one plain value "
                f"(text, number, date) per cell; cast it to a plain type in a SELECT (e.g. CAST({name} AS "
                "TEXT)) and load that."
            )
    return chunk


def is_url(source: str) -> bool:
    """True for a SQLAlchemy URL (``dialect[+driver]://...``), False for a file path."""
    head = source.split("://", 1)[0]
    return "://" in source and head.replace("+", "").isalnum() and head != "file"


@contextmanager
def url_engine(url: str) -> Iterator[sa.Engine]:
    """An engine for the database ``url`` (a batch job's), disposed on leaving the ``with`` block;
    ``DataError`` naming the fix for a URL that does not open and for a SQLite file that does not exist
    (connecting would create an empty database there)."""
    from dpcore.url_text import URL_PLACEHOLDER, shown_url  # no secret in any message

    try:
        engine = sa.create_engine(url)
    except (sa.exc.SQLAlchemyError, ImportError, ValueError, TypeError) as err:
        # a malformed URL, an unknown or absent driver, a query value the driver cannot parse; the error of
        # a URL that does not even parse may quote any part of it: only its type is shown
        shown = shown_url(url)
        why = type(err).__name__ if shown == URL_PLACEHOLDER else url_redactor(url)(str(err))
        raise DataError(
            f"Cannot open the database URL {shown} ({why}); give a SQLAlchemy URL such as "
            "postgresql+psycopg://user@host/db whose driver is installed."
        ) from None
    try:
        file = _sqlite_path(engine.url) if engine.url.get_backend_name() == "sqlite" else None
        if file is not None and not file.is_file():
            raise DataError(
                f"There is no SQLite database file at {file}; point --source at the database the plan was "
                "made on."
            )
        yield engine
    finally:
        engine.dispose()


CHUNK_ROWS = 65_536  # rows per chunk of a batch job's read


class DatabaseSource(SourceSpec):
    """Base of the database kinds: rows of the connection :attr:`where` read in one read-only transaction
    (:func:`sql_chunks`), in the order of all their columns; a kind gives its count and rows queries
    (:meth:`selects`) and the fix said when the database refuses the read (``refused_fix``)."""

    allow_list = "databases"
    reread = True
    refused_fix: str
    connection: str  # a field of every database kind

    @property
    def where(self) -> str:
        return self.connection

    @classmethod
    def intro(cls, settings: common.SourceSettings) -> str:
        return (
            "Read in a read-only transaction (PostgreSQL, SQLite); a query must be exactly one SELECT, never "
            "a statement that changes the database. A read is stopped after "
            f"{settings.query_timeout_s:g} s (the operator's time limit)."
        )

    @classmethod
    def connections(cls, ctx: SourceContext) -> dict[str, dict[str, str]]:
        """The allow-listed connection names, as choices."""
        return {name: {"connection": name} for name in ctx.databases}

    @classmethod
    def tables(cls, ctx: SourceContext, connection: str) -> dict[str, dict[str, str]]:
        """The tables and views of ``connection`` as choices (kept by ``ctx.memo`` per name and URL)."""

        def listed() -> list[str]:
            with ctx.engine(connection) as engine:
                return list_tables(engine, timeout_s=ctx.timeout_s)

        return {t: {"table": t} for t in ctx.memo(("tables", connection, ctx.url(connection)), listed)}

    @abstractmethod
    def selects(self, conn: sa.Connection) -> tuple[Any, Any]:
        """(count query, rows query in the order of all their columns) as SQLAlchemy selectables; on
        PostgreSQL the rows query fails on a row above ``MAX_SQL_ROW_BYTES`` (:func:`row_check`)."""

    def stamp(self, ctx: SourceContext) -> tuple[Any, ...]:
        if self.where not in ctx.databases and self.where not in ctx.urls:
            raise DataError(
                f"'{self.where}' is not a database listed in [dpcore] databases; choose one from the list."
            )
        return (ctx.url(self.where),)

    def load(self, ctx: SourceContext, *, max_rows: int, sample_seed: int) -> LoadedSource:
        with (
            ctx.engine(self.where) as engine,
            sql_chunks(self, engine, timeout_s=ctx.timeout_s) as (n, chunks),
        ):
            result = common.one_pass(self.label, chunks, n, max_rows, sample_seed, int(MAX_SQL_BYTES))
        what = f"database '{self.where}', read in a read-only transaction"
        return common.loaded(self.label, *result, sample_seed, what)

    def batch(self, ctx: SourceContext) -> BatchChunks:
        @contextmanager
        def read() -> Iterator[tuple[int, Iterator[pd.DataFrame]]]:
            with ctx.engine(self.where) as engine, sql_chunks(self, engine, CHUNK_ROWS, ctx.timeout_s) as got:
                yield got

        return BatchChunks(self.label, read)

    @classmethod
    def url_form(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[str, SourceContext] | None:
        """(connection name, context) of a batch command's database ``--source`` URL (the URL without its
        secrets names it), None for a file; ``ParameterError`` unless exactly one of --table and --query is
        given."""
        if not is_url(source):
            return None
        if (table is None) == (query is None):
            raise ParameterError(
                "A database source needs --table NAME or --query 'SELECT ...' (one of them: the table or "
                "the SELECT the plan was made on)."
            )
        from dpcore.url_text import shown_url

        name = shown_url(source)
        return name, SourceContext(urls={name: source})

    def command_line(self) -> list[str]:
        return [f"<URL of the database connection {self.where}>"]
