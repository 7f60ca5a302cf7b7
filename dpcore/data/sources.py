"""Tables the operator configures: files under allow-listed folders, and SQL database tables or SELECTs.

A source is named by a spec (:class:`FolderFile`, :class:`DatabaseTable`, :class:`DatabaseQuery`) that holds
no data and no secret (a database is named by its connection name, the URL stays in the operator's config),
so a session plan can store it and load the table again. :func:`load_source` reads the source in one
streaming pass: it computes the whole table's :func:`~dpcore.data.fingerprint` (through
:class:`~dpcore.data.fingerprint.FingerprintStream`) and keeps the rows, or, above ``max_rows``, a uniform
sample of ``max_rows`` rows (indices drawn without replacement), for the diagnostics. The kept rows go
through :func:`~dpcore.data.load_table`, the upload path, so a Parquet file gives the same table and the
same fingerprint whether it is uploaded or read from a folder.

Safety: a folder file must resolve (symlinks followed) inside one of the allow-listed folders, with no
absolute path and no ``..``; only those folders are listed, never the rest of the file system. A query
must parse as exactly one SELECT with no data-modifying part (:func:`validate_select`) and runs in a
read-only transaction where the database has one (PostgreSQL, SQLite); a table must be one the database
lists. Rows are read in the order of all their columns, so the fingerprint does not depend on the
database's scan order. The Data page's reads and table lists stop at the operator's time limit
(``query_timeout_s``, :func:`sql_chunks`, :func:`list_tables`); the operator's batch job reads without one.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import ipaddress
import math
import os
import secrets
import socket
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
import sqlglot
from pandas.io.sql import _wrap_result  # pandas' own rows-to-frame step (read_sql's)
from sqlglot import exp

from dpcore.data.fingerprint import FingerprintStream, fingerprint
from dpcore.data.io import (
    MAX_COLUMNS,
    binary_type,
    check_dates,
    check_flat,
    column_name,
    index_as_column,
    load_table,
    parquet_batches,
)
from dpcore.errors import DataError
from dpcore.url_text import url_redactor

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_QUERY_TIMEOUT_S",
    "DEFAULT_SOURCE_CACHE_TTL_S",
    "LEDGER_TABLES",
    "DatabaseQuery",
    "DatabaseTable",
    "FolderFile",
    "LoadedSource",
    "SourceSettings",
    "SourceSpec",
    "list_folder_files",
    "list_tables",
    "load_source",
    "parquet_frames",
    "parquet_parts",
    "read_text_file",
    "refuse_ledger_database",
    "resolve_folder_file",
    "same_database",
    "source_from_dict",
    "sql_chunks",
    "validate_select",
]

DEFAULT_MAX_ROWS = 200_000
MAX_TEXT_MB = 200  # a file read whole (as an upload is): a CSV on disk and unpacked, a Parquet file's text
MAX_LISTED = 500
MAX_WALKED = 10_000
BATCH_ROWS = 65_536
FOLDERS_ENV = "DPCORE_DATA_FOLDERS"
MAX_ROWS_ENV = "DPCORE_MAX_ROWS"
DEFAULT_QUERY_TIMEOUT_S = 300.0  # a sampled read of 2M x 10 SQLite rows: 12 s
QUERY_TIMEOUT_ENV = "DPCORE_QUERY_TIMEOUT_S"
DEFAULT_SOURCE_CACHE_TTL_S = 600.0  # a database read is kept per server this long (0: read every time)
SOURCE_CACHE_TTL_ENV = "DPCORE_SOURCE_CACHE_TTL_S"
SQLITE_STEPS = 10_000  # SQLite virtual-machine instructions between two looks at the clock (well under 1 ms)
MAX_SQL_ROW_BYTES = 2**18  # one row of a database read: its values' bytes (Data page and batch job alike)
SQL_CHUNK_BYTES = 2**24  # a chunk of a database read ends at this many bytes of values (or at its rows)
MAX_SQL_BYTES = MAX_TEXT_MB * 2**20  # bytes of values the Data page keeps from one database read
#: The ledger's tables (dpcore.ledger, and dpcore.sessions' ``sessions``): never listed as a data source.
LEDGER_TABLES = frozenset({"ledger_instance", "datasets", "accounts", "account_releases", "sessions"})
_TOO_BIG = "dpcore_row_too_big"  # the text PostgreSQL's row check fails to cast, naming the refusal
_SIZED = (str, bytes, bytearray, memoryview)
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")
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


# -- specs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FolderFile:
    """A Parquet or CSV file, or a folder of Parquet files, at ``path`` (relative, POSIX) below the
    allow-listed ``folder`` (as the operator configured it)."""

    folder: str
    path: str

    @property
    def label(self) -> str:
        return f"{Path(self.folder).name}/{self.path}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": "folder_file", "folder": self.folder, "path": self.path}


@dataclass(frozen=True)
class DatabaseTable:
    """A table of the database the operator configured under the connection name ``connection``."""

    connection: str
    table: str

    @property
    def label(self) -> str:
        return f"{self.connection}: {self.table}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": "database_table", "connection": self.connection, "table": self.table}


@dataclass(frozen=True)
class DatabaseQuery:
    """One read-only SELECT on the database configured under ``connection``."""

    connection: str
    sql: str

    @property
    def label(self) -> str:
        text = " ".join(self.sql.split())
        return f"{self.connection}: {text[:60]}{'...' if len(text) > 60 else ''}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": "database_query", "connection": self.connection, "sql": self.sql}


SourceSpec = FolderFile | DatabaseTable | DatabaseQuery
_KINDS: dict[str, type[FolderFile] | type[DatabaseTable] | type[DatabaseQuery]] = {
    "folder_file": FolderFile,
    "database_table": DatabaseTable,
    "database_query": DatabaseQuery,
}


def source_from_dict(data: Mapping[str, Any]) -> SourceSpec:
    """The spec saved by ``spec.to_dict()``."""
    fields = {k: v for k, v in data.items() if k != "kind"}
    kind = _KINDS.get(str(data.get("kind")))
    if kind is None or not all(isinstance(v, str) for v in fields.values()):
        raise DataError(f"Not a saved data source: {dict(data)!r}; choose the source again on the Data page.")
    try:
        return kind(**fields)
    except TypeError as err:
        raise DataError(
            f"Not a saved source (its fields are not those of a {kind.__name__}); choose the source again on "
            "the Data page."
        ) from err


@dataclass(frozen=True)
class SourceSettings:
    """What the operator allows: data folders, database connection names, the in-memory row limit, the
    time limit of a database read on the Data page (seconds) and how long the Data page keeps a database
    read for other sessions and reloads (seconds, 0: never kept).

    Read by :meth:`from_config` from a ``[dpcore]`` table (``data_folders``, ``databases``, ``max_rows``,
    ``query_timeout_s``, ``source_cache_ttl_s``) and the environment (``DPCORE_DATA_FOLDERS``: folders
    separated by ``os.pathsep``; ``DPCORE_MAX_ROWS``; ``DPCORE_QUERY_TIMEOUT_S``;
    ``DPCORE_SOURCE_CACHE_TTL_S``).
    """

    folders: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()
    max_rows: int = DEFAULT_MAX_ROWS
    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    source_cache_ttl_s: float = DEFAULT_SOURCE_CACHE_TTL_S

    @classmethod
    def from_config(cls, table: Mapping[str, Any], environ: Mapping[str, str]) -> SourceSettings:
        folders = [str(f) for f in _strings(table.get("data_folders", ()), "data_folders")]
        folders += [f for f in environ.get(FOLDERS_ENV, "").split(os.pathsep) if f.strip()]
        databases = _strings(table.get("databases", ()), "databases")
        limit = environ.get(MAX_ROWS_ENV) or table.get("max_rows", DEFAULT_MAX_ROWS)
        try:
            max_rows = int(limit)
        except (TypeError, ValueError):
            max_rows = 0
        if max_rows < 1:
            raise DataError(f"max_rows must be a positive whole number (got {limit!r}); fix the config.")
        timeout = environ.get(QUERY_TIMEOUT_ENV) or table.get("query_timeout_s", DEFAULT_QUERY_TIMEOUT_S)
        seconds = _seconds(timeout)
        if not seconds > 0:
            raise DataError(
                f"query_timeout_s must be a positive number of seconds (got {timeout!r}), e.g. "
                f"query_timeout_s = {DEFAULT_QUERY_TIMEOUT_S:g}; fix the config."
            )
        ttl = environ.get(SOURCE_CACHE_TTL_ENV) or table.get("source_cache_ttl_s", DEFAULT_SOURCE_CACHE_TTL_S)
        kept = _seconds(ttl)
        if not kept >= 0:
            raise DataError(
                f"source_cache_ttl_s must be a number of seconds, 0 or more (got {ttl!r}), e.g. "
                f"source_cache_ttl_s = {DEFAULT_SOURCE_CACHE_TTL_S:g} (0 reads a database on every load); "
                "fix the config."
            )
        unique = tuple(dict.fromkeys(folders)), tuple(dict.fromkeys(databases))
        return cls(*unique, max_rows, seconds, kept)


def _seconds(value: Any) -> float:
    """``value`` as a finite number of seconds, NaN when it is not one (a boolean, text, inf)."""
    try:
        seconds = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return math.nan
    return seconds if math.isfinite(seconds) else math.nan


def _strings(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise DataError(f"[dpcore] {name} must be a list of strings, e.g. {name} = ['...']; fix it.")
    return list(value)


# -- folders ----------------------------------------------------------------------------------------


def _hidden(name: str) -> bool:
    """Names Spark, Hive and Arrow datasets skip: '.' (hidden, staging) and '_' (_temporary, _SUCCESS)."""
    return name.startswith((".", "_"))


def _is_table_file(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES + TEXT_SUFFIXES) and not _hidden(name)


def parquet_parts(folder: Path) -> list[Path]:
    """Every ``.parquet`` file below ``folder``, in sorted path order, skipping files and folders whose
    names start with '.' or '_' (a writer's in-progress parts, as Spark and Arrow datasets skip them)."""
    return sorted(
        p
        for p in folder.rglob("*.parquet")
        if p.is_file() and not any(_hidden(part) for part in p.relative_to(folder).parts)
    )


def _inside(path: Path, root: Path, shown: str) -> Path:
    real = path.resolve()
    if not real.is_relative_to(root):
        raise DataError(
            f"'{shown}' leads outside the allow-listed folder (through a symbolic link); choose a file from "
            "the list."
        )
    return real


def resolve_folder_file(spec: FolderFile, folders: Sequence[str]) -> list[Path]:
    """The file(s) ``spec`` names, each checked to lie inside its allow-listed folder after resolving
    symbolic links: one file, or the ``.parquet`` files below a folder (:func:`parquet_parts`).

    Raises ``DataError`` for a folder that is not allow-listed, an absolute path, ``..``, a symbolic link
    leading out of the folder, a missing file or an unsupported file type.
    """
    if spec.folder not in folders:
        raise DataError(
            f"'{spec.folder}' is not an allow-listed data folder; choose a file from the list (the operator "
            "sets the folders in [dpcore] data_folders)."
        )
    rel = PurePosixPath(spec.path)
    if not spec.path or rel.is_absolute() or ".." in rel.parts or "\\" in spec.path or "\x00" in spec.path:
        raise DataError(
            f"'{spec.path}' is not a path inside the folder (no absolute paths, no '..'); choose a file from "
            "the list."
        )
    root = Path(spec.folder).resolve()
    target = root.joinpath(*rel.parts)
    if not target.exists():
        raise DataError(f"'{spec.label}' does not exist (any more); choose a file from the list.")
    real = _inside(target, root, spec.path)
    if real.is_dir():  # its .parquet parts, as the batch command reads them
        parts = parquet_parts(real)
        if not parts:
            raise DataError(f"'{spec.label}' holds no .parquet files; choose a file from the list.")
        return [_inside(p, root, f"{spec.path}/{p.name}") for p in parts]
    if not _is_table_file(real.name):
        raise DataError(
            f"'{spec.label}' is not a Parquet or CSV file (.parquet, .pq, .csv, .tsv, .txt, .csv.gz); choose "
            "a file from the list."
        )
    return [real]


def list_folder_files(folders: Sequence[str]) -> list[FolderFile]:
    """Parquet and CSV files below the allow-listed folders (names starting with '.' or '_' and symbolic
    links leading out excluded), and each sub-folder with two or more Parquet files below it (one table:
    all of them, as in a partitioned data set), in path order; at most ``MAX_LISTED`` of the first
    ``MAX_WALKED`` files."""
    found: list[FolderFile] = []
    for folder in folders:
        root = Path(folder).resolve()
        if not root.is_dir():
            continue
        files: list[PurePosixPath] = []
        for dirpath, dirnames, filenames in os.walk(root):  # symbolic links to folders are not entered
            dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
            here = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
            files += [here / f for f in sorted(filenames) if _is_table_file(f)]
            if len(files) >= MAX_WALKED:
                break
        below = Counter(d for f in files if f.name.lower().endswith(".parquet") for d in f.parents if d.parts)
        candidates = sorted([*files, *(d for d, n in below.items() if n > 1)], key=lambda p: p.parts)
        for rel in candidates:
            spec = FolderFile(folder, rel.as_posix())
            try:
                resolve_folder_file(spec, folders)
            except DataError:
                continue
            found.append(spec)
            if len(found) >= MAX_LISTED:
                return found
    return found


# -- databases --------------------------------------------------------------------------------------


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


def _ledger_error() -> DataError:
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
            raise _ledger_error()
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


_SQL_COLUMNS = "Load only the columns you need (features, the user column) with SELECT a, b, ... FROM ..."
_FILE_COLUMNS = "Write a copy with only the columns you need (features, the user column) and use that."


def _check_names(label: str, names: Sequence[object], fix: str) -> None:
    """Refuse, before any row is read, a source wider than the Data page holds (``MAX_COLUMNS``; ``fix``
    says how to narrow it) or naming two columns alike (a join's ``a.x, b.x``; names compared as
    ``load_table`` cleans them)."""
    if len(names) > MAX_COLUMNS:
        raise DataError(f"'{label}' has {len(names):,} columns; at most {MAX_COLUMNS:,} can be loaded. {fix}")
    seen: set[str] = set()
    twice = next((n for n in map(column_name, names) if n in seen or seen.add(n)), None)
    if twice is not None:
        raise DataError(
            f"'{label}' returns the column name '{twice}' more than once; give each column its own name "
            f"(in a SELECT: a.{twice} AS {twice}_a, b.{twice} AS {twice}_b)."
        )


def _row_check(conn: sa.Connection, name: str) -> str:
    """A condition true for every row of ``name`` (a table or the query's alias) that PostgreSQL fails
    on, before the row leaves the server, when the row is larger than ``MAX_SQL_ROW_BYTES`` (an invalid
    cast naming ``_TOO_BIG``); empty elsewhere (SQLite's length limit refuses such a row itself)."""
    if conn.dialect.name != "postgresql":
        return ""
    size = f"pg_column_size({name}.*)"  # the failing cast depends on the row: not folded when planned
    too_big = f"CAST('{_TOO_BIG}' || {size} AS integer)"
    return f"CASE WHEN {size} > {int(MAX_SQL_ROW_BYTES):d} THEN {too_big} ELSE 1 END = 1"


def _sql_selects(spec: DatabaseTable | DatabaseQuery, conn: sa.Connection) -> tuple[Any, Any]:
    """(count query, ordered rows query) of the spec, as SQLAlchemy selectables; on PostgreSQL the rows
    query fails on a row above ``MAX_SQL_ROW_BYTES`` (:func:`_row_check`). A database holding a ledger is
    refused (:data:`LEDGER_TABLES`)."""
    if isinstance(spec, DatabaseTable):
        if spec.table not in list_tables(conn):
            raise DataError(f"The database has no table '{spec.table}'; choose one from the list.")
        table = sa.Table(spec.table, sa.MetaData(), autoload_with=conn)
        _check_names(spec.label, [c.name for c in table.columns], _SQL_COLUMNS)
        rows = sa.select(table).order_by(*table.columns)
        check = _row_check(conn, conn.dialect.identifier_preparer.quote(spec.table))
        rows = rows.where(sa.text(check)) if check else rows
        return sa.select(sa.func.count()).select_from(table), rows
    if sa.inspect(conn).has_table("ledger_instance"):
        raise _ledger_error()
    sql = validate_select(spec.sql, conn.dialect.name)
    inner = f"({sql}\n) AS dpcore_q"  # a line break: a trailing -- comment ends before the parenthesis
    names = list(conn.execute(sa.text(f"SELECT * FROM {inner} WHERE 1 = 0")).keys())
    _check_names(spec.label, names, _SQL_COLUMNS)
    order = ", ".join(str(i + 1) for i in range(len(names)))
    check = _row_check(conn, "dpcore_q")
    where = f" WHERE {check}" if check else ""
    return sa.text(f"SELECT COUNT(*) FROM {inner}"), sa.text(f"SELECT * FROM {inner}{where} ORDER BY {order}")


# -- loading ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSource:
    """A source read in one pass: ``table`` is the whole table, or a uniform sample of it when
    ``sampled`` (``sample_seed`` draws the same rows again); ``fingerprint`` and ``n_rows`` are always
    the whole table's."""

    table: pd.DataFrame
    fingerprint: str
    n_rows: int
    sampled: bool
    sample_seed: int | None
    description: str


def load_source(
    spec: SourceSpec,
    *,
    folders: Sequence[str] = (),
    engine: sa.Engine | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    sample_seed: int | None = None,
    timeout_s: float | None = None,
) -> LoadedSource:
    """Read ``spec`` (a folder file needs the allow-listed ``folders``, a database spec its ``engine``);
    above ``max_rows`` rows keep a uniform sample drawn with ``sample_seed`` (new from the OS entropy
    source when None: the sample is for diagnostics, its seed is recorded to load the same rows again).
    A database read is stopped after ``timeout_s`` seconds (None: no limit), see :func:`sql_chunks`, and
    refused once the rows it keeps take more than ``MAX_SQL_BYTES`` in memory."""
    if max_rows < 1:
        raise DataError(f"max_rows must be at least 1 (got {max_rows}).")
    seed = secrets.randbits(63) if sample_seed is None else int(sample_seed)
    if isinstance(spec, FolderFile):
        return _load_folder_file(spec, folders, max_rows, seed)
    if engine is None:
        raise DataError(f"No database connection for '{spec.connection}'; the operator must configure it.")
    return _load_sql(spec, engine, max_rows, seed, timeout_s)


def _pass(
    name: str,
    chunks: Iterator[pd.DataFrame],
    total: int,
    max_rows: int,
    seed: int,
    max_bytes: int | None = None,
) -> tuple[str, int, list[pd.DataFrame], bool]:
    """One pass over ``chunks`` (``total`` rows in all): the fingerprint of the rows with a value (as
    ``load_table`` keeps them), their number, and the rows kept (all, or a uniform sample of ``max_rows``
    of the ``total`` rows, indices without replacement), refused once they take more than ``max_bytes`` in
    memory (None: no limit)."""
    sampled = total > max_rows
    picks = np.sort(np.random.default_rng(seed).choice(total, max_rows, replace=False)) if sampled else None
    kept: list[pd.DataFrame] = []
    start = held = 0
    with FingerprintStream() as stream:
        for chunk in chunks:
            if picks is None:
                kept.append(chunk)
            else:
                lo, hi = np.searchsorted(picks, [start, start + len(chunk)])
                kept.append(chunk.iloc[picks[lo:hi] - start])
            if max_bytes is not None:
                held += int(kept[-1].memory_usage(index=False, deep=True).sum())
                if held > max_bytes:
                    raise _kept_error(name, max_bytes)
            start += len(chunk)
            stream.update(chunk.dropna(how="all"))
        if start != total:
            raise DataError(f"'{name}' changed while it was read ({start:,} of {total:,} rows); load again.")
        if stream.n_rows == 0:
            raise _no_rows(name, total)
        return stream.hexdigest(), stream.n_rows, kept, sampled


def _kept_error(name: str, max_bytes: int) -> DataError:
    return DataError(
        f"'{name}' takes more than {max_bytes / 2**20:,.0f} MB in memory, the most the Data page keeps from "
        "one database read. Select only the columns you need and shorten long texts (e.g. substr(note, 1, "
        "1000)), or ask the operator to lower [dpcore] max_rows (a smaller sample); the batch job (python -m "
        "dpcore run-plan) reads the whole table without this limit."
    )


def _no_rows(name: str, total: int) -> DataError:
    empty = f" with a value ({total:,} row{'s' * (total != 1)}, every cell empty)" if total else ""
    return DataError(f"'{name}' has no rows{empty}; choose a table, file or SELECT with at least one row.")


def _validated(kept: list[pd.DataFrame], name: str) -> pd.DataFrame:
    """The kept rows read back through ``load_table`` (the upload path's checks and types)."""
    frame = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()
    buffer = io.BytesIO()
    try:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    except (pa.ArrowException, TypeError, ValueError) as err:
        mixed = ", ".join(f"'{c}'" for c in frame.columns if not _one_type(frame[c])) or "?"
        raise DataError(
            f"'{name}' has a column mixing types ({mixed}: numbers and text, say, which one column cannot "
            "hold); cast it to one type and load it again."
        ) from err
    return load_table(buffer.getvalue(), filename=f"{name}.parquet", max_bytes=MAX_TEXT_MB * 2**20)


def _one_type(values: pd.Series) -> bool:
    """Whether Arrow can hold ``values`` as one column (one type)."""
    try:
        pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return True


def _result(
    name: str, digest: str, n_rows: int, kept: list[pd.DataFrame], sampled: bool, seed: int, what: str
) -> LoadedSource:
    table = _validated(kept, name)
    if not sampled:  # the table in use is the whole table: its own fingerprint, as for an upload
        return LoadedSource(table, fingerprint(table), len(table), False, None, what)
    note = f"{what}; uniform sample of {len(table):,} of {n_rows:,} rows"
    return LoadedSource(table, digest, n_rows, True, seed, note)


def _load_folder_file(spec: FolderFile, folders: Sequence[str], max_rows: int, seed: int) -> LoadedSource:
    paths = resolve_folder_file(spec, folders)
    if len(paths) == 1 and not paths[0].name.lower().endswith(PARQUET_SUFFIXES):
        return _load_text_file(spec, paths[0], max_rows, seed)
    try:  # one file open at a time: a folder may hold more parts than a process may open
        total = sum(pq.read_metadata(p).num_rows for p in paths)
        names = pq.read_schema(paths[0]).names
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"'{spec.label}' is not readable Parquet (damaged, or written in a way pyarrow cannot read: "
            f"{type(err).__name__}); export it again."
        ) from err
    if total == 0:
        raise _no_rows(spec.label, 0)
    _check_names(spec.label, names, _FILE_COLUMNS)
    what = f"Parquet, {len(paths)} file{'s' * (len(paths) > 1)} in an allow-listed folder"
    if total <= max_rows and len(paths) == 1:  # exactly an upload of this file
        table = load_table(paths[0], max_bytes=MAX_TEXT_MB * 2**20)
        return LoadedSource(table, fingerprint(table), len(table), False, None, what)

    chunks = parquet_frames(paths, spec.label)
    return _result(spec.label, *_pass(spec.label, chunks, total, max_rows, seed), seed, what)


