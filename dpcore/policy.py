"""Privacy policies: which definition a release satisfies, which neighbours it protects, with what parameters.

docs/mathematics.md lists the definitions a curator can pick:

* ``PureDP``: eps-DP (Machanavajjhala & Kifer 2015 Def. 1). Pr[M(X) in S] <= e^eps Pr[M(X') in S] for
  neighbours X, X': one row added or removed ("unbounded") or one row's value replaced ("bounded",
  Machanavajjhala & Kifer 2015 "Full domain").
* ``ApproxDP``: (eps, delta)-DP (Zhu et al. 2017 Def. 2.1, Machanavajjhala & Kifer 2015 Def. 3), same
  neighbours, plus delta.
* ``LocalPDP``: (eps, delta)-PDP for this dataset (Ravi et al. 2021 Def. 1): X vs X minus one of its own rows,
  with the noise calibrated on X itself. Weaker than DP and never presented as DP.
* ``Blowfish``: (eps, P)-Blowfish (Machanavajjhala & Kifer 2015 Def. 5-6): one row's value x replaced by y,
  (x, y) an edge of the policy graph G; Pr ratio <= exp(eps * d_G(x, y)), d_G the shortest-path length in G.
* ``GeoIndistinguishability``: eps-geo-indistinguishability (Zhu et al. 2017 s.12.3.1, Def. 12.1): one
  location x replaced by x'; Pr ratio <= exp(eps * d(x, x')), eps per metre (or level l within r metres, eps =
  l/r).

Every class is a frozen dataclass validated on creation (``PolicyError`` naming the parameter, the value
and the valid range) and round-trips through ``to_dict`` / ``policy_from_dict`` (plain JSON types).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from numpy.polynomial.polynomial import polyval
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, gammainc, lambertw

from dpcore.errors import PolicyError
from dpcore.location.geometry import haversine_m

DEFINITIONS: dict[str, tuple[str, str]] = {
    "pure_dp": (
        "ε-differential privacy",
        "The standard: hides whether any one person is in the data (or which value their row holds).",
    ),
    "approx_dp": (
        "(ε, δ)-differential privacy",
        "As ε-DP, except with a small probability δ; allows Gaussian noise.",
    ),
    "local_pdp": (
        "Local (ε, δ) guarantee for this dataset (not DP)",
        "The colored-noise paper's guarantee (probabilistic differential privacy, PDP, with its own "
        "calibration): calibrated on this dataset's own rows, weaker than DP.",
    ),
    "blowfish": (
        "Blowfish privacy (ε, policy graph)",
        "Relaxed DP: hides only the differences a policy graph connects (e.g. values within θ).",
    ),
    "geo_ind": (
        "Geo-indistinguishability (level l within radius r)",
        "For single locations: nearby places are hard to tell apart, distant ones less so.",
    ),
}

NEIGHBOURS: dict[str, str] = {
    "unbounded": "one row added or removed",
    "bounded": "one row's value replaced by any other value",
}

METRICS: dict[str, str] = {
    "l1": "L1 (Manhattan) distance",
    "l2": "L2 (Euclidean) distance",
    "haversine": "great-circle distance (metres)",
}

_EPSILON_HINT = "Pick a positive epsilon such as 1.0."
# -(W_{-1}(z) + 1) as a power series in s = sqrt(2 (e z + 1)) (Corless et al. 1996, eq. 4.22).
_W_SERIES = np.array([0.0, 1.0, 1 / 3, 11 / 72, 43 / 540, 769 / 17280, 221 / 8505])


def _show(value: object) -> str:
    if isinstance(value, Real) and not isinstance(value, bool):
        return f"{float(value):g}"
    return repr(value)


def _positive(name: str, value: object, hint: str) -> float:
    """``value`` as a float if it is a finite real number > 0, else ``PolicyError``."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise PolicyError(f"{name} must be a finite number > 0 (got {_show(value)}). {hint}")
    return float(value)  # type: ignore[arg-type]


def _delta(value: object) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool) and 0 < value < 1
    if not ok:
        raise PolicyError(
            f"delta must be in (0, 1); typical values are below 1/n, such as 1e-6 (got {_show(value)})."
        )
    return float(value)  # type: ignore[arg-type]


