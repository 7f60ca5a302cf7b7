"""Server-side store of dashboard sessions: one JSON plan per URL token, uploaded tables by fingerprint.

A session is named by a random 128-bit token (32 hex digits) that the server issues and the app keeps in
its URL. Its plan (which table, schema, cleaning steps, preparation choices, policy, sampling mode, widget
values) is a JSON object in the table ``sessions(token PK, state, updated)`` of the ledger's database
(:func:`config.ledger_url`), so a reload, a deep link, a server restart or a second tab finds it again. The
table holds the token's SHA-256 (first 32 hex digits), never the token: a copy of the database, its
write-ahead log or a backup gives no session URL. Uploaded tables are kept as
``<data dir>/uploads/<fingerprint>.parquet`` (:func:`store_table`, :func:`load_stored_table`), readable by
the app's user only; a stored table must hash to its file name, so a restored session works on exactly the
table it was built on. :func:`prune` removes sessions and uploads unused for longer than the retention.

Nothing secret belongs in a plan; the token is a bearer credential for the session (its plan and its
uploaded table's rows) for whoever may sign in as its owner (anyone who reaches the app, without sign-in).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from dpcore import config
from dpcore.data import fingerprint as table_fingerprint
from dpcore.data import load_table
from dpcore.errors import DataError, ParameterError
from dpcore.ledger.engines import (  # the ledger's database and its faults
    _database_fault,
    _make_engine,
    _parse_url,
)

__all__ = [
    "SessionStore",
    "is_token",
    "load_stored_table",
    "new_token",
    "prune",
    "retention_days",
    "store_table",
    "stored_table_path",
]

_TOKEN = re.compile(r"[0-9a-f]{32}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
_TUPLE = "__tuple__"

_metadata = sa.MetaData()
_sessions = sa.Table(
    "sessions",
    _metadata,
    sa.Column("token", sa.String(32), primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("updated", sa.String(40), nullable=False),
)


def new_token() -> str:
    """A fresh session token: 128 bits from the OS entropy source, as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def is_token(text: object) -> bool:
    """True if ``text`` has the form of a session token (32 lowercase hex digits)."""
    return isinstance(text, str) and _TOKEN.fullmatch(text) is not None


def _check_token(token: object) -> str:
    """The database key of a well-formed ``token``: its SHA-256, first 32 hex digits (never the token)."""
    if not is_token(token):
        raise ParameterError("A session token is 32 lowercase hex digits; use new_token().")
    return hashlib.sha256(str(token).encode()).hexdigest()[:32]


