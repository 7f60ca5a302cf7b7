"""A throwaway PostgreSQL server for the ledger and session-store tests (pytest plugin, see conftest.py).

``postgres_server`` (session scope) runs Debian's ``initdb`` and ``pg_ctl`` in a fresh folder under
/tmp, listening only on a unix socket in that folder, and stops it at the end of the session; under
pytest-xdist every worker has its own server; a server whose session was killed before its teardown is
stopped by the next session. As root (CI) the server runs as the ``postgres`` system
user, since PostgreSQL refuses to run as root. ``ledger_url`` gives each test either a fresh SQLite file
or a fresh database on that server.

Without the binaries the PostgreSQL variants fail (``.ci/run`` installs Debian's ``postgresql``);
they are skipped only when ``DPCORE_SKIP_POSTGRES=1`` is set explicitly.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

SKIP_ENV = "DPCORE_SKIP_POSTGRES"
PREFIX = "dpcore-pg-"  # folders under the temp dir; short, as unix socket paths are <= 107 bytes
OWNER_FILE = "owner.pid"  # the pytest process that started the server in this folder
SERVER_USER = "postgres"  # Debian's postgresql package creates this system user
BACKENDS = ("sqlite", "postgresql")
# Test-only settings: durability is irrelevant for a server deleted at the end of the session.
SERVER_OPTIONS = "-c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off"


@dataclass(frozen=True)
class PostgresServer:
    """A running server: its socket folder, superuser, and how long ``initdb`` + start took."""

    socket_dir: Path
    user: str
    startup_s: float

    def url(self, database: str) -> str:
        """SQLAlchemy URL of ``database`` over the unix socket (psycopg 3)."""
        return f"postgresql+psycopg://{self.user}@/{database}?host={self.socket_dir}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction in the ``postgres`` maintenance database."""
        import psycopg

        dsn = {"host": str(self.socket_dir), "user": self.user, "dbname": "postgres"}
        with psycopg.connect(**dsn, autocommit=True) as conn:
            conn.execute(sql)


def _binary(name: str) -> str | None:
    """``name`` on PATH, else in the newest /usr/lib/postgresql/<version>/bin (Debian's layout)."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]))
    return versions[-1] if versions else None


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"PostgreSQL tests skipped ({SKIP_ENV}=1): {reason}")
    pytest.fail(
        f"{reason} The PostgreSQL ledger tests need Debian's postgresql package (apt-get install postgresql; "
        f".ci/run installs it); set {SKIP_ENV}=1 to skip them explicitly.",
        pytrace=False,
    )


def _stop(pg_ctl: str, as_user: list[str], folder: Path) -> None:
    """Stop the server of ``folder`` (if it runs) and delete the folder."""
    subprocess.run([*as_user, pg_ctl, "-D", str(folder / "data"), "-m", "immediate", "-w", "stop"],
                   check=False, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _stop_orphans(pg_ctl: str, as_user: list[str]) -> None:
    """Stop the servers of test sessions that were killed before their teardown ran (e.g. by a timeout)."""
    for owner in Path(tempfile.gettempdir()).glob(f"{PREFIX}*/{OWNER_FILE}"):
        try:
            os.kill(int(owner.read_text()), 0)
        except ProcessLookupError:
            _stop(pg_ctl, as_user, owner.parent)
        except (OSError, ValueError):  # another user's live process, or a file being written
            continue


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Start a private PostgreSQL server for this test session (worker) and stop it afterwards."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        _unavailable("initdb/pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin.")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam(SERVER_USER)
        except KeyError:
            shutil.rmtree(folder)
            _unavailable(f"Running as root and there is no {SERVER_USER!r} user to run the server as.")
        os.chown(folder, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", SERVER_USER, "--"]
    data, log = folder / "data", folder / "server.log"
    start = time.perf_counter()
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data), "-U", SERVER_USER, "--auth=trust", "--no-sync",
             "-E", "UTF8", "--locale=C.UTF-8"],
            check=True, capture_output=True, text=True,
        )
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60",
             "-o", f"-k {folder} {SERVER_OPTIONS}", "start"],
            check=True, capture_output=True, text=True,
        )
    except subprocess.CalledProcessError as err:
        detail = err.stderr.strip() + (f"\n{log.read_text()}" if log.exists() else "")
        _stop(pg_ctl, as_user, folder)
        pytest.fail(f"Could not start PostgreSQL ({' '.join(err.cmd[:4])} ...):\n{detail}", pytrace=False)
    server = PostgresServer(folder, SERVER_USER, time.perf_counter() - start)
    _stop_orphans(pg_ctl, as_user)
    try:
        yield server
    finally:
        _stop(pg_ctl, as_user, folder)


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty ledger database: a SQLite file, or a new database on the test PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
        return
    with scratch_database(request.getfixturevalue("postgres_server"), "t") as url:
        yield url


@contextmanager
def scratch_database(server: PostgresServer, prefix: str) -> Iterator[str]:
    """The URL of a new, empty database ``<prefix>_<32 hex>`` on ``server``, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex}"
    server.admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield server.url(name)
    finally:  # FORCE: a test that forgot to close its engine does not keep the database alive
        server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
