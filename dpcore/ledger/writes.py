"""The ledger's writes: :class:`Ledger` opens an initialised ledger (or creates one,
:meth:`Ledger.initialise`) and records datasets, budgets (each change with its event) and releases, each
check and debit one transaction with the accounts it may charge locked in key order (the package
docstring).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import sqlalchemy as sa

from dpcore import config
from dpcore.errors import ParameterError
from dpcore.ledger.composition import (
    _budget_row,
    _charges,
    _check_fits,
    _cost,
    _fits,
    _Spend,
    _spends,
    _status,
)
from dpcore.ledger.engines import (
    _database_fault,
    _folder_words,
    _is_busy,
    _make_engine,
    _parse_url,
    _url_words,
    sqlite_file,
)
from dpcore.ledger.identity import (
    INSTANCE_FILE,
    SAMPLING_MODES,
    Account,
    _file_identity,
    _instance_marker,
    _name,
    dataset_id_for_name,
)
from dpcore.ledger.reads import LedgerReads
from dpcore.ledger.records import (
    BudgetNotSet,
    BudgetStatus,
    LedgerError,
    LedgerUnavailable,
    ReleaseRecord,
    _delta,
    _epsilon,
    _fmt,
    _now,
    _reason,
    _record,
    _text,
    _to_json,
)
from dpcore.ledger.schema import (
    _MAX_ID,
    ADDED_TABLES,
    _budget_events,
    _budgets,
    _datasets,
    _instance,
    _metadata,
    _releases,
)


class Ledger(LedgerReads):
    """Budgets and releases per :class:`Account` in the initialised ledger at ``url`` (default
    :func:`config.ledger_url`), plus the names of the datasets they belong to.

    Opening creates nothing, except the data folder's own ``ledger.db`` on its first use: a database
    that :meth:`initialise` did not create raises :class:`LedgerUnavailable`. Safe to share between
    threads, and any number of ``Ledger`` objects (threads, processes, app sessions) may use one
    database. Every method taking ``account`` accepts an :class:`Account` or its key.

    >>> led = Ledger.initialise("sqlite://")  # in memory, for a notebook or a test: gone once closed
    >>> led.set_budget("notebook", epsilon=1.0).epsilon_left
    1.0
    >>> record = led.spend("notebook", 0.25, 0.0, "laplace", "run-1")
    >>> led.remaining("notebook")
    (0.75, 0.0)
    >>> led.close()
    """

    url: sa.URL
    instance_id: str

    def __init__(self, url: str | sa.URL | None = None) -> None:
        self._open(url, create=False)

    @classmethod
    def initialise(cls, url: str | sa.URL | None = None) -> Ledger:
        """Create the ledger at ``url`` (tables and a random instance id; a SQLite file and its folder too)
        and open it. The operator's explicit step (``python -m dpcore init-ledger``); on an initialised
        ledger it changes nothing and opens it."""
        ledger = cls.__new__(cls)
        ledger._open(url, create=True)
        return ledger

    def _open(self, url: str | sa.URL | None, *, create: bool) -> None:
        self.url = _parse_url(url)
        self._file = sqlite_file(self.url)
        marker = _instance_marker(self._file)
        create = create or (marker is not None and not marker.is_file())  # the data folder's first use
        if self._file is not None and not create and not self._file.is_file():
            raise LedgerUnavailable(
                f"There is no ledger database file {self._file.name!r} in {_folder_words(self._file)}. "
                "A ledger is never started over silently: restore the file from a backup, or create a new "
                "ledger explicitly with `python -m dpcore init-ledger`."
            )
        self._engine = _make_engine(self.url, create_folder=create)
        self._writer = self._engine.execution_options(dpcore_write=True)
        self._identity = None
        try:
            self.instance_id = self._create() if create else self._read_instance()
            if not create:
                self._upgrade()
            if marker is not None and create:
                marker.write_text(self.instance_id + "\n")
            elif marker is not None and marker.read_text().strip() != self.instance_id:
                raise LedgerUnavailable(
                    f"The ledger database {self._file.name!r} is not the one this data folder started with "
                    f"(instance {self.instance_id[:8]}, {INSTANCE_FILE} says "
                    f"{marker.read_text().strip()[:8]}): it was replaced. Restore the original from a "
                    "backup; to start a new ledger on purpose, run `python -m dpcore init-ledger`."
                )
        except BaseException:
            self._engine.dispose()
            raise
        self._identity = _file_identity(self._file)

    def _create(self) -> str:
        for attempt in (1, 2):
            try:
                with self._writer.begin() as conn:
                    _metadata.create_all(conn)
                    found = conn.execute(sa.select(_instance.c.instance_id)).scalars().all()
                    if found:
                        return found[0]
                    instance_id = uuid.uuid4().hex
                    conn.execute(_instance.insert().values(instance_id=instance_id, created=_now()))
                    return instance_id
            except sa.exc.DBAPIError as err:  # a concurrent initialiser may win the race on a server database
                if attempt == 2 or _is_busy(err):
                    raise _database_fault(err, self.url) from None
        raise AssertionError("unreachable")

    def _upgrade(self) -> None:
        """Add :data:`ADDED_TABLES` (with their triggers) to an initialised ledger made before them."""
        for attempt in (1, 2):
            with self._tx(check=False) as conn:
                present = set(sa.inspect(conn).get_table_names())
            if all(t.name in present for t in ADDED_TABLES):
                return
            try:
                with self._writer.begin() as conn:
                    _metadata.create_all(conn, tables=list(ADDED_TABLES))
                return
            except sa.exc.DBAPIError as err:  # another process added them at the same time: look again
                if attempt == 2 or _is_busy(err):
                    raise _database_fault(err, self.url) from None

    def _read_instance(self) -> str:
        with self._tx(check=False) as conn:
            if not sa.inspect(conn).has_table(_instance.name):
                raise LedgerUnavailable(
                    f"The database {_url_words(self.url)} is not an initialised ledger (it has no instance "
                    "id). A ledger is never started over silently: point DPCORE_LEDGER_URL at the existing "
                    "ledger, or create one explicitly with `python -m dpcore init-ledger`."
                )
            found = conn.execute(sa.select(_instance.c.instance_id)).scalars().all()
        if len(found) != 1:
            raise LedgerUnavailable(
                f"The ledger {_url_words(self.url)} has {len(found)} instance ids instead of one: it was "
                "edited outside dpcore. Restore it from a backup."
            )
        return found[0]

    def close(self) -> None:
        """Close the pooled database connections."""
        self._engine.dispose()

    # -- writes -------------------------------------------------------------------------------------

    def register_dataset(self, dataset_id: str, name: str, fingerprint: str | None = None) -> None:
        """Record a dataset's display name (the latest name given wins; the id never changes)."""
        values = {
            "name": _text(str(name)[:_MAX_ID] or dataset_id, "name"),
            "fingerprint": _text(fingerprint, "fingerprint", optional=True),
        }
        dataset_id = _text(dataset_id, "dataset_id")
        try:
            self._register_dataset_once(dataset_id, values)
        except sa.exc.IntegrityError:  # another transaction inserted this dataset first; rerun updates it
            self._register_dataset_once(dataset_id, values)

    def _register_dataset_once(self, dataset_id: str, values: Mapping[str, str | None]) -> None:
        with self._tx(write=True) as conn:
            query = sa.select(_datasets.c.name).where(_datasets.c.dataset_id == dataset_id)
            if conn.execute(query).first() is None:
                conn.execute(_datasets.insert().values(dataset_id=dataset_id, first_seen=_now(), **values))
            else:
                conn.execute(_datasets.update().where(_datasets.c.dataset_id == dataset_id).values(**values))

    def adopt_dataset(self, old_id: str, name: str) -> str:
        """Move dataset ``old_id``'s accounts, releases and record to the id of ``name`` (one transaction),
        for a ledger written before dataset names carried budgets, whose accounts are keyed by the table's
        fingerprint; budgets, spends and request ids are kept as they are. Refused when ``old_id`` has no
        account or release, or when ``name`` already has some (two budgets are never merged). Returns the
        new id."""
        old_id, new_id = _text(old_id, "dataset_id"), dataset_id_for_name(name)
        if new_id == old_id:
            return new_id
        with self._tx(write=True) as conn:
            taken = _dataset_rows(conn, new_id)
            if any(taken):
                raise LedgerError(
                    f"The name {name!r} already has {taken[0]} account(s) and {taken[1]} release(s) in this "
                    "ledger; two budgets are never merged. Choose a name that is not in use."
                )
            if not any(_dataset_rows(conn, old_id)):
                raise LedgerError(
                    f"The ledger has no account or release of dataset {old_id!r}; nothing moved."
                )
            keys = set()
            for table in (_budgets, _releases):
                keys |= set(
                    conn.execute(sa.select(table.c.account).where(table.c.dataset_id == old_id)).scalars()
                )
            for old_key in keys:
                acc = Account.parse(old_key)
                moved = {
                    "account": Account(new_id, acc.definition, acc.relation, acc.mode).key,
                    "dataset_id": new_id,
                }
                for table in (_budgets, _releases):
                    conn.execute(table.update().where(table.c.account == old_key).values(**moved))
                budget = _budget_row(conn, moved["account"])
                if budget is not None:  # the old account's events stay as written; the new one starts here
                    conn.execute(
                        _budget_events.insert().values(
                            **moved,
                            time=_now(),
                            user=config.local_user(),
                            reason=f"moved from dataset {old_id} to the name {str(name)[:_MAX_ID]!r}",
                            epsilon_before=None,
                            delta_before=None,
                            epsilon_after=budget["epsilon_total"],
                            delta_after=budget["delta_total"],
                        )
                    )
            record = (
                conn.execute(sa.select(_datasets).where(_datasets.c.dataset_id == old_id)).mappings().first()
            )
            conn.execute(_datasets.delete().where(_datasets.c.dataset_id.in_([old_id, new_id])))
            conn.execute(
                _datasets.insert().values(
                    dataset_id=new_id,
                    name=_text(str(name)[:_MAX_ID], "name"),
                    fingerprint=None if record is None else record["fingerprint"],
                    first_seen=_now() if record is None else record["first_seen"],
                )
            )
        return new_id

    def set_budget(
        self,
        account: Account | str,
        epsilon: float,
        delta: float = 0.0,
        *,
        user: str | None = None,
        reason: str = "",
    ) -> BudgetStatus:
        """Set (create, raise or lower) the account's total budget; never below what is already spent.

        The change and its :class:`BudgetEvent` (old and new totals, ``user``, default
        :func:`config.local_user`, the time and ``reason``) are written in one transaction."""
        acc = Account.parse(account)
        eps_total = _epsilon(epsilon, "The budget's epsilon")
        delta_total = _delta(delta, "The budget's delta")
        event = {
            "user": _text(config.local_user() if user is None else user, "user"),
            "reason": _reason(reason),
        }
        try:
            return self._set_budget_once(acc, eps_total, delta_total, event)
        except sa.exc.IntegrityError:  # another transaction created this budget row first; rerun updates it
            return self._set_budget_once(acc, eps_total, delta_total, event)

    def _set_budget_once(
        self, acc: Account, eps_total: float, delta_total: float, event: Mapping[str, str]
    ) -> BudgetStatus:
        now, key = _now(), acc.key
        with self._tx(write=True) as conn:
            row = _lock_accounts(conn, acc).get(key)
            charged = _charges(acc, _spends(conn, acc.dataset_id))
            eps_spent, delta_spent = _cost(charged.charges)
            if not (_fits(eps_spent, eps_total) and _fits(delta_spent, delta_total)):
                raise LedgerError(
                    f"Cannot set the budget of {_name(acc)} to eps={_fmt(eps_total)}, "
                    f"delta={_fmt(delta_total)}: eps={_fmt(eps_spent)}, delta={_fmt(delta_spent)} is already "
                    f"spent. Choose a total of at least eps={_fmt(eps_spent)}, delta={_fmt(delta_spent)}."
                )
            values = {"epsilon_total": eps_total, "delta_total": delta_total, "updated": now}
            if row is None:
                values |= {
                    "account": key,
                    "dataset_id": acc.dataset_id,
                    "definition": acc.definition,
                    "relation": acc.relation,
                    "mode": acc.mode,
                    "created": now,
                }
                conn.execute(_budgets.insert().values(**values))
            else:
                conn.execute(_budgets.update().where(_budgets.c.account == key).values(**values))
            conn.execute(
                _budget_events.insert().values(
                    account=key,
                    dataset_id=acc.dataset_id,
                    time=now,
                    epsilon_before=None if row is None else row["epsilon_total"],
                    delta_before=None if row is None else row["delta_total"],
                    epsilon_after=eps_total,
                    delta_after=delta_total,
                    **event,
                )
            )
            return _status(_budget_row(conn, key), charged)

    def spend(
        self,
        account: Account | str,
        epsilon: float,
        delta: float,
        mechanism: str,
        request_id: str,
        *,
        user: str | None = None,
        fingerprint: str | None = None,
        definition: str = "",
        calibration: str = "",
        sampling_mode: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        artifact_path: str | PurePath | None = None,
        artifact_hash: str | None = None,
        parallel_group: str | None = None,
        partition_key: str | None = None,
        preparation: Sequence[tuple[str, float]] = (),
    ) -> ReleaseRecord:
        """Check the account's budget and record one release in a single transaction; return its record,
        with ``inserted=True`` when this call recorded it.

        ``preparation`` lists (mechanism, epsilon) of private steps the release ran first (e.g. bounds
        estimated privately): each is recorded in the same transaction, on the same account, as its own row
        (request id ``<request_id>/<mechanism>``, delta 0, sequential), and the budget must hold them all.

        A ``request_id`` already in the ledger for this account returns that first record
        (``inserted=False``) and debits nothing (whatever the other arguments). Releases sharing
        ``parallel_group`` run on disjoint parts named by distinct ``partition_key`` values and cost the
        group's maximum (eps and delta).
        ``sampling_mode`` defaults to the account's mode and must equal it (demo releases only debit
        demo accounts). ``definition`` defaults to the account's. ``user`` defaults to
        :func:`config.local_user`. A ``fingerprint`` that already has releases of this mode under another
        dataset is refused (a renamed table gets no second budget). Raises :class:`BudgetExceeded`
        (nothing recorded), :class:`BudgetNotSet`, :class:`LedgerBusy`, :class:`LedgerUnavailable`,
        :class:`LedgerError` or ``PolicyError``/``ParameterError``.
        """
        acc = Account.parse(account)
        if (parallel_group is None) != (partition_key is None):
            raise ParameterError(
                "Parallel composition needs both parallel_group and partition_key (the disjoint part this "
                "release touches). Give both, or neither for sequential composition."
            )
        mode = acc.mode if sampling_mode is None else sampling_mode
        if mode not in SAMPLING_MODES:
            raise ParameterError(
                f"sampling_mode must be one of {SAMPLING_MODES}, got {sampling_mode!r}. Release with "
                "Sampler() (secure) or a labelled demo Sampler(seed=...); diagnostic noise is never released."
            )
        if mode != acc.mode:
            raise LedgerError(
                f"A {mode} release cannot be debited from the {acc.mode} account {_name(acc)}: demo releases "
                "use the dataset's separate demo account, real releases its real account."
            )
        row = {
            "request_id": _text(request_id, "request_id"),
            "account": acc.key,
            "dataset_id": acc.dataset_id,
            "user": _text(config.local_user() if user is None else user, "user"),
            "dataset_fingerprint": _text(fingerprint, "fingerprint", optional=True),
            "definition": _text(definition or acc.definition, "definition", allow_empty=True),
            "relation": acc.relation,
            "mechanism": _text(mechanism, "mechanism"),
            "calibration": _text(calibration, "calibration", allow_empty=True),
            "epsilon": _epsilon(epsilon, "The release's epsilon"),
            "delta": _delta(delta, "The release's delta"),
            "sampling_mode": mode,
            "parameters": _to_json(parameters),
            "artifact_path": None if artifact_path is None else str(artifact_path),
            "artifact_hash": _text(artifact_hash, "artifact_hash", optional=True),
            "composition": "sequential" if parallel_group is None else "parallel",
            "parallel_group": _text(parallel_group, "parallel_group", optional=True),
            "partition_key": _text(partition_key, "partition_key", optional=True),
        }
        parts = []
        for step, eps in preparation:
            if parallel_group is not None:
                raise ParameterError("A release with private preparation steps composes sequentially.")
            parts.append(
                {
                    **row,
                    "request_id": _text(f"{row['request_id']}/{step}", "request_id"),
                    "mechanism": _text(step, "mechanism"),
                    "calibration": "",
                    "epsilon": _epsilon(eps, f"The epsilon of the {step} step"),
                    "delta": 0.0,
                    "parameters": _to_json({"part_of": row["request_id"]}),  # starts with _PART_JSON
                    "artifact_path": None,
                    "artifact_hash": None,
                }
            )
        try:
            return self._spend_once(row, acc, parts)
        except sa.exc.IntegrityError:  # a concurrent transaction inserted this request_id first
            return self._spend_once(row, acc, parts)

    def _spend_once(
        self, row: dict[str, Any], acc: Account, parts: Sequence[dict[str, Any]] = ()
    ) -> ReleaseRecord:
        key, request_id = row["account"], row["request_id"]
        with self._tx(write=True) as conn:
            budgets = _lock_accounts(conn, acc)
            query = sa.select(_releases).where(_releases.c.request_id == request_id)
            first = conn.execute(query).mappings().first()
            if first is not None:
                if first["account"] != key:
                    raise LedgerError(
                        f"request_id {request_id!r} was already used for account {first['account']}, "
                        f"not {key}. Use a new request id for a new release."
                    )
                return _record(first)
            if key not in budgets:
                raise BudgetNotSet(
                    f"{_name(acc)} has no privacy budget. Set one on the Privacy policy page "
                    "(Ledger.set_budget) before releasing."
                )
            _check_same_data_same_name(conn, row, acc)
            group = row["parallel_group"]
            if group is not None:
                _check_partition_free(conn, key, group, row["partition_key"])
            spends = _spends(conn, acc.dataset_id)
            new = [_Spend(key, 0, r["epsilon"], r["delta"], r["parallel_group"]) for r in (row, *parts)]
            for target_key in sorted(budgets, key=lambda k: k != key):  # its own account first
                target = Account.parse(target_key)
                added = _charges(target, new).charges
                if added:
                    _check_fits(budgets[target_key], _charges(target, spends).charges, added, row, target)
            now = _now()
            for part in parts:
                conn.execute(_releases.insert().values(**part, time=now))
            row = {**row, "time": now}
            new_id = conn.execute(_releases.insert().values(**row)).inserted_primary_key[0]
            return _record({**row, "id": int(new_id)}, inserted=True)