def _choice(name: str, value: object, options: Mapping[str, str | tuple[str, str]]) -> str:
    if not isinstance(value, str) or value not in options:
        valid = ", ".join(repr(k) for k in options)
        raise PolicyError(f"{name} must be one of {valid} (got {_show(value)}).")
    return value


def _percent(p: float) -> str:
    return "more than 99.99%" if p > 0.9999 else f"{100 * p:.2f}%"


def _metres(r: float) -> str:
    return f"{r / 1000:,.2f} km" if r >= 1000 else f"{r:.3g} m"


def truthful_probability(epsilon: float) -> float:
    """e^eps / (1 + e^eps): how often the most revealing eps-DP answer about one person is true
    (Machanavajjhala & Kifer 2015).

    Computed as the logistic function ``expit(eps)``, so large eps does not overflow.
    """
    return float(expit(_positive("epsilon", epsilon, _EPSILON_HINT)))


def odds_bound(epsilon: float) -> float:
    """e^eps: the most one release can change an attacker's odds by (Machanavajjhala & Kifer 2015); inf past
    eps = 709."""
    eps = _positive("epsilon", epsilon, _EPSILON_HINT)
    return math.exp(eps) if eps < 709.0 else math.inf


def geo_radius_cdf(epsilon_per_metre: float, r: ArrayLike) -> float | NDArray[np.float64]:
    """C_eps(r) = 1 - (1 + eps r) e^(-eps r): Pr[planar Laplace noise within r] (Zhu et al. 2017 s.12.3.1).

    Evaluated as the regularised incomplete gamma P(2, eps r), which keeps full precision for small r.
    """
    eps = _positive("epsilon_per_metre", epsilon_per_metre, "Use e.g. 0.01 (level 1 within 100 m).")
    c = gammainc(2.0, np.maximum(eps * np.asarray(r, dtype=float), 0.0))
    return float(c) if c.ndim == 0 else c


def geo_radius_quantile(epsilon_per_metre: float, q: ArrayLike) -> float | NDArray[np.float64]:
    """Radius r (metres) with C_eps(r) = q: r = -(1/eps) (W_{-1}((q - 1)/e) + 1) (Andres et al. 2013).

    ``q`` is a probability in (0, 1) or an array of them; r is the q-quantile of Gamma(2, 1/eps). Near the
    branch point (q < 1e-3) scipy's ``lambertw(k=-1)`` loses precision (below q ~ 1e-8 it returns the wrong
    branch), so there -(W_{-1} + 1) comes from its branch-point series in s = sqrt(2q),
    s + s^2/3 + 11 s^3/72 + 43 s^4/540 + 769 s^5/17280 + 221 s^6/8505, polished by one Newton step.
    """
    eps = _positive("epsilon_per_metre", epsilon_per_metre, "Use e.g. 0.01 (level 1 within 100 m).")
    try:
        qa = np.asarray(q, dtype=float)
    except (TypeError, ValueError):
        qa = np.array(np.nan)
    if qa.size == 0 or not np.all((qa > 0) & (qa < 1)):
        raise PolicyError(f"q must be a probability in (0, 1), such as 0.9 (got {q!r}).")
    x = -(lambertw((qa - 1.0) / math.e, k=-1).real + 1.0)
    series = polyval(np.sqrt(2.0 * qa), _W_SERIES)
    series -= (gammainc(2.0, series) - qa) / (series * np.exp(-series))
    r = np.where(qa < 1e-3, series, x) / eps
    return float(r) if r.ndim == 0 else r


