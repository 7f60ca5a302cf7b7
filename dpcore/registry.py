"""Mechanism registries: one per domain (k-means, locations), one module per mechanism.

Each mechanism module builds one :class:`MechanismSpec` and registers it in its domain's
:class:`Registry` (``dpcore.kmeans.registry.KMEANS``, ``dpcore.location.registry.LOCATIONS``). The spec
declares everything a caller needs: a key, a label, the privacy definition the mechanism satisfies, a
plain sentence for the curator, the formula (shown on request), the papers it comes from (author and
year), its parameters (validated once, here; the pages draw their widgets from them), the callable that
runs one release, and optional capabilities: its calibration and neighbour relation (from which
:func:`guarantee_name` words the guarantee), the diagnostic trial with its metrics, its background cost,
a noise covariance (for the ellipses), an out-of-core release, a note for the page and a plot colour.
Pages, ui/, sweeps, plots, plans and batch jobs ask the spec; none of them names a mechanism. Adding a
mechanism is adding one module and importing it from the domain package.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import pandas as pd

from dpcore.errors import ParameterError

__all__ = [
    "DEFINITIONS_DP",
    "DEFINITION_NAMES",
    "Calibration",
    "Covariance",
    "Definition",
    "MechanismOutput",
    "MechanismSpec",
    "Metric",
    "Param",
    "Registry",
    "TableInputs",
    "calibration_name",
    "guarantee_name",
    "presented",
    "release",
]

Definition = Literal["pure_dp", "approx_dp", "local_pdp", "blowfish", "geo_ind"]
#: Definitions whose guarantee does not depend on the data it protects (everything but local PDP).
DEFINITIONS_DP: frozenset[str] = frozenset({"pure_dp", "approx_dp", "blowfish", "geo_ind"})
#: What a release under each definition satisfies, in words, unless its :class:`Calibration` says more.
DEFINITION_NAMES: dict[str, str] = {
    "pure_dp": "differential privacy",
    "approx_dp": "differential privacy",
    "blowfish": "Blowfish privacy",
    "geo_ind": "geo-indistinguishability",
    "local_pdp": "a local indistinguishability bound",
}
#: What a guarantee under each definition does not cover, appended to its name.
_DEFINITION_LIMITS: dict[str, str] = {"local_pdp": " for this dataset only, not differential privacy"}
_HEX = re.compile(r"#[0-9a-fA-F]{6}")


@dataclass(frozen=True)
class Param:
    """One public parameter of a mechanism: name, label, type, default, inclusive range, help text.

    Numeric parameters must declare both ends of the range (:meth:`Registry.register` refuses them
    otherwise): the upper end bounds the work one request can ask of the server.

    >>> k = Param("n_clusters", "Clusters K", int, 3, low=1, high=50)
    >>> k.validate("4")
    4
    >>> k.validate(99)
    Traceback (most recent call last):
    ...
    dpcore.errors.ParameterError: Clusters K must lie in [1, 50]; got 99.
    """

    name: str
    label: str
    kind: type
    default: Any
    low: float | None = None
    high: float | None = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    zero: str = ""  # what the value 0 stands for, in words (e.g. "automatic"), shown in its place
    #: The value follows the privacy policy: ``from_policy(policy)`` (pages draw no widget for it).
    from_policy: Callable[[Any], Any] | None = None
    #: A choice in words, for the widget (default: the value itself).
    choice_label: Callable[[Any], str] | None = None
    #: Pages draw no widget for it (a value set elsewhere on the page, e.g. the number of clusters).
    hidden: bool = False
    #: Named values the widget offers before a free entry, e.g. (("city", 25000.0), ...).
    presets: tuple[tuple[str, Any], ...] = ()

    @property
    def numeric(self) -> bool:
        """An int or float parameter without a list of choices."""
        return self.choices is None and self.kind in (int, float)

    def validate(self, value: Any) -> Any:
        """``value`` as ``kind``; a clear ``ParameterError`` naming the parameter and the fix otherwise."""
        if self.choices is not None:
            if value not in self.choices:
                raise ParameterError(
                    f"{self.label} must be one of {', '.join(map(str, self.choices))}; got {value!r}."
                )
            return value
        try:
            if self.kind is int and (isinstance(value, bool) or float(value) != int(float(value))):
                raise ValueError
            out = self.kind(value)
        except (TypeError, ValueError):
            raise ParameterError(
                f"{self.label} must be a {self.kind.__name__}; got {value!r}. {self.help}".strip()
            ) from None
        if isinstance(out, float | int) and not (
            (self.low is None or out >= self.low) and (self.high is None or out <= self.high)
        ):
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            raise ParameterError(f"{self.label} must lie in [{lo}, {hi}]; got {value!r}. {self.help}".strip())
        return out


@dataclass(frozen=True)
class Metric:
    """One score of a mechanism's diagnostic trial: its column in the comparison table, the axis title
    and the value axis (``"auto"``: log when every value is > 0; ``"unit"``: linear up to 1, e.g. an
    adjusted Rand index; ``"linear"``). Plots draw any declared metric with its own title."""

    name: str
    title: str
    scale: Literal["auto", "unit", "linear"] = "auto"

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.title:
            raise ParameterError(f"A metric needs an identifier name and a title; got {self.name!r}.")
        if self.scale not in ("auto", "unit", "linear"):
            raise ParameterError(f"metric {self.name}: scale is auto, unit or linear, not {self.scale!r}.")


@dataclass(frozen=True)
class Calibration:
    """How a release's noise is calibrated: ``name`` as the ledger's calibration column records it
    (e.g. "analytic", "laplace"), ``guarantee`` what the mechanism's definition amounts to under it, in
    words (e.g. "probabilistic differential privacy (PDP)"; empty: the definition's own name)."""

    name: str
    guarantee: str = ""


@runtime_checkable
class Covariance(Protocol):
    """The noise covariance of one release (a ``covariance`` capability's result): one covariance matrix
    per released point (``blocks``), their total variance, the optimality gap of the solve (None if exact
    by construction) and caveats in words."""

    blocks: Sequence[Any]
    trace: float
    gap: float | None
    caveats: Sequence[str]


@runtime_checkable
class TableInputs(Protocol):
    """Inputs an out-of-core engine reads by passes (:mod:`dpcore.outofcore`), not rows in memory: a
    release on them runs the spec's ``out_of_core`` capability (:meth:`MechanismSpec.run`)."""

    out_of_core: Literal[True]


@dataclass(frozen=True)
class MechanismOutput:
    """What one run of a mechanism releases: the table that leaves, its figures, manifest details.

    ``details`` are JSON-able facts about the run that may be published (budget split, caveats);
    ``diagnostics`` are data-dependent values for the curator's eyes only, never written to a file.
    ``scope`` overrides the unit of protection for this run (e.g. "per user, at most 5 locations each").
    ``files`` adds released files by name suffix (e.g. ".geojson"), each built from the table as written
    (with the demo notice column in demo mode).
    """

    table: pd.DataFrame
    figures: tuple[Any, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    files: Mapping[str, Callable[[pd.DataFrame], bytes]] = field(default_factory=dict)


@dataclass(frozen=True)
class MechanismSpec:
    """A releasable mechanism of one domain.

    ``definition`` is the privacy definition its release satisfies; ``summary`` one plain sentence for the
    curator (no formulas, acronyms spelled out); ``formula`` the mathematics, shown in a details expander;
    ``citation`` the papers by author and year. ``release(inputs, *, epsilon, delta, params, random_state)``
    runs it once and returns a :class:`MechanismOutput`; ``params`` were validated against ``params``.

    Optional capabilities (None or empty: the mechanism has none):

    - ``calibration(params) -> Calibration``: its noise calibration (the guarantee's wording and the
      ledger's calibration column: :func:`guarantee_name`, :func:`calibration_name`).
    - ``relation(params, policy) -> dpcore.accounts.Relation``: the neighbour relation of one row its
      release protects, refusing (``PolicyError``) a policy it cannot be released under (e.g. another
      geo-indistinguishability radius than its own); default: the policy's, for its definition.
    - ``contribution(params, scope) -> int | None``: the rows of one person a release reads when its unit
      of protection is a person (m locations, or m x L fixes for trajectories), which the ledger account
      names; None (the default): one row.
    - ``trial(inputs, eps_grid, trials, *, delta, params, random_state, progress)``: the comparison's
      diagnostic (never released), scored by ``metrics``; ``trials``: a parameter for its own number of
      trials per ε when not the comparison's (e.g. MCMC chains); ``background_cost``: the work of one
      trial at one ε relative to one noisy-Lloyd fit (comparisons above a threshold run in the
      background; 0 for noise added in closed form).
    - ``covariance(inputs, epsilon, delta, params) -> Covariance``: its noise covariance (ellipses).
    - ``out_of_core(table, *, epsilon, delta, params, random_state)``: its release on :class:`TableInputs`.
    - ``note(inputs, params) -> str``: a diagnostic sentence the page shows beside it (may read the
      data; costs no budget, never released).
    - ``diagnostic_figures(inputs, *, epsilon, params, random_state, tiles, nonnegative) -> {name: Figure}``:
      curator figures of one diagnostic draw set against the true data (e.g. true vs released), never
      released; ``tiles`` draws maps on a tile basemap (needs internet), ``nonnegative`` shows noisy counts
      made non-negative by post-processing; ``name`` is a stable short chart name.
    - ``color``: its colour on the charts, ``#rrggbb``; ``aliases``: former keys that still resolve
      (manifests, plans and ledger rows written with them load); ``compared_by_default``: ticked for
      the comparison when a page opens; ``presented``: the mechanism whose trade-off the Present page's
      story tells (one per domain, :func:`presented`).
    """

    domain: str
    key: str
    label: str
    definition: Definition
    summary: str
    formula: str
    citation: str
    release: Callable[..., MechanismOutput]
    params: tuple[Param, ...] = ()
    needs_delta: bool = False
    trial: Callable[..., Any] | None = None
    calibration: Callable[[Mapping[str, Any]], Calibration] | None = None
    relation: Callable[[Mapping[str, Any], Any], Any] | None = None
    contribution: Callable[[Mapping[str, Any], str], int | None] | None = None
    metrics: tuple[Metric, ...] = ()
    trials: Param | None = None
    background_cost: float = 0.0
    covariance: Callable[..., Covariance] | None = None
    out_of_core: Callable[..., MechanismOutput] | None = None
    note: Callable[..., str] | None = None
    diagnostic_figures: Callable[..., Mapping[str, Any]] | None = None
    color: str | None = None
    aliases: tuple[str, ...] = ()
    compared_by_default: bool = True
    presented: bool = False

    def __post_init__(self) -> None:
        if self.color is not None and not _HEX.fullmatch(self.color):
            raise ParameterError(f"{self.key}: color must be a hex colour '#rrggbb', not {self.color!r}.")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ParameterError(f"{self.key}: each metric is declared once; got {names}.")
        if self.metrics and self.trial is None:
            raise ParameterError(f"{self.key}: metrics score a diagnostic trial; declare the trial too.")
        if not (self.background_cost >= 0 and self.background_cost != float("inf")):
            raise ParameterError(f"{self.key}: background_cost must be a finite number >= 0.")

    @property
    def is_dp(self) -> bool:
        """False for dataset-dependent (local) guarantees, which are not differential privacy."""
        return self.definition in DEFINITIONS_DP

    def validate_params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The declared parameters with defaults filled in; unknown names are refused."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ParameterError(
                f"{self.label} has no parameter {', '.join(unknown)}; it takes {', '.join(known) or 'none'}."
            )
        return {name: p.validate(values.get(name, p.default)) for name, p in known.items()}

    def param(self, name: str) -> Param | None:
        """The declared parameter called ``name``, or None."""
        return next((p for p in self.params if p.name == name), None)

    def run(
        self, inputs: Any, *, epsilon: float, delta: float, params: Mapping[str, Any], random_state: Any
    ) -> MechanismOutput:
        """One release: ``out_of_core`` on :class:`TableInputs`, ``release`` on rows in memory."""
        if isinstance(inputs, TableInputs):
            if self.out_of_core is None:
                raise ParameterError(
                    f"{self.label} has no out-of-core release; read the rows into memory first."
                )
            return self.out_of_core(
                inputs, epsilon=epsilon, delta=delta, params=params, random_state=random_state
            )
        return self.release(inputs, epsilon=epsilon, delta=delta, params=params, random_state=random_state)


def guarantee_name(spec: MechanismSpec, params: Mapping[str, Any]) -> str:
    """What a release of ``spec`` with ``params`` satisfies, in words: its definition as its calibration
    meets it, and what that does not cover (the plan's guarantee sentence, the page and the manifest)."""
    calibrated = spec.calibration(params).guarantee if spec.calibration is not None else ""
    return (calibrated or DEFINITION_NAMES[spec.definition]) + _DEFINITION_LIMITS.get(spec.definition, "")


def calibration_name(spec: MechanismSpec, params: Mapping[str, Any]) -> str:
    """The calibration the ledger records for a release of ``spec`` with ``params`` ("" without one)."""
    return spec.calibration(params).name if spec.calibration is not None else ""


class Registry(Mapping[str, MechanismSpec]):
    """The mechanisms of one domain, by key, in registration order.

    A mechanism is one module that builds its :class:`MechanismSpec` and registers it:

    >>> def release(inputs, *, epsilon, delta, params, random_state): ...
    >>> demo = Registry("example")
    >>> spec = demo.register(MechanismSpec(
    ...     domain="example", key="noisy_sum", label="Noisy sum", definition="pure_dp",
    ...     summary="The sum of the values, plus noise.", formula="sum + Laplace(B / eps)",
    ...     citation="Dwork & Roth 2014", release=release,
    ...     params=(Param("bound", "Bound B", float, 1.0, low=0.0, high=1e6),)))
    >>> list(demo), demo["noisy_sum"].validate_params({"bound": "2.5"})
    (['noisy_sum'], {'bound': 2.5})
    """

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self._specs: dict[str, MechanismSpec] = {}
        self._aliases: dict[str, str] = {}

    def register(self, spec: MechanismSpec) -> MechanismSpec:
        """Add ``spec``; every numeric parameter must declare its range (a resource limit for the server)."""
        unbounded = [p.name for p in spec.params if p.numeric and (p.low is None or p.high is None)]
        if unbounded:
            raise ParameterError(
                f"{spec.key}: give parameter(s) {', '.join(unbounded)} an explicit range (low and high)."
            )
        if spec.domain != self.domain:
            raise ParameterError(f"{spec.key} belongs to {spec.domain}, not {self.domain}.")
        for name in (spec.key, *spec.aliases):
            if name in self._specs or name in self._aliases:
                raise ParameterError(f"A {self.domain} mechanism named {name!r} is already registered.")
        self._specs[spec.key] = spec
        self._aliases.update(dict.fromkeys(spec.aliases, spec.key))
        return spec

    def unregister(self, key: str) -> None:
        """Remove mechanism ``key`` and its aliases (a test's own mechanism, after the test)."""
        spec = self[key]
        del self._specs[spec.key]
        for alias in spec.aliases:
            self._aliases.pop(alias, None)

    def canonical(self, key: str) -> str:
        """The current key of ``key`` (itself, or the mechanism an alias names)."""
        return self[key].key

    def __getitem__(self, key: str) -> MechanismSpec:
        try:
            return self._specs[self._aliases.get(key, key)]
        except KeyError:
            raise ParameterError(
                f"Unknown {self.domain} mechanism {key!r}; choose one of {', '.join(self._specs)}."
            ) from None

    def __contains__(self, key: object) -> bool:
        return key in self._specs or key in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def labels(self) -> dict[str, str]:
        """Key -> display label, in registration order, then former keys (aliases) -> their label."""
        return {
            **{k: s.label for k, s in self._specs.items()},
            **{alias: self._specs[key].label for alias, key in self._aliases.items()},
        }


def release(
    mechanism: str,
    inputs: Any,
    *,
    epsilon: float,
    delta: float = 0.0,
    params: Mapping[str, Any] | None = None,
    random_state: Any = None,
) -> MechanismOutput:
    """One release of the registered mechanism ``mechanism`` (its key, in any domain) on ``inputs``: the
    domain's inputs (``KMeansInputs``, ``LocationInputs``, ``TrajectoryInputs``) or a :class:`TableInputs`
    for mechanisms that run out of core; ``params`` are validated (defaults filled in) by its spec.

    ``random_state``: None for secure sampling (OS entropy), an int for a labelled demo; a diagnostic
    sampler is refused (:func:`dpcore.mechanisms.check_random_state`). Nothing is debited here: the
    accounted release, bound to a release plan and the budget ledger, is ``make_release``.

    >>> import numpy as np
    >>> from dpcore.kmeans import KMeansInputs
    >>> X = np.array([[0.1, 0.2], [0.2, 0.1], [0.8, 0.9], [0.9, 0.8]] * 100)
    >>> inputs = KMeansInputs(X, lower=np.zeros(2), upper=np.ones(2))
    >>> out = release("dp_lloyd", inputs, epsilon=1.0, params={"n_clusters": 2}, random_state=0)
    >>> len(out.table)
    2
    """
    from dpcore.mechanisms import check_random_state
    from dpcore.plan import DOMAINS, registry

    specs = [registry(d)[mechanism] for d in DOMAINS if mechanism in registry(d)]
    if len(specs) != 1:
        known = ", ".join(k for d in DOMAINS for k in registry(d))
        raise ParameterError(f"Unknown mechanism {mechanism!r}; choose one of {known}.")
    spec = specs[0]
    sampler = check_random_state(random_state)
    if sampler.mode == "diagnostic":
        raise ParameterError(
            "A release draws from secure sampling (random_state=None) or a labelled demo seed (an int), "
            "never from a diagnostic sampler."
        )
    return spec.run(
        inputs, epsilon=epsilon, delta=delta, params=spec.validate_params(params or {}), random_state=sampler
    )


def presented(registry: Registry) -> MechanismSpec:
    """The one spec of ``registry`` declared ``presented`` (the Present page's story tells its trade-off)."""
    specs = [spec for spec in registry.values() if spec.presented]
    if len(specs) != 1:
        raise ParameterError(f"The {registry.domain} registry presents {len(specs)} mechanisms; declare one.")
    return specs[0]
