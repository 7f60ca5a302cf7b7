"""Privacy budget ledger in a SQL database: one account per (dataset, definition, neighbour relation, mode).

Epsilons of different privacy definitions or neighbour relations are not comparable (an eps of local
PDP, a Blowfish eps for graph G, a geo-indistinguishability level within r metres and an eps-DP eps
measure different things), so each lives in its own :class:`Account`; demo releases have their own
demo accounts and never touch a real budget.

Related accounts: a release also protects the relations of other accounts of its dataset and mode (an
unbounded eps is a bounded 2 eps, a theta = 0.31 Blowfish release is also a theta = 0.30 one, a level
within 1000.5 m costs 1000/1000.5 of it within 1000 m, one row's eps is m eps for a user with m rows), so
each account is charged every such release at the factor of :func:`dpcore.accounts.factor`, and a spend
is refused when any of them would overspend. Releases of a relation with no factor to an account's are
not charged there (nothing bounds them; the Ledger page says so).

Composition (sequential and parallel composition, Dwork & Roth 2014; McSherry 2009): an account's cost is

    cost_eps = sum_{sequential r} k_r eps_r + sum_{parallel groups g} max_{r in g} k_r eps_r

over its own releases (k_r = 1) and those charged to it (k_r their factor; delta by
:func:`dpcore.accounts.convert`); ``remaining = total - cost``. The members of a parallel group touch
disjoint parts of the dataset (one distinct ``partition_key`` each), so a neighbour changes the input of
at most one member and the group costs its largest member; charged to an account whose unit is all rows
of one user (whose rows may lie in several parts), or from one, they add up instead.

Exact arithmetic: every float is read as its shortest round-tripping decimal (``repr``) and summed as
an exact fraction, so ten spends of 0.1 use a budget of 1.0 exactly and 0.1 + 0.2 fits a budget of 0.3.
A spend is admitted only when ``cost_after <= total`` exactly (no slack); ``remaining()`` rounds toward
zero, so a remaining value fed back into ``spend`` always fits.

Concurrency: the budget check and the debit are one transaction. On SQLite (write-ahead log, so
readers never wait for a writer) it starts with ``BEGIN IMMEDIATE``, the database write lock; on other
databases every budget row of the dataset and mode is locked with ``SELECT ... FOR UPDATE`` in the order
of the account keys (a spend and a budget change lock the same rows in the same order: no deadlock). A
lock held elsewhere is waited for at most :data:`LOCK_WAIT_S` seconds, then :class:`LedgerBusy` says to
retry (nothing was debited).
``request_id`` is unique: a rerun of a request returns the first record and debits nothing (its
``inserted`` is False; only the call that debited gets ``inserted=True``).

Faults never look like a fresh budget. A ledger is created only by :meth:`Ledger.initialise` (the
operator's ``python -m dpcore init-ledger``), which records a random instance id; only the default
embedded SQLite file of the data folder (``<data folder>/ledger.db``) is initialised on first use, and
the folder then keeps its instance id in :data:`INSTANCE_FILE`, so a missing or replaced file is refused.
``Ledger(url)`` opens an initialised ledger and refuses (:class:`LedgerUnavailable`) a missing
database, one without the instance id, a SQLite file deleted or replaced while open, an unreadable
file, a malformed URL or a missing driver. Rows read back are checked (finite, non-negative numbers,
releases of known accounts); a ledger holding a row that fails is refused, never summed.

Dataset identity: an account's dataset is the curator's dataset *name* (:func:`dataset_id_for_name`),
so the budget follows the name whatever the file's row order or column names; every release records
the data's fingerprint. Releasing data whose fingerprint already has spends under another name is
refused (:meth:`Ledger.spend`): the same table cannot get a second budget by being renamed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa

from dpcore import config
from dpcore.accounts import Relation, convert, factor
from dpcore.errors import DPCoreError, ParameterError, PolicyError
from dpcore.url_text import shown_url, url_redactor

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Account",
    "BudgetEvent",
    "BudgetExceeded",
    "BudgetNotSet",
    "BudgetStatus",
    "Ledger",
    "LedgerBusy",
    "LedgerError",
    "LedgerUnavailable",
    "ReleaseRecord",
    "dataset_id_for_name",
    "relation_factor",
]

LOCK_WAIT_S = 3.0  # longest wait for a lock held elsewhere (SQLite busy timeout, PostgreSQL lock_timeout)
INSTANCE_FILE = "ledger.instance"  # the data folder's record of its embedded ledger's instance id
SAMPLING_MODES = ("secure", "demo")
_MAX_ID = 255
_ZERO = Fraction(0)
_SEP = "|"

_metadata = sa.MetaData()
_instance = sa.Table(
    "ledger_instance",
    _metadata,
    sa.Column("instance_id", sa.String(64), primary_key=True),
    sa.Column("created", sa.String(40), nullable=False),
)
_datasets = sa.Table(
    "datasets",
    _metadata,
    sa.Column("dataset_id", sa.String(_MAX_ID), primary_key=True),
    sa.Column("name", sa.String(_MAX_ID), nullable=False),
    sa.Column("fingerprint", sa.String(_MAX_ID)),
    sa.Column("first_seen", sa.String(40), nullable=False),
)
_budgets = sa.Table(
    "accounts",
    _metadata,
    sa.Column("account", sa.String(_MAX_ID), primary_key=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("definition", sa.String(_MAX_ID), nullable=False),
    sa.Column("relation", sa.String(_MAX_ID), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("epsilon_total", sa.Double, nullable=False),
    sa.Column("delta_total", sa.Double, nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("updated", sa.String(40), nullable=False),
)
_releases = sa.Table(
    "account_releases",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(_MAX_ID), nullable=False, unique=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("dataset_fingerprint", sa.String(_MAX_ID)),
    sa.Column("definition", sa.String(_MAX_ID), nullable=False),
    sa.Column("relation", sa.String(_MAX_ID), nullable=False),
    sa.Column("mechanism", sa.String(_MAX_ID), nullable=False),
    sa.Column("calibration", sa.String(_MAX_ID), nullable=False),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("sampling_mode", sa.String(16), nullable=False),
    sa.Column("parameters", sa.Text, nullable=False),
    sa.Column("artifact_path", sa.Text),
    sa.Column("artifact_hash", sa.String(_MAX_ID)),
    sa.Column("composition", sa.String(16), nullable=False),
    sa.Column("parallel_group", sa.String(_MAX_ID)),
    sa.Column("partition_key", sa.String(_MAX_ID)),
    sa.CheckConstraint("composition IN ('sequential', 'parallel')", name="ck_releases_composition"),
    sa.UniqueConstraint("account", "parallel_group", "partition_key", name="uq_releases_partition"),
)
#: Append-only (triggers refuse UPDATE and DELETE): every budget change, who made it, when and why.
_budget_events = sa.Table(
    "budget_events",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("epsilon_before", sa.Double),
    sa.Column("delta_before", sa.Double),
    sa.Column("epsilon_after", sa.Double, nullable=False),
    sa.Column("delta_after", sa.Double, nullable=False),
)
#: Append-only: an account's approval rule is its latest row (``dpcore.approvals``).
_approval_rules = sa.Table(
    "approval_rules",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("rule", sa.String(16), nullable=False),
    sa.Column("threshold", sa.Double),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.CheckConstraint("rule IN ('none', 'above', 'all')", name="ck_approval_rule"),
)
#: Append-only: a release request exactly as the curator made it (``dpcore.approvals``); ``request_id`` is
#: the release's (the plan's), ``ticket`` this request's (a denied plan may be requested again).
_release_requests = sa.Table(
    "release_requests",
    _metadata,
    sa.Column("ticket", sa.String(64), primary_key=True),
    sa.Column("request_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("requester", sa.String(_MAX_ID), nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("expires", sa.String(40), nullable=False),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("plan", sa.Text, nullable=False),
    sa.Column("guarantee", sa.Text, nullable=False),
    sa.Column("expected_error", sa.Text, nullable=False),
    sa.Column("chart", sa.Text),
    sa.Column("inputs_path", sa.Text),
    sa.Column("inputs_hash", sa.String(_MAX_ID)),
    sa.Column("origin", sa.Text),
)
#: Append-only: each request's decisions and outcome, one row per state (so two approvals cannot both land).
_request_events = sa.Table(
    "request_events",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ticket", sa.String(64), nullable=False, index=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.UniqueConstraint("ticket", "state", name="uq_request_state"),
)
#: The tables added after the first ledgers were made: an initialised ledger without them gets them (and
#: their append-only triggers) when opened (:meth:`Ledger._upgrade`).
ADDED_TABLES = (_budget_events, _approval_rules, _release_requests, _request_events)
_APPEND_ONLY_FUNCTION = sa.DDL(
    "CREATE OR REPLACE FUNCTION dpcore_append_only() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION "
    "'dpcore: ledger events are append-only (never updated or deleted)'; END $$ LANGUAGE plpgsql"
)
for _table in ADDED_TABLES:  # a past event is never rewritten or deleted, whoever connects
    for _verb in ("UPDATE", "DELETE"):
        sa.event.listen(
            _table,
            "after_create",
            sa.DDL(
                f"CREATE TRIGGER {_table.name}_no_{_verb.lower()} BEFORE {_verb} ON {_table.name} "
                f"BEGIN SELECT RAISE(ABORT, 'dpcore: {_table.name} rows are append-only'); END"
            ).execute_if(dialect="sqlite"),
        )
    sa.event.listen(_table, "after_create", _APPEND_ONLY_FUNCTION.execute_if(dialect="postgresql"))
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            f"CREATE TRIGGER {_table.name}_append_only BEFORE UPDATE OR DELETE ON {_table.name} "
            "FOR EACH ROW EXECUTE FUNCTION dpcore_append_only()"
        ).execute_if(dialect="postgresql"),
    )
_COST_COLS = (_releases.c.epsilon, _releases.c.delta, _releases.c.parallel_group)
_PART_JSON = '{"part_of": '  # how a preparation step's parameters start (json.dumps of {"part_of": id})


@dataclass(frozen=True)
class Account:
    """Where a release's epsilon and delta are debited: one dataset, one privacy definition, one neighbour
    relation (the unit of protection), one mode. Only spends of the same account are ever added up.

    ``definition`` is an account family: ``"dp"`` (pure and approximate DP share it: eps-DP is (eps, 0)-DP),
    ``"blowfish"``, ``"geo_ind"`` (levels within the radius named in ``relation``) or ``"local_pdp"``.
    A plain string key (notebooks, tests) is an account of its own with an empty definition.
    """

    dataset_id: str
    definition: str = ""
    relation: str = ""
    mode: str = "secure"

    def __post_init__(self) -> None:
        if self.mode not in SAMPLING_MODES:
            raise ParameterError(f"An account's mode is 'secure' or 'demo', got {self.mode!r}.")

    @property
    def key(self) -> str:
        """The account's identifier in the database (unique per dataset, definition, relation and mode)."""
        if not self.definition and not self.relation and self.mode == "secure":
            return self.dataset_id
        parts = (self.dataset_id, self.definition, self.relation)
        return _SEP.join(("demo", *parts) if self.mode == "demo" else parts)

    @classmethod
    def parse(cls, account: Account | str) -> Account:
        """``account`` itself, or the account named by a key (a plain id is an account of its own)."""
        if isinstance(account, Account):
            return account
        key = _text(account, "account")
        parts = key.split(_SEP)
        mode = "secure"
        if parts[0] == "demo" and len(parts) == 4:
            mode, parts = "demo", parts[1:]
        if len(parts) == 3:
            return cls(parts[0], parts[1], parts[2], mode)
        return cls(key)


