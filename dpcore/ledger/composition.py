"""The accounting of spends: each release's debit read back and checked, charged to every related account
of its dataset and mode at its factor (:func:`relation_factor`), composed exactly (sequential releases add
up, a parallel group costs its largest member; every float read as its shortest decimal, summed as a
fraction) and compared with the budget without slack (the package docstring gives the formulas).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

import sqlalchemy as sa

from dpcore.accounts import Relation, convert, factor
from dpcore.ledger.identity import Account, _name
from dpcore.ledger.records import BudgetExceeded, BudgetStatus, _checked_number, _checked_spend, _fmt
from dpcore.ledger.schema import _COST_COLS, _PART_JSON, _budgets, _releases

_ZERO = Fraction(0)


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


def _budget_row(conn: sa.Connection, key: str) -> sa.RowMapping | None:
    return conn.execute(sa.select(_budgets).where(_budgets.c.account == key)).mappings().first()


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
