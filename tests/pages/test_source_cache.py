"""A database source on the Data page is read once per server (AppTest): a reload and a second session use
the kept read until the operator's ``source_cache_ttl_s`` runs out (0: every load reads); "Read the table
again" reads it now, and its rows and fingerprint replace both of the earlier read's; a failed read is not
kept. Before, every reload and every second tab read the whole table again (12 s for 2M x 10 SQLite rows)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from dpcore.data.sources import DEFAULT_SOURCE_CACHE_TTL_S, DatabaseTable, SourceSettings, load_source
from dpcore.errors import DataError
from tests.pages.test_sources import DATABASE, _ok, _open, _people
from ui import datasets

MAX_ROWS = 100  # the table has more rows: the dataset is a sample, drawn with the session's seed


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    """No test sees another's kept reads, sample seeds or table lists (kept by connection name and URL)."""
    kept = (datasets._kept_read, datasets._sample_seeds, datasets._listing)
    for cache in kept:
        cache.clear()
    yield
    for cache in kept:
        cache.clear()


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    _write(url, _people(400))
    return url


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables the Data page reads from the database, one entry per read."""
    seen: list[str] = []

    read = datasets._read_now

    def counted(spec, *args):
        seen.append(spec.table)
        return read(spec, *args)

    monkeypatch.setattr(datasets, "_read_now", counted)
    return seen


def _write(url: str, table: pd.DataFrame | None) -> None:
    """Replace the table ``people`` with ``table`` (None: drop it)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS people"))
    if table is not None:
        table.to_sql("people", engine, index=False)
    engine.dispose()


def _secrets(url: str, **settings: Any) -> dict[str, Any]:
    return {
        "dpcore": {"databases": ["warehouse"], "max_rows": MAX_ROWS, **settings},
        "connections": {"warehouse": {"url": url}},
    }


def _load(at: AppTest) -> AppTest:
    at.radio(key="data_source").set_value(DATABASE).run()
    at.selectbox(key="data_source_database_table_table_warehouse").set_value("people").run()
    at.button(key="data_load_source").click().run()
    return _ok(at)


def _expected(url: str, seed: int):
    """The table ``people`` as it is now, read directly with the sample seed ``seed``."""
    engine = sa.create_engine(url)
    spec = DatabaseTable("warehouse", "people")
    loaded = load_source(spec, engine=engine, max_rows=MAX_ROWS, sample_seed=seed)
    engine.dispose()
    return loaded


def _stale(at: AppTest) -> list[str]:
    """The warnings that a reload did not get the table its session used."""
    return [w.value for w in at.warning if "not the table this session used" in w.value]


def _read_note(at: AppTest) -> str:
    (note,) = [c.value for c in at.caption if c.value.startswith("Read from the database at ")]
    return note


def test_a_reload_and_a_second_session_use_the_servers_read(warehouse: str, reads: list[str]) -> None:
    secrets = _secrets(warehouse)
    at = _load(_open(secrets))
    first = at.session_state["dp_dataset"]
    assert first.origin["sampled"] and first.origin["rows"] == 400 and reads == ["people"]
    again = _open(secrets, token=at.query_params["s"])  # a reload: the session plan restores the source
    restored = again.session_state["dp_dataset"]
    assert restored.fingerprint == first.fingerprint and reads == ["people"]
    pd.testing.assert_frame_equal(restored.raw, first.raw)
    assert not _stale(again)
    other = _load(_open(secrets))  # a second session, without the URL's token, loads the same table
    second = other.session_state["dp_dataset"]
    assert second.fingerprint == first.fingerprint and second.origin["seed"] == first.origin["seed"]
    pd.testing.assert_frame_equal(second.raw, first.raw)  # the same diagnostic sample: the same kept read
    assert reads == ["people"]
    read_at = datetime.fromtimestamp(first.origin["read_at"], UTC).strftime("%H:%M UTC")  # when, shown
    assert restored.origin["read_at"] == second.origin["read_at"] == first.origin["read_at"]
    shown = f"Read from the database at {read_at}; reloads and other sessions use this read until"
    assert all(_read_note(session).startswith(shown) for session in (at, again, other))


