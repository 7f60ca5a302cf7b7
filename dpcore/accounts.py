"""Neighbour relations of ledger accounts, and what a spend on one account costs on another.

An account's relation says which pairs of datasets its budget protects. A release made under relation S
at eps also protects the pairs of another relation T, at ``factor(S, T) * eps``: every T-neighbour pair
is joined by a chain of at most ``factor`` S-neighbour steps (for the metric relations, a chain whose
distances add up to at most ``factor`` times S's unit), and the loss adds up along the chain (the
triangle inequality of group privacy, Dwork & Roth 2014 Thm. 2.2; Blowfish path lengths, Machanavajjhala
& Kifer 2015; distances for geo-indistinguishability, Andres et al. 2013). The ledger charges every
release to every account of its dataset whose relation it protects, at that factor
(:meth:`dpcore.ledger.Ledger.spend`); ``None`` means no chain exists (the release may reveal T's pairs
completely), and the Ledger page says a person's total across the two accounts is not bounded.
docs/mathematics.md s.5 derives the table.

Numbers in relations (theta, block width, c, radius) are read as the decimals typed, like every eps in
the ledger, so factors are exact fractions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction

from dpcore.policy import NEIGHBOURS, AttributeGraph, DistanceThresholdGraph, Graph, PartitionGraph

__all__ = ["Relation", "convert", "factor", "graph_relation"]

_EDGE = "one row's value replaced along an edge of the {} graph"
# Account keys hold these texts: never change one (existing ledgers' accounts are found by them).
_TEXTS: dict[tuple[str, str, str], str] = {
    ("dp", "unbounded", ""): NEIGHBOURS["unbounded"],
    ("dp", "bounded", ""): NEIGHBOURS["bounded"],
    ("blowfish", "bounded", ""): _EDGE.format("Full domain (bounded DP)"),
    ("blowfish", "partition", ""): _EDGE.format("Partition (blocks of width {n})"),
    ("blowfish", "threshold", "l1"): _EDGE.format("Distance threshold (θ = {n}, l1)"),
    ("blowfish", "threshold", "l2"): _EDGE.format("Distance threshold (θ = {n}, l2)"),
    ("blowfish", "threshold", "haversine"): "one location replaced by one at most {n} m away",
    ("blowfish", "attribute", ""): _EDGE.format("Attribute (at most {n} attribute{s} differ)"),
    ("geo_ind", "geo", ""): "one location moved, level counted within {n} m",
    ("local_pdp", "own_row", ""): "one of this dataset's own rows removed, clustering held fixed",
}
_PER_USER = "{base}, for all rows of one user at once (at most {m} per user)"
_NUMBER = r"(?P<n>[0-9][0-9.e+-]*)"


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(re.escape(text).replace(re.escape("{n}"), _NUMBER).replace(re.escape("{s}"), "s?"))


_PATTERNS = {key: _pattern(text) for key, text in _TEXTS.items()}
_PER_USER_PATTERN = re.compile(
    re.escape(_PER_USER)
    .replace(re.escape("{base}"), "(?P<base>.+)")
    .replace(re.escape("{m}"), "(?P<m>[1-9][0-9]*)")
)


def _num(x: float) -> str:
    """``x`` as the relation texts always wrote it (``:g``), or exactly when ``:g`` would round it."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


@dataclass(frozen=True)
class Relation:
    """One account's neighbour relation.

    ``family``: the account family ("dp", "blowfish", "geo_ind", "local_pdp"). ``kind``: "unbounded" (one
    row added or removed), "bounded" (one row's value replaced by any other: bounded DP and the full-domain
    Blowfish graph), "threshold" (replaced by a value within ``size`` in ``metric``: l1, l2 or haversine
    metres), "partition" (within the same block of width ``size``), "attribute" (at most ``size``
    attributes differ), "geo" (one location moved, the level counted within ``size`` metres) or
    "own_row" (one of this dataset's own rows removed). ``per_user``: None when the unit is one row, m
    when it is all rows of one user (at most m used per user).
    """

    family: str
    kind: str
    size: float | None = None
    metric: str = ""
    per_user: int | None = None

    @property
    def text(self) -> str:
        """The relation in words, as account keys and the Ledger page show it."""
        template = _TEXTS[(self.family, self.kind, self.metric)]
        n = "" if self.size is None else _num(self.size)
        base = template.format(n=n, s="" if self.size == 1 else "s")
        return base if self.per_user is None else _PER_USER.format(base=base, m=self.per_user)

    @classmethod
    def parse(cls, family: str, text: str) -> Relation | None:
        """The relation an account's ``family`` and text name; None for a text no plan writes."""
        per_user, base = None, text
        user = _PER_USER_PATTERN.fullmatch(text)
        if user is not None:
            base, per_user = user["base"], int(user["m"])
        for (fam, kind, metric), pattern in _PATTERNS.items():
            found = pattern.fullmatch(base) if fam == family else None
            if found is None:
                continue
            size = None
            if "n" in pattern.groupindex:
                try:
                    size = float(found["n"])
                except ValueError:
                    return None
                if not (math.isfinite(size) and size > 0):
                    return None
            relation = cls(family, kind, size, metric, per_user)
            return relation if relation.text == text else None  # the one way a plan writes it
        return None