def _dataset_rows(conn: sa.Connection, dataset_id: str) -> tuple[int, int]:
    """(accounts, releases) of ``dataset_id``."""
    count = sa.select(sa.func.count())
    return tuple(  # type: ignore[return-value]
        conn.execute(count.select_from(t).where(t.c.dataset_id == dataset_id)).scalar_one()
        for t in (_budgets, _releases)
    )


def _lock_accounts_query(acc: Account) -> sa.Select[Any]:
    """The budget rows of ``acc``'s dataset and mode in key order, locked until commit (FOR UPDATE; SQLite
    holds the database lock instead): every account a release there can be charged to."""
    query = sa.select(_budgets.c.account).where(
        _budgets.c.dataset_id == acc.dataset_id, _budgets.c.mode == acc.mode
    )
    return query.order_by(_budgets.c.account).with_for_update()


def _lock_accounts(conn: sa.Connection, acc: Account) -> dict[str, sa.RowMapping]:
    """Lock (:func:`_lock_accounts_query`), then read the budget rows by key. The read is a statement of
    its own, so on PostgreSQL it also sees an account created while the lock was awaited; that account's
    creator held these locks, and any later change to it waits for them."""
    conn.execute(_lock_accounts_query(acc)).all()
    query = sa.select(_budgets).where(_budgets.c.dataset_id == acc.dataset_id, _budgets.c.mode == acc.mode)
    return {row["account"]: row for row in conn.execute(query).mappings()}