def _names(columns: Sequence[str], most: int = 8) -> str:
    shown = ", ".join(columns[:most])
    return f"{shown}, ... ({len(columns)} in all)" if len(columns) > most else shown


def _binary_as_utf8(batch: pa.RecordBatch, label: str) -> pa.RecordBatch:
    """``batch`` with its binary columns read as text, as a whole-file read reads them when they are
    UTF-8; ``DataError`` otherwise (a whole-file read spells such a column in hexadecimal digits, which
    one batch cannot decide for the whole column)."""
    if not any(binary_type(t) for t in batch.schema.types):
        return batch
    columns, fields = [], []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if binary_type(field.type):
            try:
                column = column.cast(pa.binary()).cast(pa.string())
            except pa.ArrowInvalid as err:
                raise DataError(
                    f"'{label}': column '{field.name}' holds binary values that are not UTF-8 text; write "
                    "it as text (e.g. hexadecimal digits) or leave it out, and use that file."
                ) from err
            field = field.with_type(pa.string())
        columns.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata=batch.schema.metadata))


def parquet_frames(paths: Sequence[Path], label: str, batch_rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """The rows of the Parquet files ``paths`` (one table, in this order) as frames of at most
    ``batch_rows`` rows, column names cleaned as ``load_table`` cleans them; each batch is measured before
    its text is expanded (:func:`~dpcore.data.io.parquet_batches`). ``DataError`` for an unreadable file,
    too many or repeated column names, nested columns, timestamps pandas cannot hold, a batch too large
    once decoded, or a file whose columns differ from the first file's."""
    root = Path(os.path.commonpath([p.parent for p in paths])) if paths else Path()
    first: tuple[Path, list[str]] | None = None
    try:
        if paths:
            _check_names(label, pq.read_schema(paths[0]).names, _FILE_COLUMNS)
        for path in paths:
            check_flat(pq.read_schema(path), label)
            for k, batch in enumerate(parquet_batches(path, label, batch_rows)):
                frame = index_as_column(_binary_as_utf8(batch, label).to_pandas(), label)
                frame = frame.rename(columns=column_name)
                check_dates(frame, label)
                columns = [str(c) for c in frame.columns]
                first = first or (path, columns)
                if k == 0 and columns != first[1]:
                    raise DataError(
                        f"'{label}': {path.relative_to(root)} has the columns {_names(columns)} but "
                        f"{first[0].relative_to(root)} has {_names(first[1])}; every file of a folder table "
                        "must have the same columns in the same order. Move the odd file out of the folder, "
                        "or write it again with the same columns."
                    )
                yield frame
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"'{label}' could not be read (damaged, or changed while it was read: {type(err).__name__}); "
            "export it again."
        ) from err


