"""Deployment settings read from the environment.

- ``DPCORE_DATA_DIR``: folder for the ledger database and release artifacts (default ``./data``).
- ``DPCORE_LEDGER_URL``: SQLAlchemy URL of the ledger (default ``sqlite:///<data_dir>/ledger.db``).
- ``DPCORE_USER``: name recorded with each release when nobody is signed in (default ``local``).

An empty variable counts as unset.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpcore.errors import ParameterError


def data_dir() -> Path:
    """Absolute data folder from ``DPCORE_DATA_DIR`` (default ``./data``), created if missing; a path that
    cannot be a folder raises ``ParameterError``."""
    path = Path(os.environ.get("DPCORE_DATA_DIR") or "data").expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParameterError(
            f"The data folder DPCORE_DATA_DIR (…/{path.name}) cannot be used: {err.strerror or err}. Point "
            "DPCORE_DATA_DIR at a folder the app may write to."
        ) from None
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