def _pair(x: ArrayLike, y: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    xa, ya = np.atleast_1d(np.asarray(x, dtype=float)), np.atleast_1d(np.asarray(y, dtype=float))
    return tuple(np.broadcast_arrays(xa, ya))  # type: ignore[return-value]


class _Graph:
    """Shared behaviour of the Blowfish policy graphs (Machanavajjhala & Kifer 2015 "Blowfish")."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}  # type: ignore[arg-type]


@dataclass(frozen=True)
class FullDomainGraph(_Graph):
    """Complete graph: every two values are connected, so (eps, G)-Blowfish is bounded eps-DP (Machanavajjhala
    & Kifer 2015)."""

    kind: ClassVar[str] = "full_domain"

    @property
    def label(self) -> str:
        return "Full domain (bounded DP)"

    @property
    def edge_rule(self) -> str:
        return "any two values are connected"

    def describe(self) -> str:
        return (
            "Every pair of values is connected, so an adversary cannot tell which value any one record "
            "holds; only population-level patterns can be learned, as under bounded differential privacy."
        )

    def adjacent(self, x: ArrayLike, y: ArrayLike, lower: ArrayLike | None = None) -> NDArray[np.bool_]:
        """True for every pair of records (rows along the last axis)."""
        xa, _ = _pair(x, y)
        return np.ones(xa.shape[:-1], dtype=bool)


@dataclass(frozen=True)
class PartitionGraph(_Graph):
    """Values connected iff they fall in the same block; each numeric attribute is cut into intervals of
    width ``block_width`` starting at its public lower bound (Machanavajjhala & Kifer 2015 "Partitioned")."""

    block_width: float
    kind: ClassVar[str] = "partition"

    def __post_init__(self) -> None:
        hint = (
            "It is the width of the intervals (in the scaled feature space prepared on the Data page) "
            "an adversary may learn a value lies in."
        )
        object.__setattr__(self, "block_width", _positive("block_width", self.block_width, hint))

    @property
    def label(self) -> str:
        return f"Partition (blocks of width {self.block_width:g})"

    @property
    def edge_rule(self) -> str:
        return f"values in the same block of width {self.block_width:g} from the public lower bound"

    def describe(self) -> str:
        return (
            f"Values are connected only within the same block of width {self.block_width:g}. An adversary "
            "may learn exactly which block each record falls in, but not its value within the block."
        )

    def adjacent(self, x: ArrayLike, y: ArrayLike, lower: ArrayLike | None = None) -> NDArray[np.bool_]:
        """True where every attribute of x and y lies in the same block floor((v - lower) / width)."""
        if lower is None:
            raise PolicyError(
                "PartitionGraph needs the public lower bound of each attribute (blocks start there): "
                "pass lower=..."
            )
        xa, ya = _pair(x, y)
        lo = np.asarray(lower, dtype=float)
        same = np.floor((xa - lo) / self.block_width) == np.floor((ya - lo) / self.block_width)
        return np.all(same, axis=-1)


@dataclass(frozen=True)
class DistanceThresholdGraph(_Graph):
    """G^{d,theta}: values connected iff d(x, y) <= theta, d in {L1, L2, great-circle metres} (Machanavajjhala
    & Kifer 2015)."""

    theta: float
    metric: str = "l2"
    kind: ClassVar[str] = "distance_threshold"

    def __post_init__(self) -> None:
        hint = "It is the distance within which values stay hidden (metres for the haversine metric)."
        object.__setattr__(self, "theta", _positive("theta", self.theta, hint))
        _choice("metric", self.metric, METRICS)

    @property
    def _theta_text(self) -> str:
        return _metres(self.theta) if self.metric == "haversine" else f"{self.theta:g}"

    @property
    def label(self) -> str:
        return f"Distance threshold (θ = {self._theta_text}, {self.metric})"

    @property
    def edge_rule(self) -> str:
        return f"values within {METRICS[self.metric]} θ = {self._theta_text}"

    def describe(self) -> str:
        return (
            f"Values within {METRICS[self.metric]} θ = {self._theta_text} of each other are connected. An "
            "adversary may learn the general region of a record's value but cannot pin it down to better "
            f"than θ = {self._theta_text}."
        )

    def adjacent(self, x: ArrayLike, y: ArrayLike, lower: ArrayLike | None = None) -> NDArray[np.bool_]:
        """True where d(x, y) <= theta; for haversine, rows are (latitude, longitude) in degrees."""
        xa, ya = _pair(x, y)
        if self.metric == "haversine":
            if xa.shape[-1] != 2:
                raise PolicyError("The haversine metric needs (latitude, longitude) pairs in degrees.")
            d = haversine_m(xa[..., 0], xa[..., 1], ya[..., 0], ya[..., 1])
        else:
            d = np.linalg.norm(xa - ya, ord=1 if self.metric == "l1" else 2, axis=-1)
        return d <= self.theta


@dataclass(frozen=True)
class AttributeGraph(_Graph):
    """G^{attr,c}: values connected iff they differ in at most c attributes (Machanavajjhala & Kifer 2015
    "Attribute")."""

    c: int = 1
    kind: ClassVar[str] = "attribute"

    def __post_init__(self) -> None:
        c = self.c
        whole = isinstance(c, Integral) or (isinstance(c, float) and c.is_integer())
        if isinstance(c, bool) or not whole or c < 1:  # type: ignore[operator]
            raise PolicyError(
                f"c must be a whole number >= 1 (got {_show(c)}): the number of attributes of one record "
                "that may differ between neighbours; 1 is the usual choice."
            )
        object.__setattr__(self, "c", int(c))

    @property
    def label(self) -> str:
        return f"Attribute (at most {self.c} attribute{'s' if self.c > 1 else ''} differ)"

    @property
    def edge_rule(self) -> str:
        return f"values differing in at most {self.c} attribute{'s' if self.c > 1 else ''}"

    def describe(self) -> str:
        return (
            f"Values differing in at most {self.c} attribute(s) are connected. An adversary cannot learn any "
            f"{self.c} attribute(s) of a record from the others; changing more attributes is protected only "
            f"at ε per {self.c} attribute(s) changed, so whole records are less protected than under DP."
        )

    def adjacent(self, x: ArrayLike, y: ArrayLike, lower: ArrayLike | None = None) -> NDArray[np.bool_]:
        """True where x and y differ in at most c attributes."""
        xa, ya = _pair(x, y)
        return np.count_nonzero(xa != ya, axis=-1) <= self.c


Graph = FullDomainGraph | PartitionGraph | DistanceThresholdGraph | AttributeGraph
_GRAPHS: dict[str, type[_Graph]] = {
    g.kind: g for g in (FullDomainGraph, PartitionGraph, DistanceThresholdGraph, AttributeGraph)
}


def _build(cls: type, params: Mapping[str, Any], what: str) -> Any:
    allowed = {f.name for f in fields(cls)}
    extra = set(params) - allowed
    if extra:
        raise PolicyError(f"Unknown {what} parameter(s) {sorted(extra)}; expected some of {sorted(allowed)}.")
    try:
        return cls(**params)
    except TypeError as err:
        raise PolicyError(f"Missing {what} parameter: {err}. Expected {sorted(allowed)}.") from err


def graph_from_dict(d: Mapping[str, Any]) -> Graph:
    """Inverse of ``Graph.to_dict``."""
    params = dict(d)
    kind = _choice("graph kind", params.pop("kind", None), _GRAPHS)
    return _build(_GRAPHS[kind], params, "graph")


def _dp_plain(epsilon: float, question: str) -> str:
    truthful = _percent(truthful_probability(epsilon))
    return (
        f"At ε = {epsilon:.3g}, the most revealing answer this release can give to a yes/no question about "
        f"one person (such as “{question}”) is truthful with probability {truthful}"
        " (50% would be a coin flip). Whatever an attacker believed beforehand, the release changes their "
        f"odds on such a question by a factor of at most e^ε = {odds_bound(epsilon):.3g}."
    )


def _delta_plain(delta: float) -> str:
    return f" This may fail with probability at most δ = {delta:.3g}; keep δ well below 1/n (n rows)."


class _Policy:
    """Shared behaviour of all privacy policies."""

    definition: ClassVar[str]
    is_dp: ClassVar[bool] = True
    calibrated_on_data: ClassVar[bool] = False

    @property
    def label(self) -> str:
        return DEFINITIONS[self.definition][0]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (session state, release manifests); ``policy_from_dict`` inverts it."""
        out: dict[str, Any] = {"definition": self.definition}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, _Graph) else value
        return out