def read_text_file(path: Path, label: str) -> pd.DataFrame:
    """A CSV file (gzip-compressed or not) read whole, as an upload is read, refused above
    ``MAX_TEXT_MB`` on disk or once unpacked (Parquet is read in a streaming pass instead)."""
    limit = MAX_TEXT_MB * 2**20
    size = path.stat().st_size
    if size > limit:
        raise DataError(
            f"'{label}' is {size / 2**20:,.0f} MB; CSV files above {MAX_TEXT_MB} MB are not read into "
            "memory. Convert it to Parquet (read in a streaming pass) and use that."
        )
    return load_table(path, max_bytes=limit)


def _load_text_file(spec: FolderFile, path: Path, max_rows: int, seed: int) -> LoadedSource:
    table = read_text_file(path, spec.label)
    digest = fingerprint(table)
    if len(table) <= max_rows:
        return LoadedSource(table, digest, len(table), False, None, "CSV in an allow-listed folder")
    rows = np.sort(np.random.default_rng(seed).choice(len(table), max_rows, replace=False))
    note = f"CSV in an allow-listed folder; uniform sample of {max_rows:,} of {len(table):,} rows"
    return LoadedSource(table.iloc[rows].reset_index(drop=True), digest, len(table), True, seed, note)


@contextmanager
def sql_chunks(
    spec: DatabaseTable | DatabaseQuery,
    engine: sa.Engine,
    chunk_rows: int = BATCH_ROWS,
    timeout_s: float | None = None,
) -> Iterator[tuple[int, Iterator[pd.DataFrame]]]:
    """(number of rows, the rows in chunks) of a database table or SELECT, in the order of all their
    columns (named as ``load_table`` names them), read in one read-only transaction (rolled back on leaving
    the ``with`` block). Database errors raise ``DataError``. The chunks' types vary as pandas infers them
    per chunk; :class:`~dpcore.data.fingerprint.FingerprintStream` resolves them as a whole read would.

    Rows are fetched a few at a time and measured as they arrive, before pandas sees them: a chunk ends at
    ``chunk_rows`` rows or ``SQL_CHUNK_BYTES`` bytes of values, and a row above ``MAX_SQL_ROW_BYTES`` is
    refused, by the database itself on SQLite (its length limit) and PostgreSQL (:func:`_row_check`), and
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
                count, rows = _sql_selects(spec, conn)
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
        query = isinstance(spec, DatabaseQuery)
        fix = "correct the SELECT" if query else "check the connection's access to it"
        if "operator" in why:  # rows are read in the order of all their columns: json cannot be sorted
            fix = "read it with a SELECT that casts that column to text, CAST(... AS TEXT),"
        raise DataError(
            f"The database refused the read of '{spec.label}' ({why}); {fix} and load it again."
        ) from err


def _too_big(err: BaseException) -> bool:
    """Whether the database refused a row above ``MAX_SQL_ROW_BYTES`` (SQLite: SQLITE_TOOBIG; PostgreSQL:
    :func:`_row_check`'s cast)."""
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


def _load_sql(
    spec: DatabaseTable | DatabaseQuery, engine: sa.Engine, max_rows: int, seed: int, timeout_s: float | None
) -> LoadedSource:
    with sql_chunks(spec, engine, timeout_s=timeout_s) as (total, chunks):
        result = _pass(spec.label, chunks, total, max_rows, seed, int(MAX_SQL_BYTES))
    what = f"database '{spec.connection}', read in a read-only transaction"
    return _result(spec.label, *result, seed, what)
