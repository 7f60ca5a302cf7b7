"""The PostgreSQL test server: a real server behind the postgresql variants, and never a silent skip."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.postgres_server import (
    OWNER_FILE,
    PREFIX,
    SKIP_ENV,
    PostgresServer,
    _binary,
    _stop_orphans,
    _unavailable,
)


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_postgresql_variant_is_a_real_server_on_its_own_database(
    postgres_server: PostgresServer, ledger_url: str
) -> None:
    engine = sa.create_engine(ledger_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version()")).scalar_one()
            database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
    finally:
        engine.dispose()
    assert version.startswith("PostgreSQL ") and database.startswith("t_")
    assert sa.make_url(ledger_url).query["host"] == str(postgres_server.socket_dir)
    assert 0 < postgres_server.startup_s < 60


@pytest.mark.parametrize("value", [None, "", "0", "yes"])
def test_missing_server_fails_unless_skipping_is_asked_for(value, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv(SKIP_ENV, raising=False)
    else:
        monkeypatch.setenv(SKIP_ENV, value)
    with pytest.raises(pytest.fail.Exception, match=f"apt-get install postgresql.*{SKIP_ENV}=1"):
        _unavailable("initdb not found.")


def test_explicit_opt_out_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception, match=f"{SKIP_ENV}=1"):
        _unavailable("initdb not found.")


def test_a_killed_sessions_server_folder_is_cleaned_and_a_live_ones_kept() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    folders = {}
    for owner, pid in (("dead", int(dead.stdout)), ("live", os.getpid())):
        folders[owner] = Path(tempfile.mkdtemp(prefix=PREFIX))
        (folders[owner] / OWNER_FILE).write_text(str(pid))
    try:
        _stop_orphans(_binary("pg_ctl") or "pg_ctl", [])
        assert not folders["dead"].exists() and folders["live"].is_dir()
    finally:
        for folder in folders.values():
            if folder.exists():
                (folder / OWNER_FILE).unlink()
                folder.rmdir()
