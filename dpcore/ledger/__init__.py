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

The package, one module per concern: :mod:`~dpcore.ledger.schema` (the tables),
:mod:`~dpcore.ledger.identity` (accounts, dataset ids, the ledger's instance id),
:mod:`~dpcore.ledger.records` (errors, records, the checks of values written and rows read),
:mod:`~dpcore.ledger.engines` (SQLAlchemy URLs and engines, driver faults),
:mod:`~dpcore.ledger.composition` (the accounting of spends), :mod:`~dpcore.ledger.reads` (transactions
and reads) and :mod:`~dpcore.ledger.writes` (:class:`Ledger`: opening and the writes). Every public name
is importable from ``dpcore.ledger``.
"""

from dpcore.ledger.composition import relation_factor
from dpcore.ledger.engines import LOCK_WAIT_S, sqlite_file
from dpcore.ledger.identity import INSTANCE_FILE, SAMPLING_MODES, Account, dataset_id_for_name
from dpcore.ledger.records import (
    BudgetEvent,
    BudgetExceeded,
    BudgetNotSet,
    BudgetStatus,
    LedgerBusy,
    LedgerError,
    LedgerUnavailable,
    ReleaseRecord,
)
from dpcore.ledger.schema import ADDED_TABLES
from dpcore.ledger.writes import Ledger

__all__ = [
    "ADDED_TABLES",
    "INSTANCE_FILE",
    "LOCK_WAIT_S",
    "SAMPLING_MODES",
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
    "sqlite_file",
]
