"""Session store (engine): plans by token in the ledger's database, uploaded tables by fingerprint."""

from __future__ import annotations

import io
import os
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from dpcore import config
from dpcore.data import fingerprint, load_sample
from dpcore.errors import DataError, ParameterError
from dpcore.ledger import Ledger, LedgerBusy, LedgerUnavailable
from dpcore.sessions import (
    SessionStore,
    is_token,
    load_stored_table,
    new_token,
    prune,
    store_table,
    stored_table_path,
)
from tests.postgres_server import PostgresServer

PLAN = {
    "dataset": {"name": "x.csv", "steps": [("drop", ("a", "b"))], "prepare": None},
    "widgets": {"km_eps_range": (0.1, 2.0), "loc_mechs": ["prilocation"], "loc_hs_m": 1e4, "flag": True},
    "policy": {"definition": "geo_ind", "epsilon_per_metre": 0.001, "level": 1.0, "radius_m": 1000.0},
}


@pytest.fixture
def database(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ledger's database for this test, on each backend (a SQLite file, a PostgreSQL server)."""
    monkeypatch.setenv("DPCORE_LEDGER_URL", ledger_url)
    return ledger_url


def test_tokens_are_128_random_bits_in_hex():
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000 and all(is_token(t) and len(t) == 32 for t in tokens)
    bits = np.array([[int(c, 16) >> k & 1 for c in t for k in range(4)] for t in tokens])
    assert bits.shape == (1000, 128) and np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.07)  # 4.4 sigma
    assert not any(is_token(t) for t in ("", "ABC", "g" * 32, "0" * 31, "0" * 33, None, 12, "../" * 11))


def test_plan_round_trips_with_tuples_and_lives_in_the_ledger_database(database: str):
    store = SessionStore()
    assert store.url == sa.make_url(config.ledger_url())
    token = new_token()
    assert store.load(token) is None
    assert store.update(token, PLAN) == PLAN
    assert store.load(token) == PLAN  # tuples come back as tuples, nested too
    kinds = {"zeta": "numeric", "alpha": "latitude", "mid": "longitude"}  # table order, not sorted
    store.update(token, {"schema": {"kinds": kinds}})
    assert list(store.load(token)["schema"]["kinds"]) == ["zeta", "alpha", "mid"]
    later = {**PLAN, "schema": {"kinds": kinds}, "mode": "demo"}
    store.update(token, {"mode": "demo"})  # other keys stay
    assert store.load(token) == later
    ledger = Ledger.initialise()  # the ledger is created in the same database, with its own tables
    ledger.set_budget("d1", 1.0)
    engine = sa.create_engine(config.ledger_url())
    tables = set(sa.inspect(engine).get_table_names())
    engine.dispose()
    assert {"sessions", "accounts"} <= tables
    again = SessionStore(config.ledger_url())  # another process or server restart
    assert again.load(token) == later
    store.close(), again.close(), ledger.close()


def test_bad_tokens_and_unstorable_values_are_refused(database: str):
    store = SessionStore()
    for bad in ("", "x" * 32, "' OR 1=1 --", None):
        with pytest.raises(ParameterError, match="32 lowercase hex digits"):
            store.update(bad, {})  # type: ignore[arg-type]
        with pytest.raises(ParameterError, match="32 lowercase hex digits"):
            store.load(bad)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match=r"state\.widgets\.when holds a Timestamp"):
        store.update(new_token(), {"widgets": {"when": pd.Timestamp("2024-01-01")}})


def test_merged_keys_keep_both_tabs_changes_and_others_are_replaced(database: str):
    store, token = SessionStore(), new_token()
    store.update(token, {"policy": {"definition": "pure_dp", "epsilon": 1.0}, "widgets": {"a": 1, "b": 2}})
    store.update(token, {"widgets": {"a": 10}}, merge=("widgets",))  # one tab changed a
    changes = {"widgets": {"c": (1, 2)}, "policy": {"definition": "geo_ind"}}
    plan = store.update(token, changes, merge=["widgets"])
    assert plan == {"policy": {"definition": "geo_ind"}, "widgets": {"a": 10, "b": 2, "c": (1, 2)}}
    assert store.load(token) == plan


