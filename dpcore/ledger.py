"""Privacy budget ledger in a SQL database: one account per (dataset, definition, neighbour relation, mode).

Epsilons of different privacy definitions or neighbour relations are not comparable (an eps of local
PDP, a Blowfish eps for graph G, a geo-indistinguishability level within r metres and an eps-DP eps
measure different things), so each lives in its own :class:`Account`; demo releases have their own
demo accounts and never touch a real budget.

Composition (sequential and parallel composition, Dwork & Roth 2014; McSherry 2009): an account's cost is

    cost_eps = sum_{sequential r} eps_r + sum_{parallel groups g} max_{r in g} eps_r

and the same for delta; ``remaining = total - cost``. The members of a parallel group touch disjoint
parts of the dataset (one distinct ``partition_key`` each), so a neighbour changes the input of at most
one member and the group costs its largest member.

Exact arithmetic: every float is read as its shortest round-tripping decimal (``repr``) and summed as
an exact decimal, so ten spends of 0.1 use a budget of 1.0 exactly and 0.1 + 0.2 fits a budget of 0.3.
A spend is admitted only when ``cost_after <= total`` exactly (no slack); ``remaining()`` rounds toward
zero, so a remaining value fed back into ``spend`` always fits.

Concurrency: the budget check and the debit are one transaction. On SQLite it starts with
``BEGIN IMMEDIATE`` (the database write lock, waited for up to 30 s); on other databases the budget
row is locked with ``SELECT ... FOR UPDATE``. ``request_id`` is unique: a rerun of a request returns
the first record and debits nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from dpcore import config
from dpcore.errors import DPCoreError, ParameterError, PolicyError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Account",
    "BudgetExceeded",
    "BudgetNotSet",
    "BudgetStatus",
    "Ledger",
    "LedgerError",
    "ReleaseRecord",
]

SQLITE_BUSY_TIMEOUT_S = 30.0
SAMPLING_MODES = ("secure", "demo")
_MAX_ID = 255
_ZERO = Decimal(0)
_SEP = "|"

_metadata = sa.MetaData()
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
_COST_COLS = (_releases.c.epsilon, _releases.c.delta, _releases.c.parallel_group)


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


class LedgerError(DPCoreError):
    """A ledger operation is not allowed (request id reused, budget lowered below what is spent, ...)."""


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
    """One release as stored in the ledger; ``parameters`` is the decoded JSON object."""

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
    n_releases: int
    created: str
    updated: str


class Ledger:
    """Budgets and releases per :class:`Account` in the database at ``url`` (default
    :func:`config.ledger_url`), plus the names of the datasets they belong to.

    Tables ``datasets``, ``accounts`` and ``account_releases`` are created if missing. Safe to share between
    threads, and any number of ``Ledger`` objects (threads, processes, app sessions) may use one database.
    Every method taking ``account`` accepts an :class:`Account` or its key.
    """

    def __init__(self, url: str | sa.URL | None = None) -> None:
        self.url = sa.make_url(config.ledger_url() if url is None else url)
        self._engine = _make_engine(self.url)
        self._writer = self._engine.execution_options(dpcore_write=True)
        try:
            self._create_tables()
        except sa.exc.DBAPIError:  # a concurrent creator won the race on a server database; retry sees it
            self._create_tables()

    def _create_tables(self) -> None:
        with self._writer.begin() as conn:
            _metadata.create_all(conn)

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
        with self._writer.begin() as conn:
            query = sa.select(_datasets.c.name).where(_datasets.c.dataset_id == dataset_id)
            if conn.execute(query).first() is None:
                conn.execute(_datasets.insert().values(dataset_id=dataset_id, first_seen=_now(), **values))
            else:
                conn.execute(_datasets.update().where(_datasets.c.dataset_id == dataset_id).values(**values))

    def set_budget(self, account: Account | str, epsilon: float, delta: float = 0.0) -> BudgetStatus:
        """Set (create, raise or lower) the account's total budget; never below what is already spent."""
        acc = Account.parse(account)
        eps_total = _epsilon(epsilon, "The budget's epsilon")
        delta_total = _delta(delta, "The budget's delta")
        try:
            return self._set_budget_once(acc, eps_total, delta_total)
        except sa.exc.IntegrityError:  # another transaction created this budget row first; rerun updates it
            return self._set_budget_once(acc, eps_total, delta_total)

    def _set_budget_once(self, acc: Account, eps_total: float, delta_total: float) -> BudgetStatus:
        now, key = _now(), acc.key
        with self._writer.begin() as conn:
            row = _lock_budget(conn, key)
            rows = _cost_rows(conn, key)
            eps_spent, delta_spent = _cost(rows)
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
            row = _lock_budget(conn, key)
            return _status(row, rows)

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
    ) -> ReleaseRecord:
        """Check the account's budget and record one release in a single transaction; return its record.

        A ``request_id`` already in the ledger for this account returns that first record and debits
        nothing (whatever the other arguments). Releases sharing ``parallel_group`` run on disjoint
        parts named by distinct ``partition_key`` values and cost the group's maximum (eps and delta).
        ``sampling_mode`` defaults to the account's mode and must equal it (demo releases only debit
        demo accounts). ``definition`` defaults to the account's. ``user`` defaults to
        :func:`config.local_user`. Raises :class:`BudgetExceeded` (nothing recorded),
        :class:`BudgetNotSet`, :class:`LedgerError` or ``PolicyError``/``ParameterError``.
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
        try:
            return self._spend_once(row, acc)
        except sa.exc.IntegrityError:  # a concurrent transaction inserted this request_id first
            return self._spend_once(row, acc)

    def _spend_once(self, row: dict[str, Any], acc: Account) -> ReleaseRecord:
        key, request_id = row["account"], row["request_id"]
        with self._writer.begin() as conn:
            budget = _lock_budget(conn, key)
            query = sa.select(_releases).where(_releases.c.request_id == request_id)
            first = conn.execute(query).mappings().first()
            if first is not None:
                if first["account"] != key:
                    raise LedgerError(
                        f"request_id {request_id!r} was already used for account {first['account']}, "
                        f"not {key}. Use a new request id for a new release."
                    )
                return _record(first)
            if budget is None:
                raise BudgetNotSet(
                    f"{_name(acc)} has no privacy budget. Set one on the Privacy policy page "
                    "(Ledger.set_budget) before releasing."
                )
            group = row["parallel_group"]
            if group is not None:
                _check_partition_free(conn, key, group, row["partition_key"])
            rows = _cost_rows(conn, key)
            eps_spent, delta_spent = _cost(rows)
            eps_after, delta_after = _cost([*rows, (row["epsilon"], row["delta"], group)])
            eps_total, delta_total = budget["epsilon_total"], budget["delta_total"]
            eps_ok, delta_ok = _fits(eps_after, eps_total), _fits(delta_after, delta_total)
            if not (eps_ok and delta_ok):
                left = _left(eps_total, eps_spent), _left(delta_total, delta_spent)
                raise _exceeded(row, acc, *left, eps_ok)
            row = {**row, "time": _now()}
            new_id = conn.execute(_releases.insert().values(**row)).inserted_primary_key[0]
            return _record({**row, "id": int(new_id)})

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
        key = Account.parse(account).key
        with self._engine.begin() as conn:
            row = conn.execute(sa.select(_budgets).where(_budgets.c.account == key)).mappings().first()
            return None if row is None else _status(row, _cost_rows(conn, key))

    def budgets(self, dataset_id: str | None = None) -> list[BudgetStatus]:
        """Every account with a budget (of one dataset, or all), sorted by dataset and account."""
        with self._engine.begin() as conn:
            query = sa.select(_budgets).order_by(_budgets.c.dataset_id, _budgets.c.account)
            if dataset_id is not None:
                query = query.where(_budgets.c.dataset_id == dataset_id)
            rows = conn.execute(query).mappings().all()
            cost = sa.select(_releases.c.account, *_COST_COLS).order_by(_releases.c.id)
            spends: dict[str, list[tuple[float, float, str | None]]] = {}
            for key, eps, delta, group in conn.execute(cost):
                spends.setdefault(key, []).append((eps, delta, group))
        return [_status(row, spends.get(row["account"], [])) for row in rows]

    def dataset_names(self) -> dict[str, str]:
        """Dataset id -> the name it was last registered under."""
        with self._engine.begin() as conn:
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
        columns = [f.name for f in fields(ReleaseRecord)]
        rows = [[getattr(r, c) for c in columns] for r in records]
        frame = pd.DataFrame(rows, columns=columns)
        frame.insert(0, "dataset_name", [names.get(r.dataset_id, r.dataset_id) for r in records])
        frame["parameters"] = [json.dumps(r.parameters) for r in records]
        return frame

    def _select(self, query: sa.Select[Any]) -> list[ReleaseRecord]:
        with self._engine.begin() as conn:
            return [_record(row) for row in conn.execute(query.order_by(_releases.c.id)).mappings()]


# -- engine ----------------------------------------------------------------------------------------


def _make_engine(url: sa.URL) -> sa.Engine:
    """Engine for ``url``; on SQLite, our own BEGIN (IMMEDIATE for writes) and a 30 s busy timeout.

    pysqlite recipe from the SQLAlchemy SQLite docs ("Transactions with SQLite and the sqlite3 driver").
    """
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    database = url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @sa.event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 stops emitting BEGIN; we emit it below

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("dpcore_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


# -- helpers ---------------------------------------------------------------------------------------


def _lock_budget_query(account: str) -> sa.Select[Any]:
    """The budget row, locked until commit (FOR UPDATE; SQLite holds the database lock instead)."""
    return sa.select(_budgets).where(_budgets.c.account == account).with_for_update()


def _lock_budget(conn: sa.Connection, account: str) -> sa.RowMapping | None:
    return conn.execute(_lock_budget_query(account)).mappings().first()


def _cost_rows(conn: sa.Connection, account: str) -> list[tuple[float, float, str | None]]:
    query = sa.select(*_COST_COLS).where(_releases.c.account == account).order_by(_releases.c.id)
    return [(eps, delta, group) for eps, delta, group in conn.execute(query)]


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


def _dec(x: float) -> Decimal:
    """The shortest decimal that round-trips to the float ``x`` (what the user typed)."""
    return Decimal(repr(float(x)))


def _cost(rows: Iterable[tuple[float, float, str | None]]) -> tuple[Decimal, Decimal]:
    """Exact composed cost: sequential releases add up, each parallel group costs its max eps and delta."""
    with localcontext() as ctx:
        ctx.prec = 60
        eps, delta = _ZERO, _ZERO
        groups: dict[str, tuple[Decimal, Decimal]] = {}
        for e, d, group in rows:
            if group is None:
                eps, delta = eps + _dec(e), delta + _dec(d)
            else:
                ge, gd = groups.get(group, (_ZERO, _ZERO))
                groups[group] = (max(ge, _dec(e)), max(gd, _dec(d)))
        for ge, gd in groups.values():
            eps, delta = eps + ge, delta + gd
        return eps, delta


def _fits(cost: Decimal, total: float) -> bool:
    """Exactly ``cost <= total``: not one ulp over."""
    return cost <= _dec(total)


def _left(total: float, cost: Decimal) -> float:
    """``total - cost`` as the largest float whose shortest decimal is not above the exact difference, so a
    remaining value spent in full fits exactly."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = max(_dec(total) - cost, _ZERO)
        left = float(exact)
        while left > 0 and _dec(left) > exact:
            left = math.nextafter(left, 0.0)
        return left