def dataset_id_for_name(name: str) -> str:
    """The ledger id of the dataset the curator calls ``name``: 16 hex digits of the SHA-256 of the name with
    case and runs of spaces ignored, so "Customers 2024" and "customers  2024" share one budget."""
    text = _text(name, "The dataset name")
    normal = re.sub(r"\s+", " ", text).strip().casefold()
    if not normal:
        raise ParameterError("The dataset name is empty; give the dataset a name (it carries its budget).")
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:16]


class LedgerError(DPCoreError):
    """A ledger operation is not allowed (request id reused, budget lowered below what is spent, ...)."""


class LedgerBusy(LedgerError):
    """Another connection held the ledger's lock longer than :data:`LOCK_WAIT_S`; nothing was changed."""


class LedgerUnavailable(LedgerError):
    """The ledger cannot be used as it is (missing, not initialised, replaced, unreadable, invalid rows,
    bad URL or driver); it is never silently replaced by an empty one."""


class BudgetNotSet(LedgerError):
    """The account has no privacy budget yet."""


class BudgetExceeded(LedgerError):
    """A release would spend more than the account's remaining budget; nothing was debited."""

    def __init__(
        self,
        message: str,
        *,
        account: str,
        epsilon_asked: float,
        delta_asked: float,
        epsilon_left: float,
        delta_left: float,
    ) -> None:
        super().__init__(message)
        self.account = account
        self.epsilon_asked = epsilon_asked
        self.delta_asked = delta_asked
        self.epsilon_left = epsilon_left
        self.delta_left = delta_left