@dataclass(frozen=True)
class PureDP(_Policy):
    """eps-DP (Machanavajjhala & Kifer 2015 Def. 1): outputs at most e^eps more likely for X than for a
    neighbour X' (one row added or removed if ``neighbours="unbounded"``, one row's value replaced if
    ``"bounded"``)."""

    epsilon: float
    neighbours: str = "unbounded"
    definition: ClassVar[str] = "pure_dp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon, _EPSILON_HINT))
        _choice("neighbours", self.neighbours, NEIGHBOURS)

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def neighbour_relation(self) -> str:
        return NEIGHBOURS[self.neighbours]

    @property
    def guarantee(self) -> str:
        return (
            f"ε-differential privacy with ε = {self.epsilon:.3g}: for any two datasets that differ by "
            f"{self.neighbour_relation}, any output is at most e^ε = {odds_bound(self.epsilon):.3g} times "
            "more likely under one than under the other."
        )

    def plain_language(self) -> str:
        question = "is Bob in the data?" if self.neighbours == "unbounded" else "is Bob's value x or y?"
        return _dp_plain(self.epsilon, question)


@dataclass(frozen=True)
class ApproxDP(_Policy):
    """(eps, delta)-DP (Zhu et al. 2017 Def. 2.1, Machanavajjhala & Kifer 2015 Def. 3): Pr[M(X) in S] <= e^eps
    Pr[M(X') in S] + delta for neighbours X, X' (one row added or removed if unbounded, one row's value
    replaced if bounded)."""

    epsilon: float
    delta: float
    neighbours: str = "unbounded"
    definition: ClassVar[str] = "approx_dp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon, _EPSILON_HINT))
        object.__setattr__(self, "delta", _delta(self.delta))
        _choice("neighbours", self.neighbours, NEIGHBOURS)

    @property
    def neighbour_relation(self) -> str:
        return NEIGHBOURS[self.neighbours]

    @property
    def guarantee(self) -> str:
        return (
            f"(ε, δ)-differential privacy with ε = {self.epsilon:.3g}, δ = {self.delta:.3g}: for any two "
            f"datasets that differ by {self.neighbour_relation}, the probability of any set of outputs is at "
            f"most e^ε = {odds_bound(self.epsilon):.3g} times that under the other, plus δ."
        )

    def plain_language(self) -> str:
        question = "is Bob in the data?" if self.neighbours == "unbounded" else "is Bob's value x or y?"
        return _dp_plain(self.epsilon, question) + _delta_plain(self.delta)


