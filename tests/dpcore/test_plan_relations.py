"""Every registered mechanism's ledger account, relation and unit under each policy stay as recorded.

``tests/data/plan_relations.json`` was written from the plans before the mechanism specs declared their
own relation, contribution and radius (``python -m tests.dpcore.test_plan_relations`` rewrites it): a plan
of every spec under every policy, for every choice of its parameters and every unit of protection, must
still debit the same account (or be refused with the same message)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from dpcore.errors import DPCoreError
from dpcore.location.contribution import scope_sentence
from dpcore.plan import DOMAINS, ReleasePlan, registry
from dpcore.policy import (
    ApproxDP,
    AttributeGraph,
    Blowfish,
    DistanceThresholdGraph,
    FullDomainGraph,
    GeoIndistinguishability,
    LocalPDP,
    PartitionGraph,
    PureDP,
)

GOLDEN = Path(__file__).parents[1] / "data" / "plan_relations.json"
POLICIES = {
    "pure unbounded": PureDP(1.0),
    "pure bounded": PureDP(1.0, "bounded"),
    "approx unbounded": ApproxDP(1.0, 1e-6),
    "approx bounded": ApproxDP(1.0, 1e-6, "bounded"),
    "local pdp": LocalPDP(1.0, 1e-6),
    "blowfish full": Blowfish(1.0, FullDomainGraph()),
    "blowfish partition": Blowfish(1.0, PartitionGraph(0.5)),
    "blowfish l2": Blowfish(1.0, DistanceThresholdGraph(0.3)),
    "blowfish haversine": Blowfish(1.0, DistanceThresholdGraph(25_000.0, "haversine")),
    "blowfish attribute": Blowfish(1.0, AttributeGraph(1)),
    "geo 1000 m": GeoIndistinguishability(0.001),
    "geo 500 m": GeoIndistinguishability(0.002, 500.0),
}
SCOPES = ("", scope_sentence(False, 1), scope_sentence(True, 3), scope_sentence(True, 1))


def _variants(spec, policy):
    """Each combination of the spec's choice parameters, with its policy-bound parameters set from
    ``policy`` (as pages set them) or left at their defaults."""
    choices = [[(p.name, c) for c in p.choices] for p in spec.params if p.choices]
    followed = {p.name: p.from_policy(policy) for p in spec.params if p.from_policy is not None}
    followed = {k: v for k, v in followed.items() if v is not None}
    for combo in itertools.product(*choices):
        yield dict(combo)
        if followed:
            yield {**dict(combo), **followed}
        if any(p.name == "max_per_user" for p in spec.params):
            yield {**dict(combo), "max_per_user": 3}


def _outcome(domain, key, policy, params, scope):
    spec = registry(domain)[key]
    try:
        plan = ReleasePlan(
            domain,
            key,
            1.0,
            policy,
            "golden",
            "0" * 64,
            delta=1e-6 if spec.needs_delta else 0.0,
            params=params,
            scope=scope,
        )
    except DPCoreError as exc:
        return f"{type(exc).__name__}: {exc}"
    account = plan.account
    return [account.definition, account.relation, account.mode, plan.relation, plan.per_user]


def table() -> dict[str, object]:
    """``"domain/key/policy/params/scope"`` -> the plan's account (definition, relation, mode), relation
    text and unit, or its refusal (the golden file stores each distinct outcome once)."""
    out = {}
    for domain in DOMAINS:
        for key in registry(domain):
            spec = registry(domain)[key]
            for name, policy in POLICIES.items():
                for params in _variants(spec, policy):
                    for scope in SCOPES:
                        case = f"{domain}/{key}/{name}/{json.dumps(params, sort_keys=True)}/{scope}"
                        out[case] = _outcome(domain, key, policy, params, scope)
    return out


def test_every_location_and_trajectory_spec_declares_its_relation_and_contribution():
    for domain in ("location", "trajectory"):
        for key in registry(domain):
            spec = registry(domain)[key]
            assert spec.relation is not None and spec.contribution is not None, key


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def test_every_account_and_relation_is_as_recorded(golden):
    now = json.loads(json.dumps(table()))
    golden = {case: golden["outcomes"][i] for case, i in golden["cases"].items()}
    missing = sorted(set(golden) - set(now))
    assert not missing, f"cases no longer planned: {missing[:5]}"
    changed = {k: (golden[k], now[k]) for k in golden if golden[k] != now[k]}
    assert not changed, f"{len(changed)} cases changed, e.g. {next(iter(changed.items()))}"


if __name__ == "__main__":
    cases = table()
    outcomes = sorted({json.dumps(v, ensure_ascii=False) for v in cases.values()})
    index = {o: i for i, o in enumerate(outcomes)}
    cases = {case: index[json.dumps(v, ensure_ascii=False)] for case, v in cases.items()}
    golden = {"outcomes": [json.loads(o) for o in outcomes], "cases": cases}
    GOLDEN.write_text(json.dumps(golden, indent=0, sort_keys=True, ensure_ascii=False) + "\n")