@dataclass(frozen=True)
class ReleaseRecord:
    """One release as stored in the ledger; ``parameters`` is the decoded JSON object.

    ``inserted`` is not stored: True only on the record :meth:`Ledger.spend` returns from the call that
    recorded it (and debited), False on a rerun's and on every record read back. Records compare
    without it.
    """

    id: int
    request_id: str
    account: str
    dataset_id: str
    time: str
    user: str
    dataset_fingerprint: str | None
    definition: str
    relation: str
    mechanism: str
    calibration: str
    epsilon: float
    delta: float
    sampling_mode: str
    parameters: dict[str, Any]
    artifact_path: str | None
    artifact_hash: str | None
    composition: str
    parallel_group: str | None
    partition_key: str | None
    inserted: bool = field(default=False, compare=False)

    @property
    def part_of(self) -> str | None:
        """The request id of the release this row is a private preparation step of (``spend``'s
        ``preparation``: its own row, e.g. bounds estimated privately), or None for a release."""
        parent = self.parameters.get("part_of")
        return parent if isinstance(parent, str) else None


#: The stored fields of a release (the columns of ``releases`` that :class:`ReleaseRecord` reads).
_STORED = tuple(f.name for f in fields(ReleaseRecord) if f.name != "inserted")


@dataclass(frozen=True)
class BudgetEvent:
    """One budget change as stored (append-only): the account, its totals before (None when the change
    created the budget) and after, who made it, when (UTC, ISO 8601) and why."""

    id: int
    account: str
    dataset_id: str
    time: str
    user: str
    reason: str
    epsilon_before: float | None
    delta_before: float | None
    epsilon_after: float
    delta_after: float


