"""Related accounts: the relation texts, the conversion factors (brute force on small domains), and the
audit's two-account cases (issue 19, item 4): one person's privacy is never spent twice through two
accounts of one dataset."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path

import pytest

from dpcore.accounts import Relation, convert, factor
from dpcore.ledger import Account, BudgetExceeded, Ledger, LedgerBusy, dataset_id_for_name
from dpcore.location.contribution import PER_LOCATION, scope_sentence
from dpcore.plan import ReleasePlan, policy_account
from dpcore.policy import (
    AttributeGraph,
    Blowfish,
    DistanceThresholdGraph,
    FullDomainGraph,
    GeoIndistinguishability,
    PartitionGraph,
    PureDP,
)

FP = "ab" * 32
DS = dataset_id_for_name("visits")
UNBOUNDED, BOUNDED = Relation("dp", "unbounded"), Relation("dp", "bounded")
FULL = Relation("blowfish", "bounded")


def _theta(theta: float, metric: str = "haversine", m: int | None = None) -> Relation:
    return Relation("blowfish", "threshold", theta, metric, m)


def _geo(r: float, m: int | None = None) -> Relation:
    return Relation("geo_ind", "geo", r, per_user=m)


# -- texts: account keys of existing ledgers keep their meaning ------------------------------------


@pytest.mark.parametrize(
    ("relation", "text"),
    [
        (UNBOUNDED, "one row added or removed"),
        (BOUNDED, "one row's value replaced by any other value"),
        (FULL, f"one row's value replaced along an edge of the {FullDomainGraph().label} graph"),
        (
            Relation("blowfish", "partition", 0.5),
            f"one row's value replaced along an edge of the {PartitionGraph(0.5).label} graph",
        ),
        (
            _theta(0.3, "l2"),
            f"one row's value replaced along an edge of the {DistanceThresholdGraph(0.3).label} graph",
        ),
        (
            Relation("blowfish", "attribute", 2.0),
            f"one row's value replaced along an edge of the {AttributeGraph(2).label} graph",
        ),
        (
            Relation("blowfish", "attribute", 1.0),
            f"one row's value replaced along an edge of the {AttributeGraph(1).label} graph",
        ),
        (_theta(50_000.0), "one location replaced by one at most 50000 m away"),
        (_geo(1000.5), "one location moved, level counted within 1000.5 m"),
        (Relation("local_pdp", "own_row"), "one of this dataset's own rows removed, clustering held fixed"),
        (
            _theta(0.1234567, "l1"),
            "one row's value replaced along an edge of the Distance threshold (θ = 0.1234567, l1) graph",
        ),
        (
            Relation("dp", "unbounded", per_user=5),
            "one row added or removed, for all rows of one user at once (at most 5 per user)",
        ),
    ],
)
def test_relation_texts_are_the_account_keys_and_parse_back(relation: Relation, text: str) -> None:
    assert relation.text == text
    assert Relation.parse(relation.family, text) == relation


def test_texts_no_plan_writes_are_not_parsed() -> None:
    assert Relation.parse("dp", "one row removed") is None
    assert Relation.parse("blowfish", "one row added or removed") is None  # another family's text
    assert (
        Relation.parse("geo_ind", "one location moved, level counted within 1000.0 m") is None
    )  # not canonical
    assert Relation.parse("geo_ind", "one location moved, level counted within 0 m") is None


def test_plan_accounts_carry_the_unit_and_the_policy_page_reaches_them() -> None:
    """A Blowfish location release debits the account the Privacy policy page budgets (issue 19, smaller
    item), and a per-user release an account of its own, named with its public maximum."""
    pol = Blowfish(1.0, DistanceThresholdGraph(50_000.0, "haversine"))
    mean = ReleasePlan("location", "blowfish_mean", 1.0, pol, "visits", FP, params={"theta_m": 50_000.0})
    assert mean.account == policy_account(DS, pol)
    per_user = ReleasePlan(
        "location", "blowfish_mean", 1.0, pol, "visits", FP,
        params={"theta_m": 50_000.0, "max_per_user": 3}, scope=scope_sentence(True, 3),
    )  # fmt: skip
    assert per_user.account == policy_account(DS, pol, per_user=3) != mean.account
    assert per_user.relation == mean.relation  # the guarantee's relation of one row; the scope says the rest


# -- factors, brute force --------------------------------------------------------------------------


def _distances(start: object, steps: Callable[[object], Iterable[object]]) -> dict[object, int]:
    """Shortest path length from ``start`` to every node it reaches in the graph ``steps`` (BFS)."""
    seen, queue = {start: 0}, deque([start])
    while queue:
        node = queue.popleft()
        for nxt in steps(node):
            if nxt not in seen:
                seen[nxt] = seen[node] + 1
                queue.append(nxt)
    return seen


def _longest_path(
    pairs: list[tuple[object, object]], steps: Callable[[object], Iterable[object]]
) -> int | None:
    """The longest shortest path between the two nodes of a pair (one BFS per first node), None if some pair
    is unreachable."""
    reach = {x: _distances(x, steps) for x in dict.fromkeys(x for x, _ in pairs)}
    paths = [reach[x].get(y) for x, y in pairs]
    return None if None in paths else max(paths)  # type: ignore[type-var]


def test_threshold_factors_are_path_lengths_on_a_line() -> None:
    """G^{d, theta}: on a fine grid of a segment, the longest shortest path in the theta_s graph between two
    points within theta_t is ceil(theta_t / theta_s) hops (one theta_t = 0.31 release is one theta = 0.30
    release; one theta = 0.30 release is two theta = 0.31 releases)."""
    step = Fraction(1, 100)
    points = [i * step for i in range(101)]
    index = range(len(points))  # the graphs on the points' indices, their edges from exact comparisons
    for ts, tt in [("0.3", "0.31"), ("0.31", "0.3"), ("0.3", "0.9"), ("0.25", "0.6"), ("0.2", "0.2")]:
        s, t = Fraction(ts), Fraction(tt)
        near = [[j for j in index if abs(points[j] - points[i]) <= s] for i in index]
        pairs = [(i, j) for i in index for j in index if abs(points[i] - points[j]) <= t]
        worst = _longest_path(pairs, near.__getitem__)
        assert worst is not None
        for metric in ("l2", "l1", "haversine"):
            assert factor(_theta(float(ts), metric), _theta(float(tt), metric)) == worst
        assert factor(_theta(float(ts)), _geo(float(tt))) == worst  # a level within r metres


def test_metric_factors() -> None:
    assert factor(_geo(1000.5), _geo(1000.0)) == Fraction(2000, 2001)  # 1000/1000.5
    assert factor(_geo(1000.0), _geo(1000.5)) == Fraction(2001, 2000)
    assert factor(_geo(2000.0), _theta(500.0)) == Fraction(1, 4)  # pairs within theta: l d / r
    assert factor(_theta(0.3, "l2"), _theta(0.6, "l1")) == 2  # ||.||_2 <= ||.||_1
    assert factor(_theta(0.3, "l1"), _theta(0.6, "l2")) is None  # needs the dimension
    assert factor(_theta(0.3, "l2"), _geo(1000.0)) is None  # features are not locations
    assert factor(Relation("blowfish", "attribute", 2.0), Relation("blowfish", "attribute", 5.0)) == 3
    assert factor(Relation("blowfish", "partition", 1.0), Relation("blowfish", "partition", 0.5)) is None
    assert factor(_geo(1000.0), BOUNDED) is None and factor(_theta(1.0, "l2"), BOUNDED) is None


_ROWS = ("a", "b")  # a row's value
_USERS, _MOST = 2, 2  # users, rows a user may hold


def _datasets() -> list[tuple[tuple[str, ...], ...]]:
    """Every dataset: per user, a sorted tuple of at most ``_MOST`` values (empty: the user is absent)."""
    one = [
        tuple(sorted(c)) for n in range(_MOST + 1) for c in itertools.combinations_with_replacement(_ROWS, n)
    ]
    return list(itertools.product(one, repeat=_USERS))


def _neighbours(rel: Relation, x: tuple, y: tuple, *, capped: bool = False) -> bool:
    """Whether x and y differ by ``rel`` (dp relations; per user: one user with at most m rows, or with
    any number when the release keeps at most m of them, ``capped``)."""
    diff = [u for u in range(_USERS) if x[u] != y[u]]
    if len(diff) != 1:
        return False
    a, b = x[diff[0]], y[diff[0]]
    if rel.per_user is not None:  # all rows of one user at once
        if max(len(a), len(b)) > rel.per_user and not capped:
            return False
        return (not a or not b) if rel.kind == "unbounded" else len(a) == len(b)
    if rel.kind == "unbounded":  # one row added or removed
        small, big = sorted((a, b), key=len)
        return len(big) == len(small) + 1 and any(big[:i] + big[i + 1 :] == small for i in range(len(big)))
    return (
        len(a) == len(b)
        and sum(1 for v in set(a) | set(b) if a.count(v) != b.count(v)) == 2
        and all(abs(a.count(v) - b.count(v)) <= 1 for v in _ROWS)
    )  # one row's value replaced


@pytest.mark.parametrize(
    ("source", "target"),
    list(
        itertools.product(
            [UNBOUNDED, BOUNDED]
            + [Relation("dp", k, per_user=m) for k in ("unbounded", "bounded") for m in (1, 2)],
            repeat=2,
        )
    ),
)
def test_dp_factors_are_shortest_paths_between_neighbours(source: Relation, target: Relation) -> None:
    """Over every dataset of two users with at most two rows each, the longest shortest path of
    ``source`` steps between two ``target`` neighbours is the factor (None: some pair is unreachable)."""
    data = _datasets()

    steps = {x: [y for y in data if _neighbours(source, x, y, capped=True)] for x in data}
    pairs = [(x, y) for x in data for y in data if _neighbours(target, x, y)]
    assert factor(source, target) == _longest_path(pairs, steps.__getitem__)


def test_group_conversion_of_delta() -> None:
    eps, delta = Fraction(1, 2), Fraction(1, 10**6)
    assert convert(eps, delta, Fraction(1)) == (eps, delta)
    e2, d2 = convert(eps, delta, Fraction(2))  # type: ignore[misc]
    assert (
        e2 == 1 and d2 > delta * (1 + Fraction(16487212707, 10**10)) and d2 < delta * Fraction(26488, 10**4)
    )
    assert convert(eps, Fraction(0), Fraction(2001, 2000)) == (eps * Fraction(2001, 2000), 0)
    assert convert(eps, delta, Fraction(3, 2)) is None


# -- the audit's cases: each account has budget 1 ------------------------------------------------


@pytest.fixture
def led(tmp_path: Path) -> Ledger:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield ledger
    ledger.close()


def _account(relation: Relation) -> Account:
    return Account(DS, relation.family, relation.text)


def _budgets(led: Ledger, *relations: Relation) -> list[Account]:
    accounts = [_account(r) for r in relations]
    for acc in accounts:
        led.set_budget(acc, 1.0)
    return accounts


@pytest.mark.parametrize("first", [0, 1])
def test_bounded_dp_and_full_domain_blowfish_are_one_relation(led: Ledger, first: int) -> None:
    accounts = _budgets(led, BOUNDED, FULL)
    led.spend(accounts[first], 1.0, 0.0, "m", "r1")
    assert led.budget(accounts[1 - first]).n_charged == 1
    with pytest.raises(BudgetExceeded):
        led.spend(accounts[1 - first], 0.1, 0.0, "m", "r2")
    assert [led.remaining(a)[0] for a in accounts] == [0.0, 0.0]


def test_an_unbounded_eps_is_a_bounded_two_eps(led: Ledger) -> None:
    unbounded, bounded = _budgets(led, UNBOUNDED, BOUNDED)
    led.spend(unbounded, 0.25, 0.0, "m", "r1")
    assert led.budget(bounded).epsilon_spent == 0.5 and led.budget(bounded).n_charged == 1
    led.spend(bounded, 0.5, 0.0, "m", "r2")
    with pytest.raises(BudgetExceeded, match="also protects this account's relation") as refused:
        # bounded: 0.5 + 0.5 + 2 x 0.1 > 1
        led.spend(unbounded, 0.1, 0.0, "m", "r3")
    assert refused.value.account == bounded.key and refused.value.epsilon_asked == pytest.approx(0.2)
    assert led.budget(unbounded).epsilon_spent == 0.25  # a bounded release does not bound added rows


def test_a_wider_theta_release_is_also_a_narrower_one(led: Ledger) -> None:
    narrow, wide = _budgets(led, _theta(0.3, "l2"), _theta(0.31, "l2"))
    with pytest.raises(BudgetExceeded):  # theta = 0.3 costs two hops within 0.31
        led.spend(narrow, 0.6, 0.0, "m", "r0")
    led.spend(wide, 1.0, 0.0, "m", "r1")
    assert led.remaining(narrow) == (0.0, 0.0)
    with pytest.raises(BudgetExceeded):
        led.spend(narrow, 0.01, 0.0, "m", "r2")


def test_levels_convert_between_radii_exactly(led: Ledger) -> None:
    near, far = _budgets(led, _geo(1000.0), _geo(1000.5))
    with pytest.raises(BudgetExceeded):  # level 1 within 1000 m is 1.0005 within 1000.5 m
        led.spend(near, 1.0, 0.0, "planar_laplace", "r0")
    led.spend(far, 1.0, 0.0, "planar_laplace", "r1")
    assert led.remaining(near)[0] == pytest.approx(1 / 2001)  # 1 - 1000/1000.5
    with pytest.raises(BudgetExceeded):
        led.spend(near, 1.0, 0.0, "planar_laplace", "r2")
    assert led.remaining(far)[0] == 0.0


def _grid(scope: str) -> ReleasePlan:
    return ReleasePlan(
        "location", "uniform_grid", 0.5, PureDP(1.0), "visits", FP, params={"max_per_user": 5}, scope=scope
    )


def test_a_per_location_release_costs_m_eps_per_user(led: Ledger) -> None:
    per_user, per_row = _grid(scope_sentence(True, 5)), _grid(PER_LOCATION)
    assert per_user.account != per_row.account
    for plan in (per_user, per_row):
        led.set_budget(plan.account, 1.0)
    led.spend(per_user.account, *per_user.cost, "uniform_grid", "user")
    assert led.remaining(per_row.account)[0] == 0.0  # a user added or removed: 2 x 0.5 for one row
    with pytest.raises(BudgetExceeded) as refused:
        led.spend(per_row.account, *per_row.cost, "uniform_grid", "row")
    assert refused.value.account == per_row.account.key
    led.set_budget(per_row.account, 2.0)
    with pytest.raises(BudgetExceeded) as refused:  # 5 rows of one user: 5 x 0.5 more for the user
        led.spend(per_row.account, *per_row.cost, "uniform_grid", "row")
    assert refused.value.account == per_user.account.key and refused.value.epsilon_asked == 2.5


def test_accounts_of_other_datasets_and_modes_are_not_charged(led: Ledger) -> None:
    bounded = _account(BOUNDED)
    other = Account(dataset_id_for_name("other"), "dp", BOUNDED.text)
    demo = Account(DS, "dp", BOUNDED.text, "demo")
    unbounded = _account(UNBOUNDED)
    for acc in (bounded, other, demo, unbounded):
        led.set_budget(acc, 1.0)
    led.spend(unbounded, 0.5, 0.0, "m", "r1")
    assert [led.budget(a).epsilon_spent for a in (bounded, other, demo)] == [1.0, 0.0, 0.0]


def _level_one(radius_m: float) -> GeoIndistinguishability:
    return GeoIndistinguishability.from_level(1.0, radius_m)


def test_geo_level_and_policy_radius(led: Ledger) -> None:
    """A planar Laplace plan at a 1000.5 m policy debits its own radius's account, and is charged to the
    account of the 1000 m policy at 1000/1000.5 of its level."""
    plans = [
        ReleasePlan("location", "planar_laplace", 1.0, _level_one(r), "visits", FP, params={"radius_m": r})
        for r in (1000.0, 1000.5)
    ]
    for plan in plans:
        led.set_budget(plan.account, 1.0)
    led.spend(plans[1].account, *plans[1].cost, "planar_laplace", "far")
    assert led.budget(plans[0].account).epsilon_spent == pytest.approx(1000 / 1000.5)


def test_concurrent_spends_on_related_accounts_never_overspend_either(ledger_url: str) -> None:
    """Eight threads spend on the unbounded and bounded accounts at once (SQLite and PostgreSQL): each spend
    locks both budget rows in key order, so there is no deadlock, and neither budget is exceeded."""
    Ledger.initialise(ledger_url).close()
    unbounded, bounded = _account(UNBOUNDED), _account(BOUNDED)
    setup = Ledger(ledger_url)
    for acc in (unbounded, bounded):
        setup.set_budget(acc, 1.0)
    barrier, errors = threading.Barrier(8), []

    def work(worker: int) -> None:
        led = Ledger(ledger_url)
        barrier.wait(timeout=60)
        for i in range(6):
            acc, eps = (unbounded, 0.05) if (worker + i) % 2 else (bounded, 0.1)
            for _ in range(50):  # LedgerBusy debits nothing: retry the same request
                try:
                    led.spend(acc, eps, 0.0, "m", f"w{worker}-{i}")
                except LedgerBusy:
                    continue
                except BudgetExceeded:
                    pass
                except Exception as err:  # a deadlock or any other fault fails the test
                    errors.append(err)
                break
        led.close()

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    spent = {acc: setup.budget(acc).epsilon_spent for acc in (unbounded, bounded)}
    assert spent[bounded] == 1.0 and spent[unbounded] <= 0.5  # the bounded account fills first
    setup.close()