def test_concurrent_updates_of_one_token_lose_nothing(database: str):
    store, token = SessionStore(), new_token()
    def tab(i: int) -> None:
        store.update(token, {"widgets": {f"w{i}": i}, "last": i}, merge=("widgets",))

    threads = [threading.Thread(target=tab, args=(i,)) for i in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    plan = store.load(token)
    assert plan["widgets"] == {f"w{i}": i for i in range(16)} and plan["last"] in range(16)


def test_a_held_lock_is_ledger_busy_and_reads_go_on(database: str):
    store, holder, token = SessionStore(), SessionStore(), new_token()
    store.update(token, {"mode": "demo"})
    try:
        with holder._writer.begin() as conn:  # SQLite: BEGIN IMMEDIATE; PostgreSQL: the plan's row lock
            conn.execute(sa.select(sa.text("1")).select_from(sa.table("sessions")).with_for_update())
            start = time.monotonic()
            with pytest.raises(LedgerBusy, match="retry"):
                store.update(token, {"mode": "secure"})
            assert time.monotonic() - start < 5.0
            assert store.load(token) == {"mode": "demo"}  # readers do not wait for the writer
        assert store.update(token, {"mode": "secure"}) == {"mode": "secure"}  # the retry succeeds
    finally:
        holder.close(), store.close()


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_a_lost_database_is_ledger_unavailable(database: str, postgres_server: PostgresServer):
    store, token = SessionStore(), new_token()
    store.update(token, {"mode": "demo"})
    postgres_server.admin(f'DROP DATABASE "{sa.make_url(database).database}" WITH (FORCE)')
    try:
        with pytest.raises(LedgerUnavailable, match="cannot be used"):
            store.update(token, {"mode": "secure"})
        with pytest.raises(LedgerUnavailable, match="cannot be used"):
            store.load(token)
    finally:
        store.close()


def test_stored_table_keeps_its_fingerprint_and_refuses_mismatches(isolated_data_dir: Path):
    df = load_sample("marketing_campaign")
    fp = fingerprint(df)
    path = store_table(df, fp)
    assert path == isolated_data_dir / "uploads" / f"{fp}.parquet" == stored_table_path(fp)
    back = load_stored_table(fp)
    assert fingerprint(back) == fp and back.shape == df.shape
    assert store_table(df, fp) == path  # idempotent
    other = df.iloc[1:]
    with pytest.raises(DataError, match="does not match fingerprint"):
        store_table(other, fingerprint(df.iloc[:-1]))
    with pytest.raises(DataError, match="64 lowercase hex digits"):
        store_table(df, "../../etc/passwd")
    with pytest.raises(DataError, match="upload the file again"):
        load_stored_table("0" * 64)
    pd.DataFrame({"a": [1]}).to_parquet(path)  # changed on disk
    with pytest.raises(DataError, match="was changed on disk"):
        load_stored_table(fp)


def test_stored_table_from_file_bytes_and_mixed_text_columns(isolated_data_dir: Path):
    csv = b"lat,lon,user\n34.05,-118.24,a\n34.10,-118.30,b\n"
    fp = fingerprint(pd.read_csv(io.BytesIO(csv)))
    store_table(csv, fp)
    assert list(load_stored_table(fp)["user"]) == ["a", "b"]
    mixed = pd.DataFrame({"code": pd.Series([1, "x", None], dtype=object), "v": [1.5, 2.0, 3.0]})
    fp = fingerprint(mixed)
    store_table(mixed, fp)  # pyarrow cannot write ints and strings in one column: written as text
    assert fingerprint(load_stored_table(fp)) == fp


def test_the_database_holds_no_token_and_uploads_are_the_apps_users_only(
    database: str, isolated_data_dir: Path
):
    """A copy of the sessions table (or its WAL, or a backup) gives no session URL; uploaded rows are not
    readable by other local users."""
    store = SessionStore(database)
    token = new_token()
    store.update(token, {"version": 1})
    engine = sa.create_engine(database)
    with engine.connect() as conn:
        keys = conn.execute(sa.text("SELECT token, state FROM sessions")).all()
    engine.dispose()
    assert len(keys) == 1 and token not in keys[0][0] and token not in keys[0][1]
    assert store.load(token) == {"version": 1}
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    path = store_table(df, fingerprint(df))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    store.close()


def test_unused_sessions_and_their_uploads_are_removed_after_the_retention(
    database: str, isolated_data_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    store = SessionStore(database)
    old_df, kept_df = pd.DataFrame({"x": [1.0, 2.0]}), pd.DataFrame({"x": [5.0, 6.0]})
    old_fp, kept_fp = fingerprint(old_df), fingerprint(kept_df)
    stale, live = new_token(), new_token()
    store.update(stale, {"dataset": {"fingerprint": old_fp}})
    store.update(live, {"dataset": {"fingerprint": kept_fp}})
    for df, fp in ((old_df, old_fp), (kept_df, kept_fp)):
        path = store_table(df, fp)
        os.utime(path, (time.time() - 40 * 86400,) * 2)  # both uploaded 40 days ago
    engine = sa.create_engine(database)
    with engine.begin() as conn:  # the stale session was last saved long ago
        aged = "UPDATE sessions SET updated = '2000-01-01T00:00:00.000+00:00' WHERE state LIKE :s"
        conn.execute(sa.text(aged), {"s": f"%{old_fp}%"})
    engine.dispose()
    monkeypatch.setenv("DPCORE_SESSION_RETENTION_DAYS", "30")
    assert prune(store) == (1, 1)
    assert store.load(stale) is None and store.load(live) is not None
    assert not stored_table_path(old_fp).exists() and stored_table_path(kept_fp).exists()
    monkeypatch.setenv("DPCORE_SESSION_RETENTION_DAYS", "-1")
    with pytest.raises(ParameterError, match="positive number of days"):
        prune(store)
    store.close()
