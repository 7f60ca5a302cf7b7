"""What a release is: one plan from the data to the ledger.

A :class:`ReleasePlan` holds everything that decides a release's privacy: the dataset (name and
fingerprint), every preparation step with its privacy effect, the mechanism (a key of its domain's
registry) and its parameters, epsilon and delta, the privacy policy, the unit of protection and the
sampling mode. It validates the combination as a whole (refusing what is invalid), derives the one
guarantee sentence, the ledger account and the cost, runs the release (:func:`dpcore.releases.make_release`)
and round-trips through the manifest, so a release can be re-run or verified from its manifest alone.
Pages, the release panel, reports and the ledger take these from the plan and compute them nowhere else.

Preparation that reads values from the data (imputing with a mean/median/mode, bounds taken from the
data, standardising with the data's mean and standard deviation, categories read from the data) lets one
person move many rows, so the mechanism's sensitivity no longer holds: a secure release under a
differential privacy, Blowfish or geo-indistinguishability definition is refused; a demo or local
(dataset-dependent) release is labelled with what it is. Dropping incomplete rows and curator-given
constants keep the guarantee.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from dpcore.accounts import Relation, factor, graph_relation
from dpcore.errors import ParameterError, PolicyError
from dpcore.ledger import Account, dataset_id_for_name
from dpcore.location.budget import per_member_epsilon
from dpcore.location.laplace import GRID_CALIBRATION, grid_note
from dpcore.policy import (
    DEFINITIONS,
    ApproxDP,
    Blowfish,
    Policy,
    PureDP,
    odds_bound,
    policy_from_dict,
    protected_radius,
)
from dpcore.registry import calibration_name, guarantee_name
from dpcore.steps import DropMissing, Features, Impute, PrepStep, step_from_dict

if TYPE_CHECKING:
    from dpcore.data import PreparedData
    from dpcore.registry import MechanismSpec, Registry

__all__ = [
    "DOMAINS",
    "PLAN_VERSION",
    "ReleasePlan",
    "features_step",
    "policy_account",
    "preparation_steps",
    "registry",
]

PLAN_VERSION = 2  # 2: typed preparation steps; a version 1 manifest's words are read by dpcore.manifest
DOMAINS = ("kmeans", "location", "trajectory")
Mode = Literal["secure", "demo"]
_ACCOUNT_FAMILY = {
    "pure_dp": "dp",
    "approx_dp": "dp",
    "blowfish": "blowfish",
    "geo_ind": "geo_ind",
    "local_pdp": "local_pdp",
}
_CLEAN_FIX = {
    "kmeans": "drop incomplete rows instead of imputing, give public bounds, and scale with min-max to the "
    "public bounds",
    "location": "drop the rows missing a coordinate or user instead of imputing them (imputing other columns "
    "does not affect a location release)",
    "trajectory": "drop the rows missing a person, time or coordinate instead of imputing them",
}
_DATA_DERIVED_NOTE = (
    "Preparation read values from the data ({steps}); one person can move every affected row, so the "
    "bound above does not cover that preparation."
)


def registry(domain: str) -> Registry:
    """The mechanism registry of ``domain`` ("kmeans", "location" or "trajectory")."""
    if domain == "kmeans":
        from dpcore.kmeans.registry import KMEANS

        return KMEANS
    if domain == "location":
        from dpcore.location.registry import LOCATIONS

        return LOCATIONS
    if domain == "trajectory":
        from dpcore.trajectory.registry import TRAJECTORIES

        return TRAJECTORIES
    raise ParameterError(f"Unknown release domain {domain!r}; choose one of {', '.join(DOMAINS)}.")


def features_step(prepared: PreparedData) -> Features:
    """The features of ``prepared`` with their bounds in encoded units (the curator's public bounds, or
    "private" for those a release estimates first, or "data" for data-derived ones, the data's extremes,
    which are never written into a release) and the scaling."""
    from dpcore.kmeans.registry import data_bounded

    hidden = data_bounded(prepared)
    private = set((prepared.private_bounds or {}).get("features", ()))
    bounds = [
        "private" if name in private else "data" if name in hidden else
        (float(prepared.raw_lower[j]), float(prepared.raw_upper[j]))
        for j, name in enumerate(prepared.feature_names)
    ]
    return Features(prepared.feature_names, tuple(bounds), prepared.scaling)


def preparation_steps(
    cleaning: Sequence[DropMissing | Impute],
    prepared: PreparedData | None = None,
    *,
    used: Collection[str] | None = None,
) -> tuple[PrepStep, ...]:
    """Steps from the Data page's missing-value choices (only dropping rows keeps the guarantee) and, once
    features are prepared, the features with their public bounds and scaling (:func:`features_step`), the
    private bounds step if any, and ``PreparedData.leaks`` (each data-derived; they include the
    imputations of features, which then stand for their cleaning steps).

    With ``used`` (the columns the release reads), an imputation of columns the release does not read is
    recorded without effect (:class:`~dpcore.steps.Impute` ``effect=False``) and keeps the guarantee: it
    fills values in rows that are kept whatever the values are, so the release's input is the same on
    every pair of neighbouring tables as without it."""
    leaks = () if prepared is None else tuple(prepared.leaks)
    steps: list[PrepStep] = []
    for step in cleaning:
        if not isinstance(step, Impute):
            steps.append(step)
        elif used is not None and not set(step.columns) & set(used):
            steps.append(replace(step, effect=False))
        elif not leaks:
            steps.append(replace(step, effect=True))
    if prepared is not None:
        steps.append(features_step(prepared))
        if prepared.private_bounds:
            from dpcore.private_bounds import BoundsStep

            steps.append(BoundsStep.from_dict(prepared.private_bounds))
    return (*steps, *leaks)


@dataclass(frozen=True)
class ReleasePlan:
    """Everything one release is, validated as a whole on creation (``PolicyError``/``ParameterError``).

    ``epsilon`` is what the ledger debits: eps for differential privacy, local PDP and Blowfish, the level
    l within the policy's radius r for geo-indistinguishability. ``scope`` names the unit of protection
    (e.g. "per user (at most 5 locations each)"); it is part of the guarantee, not of the account: a per-user
    release is debited at its per-user eps, which also bounds its cost per location, so the account's total
    is a valid per-location bound (its per-user total is not tracked separately).
    """

    domain: str
    mechanism: str
    epsilon: float
    policy: Policy
    dataset_name: str
    fingerprint: str
    delta: float = 0.0
    params: Mapping[str, Any] = field(default_factory=dict)
    preparation: tuple[PrepStep, ...] = ()
    mode: Mode = "secure"
    seed: int | None = None
    scope: str = ""
    epsilon_source: str = ""
    private_bounds: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.spec
        if not isinstance(self.epsilon_source, str) or len(self.epsilon_source) > 500:
            raise ParameterError("epsilon_source must be a sentence of at most 500 characters (or empty).")
        object.__setattr__(self, "params", spec.validate_params(self.params))
        eps, delta = float(self.epsilon), float(self.delta)
        if not (math.isfinite(eps) and eps > 0):
            raise PolicyError(f"epsilon must be a positive finite number, got {self.epsilon!r}; e.g. 1.0.")
        if not 0 <= delta < 1:
            raise PolicyError(f"delta must lie in [0, 1), got {self.delta!r}; e.g. 1e-6, or 0.")
        if spec.needs_delta and delta == 0:
            raise PolicyError(f"{spec.label} needs delta > 0 (Gaussian noise); choose e.g. 1e-6, below 1/n.")
        if not spec.needs_delta and delta != 0:
            raise PolicyError(f"{spec.label} satisfies a pure (delta = 0) guarantee; set delta to 0.")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)
        if self.mode not in ("secure", "demo"):
            raise ParameterError(f"mode must be 'secure' or 'demo', got {self.mode!r}.")
        if (self.mode == "demo") != (self.seed is not None):
            raise ParameterError("A demo plan needs its seed and a secure plan has none (OS entropy).")
        if len(self.fingerprint) < 16:
            raise ParameterError("fingerprint must be the dataset's SHA-256 fingerprint (64 hex digits).")
        object.__setattr__(self, "preparation", tuple(self.preparation))
        if not all(isinstance(s, PrepStep) for s in self.preparation):
            raise ParameterError("Each preparation step must be a typed step (dpcore.steps), not words.")
        derived = self.data_derived_steps
        if derived and self.mode == "secure" and spec.is_dp:
            raise PolicyError(
                f"{spec.label} cannot be released under {self.definition_label}: preparation read values "
                f"from the data ({'; '.join(derived)}), so one person can move many rows and the noise no "
                f"longer covers them. On the Data page, {_CLEAN_FIX[self.domain]}; or use demo mode to "
                "explore."
            )
        self._check_policy(spec)
        pending = {f for s in self.preparation if isinstance(s, Features) for f in s.private}
        if pending != set((self.private_bounds or {}).get("features", ())):
            raise PolicyError("The plan's features to bound privately are not its private bounds step's.")
        if self.private_bounds:
            self._check_private_bounds()
        elif any(s.spends for s in self.preparation):
            raise PolicyError("The plan runs a private step it does not record (nor debit); it was altered.")

    def _check_private_bounds(self) -> None:
        """A private bounds step (:mod:`dpcore.private_bounds`) bounds k-means features under differential
        privacy; its neighbours are the release's. A private region step
        (:mod:`dpcore.location.private_region`) estimates a location release's region with ordinary
        differential privacy on the rows, for the release's unit (one location, or all rows of one user):
        under the release's neighbours for a differentially private release, else bounded ones (one location
        replaced by any other), whose epsilon_b the ledger charges on the release's account at the conversion
        factor 1 (:func:`dpcore.accounts.factor`, checked here). Refused in demo mode: OpenDP draws from its
        own entropy, so the seed could not reproduce the release."""
        family = _ACCOUNT_FAMILY[self.definition]
        what = "A private region" if self.domain == "location" else "Bounds estimated privately"
        if self.domain == "location":  # any account whose relation a bounded ε_b-DP step bounds at ε_b
            from dpcore.location.private_region import RegionStep

            kind = self._relation().kind if family == "dp" else "bounded"
            given = RegionStep.from_dict(self.private_bounds)
            step = replace(given, neighbours=kind, per_user=self.per_user)
            source = Relation("dp", kind, per_user=self.per_user)
            if factor(source, replace(self._relation(), per_user=self.per_user)) != 1:
                raise PolicyError(
                    f"A private region step (ε-DP, {source.text}) does not bound {self.relation} at its ε: "
                    "give a public region."
                )
        elif self.domain == "kmeans" and family == "dp":
            from dpcore.private_bounds import BoundsStep

            given = BoundsStep.from_dict(self.private_bounds)
            step = replace(given, neighbours=self._relation().kind)
        else:
            raise PolicyError(
                f"{what} is a differential privacy step of a k-means or location release; give public "
                f"bounds for {self.spec.label} under {self.definition_label}."
            )
        if self.mode == "demo":
            raise PolicyError(
                f"{what} is not available in demo mode: OpenDP's quantile draws from its own randomness, so "
                "the release could not be reproduced from the demo seed. Switch to secure mode to release "
                "with it, or give public bounds (a public region on the Locations page, public bounds on the "
                "Data page)."
            )
        for name in ("neighbours", "per_user"):
            if name in self.private_bounds and self.private_bounds[name] != getattr(step, name):
                raise PolicyError(f"{what} step protects other neighbours than the release; it was altered.")
        object.__setattr__(self, "private_bounds", step.fields())
        listed = [s for s in self.preparation if s.kind == step.kind]
        unit = {k: getattr(step, k) for k in ("neighbours", "per_user") if hasattr(step, k)}
        if len(listed) != 1 or replace(listed[0], **unit) != step:
            raise PolicyError(f"{what} step is not the one the plan's preparation lists; it was altered.")
        # the step as the release runs it, with the release's neighbours and unit
        steps = tuple(step if s is listed[0] else s for s in self.preparation)
        object.__setattr__(self, "preparation", steps)

    @property
    def bounds_step(self) -> Any:
        """The private step this release runs first (:class:`dpcore.private_bounds.BoundsStep`, or for a
        location release :class:`dpcore.location.private_region.RegionStep`), or None."""
        if not self.private_bounds:
            return None
        if self.domain == "location":
            from dpcore.location.private_region import RegionStep

            return RegionStep.from_dict(self.private_bounds)
        from dpcore.private_bounds import BoundsStep

        return BoundsStep.from_dict(self.private_bounds)

    # -- what the plan is -------------------------------------------------------------------------

    @property
    def spec(self) -> MechanismSpec:
        """The mechanism's registry entry."""
        return registry(self.domain)[self.mechanism]

    @property
    def dataset_id(self) -> str:
        """The ledger's id of the dataset: from its name, which carries the budget (``dataset_id_for_name``);
        the fingerprint is recorded with each release."""
        return dataset_id_for_name(self.dataset_name)

    @property
    def definition(self) -> str:
        """The privacy definition this release satisfies (the mechanism's)."""
        return self.spec.definition

    @property
    def definition_label(self) -> str:
        """The release's privacy definition as the Privacy policy page names it."""
        return DEFINITIONS[self.definition][0]

    @property
    def data_derived_steps(self) -> list[str]:
        return [s.text for s in self.preparation if s.data_derived]

    @property
    def relation(self) -> str:
        """The neighbour relation of one row in words (the guarantee adds :attr:`scope`); for trajectories,
        of one person's trips (the account counts their at most m x L fixes as one user's rows)."""
        if self.domain == "trajectory":
            return "one person's trips added or removed"
        return self._relation().text

    def _relation(self) -> Relation:
        spec = self.spec
        return _relation(_ACCOUNT_FAMILY[spec.definition], self.policy, self.params, spec.label, spec)

    @property
    def per_user(self) -> int | None:
        """The rows of one person the release protects together, as its spec counts them
        (``MechanismSpec.contribution``: m locations when the scope is "per user (at most m locations
        each)", m x L fixes of one person's trips), else None: one row."""
        spec = self.spec
        return None if spec.contribution is None else spec.contribution(self.params, self.scope)

    def _radius(self) -> float:
        return protected_radius(self.policy, self.spec.label)

    def _check_policy(self, spec: MechanismSpec) -> None:
        """The policy gives what the mechanism's definition needs (a graph, a radius) and what its spec's
        relation asks (e.g. its own radius is the policy's)."""
        _relation(_ACCOUNT_FAMILY[spec.definition], self.policy, self.params, spec.label, spec)

    @property
    def account(self) -> Account:
        """The ledger account this release debits: dataset, definition family, relation with its unit (one
        row, or all rows of one user: :attr:`per_user`), mode. The ledger also charges it to every account
        of the dataset whose relation it protects (:mod:`dpcore.accounts`)."""
        relation = replace(self._relation(), per_user=self.per_user)
        return Account(self.dataset_id, _ACCOUNT_FAMILY[self.definition], relation.text, self.mode)

    @property
    def unit(self) -> str:
        """What :attr:`epsilon` counts: "level l" within the radius for geo-indistinguishability, else "ε"."""
        return "level l" if self.definition == "geo_ind" else "ε"

    @property
    def uses_delta(self) -> bool:
        """Whether the release's definition has a δ: differential privacy (pure and approximate releases
        share one account) and the local PDP guarantee; Blowfish and geo-indistinguishability have none."""
        return _ACCOUNT_FAMILY[self.definition] in ("dp", "local_pdp")

    @property
    def cost(self) -> tuple[float, float]:
        """(epsilon, delta) debited from :attr:`account`: with a private bounds step, epsilon + epsilon_b
        (the ledger records them as two parts of one transaction and adds them exactly)."""
        if self.private_bounds:
            total = Fraction(repr(self.epsilon)) + Fraction(repr(float(self.private_bounds["epsilon"])))
            return float(total), self.delta
        return self.epsilon, self.delta

    @property
    def guarantee(self) -> str:
        """The release's guarantee in one sentence (plus what voids or weakens it)."""
        eps, delta = self.cost  # with private bounds, the release and its bounds step together
        odds = odds_bound(eps)
        family = _ACCOUNT_FAMILY[self.definition]
        scope = f", {self.scope}" if self.scope else ""
        if family == "geo_ind":
            r = self._radius()
            text = (
                f"Geo-indistinguishability at level {eps:.3g} within {r:g} metres (ε = {eps / r:.3g} per "
                f"metre){scope}: two locations at most {r:g} m apart are at most e^{eps:.3g} = {odds:.3g} "
                "times more likely to produce any output than each other; farther apart, less protected."
            )
            if calibration_name(self.spec, self.params) == GRID_CALIBRATION:  # its own level, not a region's
                text += " " + grid_note(per_member_epsilon(self.epsilon, self.per_user or 1), r)
        else:
            what = guarantee_name(self.spec, self.params)
            d = f", δ = {delta:.3g}" if delta else ""
            text = (
                f"{what[0].upper() + what[1:]} with ε = {eps:.4g}{d}: for two datasets that differ by "
                f"{self.relation}{scope}, any output is at most e^ε = {odds:.3g} times more likely under "
                f"one than the other{' (plus δ)' if delta else ''}."
            )
        notes = []
        if self.private_bounds:
            notes.append(self.bounds_step.note(self.unit, self.epsilon))
        derived = self.data_derived_steps
        if derived:
            notes.append(_DATA_DERIVED_NOTE.format(steps="; ".join(derived)))
        if self.epsilon_source:
            notes.append(
                f"{self.unit[0].upper() + self.unit[1:]} was chosen from a non-private comparison on this "
                f"dataset ({self.epsilon_source}); that choice is not covered by the bound above."
            )
        if self.mode == "demo":
            notes.append(f"DEMO (seed {self.seed}): not a privacy release.")
        return " ".join([text, *notes])

    # -- manifest ---------------------------------------------------------------------------------

    def to_manifest(self) -> dict[str, Any]:
        """The plan as JSON-ready fields of a release manifest (``from_manifest`` inverts it)."""
        return {
            "plan_version": PLAN_VERSION,
            "domain": self.domain,
            "mechanism": self.mechanism,
            "mechanism_label": self.spec.label,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "definition": self.definition,
            "relation": self.relation,
            "account": self.account.key,
            "guarantee": self.guarantee,
            "policy": self.policy.to_dict(),
            "dataset_name": self.dataset_name,
            "dataset_fingerprint": self.fingerprint,
            "dataset_id": self.dataset_id,
            "parameters": _jsonable(self.params),
            "preparation": [s.to_dict() for s in self.preparation],
            "sampling_mode": self.mode,
            "seed": self.seed,
            "scope": self.scope,
            "citation": self.spec.citation,
            # only when set: plans without it keep the key (and request ids) they always had
            **({"epsilon_source": self.epsilon_source} if self.epsilon_source else {}),
            **({"private_bounds": dict(self.private_bounds)} if self.private_bounds else {}),
        }

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> ReleasePlan:
        """The plan recorded in a manifest (of this version, or of version 1, whose preparation in words
        :func:`dpcore.manifest.upgrade_plan` types); re-validated, and checked to derive the same
        guarantee."""
        from dpcore.manifest import upgrade_plan

        m = upgrade_plan(manifest.get("plan", manifest))
        if m.get("plan_version") != PLAN_VERSION:
            version = m.get("plan_version")
            raise ParameterError(f"Unsupported plan version {version!r}; expected {PLAN_VERSION}.")
        plan = cls(
            domain=m["domain"],
            mechanism=m["mechanism"],
            epsilon=m["epsilon"],
            delta=m["delta"],
            policy=policy_from_dict(m["policy"]),
            dataset_name=m["dataset_name"],
            fingerprint=m["dataset_fingerprint"],
            params=m["parameters"],
            preparation=tuple(step_from_dict(s) for s in m["preparation"]),
            mode=m["sampling_mode"],
            seed=m["seed"],
            scope=m.get("scope", ""),
            epsilon_source=m.get("epsilon_source", ""),
            private_bounds=m.get("private_bounds", {}),
        )
        for key in ("account", "guarantee", "definition"):
            if key in m and to_json(plan.to_manifest()[key]) != to_json(m[key]):
                raise PolicyError(f"The manifest's {key} does not follow from its plan; it was altered.")
        return plan

    @property
    def key(self) -> str:
        """SHA-256 of the plan's manifest fields: two plans with the same key release the same thing."""
        return hashlib.sha256(to_json(self.to_manifest()).encode()).hexdigest()

    @property
    def digest(self) -> str:
        """The first 16 hex digits of :attr:`key`: what the release panel shows and binds its buttons to."""
        return self.key[:16]

    def request_id(self, number: int = 1) -> str:
        """The request id of this plan's ``number``-th release: ``plan-`` and 32 hex digits of :attr:`key`
        for the first (the batch command's default), ``-<number>`` appended for each release asked again.
        The ledger debits a request id once, so a reload, a second tab or a double click cannot spend twice.

        >>> from dpcore.policy import PureDP
        >>> plan = ReleasePlan("kmeans", "dp_lloyd", 0.5, PureDP(1.0), "toy", "0" * 64,
        ...                    params={"n_clusters": 2})
        >>> plan.request_id() == "plan-" + plan.key[:32], plan.request_id(3).endswith("-3")
        (True, True)
        """
        if number < 1:
            raise ParameterError(f"A release number starts at 1, got {number}.")
        first = f"plan-{self.key[:32]}"
        return first if number == 1 else f"{first}-{number}"

    def with_mode(self, mode: Mode, seed: int | None = None) -> ReleasePlan:
        return replace(self, mode=mode, seed=seed)

    def summary_rows(self) -> list[tuple[str, str]]:
        """What will run, row by row, for the release panel (exactly the values the run uses)."""
        rows = [
            ("Dataset", self.dataset_name),
            ("Mechanism", self.spec.label),
            (self.unit, f"{self.epsilon:.6g}"),
            *([(f"{self.unit} chosen with", self.epsilon_source)] if self.epsilon_source else []),
            *(
                [*self.bounds_step.summary_rows(), (f"{self.unit} in all", f"{self.cost[0]:.6g}")]
                if self.private_bounds
                else []
            ),
            *([("δ", f"{self.delta:.3g}")] if self.uses_delta else []),
            ("Definition", self.definition_label),
            ("Neighbours", self.relation + (f", {self.scope}" if self.scope else "")),
            ("Mode", "DEMO (fixed seed)" if self.mode == "demo" else "secure (OS entropy)"),
        ]
        specs = {p.name: p for p in self.spec.params}
        for name, value in self.params.items():
            spec = specs.get(name)
            shown = spec.zero if spec is not None and spec.zero and value == 0 else _show(value)
            rows.append((spec.label if spec is not None else name, shown))
        rows += [("Preparation", s.text + (" (data-derived)" * s.data_derived)) for s in self.preparation]
        return rows


