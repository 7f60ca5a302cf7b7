"""Deployment settings read from the environment.

- ``DPCORE_DATA_DIR``: folder for the ledger database and release artifacts (default ``./data``).
- ``DPCORE_LEDGER_URL``: SQLAlchemy URL of the ledger (default ``sqlite:///<data_dir>/ledger.db``).
- ``DPCORE_USER``: name recorded with each release when nobody is signed in (default ``local``).

An empty variable counts as unset.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """Absolute data folder from ``DPCORE_DATA_DIR`` (default ``./data``), created if missing."""
    path = Path(os.environ.get("DPCORE_DATA_DIR") or "data").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def ledger_url() -> str:
    """Ledger URL from ``DPCORE_LEDGER_URL``, else an SQLite file ``ledger.db`` in :func:`data_dir`."""
    return os.environ.get("DPCORE_LEDGER_URL") or f"sqlite:///{(data_dir() / 'ledger.db').as_posix()}"


def default_ledger_url() -> str:
    """The URL ``Ledger()`` opens when given none (same as :func:`ledger_url`)."""
    return ledger_url()


def local_user() -> str:
    """User name recorded with releases when nobody is signed in: ``DPCORE_USER`` or ``"local"``."""
    return os.environ.get("DPCORE_USER") or "local"
