"""What the ledger stores and returns, checked both ways: its errors, the records of releases, budget
changes and budget status, the checks of every value written (epsilon, delta, identifiers, JSON
parameters) and of every row read back (an invalid row makes the ledger refuse, never sum).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import PurePath
from typing import Any

from dpcore.errors import DPCoreError, ParameterError, PolicyError
from dpcore.ledger.schema import _MAX_ID


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
