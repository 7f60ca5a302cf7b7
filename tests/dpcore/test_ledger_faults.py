"""Ledger faults never look like a fresh budget: explicit initialisation, a vanished or replaced database,
lock timeouts, rows written by another tool, bad configuration, and a kill in the middle of a release."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from dpcore import config
from dpcore.artifacts import STAGING, sha256_file
from dpcore.errors import ParameterError
from dpcore.kmeans.registry import KMeansInputs
from dpcore.ledger import (
    INSTANCE_FILE,
    BudgetExceeded,
    Ledger,
    LedgerBusy,
    LedgerError,
    LedgerUnavailable,
    dataset_id_for_name,
)
from dpcore.plan import ReleasePlan
from dpcore.policy import PureDP
from dpcore.releases import make_release

FRESH = "never started over silently"


def _sqlite_path(url: str) -> Path:
    return Path(sa.make_url(url).database)


def _other_tool(url: str, sql: str, **params) -> None:
    """Run one statement through a plain engine, as a tool other than dpcore would."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql), params)
    finally:
        engine.dispose()


# -- creation only by an explicit initialise step ------------------------------------------------------


def test_a_url_in_a_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'missing' / 'ledger.db').as_posix()}"
    with pytest.raises(LedgerUnavailable, match=FRESH) as err:
        Ledger(url)
    assert "init-ledger" in str(err.value) and str(tmp_path) not in str(err.value)
    assert not (tmp_path / "missing").exists()


def test_an_uninitialised_database_is_refused_and_initialise_is_explicit(ledger_url: str) -> None:
    _other_tool(ledger_url, "CREATE TABLE sessions (token VARCHAR(32) PRIMARY KEY)")  # e.g. the session store
    with pytest.raises(LedgerUnavailable, match="not an initialised ledger"):
        Ledger(ledger_url)
    first = Ledger.initialise(ledger_url)
    try:
        first.set_budget("ds", epsilon=1.0)
        first.spend("ds", 0.25, 0.0, "laplace", "r1")
        again = Ledger.initialise(ledger_url)  # a second initialise changes nothing
        opened = Ledger(ledger_url)
        assert again.instance_id == opened.instance_id == first.instance_id
        assert again.remaining("ds") == opened.remaining("ds") == (0.75, 0.0)
        again.close()
        opened.close()
    finally:
        first.close()


def test_a_database_file_deleted_while_open_is_refused_everywhere(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'l.db').as_posix()}"
    led = Ledger.initialise(url)
    led.set_budget("ds", epsilon=1.0)
    led.spend("ds", 0.9, 0.0, "laplace", "r1")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 'l.db'}{suffix}").unlink(missing_ok=True)
    for read in (lambda: led.remaining("ds"), led.budgets, led.all_releases):
        with pytest.raises(LedgerUnavailable, match="deleted or replaced"):
            read()
    with pytest.raises(LedgerUnavailable, match="deleted or replaced"):
        led.spend("ds", 0.9, 0.0, "laplace", "r2")  # would fit a fresh budget of 1.0
    led.close()
    with pytest.raises(LedgerUnavailable, match=FRESH):  # a new Ledger does not start over either
        Ledger(url)
    assert not (tmp_path / "l.db").exists()


def test_a_replaced_database_is_refused(ledger_url: str, tmp_path: Path) -> None:
    led = Ledger.initialise(ledger_url)
    try:
        led.set_budget("ds", epsilon=1.0)
        led.spend("ds", 0.9, 0.0, "laplace", "r1")
        if ledger_url.startswith("sqlite"):  # another initialised ledger file moved over this one
            other = f"sqlite:///{(tmp_path / 'other.db').as_posix()}"
            Ledger.initialise(other).close()
            os.replace(tmp_path / "other.db", _sqlite_path(ledger_url))
        else:  # the tables emptied and initialised again by someone else
            _other_tool(ledger_url, "DELETE FROM account_releases")
            _other_tool(ledger_url, "DELETE FROM ledger_instance")
            Ledger.initialise(ledger_url).close()
        with pytest.raises(LedgerUnavailable, match="replaced"):
            led.spend("ds", 0.9, 0.0, "laplace", "r2")
        with pytest.raises(LedgerUnavailable, match="replaced"):
            led.remaining("ds")
    finally:
        led.close()