@dataclass(frozen=True)
class LocalPDP(_Policy):
    """(eps, delta)-PDP for this dataset (Ravi et al. 2021 Def. 1): the (eps, delta) bound holds only between
    X and X minus one of its own rows, with noise calibrated on X itself, not differential privacy."""

    epsilon: float
    delta: float
    definition: ClassVar[str] = "local_pdp"
    is_dp: ClassVar[bool] = False
    calibrated_on_data: ClassVar[bool] = True
    neighbours: ClassVar[str] = "own_row_removed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon, _EPSILON_HINT))
        object.__setattr__(self, "delta", _delta(self.delta))

    @property
    def neighbour_relation(self) -> str:
        return "one of this dataset's own rows removed"

    @property
    def guarantee(self) -> str:
        return (
            f"(ε, δ)-PDP for this dataset only, with ε = {self.epsilon:.3g}, δ = {self.delta:.3g}: the bound "
            f"e^ε = {odds_bound(self.epsilon):.3g} (plus δ) holds only between this dataset and this dataset "
            f"with {self.neighbour_relation}, and the noise is calibrated on this dataset, so this is NOT "
            "differential privacy."
        )

    def plain_language(self) -> str:
        return (
            _dp_plain(self.epsilon, "was this row removed?")
            + _delta_plain(self.delta)
            + " Caution: this is not differential privacy. It covers only removing a row of this very "
            "dataset, and the noise is calibrated on this dataset's own rows, so the noise itself can reveal "
            "information about the most extreme rows."
        )