def _status(budget: sa.RowMapping, rows: list[tuple[float, float, str | None]]) -> BudgetStatus:
    eps_spent, delta_spent = _cost(rows)
    return BudgetStatus(
        account=budget["account"],
        dataset_id=budget["dataset_id"],
        definition=budget["definition"],
        relation=budget["relation"],
        mode=budget["mode"],
        epsilon_total=budget["epsilon_total"],
        delta_total=budget["delta_total"],
        epsilon_spent=float(eps_spent),
        delta_spent=float(delta_spent),
        epsilon_left=_left(budget["epsilon_total"], eps_spent),
        delta_left=_left(budget["delta_total"], delta_spent),
        n_releases=len(rows),
        created=budget["created"],
        updated=budget["updated"],
    )


def _exceeded(
    row: dict[str, Any], acc: Account, eps_left: float, delta_left: float, eps_ok: bool
) -> BudgetExceeded:
    eps, delta, group = row["epsilon"], row["delta"], row["parallel_group"]
    where = "" if group is None else f" in parallel group {group!r}"
    fix = "Lower delta" if eps_ok else "Lower epsilon"
    return BudgetExceeded(
        f"Budget exceeded: {_name(acc)} has eps={_fmt(eps_left)}, delta={_fmt(delta_left)} left; this "
        f"release asks eps={_fmt(eps)}, delta={_fmt(delta)}{where}. "
        f"{fix} or raise the budget on the Privacy policy page.",
        account=row["account"],
        epsilon_asked=eps,
        delta_asked=delta,
        epsilon_left=eps_left,
        delta_left=delta_left,
    )


def _record(row: Mapping[str, Any]) -> ReleaseRecord:
    values = {f.name: row[f.name] for f in fields(ReleaseRecord)}
    values["parameters"] = json.loads(values["parameters"])
    return ReleaseRecord(**values)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _fmt(x: float | Decimal) -> str:
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
