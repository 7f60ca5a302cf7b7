"""Ledger under 16 concurrent writers on one database (a SQLite file, a PostgreSQL server): threads and
spawned processes.

Total demand is 16 x 4 x 0.07 = 4.48 against a budget of 1.0, so exactly floor(1.0 / 0.07) = 14 spends
may succeed; every other attempt must be refused with BudgetExceeded and nothing may be over-spent. A
writer that waited longer than the ledger's bounded lock wait gets ``LedgerBusy`` (nothing debited) and
retries the same request, as a curator would.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import types
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from dpcore.ledger import BudgetExceeded, Ledger, LedgerBusy

WORKERS = 16
TRIES = 4
BUDGET = 1.0
STEP = 0.07
EXPECTED_OK = int(Decimal(repr(BUDGET)) // Decimal(repr(STEP)))  # 14
SAME_ID_EPS = 0.1
RETRIES = 50  # LedgerBusy retries per request: a loaded 2-core machine can hold 16 writers past LOCK_WAIT_S


def _spend(led: Ledger, *args: Any) -> Any:
    """``led.spend(*args)``, the same request again after each ``LedgerBusy`` (which debits nothing)."""
    for _ in range(RETRIES):
        try:
            return led.spend(*args)
        except LedgerBusy:
            continue
    return led.spend(*args)


def _attempts(led: Ledger, worker: int, barrier: Any) -> list[tuple[str, str]]:
    """Wait for all workers, then try TRIES spends on "many" and one spend with a shared id on "same"."""
    barrier.wait(timeout=60)
    outcomes = []
    for i in range(TRIES):
        try:
            rec = _spend(led, "many", STEP, 0.0, "laplace", f"w{worker}-{i}")
            outcomes.append(("ok", rec.request_id))
        except BudgetExceeded:
            outcomes.append(("refused", ""))
        except Exception as err:  # reported and asserted against in the parent
            outcomes.append(("error", f"{type(err).__name__}: {err}"))
    try:
        rec = _spend(led, "same", SAME_ID_EPS, 0.0, "laplace", "shared-request")
        outcomes.append(("same", str(rec.id)))
    except Exception as err:
        outcomes.append(("error", f"{type(err).__name__}: {err}"))
    return outcomes


def _process_worker(url: str, worker: int, barrier: Any, queue: Any) -> None:
    led = Ledger(url)
    try:
        queue.put((worker, _attempts(led, worker, barrier)))
    finally:
        led.close()


def _prepare(url: str) -> str:
    led = Ledger.initialise(url)
    led.set_budget("many", epsilon=BUDGET)
    led.set_budget("same", epsilon=BUDGET)
    led.close()
    return url


def _check_ledger(url: str, results: list[list[tuple[str, str]]]) -> None:
    assert len(results) == WORKERS
    outcomes = [o for worker in results for o in worker]
    assert [o for o in outcomes if o[0] == "error"] == []
    ok = [rid for kind, rid in outcomes if kind == "ok"]
    assert len(ok) == EXPECTED_OK
    assert sum(kind == "refused" for kind, _ in outcomes) == WORKERS * TRIES - EXPECTED_OK
    same_ids = {rid for kind, rid in outcomes if kind == "same"}
    assert len(same_ids) == 1

    led = Ledger(url)
    try:
        many = led.releases("many")
        assert sorted(r.request_id for r in many) == sorted(ok)
        spent = sum(Decimal(repr(r.epsilon)) for r in many)
        assert spent <= Decimal(repr(BUDGET))
        assert spent == EXPECTED_OK * Decimal(repr(STEP))
        assert led.remaining("many")[0] == float(Decimal(repr(BUDGET)) - spent)
        same = led.releases("same")
        assert [str(r.id) for r in same] == list(same_ids)
        assert led.remaining("same") == (BUDGET - SAME_ID_EPS, 0.0)
    finally:
        led.close()


def _run_threads(target: Callable[[int, Any], list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
    barrier = threading.Barrier(WORKERS)
    results: list[list[tuple[str, str]]] = [[] for _ in range(WORKERS)]

    def run(worker: int) -> None:
        results[worker] = target(worker, barrier)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return results


def test_threads_each_with_own_ledger(ledger_url: str) -> None:
    url = _prepare(ledger_url)

    def target(worker: int, barrier: Any) -> list[tuple[str, str]]:
        led = Ledger(url)
        try:
            return _attempts(led, worker, barrier)
        finally:
            led.close()

    _check_ledger(url, _run_threads(target))


def test_threads_sharing_one_ledger(ledger_url: str) -> None:
    url = _prepare(ledger_url)
    shared = Ledger(url)
    try:
        _check_ledger(url, _run_threads(lambda worker, barrier: _attempts(shared, worker, barrier)))
    finally:
        shared.close()


@pytest.mark.slow
def test_spawned_processes(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _prepare(ledger_url)
    # Streamlit's AppTest (run earlier in the same worker) leaves one of its temporary scripts as
    # __main__; spawn would re-run it in every child. The workers need nothing from __main__.
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(url, w, barrier, queue)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    _check_ledger(url, [results[w] for w in range(WORKERS)])


def test_two_releases_registering_one_new_dataset_at_once(ledger_url: str, monkeypatch) -> None:
    """Two releases of a dataset the ledger has not seen (two officers approving one request) each register
    it. On a server database both may find it absent before either inserts: the second insert collides,
    and the registration reruns as an update instead of failing the release. The barrier in the insert
    forces that interleaving (SQLite's write transaction holds the database lock, so it cannot happen)."""
    from dpcore.ledger import writes

    Ledger.initialise(ledger_url).close()
    if not ledger_url.startswith("sqlite"):
        barrier, now = threading.Barrier(2, timeout=30), writes._now
        calls = iter(range(2))

        def both_found_it_absent() -> str:
            if next(calls, None) is not None:  # the first insert of each thread waits for the other's
                barrier.wait()
            return now()

        monkeypatch.setattr(writes, "_now", both_found_it_absent)
    errors: list[BaseException] = []

    def register(name: str) -> None:
        led = Ledger(ledger_url)
        try:
            led.register_dataset("new0000000000001", name, "cd" * 32)
        except BaseException as err:  # asserted against below
            errors.append(err)
        finally:
            led.close()

    threads = [threading.Thread(target=register, args=(n,)) for n in ("a.csv", "b.csv")]
    [t.start() for t in threads]
    [t.join(timeout=120) for t in threads]
    assert errors == []
    led = Ledger(ledger_url)
    names = led.dataset_names()
    led.close()
    assert names in ({"new0000000000001": "a.csv"}, {"new0000000000001": "b.csv"})
