"""Deployment settings read from the environment.

- ``DPCORE_DATA_DIR``: folder for the ledger database and release artifacts (default ``./data``).
- ``DPCORE_LEDGER_URL``: SQLAlchemy URL of the ledger (default ``sqlite:///<data_dir>/ledger.db``).
- ``DPCORE_USER``: name recorded with each release when nobody is signed in (default ``local``).
- ``DPCORE_JOB_MEMORY_ROWS``: most rows a batch job reads into memory for a mechanism without out-of-core
  passes (default 2,000,000; ``run-plan --memory-rows`` overrides it).

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


#: Default of :func:`job_memory_rows`: 2M rows of a few float64 columns take tens of MB, the mechanisms'
#: working arrays a few times that.
JOB_MEMORY_ROWS = 2_000_000


def job_memory_rows() -> int:
    """Most rows a batch job reads into memory (``DPCORE_JOB_MEMORY_ROWS``, default
    :data:`JOB_MEMORY_ROWS`); a value that is not a positive whole number raises ``ParameterError``."""
    text = os.environ.get("DPCORE_JOB_MEMORY_ROWS") or str(JOB_MEMORY_ROWS)
    try:
        rows = int(text)
    except ValueError:
        rows = 0
    if rows < 1:
        raise ParameterError(
            f"DPCORE_JOB_MEMORY_ROWS={text!r} is not a positive whole number of rows; set it to e.g. "
            f"{JOB_MEMORY_ROWS} or leave it unset."
        )
    return rows


def default_ledger_url() -> str:
    """The URL ``Ledger()`` opens when given none (same as :func:`ledger_url`)."""
    return ledger_url()


def local_user() -> str:
    """User name recorded with releases when nobody is signed in: ``DPCORE_USER`` or ``"local"``."""
    return os.environ.get("DPCORE_USER") or "local"
