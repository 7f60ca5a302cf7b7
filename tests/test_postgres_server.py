"""The PostgreSQL test server: a real server behind the postgresql variants, and never a silent skip."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.postgres_server import SKIP_ENV, PostgresServer, _unavailable


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
