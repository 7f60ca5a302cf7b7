"""Exact budget splits: the parts of eps never add up to more than eps, in binary or in decimal.

A split eps -> (eps s_1, ..., eps s_k) computed in floating point can exceed eps by an ulp (e.g. eps - eps/20
plus eps/20). Here every part is a decimal of at most 12 significant digits, rounded down from
E s_i with E = Decimal(repr(eps)) (how the ledger reads eps), so ``Decimal(repr(part))`` is that decimal
(any decimal of at most 15 digits survives float -> repr) and the decimal sum is at most E. The exact
binary sum of the parts (what ``math.fsum`` rounds) is then checked with fractions; while it exceeds eps,
every part loses one unit in its 12th digit (equal shares stay equal). The parts fall short of eps by at
most about k 1e-12 relative: a spend that never exceeds the budget, by even one ulp.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

from dpcore.errors import ParameterError
from dpcore.mechanisms import _check_epsilon

DIGITS = 12

BudgetLog = list[tuple[str, float]]


def _floor_digits(x: Decimal) -> Decimal:
    """x > 0 rounded down to DIGITS significant digits."""
    quantum = Decimal(1).scaleb(x.adjusted() - DIGITS + 1)
    return x.quantize(quantum, rounding=ROUND_FLOOR)


def _unit(x: Decimal) -> Decimal:
    """One unit in the DIGITS-th significant digit of x."""
    return Decimal(1).scaleb(x.adjusted() - DIGITS + 1)


def _fit(eps: float, parts: list[Decimal], counts: list[int]) -> list[Decimal]:
    """Lower every part by one unit in its last digit until sum(count x part) <= eps in binary and decimal."""
    total = Decimal(repr(eps))
    while (
        sum(c * Fraction(float(p)) for p, c in zip(parts, counts, strict=True)) > Fraction(eps)
        or sum(c * p for p, c in zip(parts, counts, strict=True)) > total
    ):
        parts = [p - _unit(p) for p in parts]
    if any(p <= 0 for p in parts):
        raise ParameterError(f"epsilon = {eps!r} is too small to split into {sum(counts)} parts.")
    return parts


def split_budget(epsilon: float, shares: Sequence[tuple[str, Fraction]]) -> BudgetLog:
    """(name, part) with part ~ eps * share, sum(parts) <= eps exactly in binary and in decimal.

    ``shares`` are exact fractions (e.g. Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)) with sum <= 1.
    """
    eps = _check_epsilon(epsilon)
    fracs = [Fraction(s) for _, s in shares]
    if not fracs or any(f <= 0 for f in fracs) or sum(fracs) > 1:
        raise ParameterError(
            f"budget shares must be positive fractions adding up to at most 1 (got {fracs})."
        )
    with localcontext() as ctx:
        ctx.prec = 60
        total = Decimal(repr(eps))
        parts = _fit(
            eps, [_floor_digits(total * f.numerator / f.denominator) for f in fracs], [1] * len(fracs)
        )
    return [(name, float(p)) for (name, _), p in zip(shares, parts, strict=True)]


def per_member_epsilon(epsilon: float, group: int) -> float:
    """eps' with group x eps' <= eps exactly: the budget of each of a person's ``group`` contributions.

    Group privacy: a mechanism that is eps'-DP for one contribution is (group eps')-DP for a person who
    makes at most ``group`` of them (Dwork and Roth 2014, Theorem 2.2).
    """
    eps = _check_epsilon(epsilon)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ParameterError(f"the group size must be a whole number >= 1 (got {group!r}).")
    if group == 1:
        return eps
    with localcontext() as ctx:
        ctx.prec = 60
        (part,) = _fit(eps, [_floor_digits(Decimal(repr(eps)) / group)], [group])
    return float(part)