def _relation(
    family: str, policy: Policy, params: Mapping[str, Any], label: str, spec: MechanismSpec | None = None
) -> Relation:
    """The neighbour relation of one row (shared by plans and :func:`policy_account`): the mechanism's own
    (``MechanismSpec.relation``), else the policy's for the definition."""
    if spec is not None and spec.relation is not None:
        return spec.relation(params, policy)
    if family == "dp":
        return Relation("dp", policy.neighbours if isinstance(policy, PureDP | ApproxDP) else "unbounded")
    if family == "blowfish":
        if not isinstance(policy, Blowfish):
            raise PolicyError(
                f"{label} needs a Blowfish policy graph: choose Blowfish on the Privacy policy page."
            )
        return graph_relation(policy.graph)
    if family == "geo_ind":
        return Relation("geo_ind", "geo", protected_radius(policy, label))
    return Relation("local_pdp", "own_row")


def policy_account(
    dataset_id: str, policy: Policy, mode: Mode = "secure", per_user: int | None = None
) -> Account:
    """The account that releases under ``policy`` debit (the budget the Privacy policy page sets): one
    row, or with ``per_user`` = m all rows of one user (the Locations page's releases with a user column)."""
    family = _ACCOUNT_FAMILY[policy.definition]
    relation = replace(_relation(family, policy, {}, policy.label), per_user=per_user)
    return Account(dataset_id, family, relation.text, mode)


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(map(_show, value))
    return str(value)


def _jsonable(value: Any) -> Any:
    return json.loads(to_json(value))


def to_json(value: Any) -> str:
    """Canonical JSON (sorted keys; numpy values as lists; other objects by their ``to_dict`` or text)."""

    def default(obj: Any) -> Any:
        if hasattr(obj, "to_dict"):
            return obj.to_dict()
        if hasattr(obj, "tolist"):
            return obj.tolist()
        return str(obj)

    return json.dumps(value, sort_keys=True, default=default)