def test_the_data_folder_ledger_is_created_once_then_never_again() -> None:
    folder = config.data_dir()
    first = Ledger()  # the app's default: created on first use, its id kept in the data folder
    first.set_budget("ds", epsilon=1.0)
    first.spend("ds", 1.0, 0.0, "laplace", "r1")
    first.close()
    assert (folder / INSTANCE_FILE).read_text().strip() == first.instance_id
    assert Ledger().remaining("ds") == (0.0, 0.0)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{folder / 'ledger.db'}{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerUnavailable, match=FRESH):
        Ledger()
    sqlite3.connect(folder / "ledger.db").close()  # e.g. the session store opened the file again
    with pytest.raises(LedgerUnavailable, match="not an initialised ledger"):
        Ledger()
    (folder / "ledger.db").unlink()
    Ledger.initialise(f"sqlite:///{(folder / 'other.db').as_posix()}").close()
    os.replace(folder / "other.db", folder / "ledger.db")  # another ledger put in its place
    with pytest.raises(LedgerUnavailable, match="replaced"):
        Ledger()


# -- a lock held elsewhere: a short bounded wait, then "busy, retry" -----------------------------------


def test_a_held_write_lock_fails_a_spend_within_seconds_and_reads_go_on(ledger_url: str) -> None:
    led, holder = Ledger.initialise(ledger_url), Ledger(ledger_url)
    try:
        led.set_budget("ds", epsilon=1.0)
        with holder._writer.begin() as conn:  # SQLite: BEGIN IMMEDIATE; PostgreSQL: the budget row lock
            conn.execute(sa.select(sa.text("1")).select_from(sa.table("accounts")).with_for_update())
            start = time.monotonic()
            with pytest.raises(LedgerBusy, match="retry"):
                led.spend("ds", 0.5, 0.0, "laplace", "r1")
            assert time.monotonic() - start < 5.0
            start = time.monotonic()
            assert led.remaining("ds") == (1.0, 0.0)  # readers never wait for the writer
            assert time.monotonic() - start < 1.0
        assert led.spend("ds", 0.5, 0.0, "laplace", "r1").epsilon == 0.5  # the retry succeeds
    finally:
        holder.close()
        led.close()


def test_an_exclusive_sqlite_lock_does_not_hang_the_pages(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'l.db').as_posix()}"
    led = Ledger.initialise(url)
    led.set_budget("ds", epsilon=1.0)
    other = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another program (sqlite3 shell, backup) holds the database
    try:
        start = time.monotonic()
        assert led.remaining("ds") == (1.0, 0.0)
        assert [s.account for s in led.budgets()] == ["ds"]
        assert time.monotonic() - start < 1.0
        start = time.monotonic()
        with pytest.raises(LedgerBusy, match="Nothing was changed or debited; retry"):
            led.set_budget("ds", epsilon=2.0)
        assert time.monotonic() - start < 5.0
    finally:
        other.execute("ROLLBACK")
        other.close()
        led.close()
    assert sqlite3.connect(tmp_path / "l.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)


# -- rows written by another tool are checked, never trusted --------------------------------------------

_INSERT = (
    'INSERT INTO account_releases (request_id, account, dataset_id, time, "user", definition, relation, '
    "mechanism, calibration, epsilon, delta, sampling_mode, parameters, composition) VALUES "
    "(:rid, :account, 'ds', '2026-01-01T00:00:00+00:00', 'tool', '', '', 'laplace', '', :eps, :delta, "
    "'secure', '{}', 'sequential')"
)


@pytest.mark.parametrize(
    ("account", "eps", "delta", "what"),
    [
        ("ds", -0.5, 0.0, "epsilon is -0.5"),
        ("ds", 0.0, 0.0, "epsilon 0"),
        ("ds", 0.1, -1e-6, "delta is -1e-06"),
        ("ds", 0.1, 1.5, "below 1"),
        ("ghost", 0.1, 0.0, "account 'ghost', which has no budget"),
    ],
)
def test_an_invalid_stored_row_refuses_the_ledger(ledger_url, account, eps, delta, what) -> None:
    led = Ledger.initialise(ledger_url)
    try:
        led.set_budget("ds", epsilon=1.0)
        led.spend("ds", 0.5, 0.0, "laplace", "r1")
        _other_tool(ledger_url, _INSERT, rid="evil", account=account, eps=eps, delta=delta)
        reads = [led.budgets, led.all_releases]
        if account == "ds":
            reads += [lambda: led.remaining("ds"), lambda: led.spend("ds", 0.5, 0.0, "laplace", "r2")]
        for read in reads:
            with pytest.raises(LedgerUnavailable, match="invalid entry") as err:
                read()
            assert what in str(err.value) and "edited by another tool" in str(err.value)
    finally:
        led.close()
    _other_tool(ledger_url, "DELETE FROM account_releases WHERE request_id = 'evil'")
    fixed = Ledger(ledger_url)
    try:
        assert fixed.remaining("ds") == (0.5, 0.0)
    finally:
        fixed.close()


def test_an_invalid_budget_row_refuses_the_account(ledger_url: str) -> None:
    led = Ledger.initialise(ledger_url)
    try:
        led.set_budget("ds", epsilon=1.0)
        _other_tool(ledger_url, "UPDATE accounts SET epsilon_total = -5")
        with pytest.raises(LedgerUnavailable, match="budget of account 'ds' has epsilon is -5"):
            led.remaining("ds")
        with pytest.raises(LedgerUnavailable, match="invalid entry"):
            led.spend("ds", 0.1, 0.0, "laplace", "r1")
    finally:
        led.close()


# -- configuration faults --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "malformed"),
        ("postgresql+psycopg2://u@h/db", "driver that is not installed"),
        ("mysql+pymysql://u:secret@h/db", "driver that is not installed"),
    ],
)
def test_bad_urls_are_ledger_errors(url: str, message: str) -> None:
    with pytest.raises(LedgerUnavailable, match=message) as err:
        Ledger(url)
    assert "secret" not in str(err.value)