@dataclass(frozen=True)
class BudgetStatus:
    """An account's total budget, what its releases cost under composition, and what is left."""

    account: str
    dataset_id: str
    definition: str
    relation: str
    mode: str
    epsilon_total: float
    delta_total: float
    epsilon_spent: float
    delta_spent: float
    epsilon_left: float
    delta_left: float
    n_releases: int  # by request: a release's preparation steps (its extra rows) are part of it
    created: str
    updated: str
    n_charged: int = 0  # releases of related accounts charged here (dpcore.accounts)


class Ledger:
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

    # -- reads --------------------------------------------------------------------------------------

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


# -- engine ----------------------------------------------------------------------------------------


def _make_engine(url: sa.URL, *, create_folder: bool = True) -> sa.Engine:
    try:
        return _engine_for(url, create_folder)
    except (ImportError, sa.exc.NoSuchModuleError, sa.exc.ArgumentError) as err:
        raise LedgerUnavailable(
            f"The ledger URL {_url_words(url)} needs a database driver that is not installed ({err}). "
            "Install it (for PostgreSQL: pip install 'psycopg[binary]') or fix DPCORE_LEDGER_URL."
        ) from None


def _engine_for(url: sa.URL, create_folder: bool) -> sa.Engine:
    """Engine for ``url`` that waits at most :data:`LOCK_WAIT_S` for a lock; on SQLite, a write-ahead log
    (readers do not wait for the writer) and our own BEGIN (IMMEDIATE for writes).

    pysqlite recipe from the SQLAlchemy SQLite docs ("Transactions with SQLite and the sqlite3 driver").
    ``create_folder``: create a SQLite file's missing folder (the session store's tables; never a ledger's
    unless it is being initialised).
    """
    if url.get_backend_name() == "postgresql":
        lock_ms = int(LOCK_WAIT_S * 1000)
        args = {"options": f"-c lock_timeout={lock_ms}"}
        return sa.create_engine(url, pool_pre_ping=True, connect_args=args)
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    file = sqlite_file(url)
    if file is not None and create_folder:
        file.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": LOCK_WAIT_S})

    @sa.event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 stops emitting BEGIN; we emit it below
        if file is not None:
            try:  # persistent once set; a lock held by a rollback-journal writer surfaces at BEGIN instead
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            except dbapi_connection.OperationalError:
                pass

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("dpcore_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


# -- helpers ---------------------------------------------------------------------------------------


def _parse_url(url: str | sa.URL | None) -> sa.URL:
    """``url`` (default :func:`config.ledger_url`) as a SQLAlchemy URL, or :class:`LedgerUnavailable`."""
    text = config.ledger_url() if url is None else url
    try:
        return sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        raise LedgerUnavailable(
            "The ledger URL is malformed. Set DPCORE_LEDGER_URL to an SQLAlchemy URL such as "
            "sqlite:////srv/dpcore/ledger.db or postgresql+psycopg://user@host/db, or unset it to use the "
            "data folder's ledger."
        ) from None


def sqlite_file(url: sa.URL) -> Path | None:
    """The file of a SQLite URL (None for other databases, in-memory and ``file:`` URIs)."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser().absolute()


def _instance_marker(file: Path | None) -> Path | None:
    """The data folder's :data:`INSTANCE_FILE` when ``file`` is its default ``ledger.db``, else None."""
    if file is None or file.name != "ledger.db":
        return None
    try:
        folder = config.data_dir()
    except OSError:
        return None
    return folder / INSTANCE_FILE if file.resolve() == (folder / "ledger.db").resolve() else None


def _file_identity(file: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``file``: changes when the file is deleted or replaced; None if absent."""
    if file is None:
        return None
    try:
        st = file.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _folder_words(file: Path) -> str:
    """Where a file is, without publishing server paths beyond the folder's own name."""
    return f"the folder {file.parent.name!r}" if file.parent.name else "its folder"


def _url_words(url: sa.URL) -> str:
    """A ledger URL in messages: a SQLite file by name, a server database without its password and query
    values (:func:`~dpcore.url_text.shown_url`)."""
    file = sqlite_file(url)
    if file is not None:
        return f"file {file.name!r}"
    if url.get_backend_name() == "sqlite":
        return "(in-memory SQLite)"
    return repr(shown_url(url))


def _is_busy(err: sa.exc.DBAPIError) -> bool:
    """A lock wait that timed out: SQLite "database is locked/busy", PostgreSQL lock_not_available."""
    text = str(err.orig).lower()
    code = getattr(err.orig, "sqlstate", None) or getattr(err.orig, "pgcode", None)
    return code == "55P03" or "database is locked" in text or "database is busy" in text


def _database_fault(err: sa.exc.DBAPIError, url: sa.URL) -> LedgerError:
    """A driver error as a ledger error saying what is wrong and what to do."""
    if _is_busy(err):
        return LedgerBusy(
            f"The ledger is busy: another program held its lock for more than {LOCK_WAIT_S:g} s. Nothing was "
            "changed or debited; retry in a moment."
        )
    text = url_redactor(url)(str(err.orig).strip())  # a driver may quote the URL's values (libpq: sslmode)
    first = text.splitlines()[0][:200] if text else type(err.orig).__name__
    return LedgerUnavailable(
        f"The ledger database {_url_words(url)} cannot be used ({first}). Nothing was changed. Check that "
        "it is a dpcore ledger that the app can reach and write (restore it from a backup if it is damaged); "
        "a new ledger is made only with `python -m dpcore init-ledger`."
    )


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


def _budget_row(conn: sa.Connection, key: str) -> sa.RowMapping | None:
    return conn.execute(sa.select(_budgets).where(_budgets.c.account == key)).mappings().first()


class _Spend(NamedTuple):
    """A stored release's debit: its account key, row id, epsilon, delta and parallel group."""

    account: str
    id: int
    epsilon: float
    delta: float
    group: str | None
    part: bool = False  # a private preparation step of a release (its own row), not a release


def _spends(conn: sa.Connection, dataset_id: str | None) -> list[_Spend]:
    """The checked debits of every release of ``dataset_id`` (of all datasets for None), oldest first."""
    part = _releases.c.parameters.startswith(_PART_JSON, autoescape=True)
    query = sa.select(_releases.c.account, _releases.c.id, *_COST_COLS, part).order_by(_releases.c.id)
    if dataset_id is not None:
        query = query.where(_releases.c.dataset_id == dataset_id)
    return [
        _Spend(key, row_id, *_checked_spend(row_id, *cost), bool(is_part))
        for key, row_id, *cost, is_part in conn.execute(query)
    ]


def _invalid(what: str) -> LedgerUnavailable:
    return LedgerUnavailable(
        f"The ledger holds an invalid entry: {what}. dpcore never writes such a row, so the database was "
        "edited by another tool and its budgets cannot be trusted; nothing was released or changed. Restore "
        "the ledger from a backup (or delete that row after checking it), then retry."
    )


def _checked_number(value: Any, what: str, *, upper: float = math.inf) -> float:
    """A stored epsilon or delta: a finite number in [0, upper), else :class:`LedgerUnavailable`."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise _invalid(f"{what} is {value!r}, not a number")
    if not (math.isfinite(value) and 0 <= value < upper):
        bound = "" if upper == math.inf else f" below {upper:g}"
        raise _invalid(f"{what} is {value!r}, not a finite non-negative number{bound}")
    return float(value)


def _checked_spend(row_id: int, eps: Any, delta: Any, group: str | None) -> tuple[float, float, str | None]:
    """A release's stored (eps, delta, parallel group), checked: eps > 0 finite, delta in [0, 1)."""
    eps = _checked_number(eps, f"release #{row_id} has epsilon")
    if eps == 0:
        raise _invalid(f"release #{row_id} has epsilon 0 (a release always spends eps > 0)")
    return eps, _checked_number(delta, f"release #{row_id} has delta", upper=1.0), group


def _name(acc: Account) -> str:
    """How messages name an account."""
    if not acc.definition:
        return f"Account {acc.key}"
    demo = "demo " if acc.mode == "demo" else ""
    return f"The {demo}{acc.definition} account ({acc.relation}) of dataset {acc.dataset_id}"


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


def _exact(x: float) -> Fraction:
    """The shortest decimal that round-trips to the float ``x`` (what the user typed), as a fraction."""
    return Fraction(repr(float(x)))


@lru_cache(maxsize=1024)
def _relation(definition: str, relation: str) -> Relation | None:
    return Relation.parse(definition, relation) if definition else None


def relation_factor(source: Account, target: Account) -> Fraction | None:
    """What one eps spent on ``source`` costs on ``target``: 1 on itself, :func:`dpcore.accounts.factor`
    between accounts of one dataset and mode, else None (not charged)."""
    if source.key == target.key:
        return Fraction(1)
    if (source.dataset_id, source.mode) != (target.dataset_id, target.mode):
        return None
    s, t = _relation(source.definition, source.relation), _relation(target.definition, target.relation)
    return None if s is None or t is None else factor(s, t)


_Charge = tuple[Fraction, Fraction, tuple[str, str] | None]  # eps, delta, (account, parallel group)


@dataclass(frozen=True)
class _Charged:
    """What ``target`` is charged: one (eps, delta, group) per ledger row, and how many releases (by
    request: without their preparation steps' rows) are its own and of related accounts."""

    charges: list[_Charge]
    own: int
    related: int


def _charges(target: Account, spends: Iterable[_Spend]) -> _Charged:
    """Every spend of a release ``target`` is charged for (:func:`relation_factor`), converted by
    :func:`dpcore.accounts.convert`. A parallel group stays one (by its account and name) where both
    units are one row; charged to or from an account of users it composes sequentially."""
    charges: list[_Charge] = []
    own = related = 0  # releases, by request: a release's preparation steps are not counted again
    for spend in spends:
        source = Account.parse(spend.account)
        k = relation_factor(source, target)
        converted = None if k is None else convert(_exact(spend.epsilon), _exact(spend.delta), k)
        if converted is None:
            continue
        own += source.key == target.key and not spend.part
        related += source.key != target.key and not spend.part
        keep = source.key == target.key or _row_units(source, target)
        group = (source.key, spend.group) if spend.group is not None and keep else None
        charges.append((*converted, group))
    return _Charged(charges, own, related)


def _row_units(*accounts: Account) -> bool:
    relations = [_relation(a.definition, a.relation) for a in accounts]
    return all(r is not None and r.per_user is None for r in relations)


def _cost(charges: Iterable[_Charge]) -> tuple[Fraction, Fraction]:
    """Exact composed cost: sequential charges add up, each parallel group costs its max eps and delta."""
    eps, delta = _ZERO, _ZERO
    groups: dict[tuple[str, str], tuple[Fraction, Fraction]] = {}
    for e, d, group in charges:
        if group is None:
            eps, delta = eps + e, delta + d
        else:
            ge, gd = groups.get(group, (_ZERO, _ZERO))
            groups[group] = (max(ge, e), max(gd, d))
    for ge, gd in groups.values():
        eps, delta = eps + ge, delta + gd
    return eps, delta


def _fits(cost: Fraction, total: float) -> bool:
    """Exactly ``cost <= total``: not one ulp over."""
    return cost <= _exact(total)


def _left(total: float, cost: Fraction) -> float:
    """``total - cost`` as the largest float whose shortest decimal is not above the exact difference, so a
    remaining value spent in full fits exactly."""
    exact = max(_exact(total) - cost, _ZERO)
    left = float(exact)
    while left > 0 and _exact(left) > exact:
        left = math.nextafter(left, 0.0)
    return left


def _totals(budget: Mapping[str, Any]) -> tuple[float, float]:
    where = f"the budget of account {budget['account']!r} has"
    eps_total = _checked_number(budget["epsilon_total"], f"{where} epsilon")
    return eps_total, _checked_number(budget["delta_total"], f"{where} delta", upper=1.0)


def _check_fits(
    budget: Mapping[str, Any],
    before: list[_Charge],
    added: list[_Charge],
    row: dict[str, Any],
    target: Account,
) -> None:
    """:class:`BudgetExceeded` unless ``target``'s cost with the new release's charge ``added`` fits."""
    eps_total, delta_total = _totals(budget)
    eps_after, delta_after = _cost([*before, *added])
    eps_ok, delta_ok = _fits(eps_after, eps_total), _fits(delta_after, delta_total)
    if not (eps_ok and delta_ok):
        eps_spent, delta_spent = _cost(before)
        left = _left(eps_total, eps_spent), _left(delta_total, delta_spent)
        asked = (sum(c[0] for c in added), sum(c[1] for c in added), added[0][2])  # with its private steps
        raise _exceeded(row, target, asked, *left, eps_ok)


def _status(budget: sa.RowMapping, charged: _Charged) -> BudgetStatus:
    eps_total, delta_total = _totals(budget)
    eps_spent, delta_spent = _cost(charged.charges)
    return BudgetStatus(
        account=budget["account"],
        dataset_id=budget["dataset_id"],
        definition=budget["definition"],
        relation=budget["relation"],
        mode=budget["mode"],
        epsilon_total=eps_total,
        delta_total=delta_total,
        epsilon_spent=float(eps_spent),
        delta_spent=float(delta_spent),
        epsilon_left=_left(eps_total, eps_spent),
        delta_left=_left(delta_total, delta_spent),
        n_releases=charged.own,
        created=budget["created"],
        updated=budget["updated"],
        n_charged=charged.related,
    )


def _exceeded(
    row: dict[str, Any], target: Account, charge: _Charge, eps_left: float, delta_left: float, eps_ok: bool
) -> BudgetExceeded:
    """Refusal naming ``target`` and what the release costs there (its own account, or a related one)."""
    eps, delta, group = float(charge[0]), float(charge[1]), row["parallel_group"]
    where = "" if group is None else f" in parallel group {group!r}"
    fix = "Lower delta" if eps_ok else "Lower epsilon"
    there = ""
    if target.key != row["account"]:
        origin = _name(Account.parse(row["account"]))
        there = (
            f" there (its eps={_fmt(row['epsilon'])}, delta={_fmt(row['delta'])} on {origin[0].lower()}"
            f"{origin[1:]} also protects this account's relation; docs/mathematics.md, s.5)"
        )
    return BudgetExceeded(
        f"Budget exceeded: {_name(target)} has eps={_fmt(eps_left)}, delta={_fmt(delta_left)} left; this "
        f"release asks eps={_fmt(eps)}, delta={_fmt(delta)}{where}{there}. "
        f"{fix} or raise the budget on the Privacy policy page.",
        account=target.key,
        epsilon_asked=eps,
        delta_asked=delta,
        epsilon_left=eps_left,
        delta_left=delta_left,
    )


def _record(row: Mapping[str, Any], *, inserted: bool = False) -> ReleaseRecord:
    values: dict[str, Any] = {name: row[name] for name in _STORED}
    values["epsilon"], values["delta"], _ = _checked_spend(row["id"], row["epsilon"], row["delta"], None)
    try:
        values["parameters"] = json.loads(values["parameters"])
    except (TypeError, ValueError):
        raise _invalid(f"release #{row['id']} has parameters that are not JSON") from None
    return ReleaseRecord(**values, inserted=inserted)


def _event(row: Mapping[str, Any]) -> BudgetEvent:
    values = {f.name: row[f.name] for f in fields(BudgetEvent)}
    for name in ("epsilon_before", "delta_before", "epsilon_after", "delta_after"):
        if values[name] is not None:
            values[name] = _checked_number(values[name], f"budget event #{row['id']}'s {name}")
    return BudgetEvent(**values)


def _reason(value: Any) -> str:
    """A reason as stored: free text, at most 2000 characters."""
    if not isinstance(value, str) or len(value) > 2000:
        raise ParameterError("A reason must be text of at most 2000 characters; shorten it.")
    return value.strip()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _fmt(x: float | Fraction) -> str:
    return format(float(x), ".12g")


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise PolicyError(f"{what} must be a number, got {value!r}. Enter a number such as 1.0.")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PolicyError(f"{what} must be a number, got {value!r}. Enter a number such as 1.0.") from None
    if not math.isfinite(x):
        raise PolicyError(f"{what} must be finite, got {value!r}. Enter a finite number.")
    return x


def _epsilon(value: Any, what: str) -> float:
    x = _number(value, what)
    if x <= 0:
        raise PolicyError(f"{what} must be > 0, got {value!r}. Enter a positive epsilon such as 1.0.")
    return x


def _delta(value: Any, what: str) -> float:
    x = _number(value, what)
    if not 0 <= x < 1:
        raise PolicyError(
            f"{what} must be in [0, 1), got {value!r}. Use 0 for pure DP or a small delta like 1e-6."
        )
    return x


def _text(value: Any, what: str, *, optional: bool = False, allow_empty: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not (value or allow_empty) or len(value) > _MAX_ID:
        raise ParameterError(
            f"{what} must be a {'possibly empty' if allow_empty else 'non-empty'} string of at most "
            f"{_MAX_ID} characters, got {value!r}. Pass a short text identifier."
        )
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _to_json(parameters: Mapping[str, Any] | None) -> str:
    if parameters is None:
        return "{}"
    if not isinstance(parameters, Mapping):
        raise ParameterError(
            f"parameters must be a dict, got {type(parameters).__name__}. Pass a dict of settings."
        )
    try:
        return json.dumps(dict(parameters), default=_json_default)
    except (TypeError, ValueError) as err:
        raise ParameterError(
            f"parameters cannot be stored as JSON ({err}). Pass numbers, strings, lists, dicts or numpy "
            "values."
        ) from None