def _check_partition_free(conn: sa.Connection, account: str, group: str, key: str) -> None:
    query = sa.select(_releases.c.request_id).where(
        _releases.c.account == account,
        _releases.c.parallel_group == group,
        _releases.c.partition_key == key,
    )
    taken = conn.execute(query).scalar()
    if taken is not None:
        raise LedgerError(
            f"Partition {key!r} of parallel group {group!r} on account {account} was already released "
            f"(request {taken!r}); a second release of the same part composes sequentially. Use a new "
            "parallel group, or release without parallel_group."
        )


def _check_same_data_same_name(conn: sa.Connection, row: Mapping[str, Any], acc: Account) -> None:
    """Refuse a release of a table (by fingerprint) that already has releases of the same mode under
    another dataset: renaming a dataset must not give it a second budget."""
    if row["dataset_fingerprint"] is None:
        return
    query = (
        sa.select(_releases.c.dataset_id, _datasets.c.name)
        .outerjoin(_datasets, _datasets.c.dataset_id == _releases.c.dataset_id)
        .where(
            _releases.c.dataset_fingerprint == row["dataset_fingerprint"],
            _releases.c.sampling_mode == row["sampling_mode"],
            _releases.c.dataset_id != row["dataset_id"],
        )
    )
    other = conn.execute(query.limit(1)).first()
    if other is None:
        return
    other_id, name = other
    table = row["dataset_fingerprint"]
    head = f"This table (fingerprint {table[:12]}) was already released as dataset {name or other_id!r}"
    if other_id != table[:16]:
        raise LedgerError(
            f"{head}; releasing it under another name would start a second budget for the same data. Nothing "
            f"was debited. Release it under the name {name or other_id!r} (its budget carries on), or change "
            "the data."
        )
    raise LedgerError(  # ledgers written before names carried budgets keyed a dataset by its fingerprint
        f"{head} (id {other_id}), whose account is keyed by the table's fingerprint (written before dataset "
        "names carried budgets), so no dataset name reaches it and a release under any name would start a "
        "second budget for the same data. Nothing was debited. Its budget and releases stay on the Ledger "
        f"page under id {other_id}. Give that budget a name once with `python -m dpcore adopt-dataset "
        f"{other_id} NAME` (the ledger's URL in DPCORE_LEDGER_URL or --ledger), then release under that name."
    )
