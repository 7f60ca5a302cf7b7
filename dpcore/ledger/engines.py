"""SQLAlchemy URLs and engines for the ledger: SQLite (write-ahead log, ``BEGIN IMMEDIATE`` for writes) or
a server database (PostgreSQL: ``lock_timeout``), a lock waited for at most :data:`LOCK_WAIT_S`, and
driver faults turned into :class:`~dpcore.ledger.records.LedgerBusy` or
:class:`~dpcore.ledger.records.LedgerUnavailable` messages that publish no password or server path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dpcore import config
from dpcore.ledger.records import LedgerBusy, LedgerError, LedgerUnavailable
from dpcore.url_text import shown_url, url_redactor

LOCK_WAIT_S = 3.0  # longest wait for a lock held elsewhere (SQLite busy timeout, PostgreSQL lock_timeout)


def _make_engine(url: sa.URL, *, create_folder: bool = True) -> sa.Engine:
    try:
        return _engine_for(url, create_folder)
    except (ImportError, sa.exc.NoSuchModuleError, sa.exc.ArgumentError) as err:
        raise LedgerUnavailable(
            f"The ledger URL {_url_words(url)} needs a database driver that is not installed ({err}). "
            "Install it (for PostgreSQL: pip install 'psycopg[binary]') or fix DPCORE_LEDGER_URL."
        ) from None


def _engine_for(url: sa.URL, create_folder: bool) -> sa.Engine:
    """Engine for ``url`` that waits at most :data:`LOCK_WAIT_S` for a lock; on SQLite, a write-ahead log
    (readers do not wait for the writer) and our own BEGIN (IMMEDIATE for writes).

    pysqlite recipe from the SQLAlchemy SQLite docs ("Transactions with SQLite and the sqlite3 driver").
    ``create_folder``: create a SQLite file's missing folder (the session store's tables; never a ledger's
    unless it is being initialised).
    """
    if url.get_backend_name() == "postgresql":
        lock_ms = int(LOCK_WAIT_S * 1000)
        args = {"options": f"-c lock_timeout={lock_ms}"}
        return sa.create_engine(url, pool_pre_ping=True, connect_args=args)
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    file = sqlite_file(url)
    if file is not None and create_folder:
        file.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": LOCK_WAIT_S})

    @sa.event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 stops emitting BEGIN; we emit it below
        if file is not None:
            try:  # persistent once set; a lock held by a rollback-journal writer surfaces at BEGIN instead
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            except dbapi_connection.OperationalError:
                pass

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("dpcore_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _parse_url(url: str | sa.URL | None) -> sa.URL:
    """``url`` (default :func:`config.ledger_url`) as a SQLAlchemy URL, or :class:`LedgerUnavailable`."""
    text = config.ledger_url() if url is None else url
    try:
        return sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        raise LedgerUnavailable(
            "The ledger URL is malformed. Set DPCORE_LEDGER_URL to an SQLAlchemy URL such as "
            "sqlite:////srv/dpcore/ledger.db or postgresql+psycopg://user@host/db, or unset it to use the "
            "data folder's ledger."
        ) from None


def sqlite_file(url: sa.URL) -> Path | None:
    """The file of a SQLite URL (None for other databases, in-memory and ``file:`` URIs)."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser().absolute()


def _folder_words(file: Path) -> str:
    """Where a file is, without publishing server paths beyond the folder's own name."""
    return f"the folder {file.parent.name!r}" if file.parent.name else "its folder"


def _url_words(url: sa.URL) -> str:
    """A ledger URL in messages: a SQLite file by name, a server database without its password and query
    values (:func:`~dpcore.url_text.shown_url`)."""
    file = sqlite_file(url)
    if file is not None:
        return f"file {file.name!r}"
    if url.get_backend_name() == "sqlite":
        return "(in-memory SQLite)"
    return repr(shown_url(url))


def _is_busy(err: sa.exc.DBAPIError) -> bool:
    """A lock wait that timed out: SQLite "database is locked/busy", PostgreSQL lock_not_available."""
    text = str(err.orig).lower()
    code = getattr(err.orig, "sqlstate", None) or getattr(err.orig, "pgcode", None)
    return code == "55P03" or "database is locked" in text or "database is busy" in text


def _database_fault(err: sa.exc.DBAPIError, url: sa.URL) -> LedgerError:
    """A driver error as a ledger error saying what is wrong and what to do."""
    if _is_busy(err):
        return LedgerBusy(
            f"The ledger is busy: another program held its lock for more than {LOCK_WAIT_S:g} s. Nothing was "
            "changed or debited; retry in a moment."
        )
    text = url_redactor(url)(str(err.orig).strip())  # a driver may quote the URL's values (libpq: sslmode)
    first = text.splitlines()[0][:200] if text else type(err.orig).__name__
    return LedgerUnavailable(
        f"The ledger database {_url_words(url)} cannot be used ({first}). Nothing was changed. Check that "
        "it is a dpcore ledger that the app can reach and write (restore it from a backup if it is damaged); "
        "a new ledger is made only with `python -m dpcore init-ledger`."
    )