@dataclass(frozen=True)
class Blowfish(_Policy):
    """(eps, G)-Blowfish privacy (Machanavajjhala & Kifer 2015 Def. 5-6): replacing one row's value x by y
    changes any output's probability by at most exp(eps * d_G(x, y)), d_G the path length in the policy graph
    G."""

    epsilon: float
    graph: Graph
    definition: ClassVar[str] = "blowfish"
    neighbours: ClassVar[str] = "graph"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon, _EPSILON_HINT))
        if not isinstance(self.graph, _Graph):
            names = ", ".join(g.__name__ for g in _GRAPHS.values())
            raise PolicyError(f"graph must be one of {names} (got {_show(self.graph)}).")

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def is_dp(self) -> bool:  # type: ignore[override]
        """Only the full-domain graph is (bounded) eps-DP; other graphs deliberately protect less."""
        return self.graph.kind == "full_domain"

    @property
    def label(self) -> str:
        return f"Blowfish privacy: {self.graph.label}"

    @property
    def neighbour_relation(self) -> str:
        rule = self.graph.edge_rule
        return f"one row's value x replaced by a value y adjacent to x in the policy graph ({rule})"

    @property
    def guarantee(self) -> str:
        return (
            f"(ε, G)-Blowfish privacy with ε = {self.epsilon:.3g} and the {self.graph.label} graph: for any "
            f"two datasets that differ by {self.neighbour_relation}, any output is at most "
            f"e^ε = {odds_bound(self.epsilon):.3g} times more likely under one than the other"
            + (
                "."
                if self.is_dp
                else " (e^(kε) for values k edges apart; values the graph does not connect are not protected "
                "from each other)."
            )
        )

    def plain_language(self) -> str:
        return (
            f"{_dp_plain(self.epsilon, 'is Bob’s value x or a connected value y?')} {self.graph.describe()}"
        )


@dataclass(frozen=True)
class GeoIndistinguishability(_Policy):
    """eps-geo-indistinguishability (Andres et al. 2013): replacing a location x by x' changes the
    probability of any reported location by at most exp(eps * d(x, x')), d in metres.

    ``radius_m`` is the protected radius r the curator reasons in: budgets and ledger costs are levels
    l = eps * r within that r (one ledger account per r), never eps per metre times a free radius.
    """

    epsilon_per_metre: float
    radius_m: float = 1000.0
    definition: ClassVar[str] = "geo_ind"
    is_dp: ClassVar[bool] = False
    neighbours: ClassVar[str] = "location_replaced"

    def __post_init__(self) -> None:
        hint = "Use e.g. 0.01 (level 1 within 100 m), or GeoIndistinguishability.from_level(level, radius_m)."
        object.__setattr__(
            self, "epsilon_per_metre", _positive("epsilon_per_metre", self.epsilon_per_metre, hint)
        )
        r_hint = "Give the radius in metres within which the level applies, e.g. 1000."
        object.__setattr__(self, "radius_m", _positive("radius_m", self.radius_m, r_hint))

    @classmethod
    def from_level(cls, level: float, radius_m: float) -> GeoIndistinguishability:
        """Privacy level l within r metres: eps = l / r (Andres et al. 2013)."""
        lv = _positive("level", level, "A level of 1 within the radius is a common choice.")
        r = _positive("radius_m", radius_m, "Give the radius in metres within which level applies, e.g. 200.")
        return cls(lv / r, r)

    @property
    def level(self) -> float:
        """The privacy level l = eps * r within the policy's radius r: what budgets and spends count. Read at
        12 significant digits, so the level typed into ``from_level`` comes back exactly (l / r * r can be
        one ulp off l) and a spend of the policy's level fits a budget of exactly that level."""
        return float(f"{self.epsilon_per_metre * self.radius_m:.12g}")

    @property
    def epsilon(self) -> float:
        return self.epsilon_per_metre

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def neighbour_relation(self) -> str:
        return "one person's location x replaced by another location x' (protection weakens with distance)"

    def level_at(self, radius_m: float) -> float:
        """Privacy level eps * r between two locations r metres apart."""
        return self.epsilon_per_metre * _positive("radius_m", radius_m, "Give metres, e.g. 100.")

    def radius_quantile(self, q: ArrayLike) -> float | NDArray[np.float64]:
        """Radius (metres) containing the planar Laplace noise with probability q."""
        return geo_radius_quantile(self.epsilon_per_metre, q)

    @property
    def guarantee(self) -> str:
        return (
            f"ε-geo-indistinguishability with ε = {self.epsilon_per_metre:.3g} per metre: for "
            f"{self.neighbour_relation}, any reported location is at most e^(ε·d(x, x')) times more likely "
            f"under one than the other; level {self.level_at(100):.3g} for places 100 m apart."
        )

    def plain_language(self) -> str:
        r50, r90, r95 = self.radius_quantile([0.5, 0.9, 0.95])
        near, far = self.level_at(100), self.level_at(1000)
        return (
            "Each reported location is the true one moved in a random direction by a random distance: within "
            f"{_metres(r50)} with probability 50%, {_metres(r90)} with 90% and {_metres(r95)} with 95% "
            f"(mean {_metres(2 / self.epsilon_per_metre)}). Telling apart two places 100 m apart is "
            f"protected at level {near:.3g} (best guess right with probability {_percent(expit(near))}); "
            f"places 1 km apart at level {far:.3g} ({_percent(expit(far))})."
        )