def test_a_corrupt_file_and_a_data_folder_that_is_a_file_are_ledger_errors(tmp_path, monkeypatch) -> None:
    corrupt = tmp_path / "ledger.db"
    corrupt.write_bytes(b"this is not a database " * 200)
    with pytest.raises(LedgerUnavailable, match=r"cannot be used \(file is not a database\)") as err:
        Ledger(f"sqlite:///{corrupt.as_posix()}")
    assert str(tmp_path) not in str(err.value)
    monkeypatch.setenv("DPCORE_DATA_DIR", str(corrupt))
    monkeypatch.delenv("DPCORE_LEDGER_URL")
    with pytest.raises(ParameterError, match="DPCORE_DATA_DIR") as err:
        Ledger()
    assert str(tmp_path) not in str(err.value)


# -- a kill between storing the files and the debit ------------------------------------------------


def _plan() -> ReleasePlan:
    return ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=0.4,
        policy=PureDP(1.0),
        dataset_name="toy",
        fingerprint="ab" * 32,
        params={"n_clusters": 3},
    )


X = np.random.default_rng(0).uniform(0, 1, (200, 2))
INPUTS = KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b"))


def _release_then_die(url: str, folder: str, die_in: str) -> None:
    """Child process: release, and die like kill -9 inside ``Ledger.spend`` (before its transaction
    commits) or right after it (before the files are published)."""
    import dpcore.ledger

    spend = dpcore.ledger.Ledger.spend

    def dying_spend(self, *args, **kwargs):
        if die_in == "debit":
            os._exit(9)
        record = spend(self, *args, **kwargs)
        os._exit(9)
        return record

    dpcore.ledger.Ledger.spend = dying_spend
    make_release(Ledger(url), _plan(), INPUTS, request_id="r1", user="bob", artifacts_dir=folder)


