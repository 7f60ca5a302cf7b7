"""Mechanism registries: one per domain (k-means, locations), one module per mechanism.

Each mechanism module builds one :class:`MechanismSpec` and registers it in its domain's
:class:`Registry` (``dpcore.kmeans.registry.KMEANS``, ``dpcore.location.registry.LOCATIONS``). The spec
declares what the release plan (:mod:`dpcore.plan`) and the pages need: a key, a label, the privacy
definition the mechanism satisfies, a plain sentence for the curator, the formula (shown on request), the
papers it comes from (author and year), its parameters (validated once, here), and the callable that
runs one release. Adding a mechanism is adding one module and importing it from the domain package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from dpcore.errors import ParameterError

__all__ = [
    "DEFINITIONS_DP",
    "Definition",
    "MechanismOutput",
    "MechanismSpec",
    "Param",
    "Registry",
]

Definition = Literal["pure_dp", "approx_dp", "local_pdp", "blowfish", "geo_ind"]
#: Definitions whose guarantee does not depend on the data it protects (everything but local PDP).
DEFINITIONS_DP: frozenset[str] = frozenset({"pure_dp", "approx_dp", "blowfish", "geo_ind"})


@dataclass(frozen=True)
class Param:
    """One public parameter of a mechanism: name, label, type, default, inclusive range, help text.

    Numeric parameters must declare both ends of the range (:meth:`Registry.register` refuses them
    otherwise): the upper end bounds the work one request can ask of the server.
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
    ``citation`` the papers by author and year. ``release(inputs, *, epsilon, delta, params, sampler)``
    runs it once and returns a :class:`MechanismOutput`; ``params`` were validated against ``params``.
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


class Registry(Mapping[str, MechanismSpec]):
    """The mechanisms of one domain, by key, in registration order."""

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self._specs: dict[str, MechanismSpec] = {}

    def register(self, spec: MechanismSpec) -> MechanismSpec:
        """Add ``spec``; every numeric parameter must declare its range (a resource limit for the server)."""
        unbounded = [p.name for p in spec.params if p.numeric and (p.low is None or p.high is None)]
        if unbounded:
            raise ParameterError(
                f"{spec.key}: give parameter(s) {', '.join(unbounded)} an explicit range (low and high)."
            )
        if spec.domain != self.domain:
            raise ParameterError(f"{spec.key} belongs to {spec.domain}, not {self.domain}.")
        if spec.key in self._specs:
            raise ParameterError(f"A {self.domain} mechanism named {spec.key!r} is already registered.")
        self._specs[spec.key] = spec
        return spec

    def __getitem__(self, key: str) -> MechanismSpec:
        try:
            return self._specs[key]
        except KeyError:
            raise ParameterError(
                f"Unknown {self.domain} mechanism {key!r}; choose one of {', '.join(self._specs)}."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def labels(self) -> dict[str, str]:
        """Key -> display label, in registration order."""
        return {k: s.label for k, s in self._specs.items()}
