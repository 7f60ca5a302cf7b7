"""Reading an opened ledger: its transactions (on this ledger and no other: a SQLite file deleted or
replaced since it was opened, or a database with another instance id, is refused) and every read
(remaining budget, budget status, budget history, releases, a DataFrame for the Ledger page).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from dpcore.ledger.composition import _budget_row, _charges, _Spend, _spends, _status
from dpcore.ledger.engines import _database_fault, _url_words
from dpcore.ledger.identity import Account, _file_identity, _name
from dpcore.ledger.records import (
    _STORED,
    BudgetEvent,
    BudgetNotSet,
    BudgetStatus,
    LedgerError,
    LedgerUnavailable,
    ReleaseRecord,
    _event,
    _invalid,
    _record,
)
from dpcore.ledger.schema import _budget_events, _budgets, _datasets, _instance, _releases

if TYPE_CHECKING:
    import pandas as pd


class LedgerReads:
    """The transactions of an opened ledger and its reads (:class:`~dpcore.ledger.writes.Ledger` opens it
    and adds the writes)."""

    url: sa.URL
    instance_id: str
    _engine: sa.Engine
    _writer: sa.Engine
    _file: Path | None
    _identity: tuple[int, int] | None

    @contextmanager
    def _tx(self, *, write: bool = False, check: bool = True) -> Iterator[sa.Connection]:
        """One transaction (a write one takes the write lock first) on this ledger and no other: a SQLite
        file deleted or replaced since it was opened, or a database with another instance id, is refused.
        Lock timeouts raise :class:`LedgerBusy`; other database faults :class:`LedgerUnavailable`."""
        if check and self._file is not None and _file_identity(self._file) != self._identity:
            raise LedgerUnavailable(
                f"The ledger database file {self._file.name!r} was deleted or replaced while in use, so its "
                "budgets and releases cannot be trusted. Nothing was changed. Restore the file from a backup "
                "and restart the app; a new ledger is made only with `python -m dpcore init-ledger`."
            )
        try:
            with (self._writer if write else self._engine).begin() as conn:
                if check:
                    found = conn.execute(sa.select(_instance.c.instance_id)).scalars().all()
                    if found != [self.instance_id]:
                        raise LedgerUnavailable(
                            f"The ledger {_url_words(self.url)} is no longer the one opened (instance id "
                            f"{self.instance_id[:8]} is gone): it was replaced or edited. Nothing was "
                            "changed; restore it from a backup."
                        )
                yield conn
        except (sa.exc.IntegrityError, LedgerError):
            raise
        except sa.exc.DBAPIError as err:
            raise _database_fault(err, self.url) from None

    def remaining(self, account: Account | str) -> tuple[float, float]:
        """``(epsilon_left, delta_left)``: total minus the composed cost, rounded toward zero."""
        acc = Account.parse(account)
        status = self.budget(acc)
        if status is None:
            raise BudgetNotSet(
                f"{_name(acc)} has no privacy budget. Set one on the Privacy policy page (Ledger.set_budget)."
            )
        return status.epsilon_left, status.delta_left

    def budget(self, account: Account | str) -> BudgetStatus | None:
        """The account's budget status, or None when no budget was set."""
        acc = Account.parse(account)
        with self._tx() as conn:
            row = _budget_row(conn, acc.key)
            return None if row is None else _status(row, _charges(acc, _spends(conn, acc.dataset_id)))

    def budgets(self, dataset_id: str | None = None) -> list[BudgetStatus]:
        """Every account with a budget (of one dataset, or all), sorted by dataset and account."""
        with self._tx() as conn:
            query = sa.select(_budgets).order_by(_budgets.c.dataset_id, _budgets.c.account)
            if dataset_id is not None:
                query = query.where(_budgets.c.dataset_id == dataset_id)
            rows = conn.execute(query).mappings().all()
            known = set(conn.execute(sa.select(_budgets.c.account)).scalars())
            spends: dict[str, list[_Spend]] = {}
            for spend in _spends(conn, dataset_id):
                if spend[0] not in known:
                    raise _invalid(f"a release debits account {spend[0]!r}, which has no budget")
                spends.setdefault(Account.parse(spend[0]).dataset_id, []).append(spend)
        return [
            _status(row, _charges(Account.parse(row["account"]), spends.get(row["dataset_id"], [])))
            for row in rows
        ]

    def budget_history(
        self, account: Account | str | None = None, *, dataset_id: str | None = None
    ) -> list[BudgetEvent]:
        """Budget changes of one account, or of every account of one dataset, or all; oldest first."""
        query = sa.select(_budget_events).order_by(_budget_events.c.id)
        if account is not None:
            query = query.where(_budget_events.c.account == Account.parse(account).key)
        if dataset_id is not None:
            query = query.where(_budget_events.c.dataset_id == dataset_id)
        with self._tx() as conn:
            return [_event(row) for row in conn.execute(query).mappings()]

    def dataset_names(self) -> dict[str, str]:
        """Dataset id -> the name it was last registered under."""
        with self._tx() as conn:
            rows = conn.execute(sa.select(_datasets.c.dataset_id, _datasets.c.name))
            return {dataset_id: name for dataset_id, name in rows}

    def releases(
        self, account: Account | str | None = None, *, dataset_id: str | None = None
    ) -> list[ReleaseRecord]:
        """Releases of one account, or of every account of one dataset, or all; oldest first."""
        query = sa.select(_releases)
        if account is not None:
            query = query.where(_releases.c.account == Account.parse(account).key)
        if dataset_id is not None:
            query = query.where(_releases.c.dataset_id == dataset_id)
        return self._select(query)

    def all_releases(self) -> list[ReleaseRecord]:
        """Every release of every account, oldest first."""
        return self._select(sa.select(_releases))

    def release_by_request(self, request_id: str) -> ReleaseRecord | None:
        """The release recorded under ``request_id``, or None."""
        found = self._select(sa.select(_releases).where(_releases.c.request_id == request_id))
        return found[0] if found else None

    def to_dataframe(self, dataset_id: str | None = None) -> pd.DataFrame:
        """Releases (of one dataset, or all) as a DataFrame, oldest first, with the dataset's name;
        ``parameters`` as JSON text."""
        import pandas as pd  # imported here so worker processes that only spend stay light

        records = self.releases(dataset_id=dataset_id)
        names = self.dataset_names()
        columns = list(_STORED)
        rows = [[getattr(r, c) for c in columns] for r in records]
        frame = pd.DataFrame(rows, columns=columns)
        frame.insert(0, "dataset_name", [names.get(r.dataset_id, r.dataset_id) for r in records])
        frame["parameters"] = [json.dumps(r.parameters) for r in records]
        return frame

    def _select(self, query: sa.Select[Any]) -> list[ReleaseRecord]:
        with self._tx() as conn:
            records = [_record(row) for row in conn.execute(query.order_by(_releases.c.id)).mappings()]
            known = set(conn.execute(sa.select(_budgets.c.account)).scalars()) if records else set()
        for r in records:
            if r.account not in known:
                raise _invalid(f"release #{r.id} debits account {r.account!r}, which has no budget")
        return records