def _killed_release(url: str, folder: Path, die_in: str) -> None:
    child = multiprocessing.get_context("spawn").Process(
        target=_release_then_die, args=(url, str(folder), die_in)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 9


def test_a_kill_before_the_debit_leaves_no_published_release(tmp_path: Path) -> None:
    url, folder = f"sqlite:///{(tmp_path / 'l.db').as_posix()}", tmp_path / "artifacts"
    led = Ledger.initialise(url)
    led.set_budget(_plan().account, 1.0)
    _killed_release(url, folder, "debit")
    assert [p.name for p in folder.iterdir()] == [STAGING]  # only staging junk, no zip
    assert led.all_releases() == [] and led.remaining(_plan().account) == (1.0, 0.0)
    release = make_release(led, _plan(), INPUTS, request_id="r1", user="bob", artifacts_dir=folder)
    assert not release.replayed and Path(release.record.artifact_path).parent == folder
    assert [p.name for p in folder.glob("*.zip")] == [Path(release.record.artifact_path).name]
    led.close()


def test_a_kill_after_the_debit_is_completed_by_the_retry(tmp_path: Path) -> None:
    url, folder = f"sqlite:///{(tmp_path / 'l.db').as_posix()}", tmp_path / "artifacts"
    led = Ledger.initialise(url)
    led.set_budget(_plan().account, 1.0)
    _killed_release(url, folder, "publish")
    (record,) = led.all_releases()
    assert list(folder.glob("*.zip")) == []  # paid, not yet published
    release = make_release(led, _plan(), INPUTS, request_id="r1", user="bob", artifacts_dir=folder)
    assert release.replayed and release.record == record
    assert sha256_file(record.artifact_path) == record.artifact_hash
    assert led.remaining(_plan().account) == (0.6, 0.0) and not any((folder / STAGING).iterdir())
    led.close()


def test_init_ledger_command_is_the_explicit_step(tmp_path: Path, capsys) -> None:
    from dpcore.__main__ import main

    url = f"sqlite:///{(tmp_path / 'new' / 'ledger.db').as_posix()}"
    with pytest.raises(LedgerUnavailable, match=FRESH):
        Ledger(url)
    assert main(["init-ledger", url]) == 0
    led = Ledger(url)
    assert led.instance_id in capsys.readouterr().out
    led.close()
    assert main(["init-ledger", "not a url"]) == 2
    assert "malformed" in capsys.readouterr().err


# -- dataset identity: the curator's name carries the budget ---------------------------------------


def _named(name: str, fingerprint: str, **changes) -> ReleasePlan:
    base = {"dataset_name": name, "fingerprint": fingerprint}
    return ReleasePlan(**{**_plan().__dict__, **base, **changes})


def test_the_name_carries_the_budget_whatever_the_table_looks_like(tmp_path: Path) -> None:
    led = Ledger.initialise(f"sqlite:///{(tmp_path / 'l.db').as_posix()}")
    first = _named("Customers 2024", "ab" * 32)
    reordered = _named("customers  2024 ", "cd" * 32)  # rows reordered or a column renamed: new fingerprint
    assert reordered.account == first.account and reordered.dataset_id == first.dataset_id
    led.set_budget(first.account, 0.5)
    folder = tmp_path / "artifacts"
    make_release(led, first, INPUTS, request_id="r1", user="bob", artifacts_dir=folder)
    with pytest.raises(BudgetExceeded):  # no fresh budget for the changed table
        make_release(led, reordered, INPUTS, request_id="r2", user="bob", artifacts_dir=folder)
    led.set_budget(first.account, 1.0)
    release = make_release(led, reordered, INPUTS, request_id="r3", user="bob", artifacts_dir=folder)
    assert release.manifest["earlier_fingerprints"] == ["ab" * 32]  # the manifest says the table changed
    assert release.record.dataset_fingerprint == "cd" * 32
    assert [r.dataset_fingerprint for r in led.releases(first.account)] == ["ab" * 32, "cd" * 32]
    led.close()


def test_the_same_table_under_a_new_name_is_refused(tmp_path: Path) -> None:
    led = Ledger.initialise(f"sqlite:///{(tmp_path / 'l.db').as_posix()}")
    first, renamed = _named("customers.csv", "ab" * 32), _named("customers-copy.csv", "ab" * 32)
    assert renamed.account != first.account
    for plan in (first, renamed):
        led.set_budget(plan.account, 1.0)
    folder = tmp_path / "artifacts"
    make_release(led, first, INPUTS, request_id="r1", user="bob", artifacts_dir=folder)
    with pytest.raises(LedgerError, match=r"already released as dataset 'customers\.csv'") as err:
        make_release(led, renamed, INPUTS, request_id="r2", user="bob", artifacts_dir=folder)
    assert "second budget" in str(err.value)
    assert led.releases(renamed.account) == [] and led.remaining(renamed.account) == (1.0, 0.0)
    assert list(folder.glob("*.zip")) == [Path(led.all_releases()[0].artifact_path)]
    demo = _named("customers-copy.csv", "ab" * 32, mode="demo", seed=1)  # demo spends are not budgets
    led.set_budget(demo.account, 1.0)
    assert make_release(led, demo, INPUTS, request_id="d1", user="bob", artifacts_dir=folder).record.id
    led.close()


def test_dataset_ids_ignore_case_and_spacing_and_need_a_name() -> None:
    assert dataset_id_for_name("Customers 2024") == dataset_id_for_name("  customers\t2024 ")
    assert dataset_id_for_name("Customers 2024") != dataset_id_for_name("Customers 2025")
    assert len(dataset_id_for_name("x")) == 16
    with pytest.raises(ParameterError, match="name"):
        dataset_id_for_name("   ")