def _exact(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _ratio(target: Relation, source: Relation) -> Fraction:
    return _exact(target.size) / _exact(source.size)  # type: ignore[arg-type]


def _row_factor(s: Relation, t: Relation) -> Fraction | None:
    """Steps of one-row relation ``s`` that join a pair of one-row relation ``t`` (units ignored)."""
    one = Fraction(1)
    if s.kind == "own_row":
        return one if t.kind == "own_row" else None
    if s.kind == "unbounded":  # a replacement is a removal and an addition
        return one if t.kind in ("unbounded", "own_row") else Fraction(2)
    if s.kind == "bounded":  # any replacement, never an addition or removal
        return None if t.kind in ("unbounded", "own_row") else one
    if s.kind == "threshold":  # hops of length theta_s along a shortest path (a segment or great circle)
        same = s.metric == t.metric or (s.metric, t.metric) == ("l2", "l1")  # ||.||_2 <= ||.||_1
        if (t.kind == "threshold" and same) or (t.kind == "geo" and s.metric == "haversine"):
            return Fraction(math.ceil(_ratio(t, s)))
        return None
    if s.kind == "geo":  # level l_s within r_s: a pair d metres apart loses l_s d / r_s
        if t.kind == "geo" or (t.kind == "threshold" and t.metric == "haversine"):
            return _ratio(t, s)
        return None
    if s.kind == "partition":  # blocks start at the public lower bound, which the relation does not name
        return one if t.kind == "partition" and t.size == s.size else None
    if s.kind == "attribute":
        return Fraction(math.ceil(_ratio(t, s))) if t.kind == "attribute" else None
    return None


def factor(source: Relation, target: Relation) -> Fraction | None:
    """What one eps spent under ``source`` costs under ``target``, or None when nothing bounds it.

    One row to all rows of one user (at most m): m times the one-row factor (group privacy). All rows of
    one user to any relation: a user added or removed (unbounded) changes any one user's rows in two steps
    (remove the user, add the changed user), one if ``target`` also adds or removes whole users; the other
    relations move all of a user's rows at once, so the one-row factor holds for one row or for all of them.
    """
    if source.per_user is None:
        base = _row_factor(source, target)
        return None if base is None else base * (target.per_user or 1)
    if source.kind == "unbounded":
        return Fraction(1 if target.kind == "unbounded" and target.per_user is not None else 2)
    return _row_factor(source, target)


def convert(epsilon: Fraction, delta: Fraction, k: Fraction) -> tuple[Fraction, Fraction] | None:
    """(eps, delta) of one release under a relation ``k`` steps away: (k eps, delta sum_{i<k} e^(i eps)),
    chaining Pr[M(x_i) in S] <= e^eps Pr[M(x_{i+1}) in S] + delta over the k steps (group privacy, Dwork &
    Roth 2014 Thm. 2.2), the delta part rounded up; None for a fractional ``k`` with delta > 0 (only pure
    relations have fractional factors)."""
    if delta == 0 or k == 1:
        return k * epsilon, delta if k == 1 else Fraction(0)
    if k.denominator != 1:
        return None
    return k * epsilon, delta * sum((_exp_up(i * epsilon) for i in range(int(k))), Fraction(0))


def _exp_up(x: Fraction) -> Fraction:
    """An upper bound of e^x, within 1e-40 relative."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = 60, ROUND_CEILING
        value = (Decimal(x.numerator) / Decimal(x.denominator)).exp()  # correctly rounded, half even
        return Fraction(value * (1 + Decimal("1e-45")))


def graph_relation(graph: Graph) -> Relation:
    """A Blowfish policy graph's relation; a great-circle threshold graph is the location mechanisms' θ."""
    if isinstance(graph, DistanceThresholdGraph):
        return Relation("blowfish", "threshold", float(graph.theta), graph.metric)
    if isinstance(graph, PartitionGraph):
        return Relation("blowfish", "partition", float(graph.block_width))
    if isinstance(graph, AttributeGraph):
        return Relation("blowfish", "attribute", float(graph.c))
    return Relation("blowfish", "bounded")