def test_read_the_table_again_shows_the_changed_table_under_its_new_fingerprint(
    warehouse: str, reads: list[str]
) -> None:
    secrets = _secrets(warehouse)
    at = _load(_open(secrets))
    first = at.session_state["dp_dataset"]
    _write(warehouse, _people(500))  # the table changes in the database
    _load(at)  # within source_cache_ttl_s a load uses the kept read: the old rows, the old fingerprint
    assert at.session_state["dp_dataset"].fingerprint == first.fingerprint and reads == ["people"]
    at.text_input(key=f"data_name_{first.dataset_id}").input("Staff").run()
    at.button(key="data_rename").click().run()
    at.button(key="data_read_again").click().run()
    ds = _ok(at).session_state["dp_dataset"]
    new = _expected(warehouse, first.origin["seed"])
    assert reads == ["people"] * 2 and new.fingerprint != first.fingerprint
    assert ds.fingerprint == new.fingerprint and ds.origin["rows"] == 500 and ds.name == "Staff"
    pd.testing.assert_frame_equal(ds.raw, new.table)  # the new rows under the new fingerprint, not the old
    assert ds.origin["read_at"] > first.origin["read_at"]
    read_at = datetime.fromtimestamp(ds.origin["read_at"], UTC).strftime("%H:%M UTC")
    assert _read_note(at).startswith(f"Read from the database at {read_at};")
    again = _open(secrets, token=at.query_params["s"])  # the reload gets the new read, kept
    restored = again.session_state["dp_dataset"]
    assert restored.fingerprint == new.fingerprint and restored.name == "Staff" and not _stale(again)
    pd.testing.assert_frame_equal(restored.raw, new.table)
    other = _load(_open(secrets))  # and so does another session
    assert other.session_state["dp_dataset"].fingerprint == new.fingerprint and reads == ["people"] * 2


def test_the_operators_ttl_expires_a_kept_read_and_zero_reads_on_every_load(
    warehouse: str, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _load(_open(_secrets(warehouse, source_cache_ttl_s=0)))
    first = at.session_state["dp_dataset"]
    assert "every load and reload reads it again ([dpcore] source_cache_ttl_s = 0)" in _read_note(at)
    again = _open(_secrets(warehouse, source_cache_ttl_s=0), token=at.query_params["s"])
    assert again.session_state["dp_dataset"].fingerprint == first.fingerprint and reads == ["people"] * 2
    _load(at)
    assert reads == ["people"] * 3
    secrets = _secrets(warehouse)  # the default: kept 600 s, unless the environment says otherwise
    at = _load(_open(secrets))
    _open(secrets, token=at.query_params["s"])
    assert reads == ["people"] * 4
    monkeypatch.setenv("DPCORE_SOURCE_CACHE_TTL_S", "0.001")  # the kept read is now older than the limit
    _open(secrets, token=at.query_params["s"])
    assert reads == ["people"] * 5
    monkeypatch.setenv("DPCORE_SOURCE_CACHE_TTL_S", "600")  # ... and was replaced by the new read
    _open(secrets, token=at.query_params["s"])
    assert reads == ["people"] * 5


def test_a_failed_read_is_not_kept_and_a_later_read_works(warehouse: str, reads: list[str]) -> None:
    secrets = _secrets(warehouse)
    at = _load(_open(secrets))
    first = at.session_state["dp_dataset"]
    token = at.query_params["s"]
    _write(warehouse, None)  # the table is dropped
    at.button(key="data_read_again").click().run()
    (error,) = _ok(at).error
    assert "The database has no table 'people'; choose one from the list." in error.value
    assert at.session_state["dp_dataset"].fingerprint == first.fingerprint  # the dataset in use is kept
    failed = _open(secrets, token=token, data_page=False)  # a reload meanwhile says so: nothing was kept
    assert "dp_dataset" not in failed.session_state
    assert any("The database has no table 'people'" in w.value for w in failed.warning)
    assert reads == ["people"] * 3
    _write(warehouse, _people(300))  # back, with other rows
    at.button(key="data_read_again").click().run()
    ds = _ok(at).session_state["dp_dataset"]
    new = _expected(warehouse, first.origin["seed"])
    assert not at.error and ds.fingerprint == new.fingerprint and ds.origin["rows"] == 300
    pd.testing.assert_frame_equal(ds.raw, new.table)
    assert reads == ["people"] * 4


def test_the_ttl_setting_comes_from_the_config_or_the_environment() -> None:
    assert SourceSettings.from_config({}, {}).source_cache_ttl_s == DEFAULT_SOURCE_CACHE_TTL_S == 600
    assert SourceSettings.from_config({"source_cache_ttl_s": 0}, {}).source_cache_ttl_s == 0
    environ = {"DPCORE_SOURCE_CACHE_TTL_S": "30"}
    assert SourceSettings.from_config({"source_cache_ttl_s": 0}, environ).source_cache_ttl_s == 30
    for bad in (-1, "soon", True, float("inf")):
        with pytest.raises(DataError, match=r"source_cache_ttl_s must be a number of seconds, 0 or more"):
            SourceSettings.from_config({"source_cache_ttl_s": bad}, {})


def test_a_connection_given_another_url_is_listed_afresh(warehouse: str, tmp_path: Path) -> None:
    """The table list is kept by connection name and URL: the same name pointed at another database within
    the minute lists that database (before, the first database's tables were shown under the new URL)."""
    at = _open(_secrets(warehouse))
    at.radio(key="data_source").set_value(DATABASE).run()
    assert "people" in _ok(at).selectbox(key="data_source_database_table_table_warehouse").options
    other = f"sqlite:///{tmp_path / 'other.db'}"
    engine = sa.create_engine(other)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE visits (n INTEGER)"))
    engine.dispose()
    at = _open(_secrets(other))
    at.radio(key="data_source").set_value(DATABASE).run()
    assert _ok(at).selectbox(key="data_source_database_table_table_warehouse").options == ["visits"]