Policy = PureDP | ApproxDP | LocalPDP | Blowfish | GeoIndistinguishability
_POLICIES: dict[str, type[_Policy]] = {
    p.definition: p for p in (PureDP, ApproxDP, LocalPDP, Blowfish, GeoIndistinguishability)
}


def policy_from_dict(d: Mapping[str, Any]) -> Policy:
    """Inverse of ``Policy.to_dict``."""
    params = dict(d)
    key = _choice("definition", params.pop("definition", None), DEFINITIONS)
    if key == "blowfish" and isinstance(params.get("graph"), Mapping):
        params["graph"] = graph_from_dict(params["graph"])
    return _build(_POLICIES[key], params, "policy")


def make_policy(
    definition: str,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    neighbours: str = "unbounded",
    graph: Graph | None = None,
    epsilon_per_metre: float | None = None,
) -> Policy:
    """Build the policy for a ``DEFINITIONS`` key; parameters the definition does not use must stay unset."""
    key = _choice("definition", definition, DEFINITIONS)
    uses = {
        "pure_dp": {"epsilon", "neighbours"},
        "approx_dp": {"epsilon", "delta", "neighbours"},
        "local_pdp": {"epsilon", "delta"},
        "blowfish": {"epsilon", "graph"},
        "geo_ind": {"epsilon_per_metre"},
    }[key]
    given = {
        "epsilon": epsilon is not None,
        "delta": delta is not None and delta != 0,
        "neighbours": neighbours != "unbounded",
        "graph": graph is not None,
        "epsilon_per_metre": epsilon_per_metre is not None,
    }
    unused = sorted(name for name, is_set in given.items() if is_set and name not in uses)
    if unused:
        raise PolicyError(
            f"{', '.join(unused)} does not apply to {DEFINITIONS[key][0]}; leave it unset "
            f"({key} takes {', '.join(sorted(uses))})."
        )
    if key == "pure_dp":
        return PureDP(epsilon, neighbours)  # type: ignore[arg-type]
    if key == "approx_dp":
        return ApproxDP(epsilon, delta, neighbours)  # type: ignore[arg-type]
    if key == "local_pdp":
        return LocalPDP(epsilon, delta)  # type: ignore[arg-type]
    if key == "blowfish":
        return Blowfish(epsilon, graph)  # type: ignore[arg-type]
    return GeoIndistinguishability(epsilon_per_metre)  # type: ignore[arg-type]


def protected_radius(policy: Policy, label: str) -> float:
    """The radius r (metres) within which a geo-indistinguishability ``policy`` counts levels; a clear
    PolicyError naming mechanism ``label`` and the fix for any other policy."""
    if not isinstance(policy, GeoIndistinguishability):
        raise PolicyError(
            f"{label} satisfies geo-indistinguishability, whose level is counted within the protected radius "
            "set on the Privacy policy page: choose geo-indistinguishability there."
        )
    return float(policy.radius_m)