def _encode(value: Any, where: str) -> Any:
    """JSON-ready copy of ``value``; tuples are tagged so :func:`_decode` gives tuples back."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, where) for v in value]}
    if isinstance(value, list):
        return [_encode(v, where) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v, f"{where}.{k}") for k, v in value.items()}
    raise ParameterError(
        f"{where} holds a {type(value).__name__}, which a session plan cannot store; keep plans to "
        "numbers, strings, booleans, lists, tuples and mappings."
    )


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TUPLE}:
            return tuple(_decode(v) for v in value[_TUPLE])
        return {k: _decode(v) for k, v in value.items()}
    return value


class SessionStore:
    """Session plans by token in the ``sessions`` table of the database at ``url``
    (default :func:`config.ledger_url`, the ledger's database). Safe to share between threads and
    processes: an update reads and writes its plan in one transaction (on SQLite under the database
    write lock, elsewhere with the row locked). A lock held elsewhere longer than the ledger's lock wait
    raises ``LedgerBusy``; a database that cannot be reached or read raises ``LedgerUnavailable``."""

    def __init__(self, url: str | sa.URL | None = None) -> None:
        self.url = _parse_url(url)
        self._engine = _make_engine(self.url)
        self._writer = self._engine.execution_options(dpcore_write=True)
        try:
            self._create_table()
        except sa.exc.DBAPIError:  # a concurrent creator won the race on a server database
            try:
                self._create_table()
            except sa.exc.DBAPIError as err:
                raise _database_fault(err, self.url) from None

    def _create_table(self) -> None:
        with self._writer.begin() as conn:
            _metadata.create_all(conn)

    def close(self) -> None:
        """Close the pooled database connections."""
        self._engine.dispose()

    def update(
        self, token: str, changes: Mapping[str, Any], *, merge: Collection[str] = ()
    ) -> dict[str, Any]:
        """Apply ``changes`` (JSON types and tuples) to the plan of ``token`` in one transaction and return
        the plan saved: each key replaces its saved value, except the keys in ``merge``, whose mappings
        are merged entry by entry, so two tabs of one session keep each other's changes."""
        key = _check_token(token)
        encoded = _encode(dict(changes), "state")
        try:
            try:
                return self._update_once(key, encoded, merge)
            except sa.exc.IntegrityError:  # another tab created the row first (server databases): merge
                return self._update_once(key, encoded, merge)
        except sa.exc.DBAPIError as err:
            raise _database_fault(err, self.url) from None

    def _update_once(self, key: str, changes: dict[str, Any], merge: Collection[str]) -> dict[str, Any]:
        query = sa.select(_sessions.c.state).where(_sessions.c.token == key).with_for_update()
        with self._writer.begin() as conn:
            text = conn.execute(query).scalar()
            plan = {} if text is None else json.loads(text)
            for name, value in changes.items():
                old = plan.get(name)
                both = name in merge and isinstance(old, dict) and isinstance(value, dict)
                plan[name] = {**old, **value} if both else value
            values = {
                "state": json.dumps(plan, ensure_ascii=False),
                "updated": datetime.now(UTC).isoformat(timespec="milliseconds"),
            }
            if text is None:
                conn.execute(sa.insert(_sessions).values(token=key, **values))
            else:
                conn.execute(sa.update(_sessions).where(_sessions.c.token == key).values(**values))
        return _decode(plan)

    def load(self, token: str) -> dict[str, Any] | None:
        """The plan saved for ``token``, or None if there is none."""
        key = _check_token(token)
        try:
            with self._engine.begin() as conn:
                text = conn.execute(sa.select(_sessions.c.state).where(_sessions.c.token == key)).scalar()
        except sa.exc.DBAPIError as err:
            raise _database_fault(err, self.url) from None
        return None if text is None else _decode(json.loads(text))

    def prune(self, older_than: datetime) -> list[dict[str, Any]]:
        """Delete the sessions last saved before ``older_than``; return the plans of those kept."""
        cutoff = older_than.astimezone(UTC).isoformat(timespec="milliseconds")
        try:
            with self._writer.begin() as conn:
                conn.execute(sa.delete(_sessions).where(_sessions.c.updated < cutoff))
                kept = conn.execute(sa.select(_sessions.c.state)).scalars().all()
        except sa.exc.DBAPIError as err:
            raise _database_fault(err, self.url) from None
        return [_decode(json.loads(text)) for text in kept]


def stored_table_path(fingerprint: str) -> Path:
    """``<data dir>/uploads/<fingerprint>.parquet`` (the fingerprint is checked: 64 hex digits)."""
    if not isinstance(fingerprint, str) or _FINGERPRINT.fullmatch(fingerprint) is None:
        raise DataError(f"A table fingerprint is 64 lowercase hex digits (got {fingerprint!r}).")
    return config.data_dir() / "uploads" / f"{fingerprint}.parquet"


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    """Parquet bytes of ``df``; mixed-type text columns are written as strings (same fingerprint)."""
    buffer = io.BytesIO()
    try:
        df.to_parquet(buffer, index=False)
    except (TypeError, ValueError, NotImplementedError):  # pyarrow's ArrowTypeError, ArrowInvalid, ...
        mixed = [c for c in df.columns if df[c].dtype == object]
        text = {c: df[c].map(lambda v: v if v is None or pd.isna(v) else str(v)) for c in mixed}
        buffer = io.BytesIO()
        df.assign(**text).to_parquet(buffer, index=False)
    return buffer.getvalue()


def store_table(table: pd.DataFrame | bytes, fingerprint: str) -> Path:
    """Keep a table (a DataFrame, or a file's bytes read with ``dpcore.data.load_table``) under
    :func:`stored_table_path`; ``DataError`` if it does not hash to ``fingerprint``. Idempotent."""
    path = stored_table_path(fingerprint)
    if path.exists():
        return path
    df = load_table(bytes(table)) if isinstance(table, bytes | bytearray | memoryview) else table
    data = _parquet_bytes(df)
    if table_fingerprint(pd.read_parquet(io.BytesIO(data))) != fingerprint:
        raise DataError(
            f"The table does not match fingerprint {fingerprint[:12]}...: store the table the fingerprint "
            "was computed from."
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)  # the app's user only, whatever the umask or an older folder's mode
    partial = path.with_suffix(f".{secrets.token_hex(4)}.part")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(data)
    partial.replace(path)  # atomic: a concurrent reader sees the whole file or none
    return path


def retention_days() -> float:
    """How long an unused session and its uploads are kept: ``DPCORE_SESSION_RETENTION_DAYS`` (default 30)."""
    text = os.environ.get("DPCORE_SESSION_RETENTION_DAYS") or "30"
    try:
        days = float(text)
    except ValueError:
        days = float("nan")
    if not days > 0:
        raise ParameterError(
            f"DPCORE_SESSION_RETENTION_DAYS must be a positive number of days (got {text!r}); e.g. 30."
        )
    return days


def prune(store: SessionStore, days: float | None = None) -> tuple[int, int]:
    """Remove the sessions unused for ``days`` (default :func:`retention_days`) and the uploaded tables no
    kept session refers to that are as old; returns (sessions kept, uploads removed)."""
    age = timedelta(days=retention_days() if days is None else days)
    cutoff = datetime.now(UTC) - age
    kept = store.prune(cutoff)
    used = {str((plan.get("dataset") or {}).get("fingerprint")) for plan in kept}
    folder = config.data_dir() / "uploads"
    removed = 0
    for file in folder.glob("*.parquet") if folder.is_dir() else ():
        old = datetime.fromtimestamp(file.stat().st_mtime, UTC) < cutoff
        if old and file.stem not in used:
            file.unlink(missing_ok=True)
            removed += 1
    return len(kept), removed


def load_stored_table(fingerprint: str) -> pd.DataFrame:
    """The table kept by :func:`store_table`; ``DataError`` if it is missing or no longer matches."""
    path = stored_table_path(fingerprint)
    if not path.exists():
        raise DataError(
            f"The table {fingerprint[:12]}... is no longer in {path.parent}; upload the file again."
        )
    df = pd.read_parquet(path)
    if table_fingerprint(df) != fingerprint:
        raise DataError(f"{path.name} was changed on disk; upload the original file again.")
    return df
