"""Bounds estimated privately: a preparation step of a release for curators without public bounds.

For each listed feature, OpenDP's DP quantile (``make_private_quantile``: the exponential mechanism on a
quantile score, Smith 2011; McKenna & Sheldon 2020's analysis) picks its ``alpha`` and ``1 - alpha``
quantiles from a data-independent grid of candidates (0 and +-10^(j/8) from 1e-3 to 1e7: 163 values,
steps of 33%). The 2k quantiles of k features compose sequentially: each runs at epsilon_b / (2k) (the
largest float whose 2k multiples do not exceed epsilon_b exactly), so the step is epsilon_b-DP for one row
added or removed (d_in = 1 in OpenDP's symmetric distance) or replaced (d_in = 2), each quantile's privacy
map checked by OpenDP. Making lower < upper (the grid's next candidate) is post-processing. The features
are then clipped to the estimated bounds and scaled (none, or min-max to [-1, 1]): what the mechanism
receives is a function of the estimated bounds and the rows, so the release composes sequentially with
the step, and the ledger debits epsilon_b with the release's epsilon, in one transaction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from dpcore.errors import ParameterError
from dpcore.steps import PrepStep

__all__ = ["CANDIDATES", "LABEL", "MECHANISM", "BoundsStep"]

MECHANISM = "private_bounds"
_POWERS = 10.0 ** (np.arange(-24, 57) / 8)  # 1e-3 .. 1e7, 8 per decade
CANDIDATES: np.ndarray = np.concatenate([-_POWERS[::-1], [0.0], _POWERS])
LABEL = "bounds estimated privately (OpenDP quantile)"  # its ledger row, in words


def _exact(x: float) -> Fraction:
    """The ledger's reading of a float: its shortest decimal (``dpcore.ledger.composition._exact``)."""
    return Fraction(repr(float(x)))


@dataclass(frozen=True)
class BoundsStep(PrepStep):
    """Estimate (lower, upper) of ``features`` with epsilon_b = ``epsilon`` (pure DP) under ``neighbours``
    ("unbounded": a row added or removed; "bounded": a row replaced) for ``group`` rows of one person at
    once (group privacy: OpenDP's d_in times ``group``), at quantiles ``alpha`` and ``1 - alpha``; then
    clip and apply ``scaling`` ("none" or "minmax") with them. A plan's preparation step (kind
    "private_bounds"; :meth:`fields` is the plan's ``private_bounds`` record)."""

    mechanism: ClassVar[str] = MECHANISM  # its ledger row
    title: ClassVar[str] = "private bounds"

    kind: ClassVar[str] = "private_bounds"
    spends: ClassVar[bool] = True
    features: tuple[str, ...]
    epsilon: float
    neighbours: str = "unbounded"
    alpha: float = 0.01
    scaling: str = "minmax"
    candidates: np.ndarray = field(default_factory=lambda: CANDIDATES, repr=False, compare=False)
    group: int = 1

    def __post_init__(self) -> None:
        names = tuple(str(f) for f in self.features)
        if not names or len(set(names)) != len(names):
            raise ParameterError("Private bounds need at least one feature, each named once.")
        object.__setattr__(self, "features", names)
        eps = float(self.epsilon)
        if not (math.isfinite(eps) and eps > 0):
            raise ParameterError(
                f"ε_b for the private bounds must be a positive number, got {self.epsilon!r}."
            )
        object.__setattr__(self, "epsilon", eps)
        if self.neighbours not in ("unbounded", "bounded"):
            raise ParameterError(f"neighbours must be 'unbounded' or 'bounded', got {self.neighbours!r}.")
        alpha = self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 0.5:
            raise ParameterError(f"alpha must lie in (0, 0.5), got {self.alpha!r}; e.g. 0.01.")
        object.__setattr__(self, "alpha", float(self.alpha))
        if self.scaling not in ("none", "minmax"):
            raise ParameterError(
                f"Private bounds take scaling 'none' or 'minmax', not {self.scaling!r} (standardising reads "
                "the data's mean and standard deviation)."
            )
        if isinstance(self.group, bool) or not isinstance(self.group, int) or self.group < 1:
            raise ParameterError(f"group must be a whole number of rows >= 1, got {self.group!r}.")

    @property
    def d_in(self) -> int:
        """The symmetric distance between neighbouring tables: 1 row added or removed, 2 for a replacement,
        times :attr:`group`."""
        return (1 if self.neighbours == "unbounded" else 2) * self.group

    @property
    def per_quantile(self) -> float:
        """epsilon_b / (2k), rounded down so that 2k of them do not exceed epsilon_b exactly."""
        parts = 2 * len(self.features)
        q = self.epsilon / parts
        while parts * _exact(q) > _exact(self.epsilon):
            q = math.nextafter(q, 0.0)
        return q

    def rank_error(self, beta: float = 0.05) -> float:
        """Rows by which each quantile may miss its target rank, with probability 1 - ``beta`` whatever the
        table: the exponential mechanism's bound 2 d_in (ln |C| + ln(1/beta)) / (epsilon_b / 2k) for a rank
        score of sensitivity d_in over |C| candidates (McSherry & Talwar 2007). A table with not many more
        rows than this gets bounds close to random picks from the grid, which may miss its data entirely."""
        return 2 * self.d_in * (math.log(len(self.candidates)) + math.log(1 / beta)) / self.per_quantile

    def accuracy(self) -> str:
        """What ε_b buys, in words a curator can check against the table's size (which is not public)."""
        rows = self.rank_error()
        return (
            f"each quantile may be off by up to {rows:,.0f} rows (95%), so only a table with many more rows "
            f"than {rows:,.0f} gets bounds near its {self.alpha:.0%}–{1 - self.alpha:.0%} range; with fewer, "
            "the bounds are close to random values of the grid and can miss the data entirely (a larger ε_b "
            "or fewer features help)"
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BoundsStep:
        try:
            return cls(
                tuple(data["features"]),
                data["epsilon"],
                data.get("neighbours", "unbounded"),
                data.get("alpha", 0.01),
                data.get("scaling", "minmax"),
            )
        except (KeyError, TypeError) as err:
            raise ParameterError(f"The plan's private bounds step is malformed ({err}).") from None

    def fields(self) -> dict[str, Any]:
        """The plan's ``private_bounds`` record (``group`` only when a region step's part sets it)."""
        out = super().fields()
        if self.group == 1:
            del out["group"]
        return out

    @property
    def text(self) -> str:
        """The step in words, for "What will run" and the manifest."""
        return (
            f"lower and upper bounds of {', '.join(self.features)} estimated privately at release: OpenDP's "
            f"DP quantile at {self.alpha:g} and {1 - self.alpha:g} on a fixed grid (±1e-3..1e7), ε_b = "
            f"{self.epsilon:g} in all ({len(self.features) * 2} quantiles), then scaling: {self.scaling}; "
            f"{self.accuracy()}"
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """The step's rows of "What will run"."""
        return [("ε_b (private bounds)", f"{self.epsilon:.6g}")]

    def note(self, unit: str, release_epsilon: float) -> str:
        """The step in the release's guarantee (``unit``: what the release's epsilon counts)."""
        return (
            f"The bounds of {', '.join(self.features)} were estimated privately first "
            f"(ε_b = {self.epsilon:g}, the same neighbours), then the release ran at {unit} = "
            f"{release_epsilon:.4g}."
        )

    def _measurement(self, alpha: float, scale: float) -> Any:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
        cands = [float(c) for c in self.candidates]
        return dp.m.make_private_quantile(
            domain, dp.symmetric_distance(), dp.max_divergence(), cands, alpha, scale
        )

    def measurements(self) -> list[tuple[Any, float]]:
        """The two OpenDP measurements of a feature (lower, upper quantile) and their privacy maps at
        :attr:`d_in`, each at most :attr:`per_quantile`."""
        q = self.per_quantile
        out = []
        for alpha in (float(self.alpha), 1.0 - float(self.alpha)):
            unit = self._measurement(alpha, 1.0).map(self.d_in)
            scale = float(unit) / q
            m = self._measurement(alpha, scale)
            while m.map(self.d_in) > q:
                scale = math.nextafter(scale, math.inf)
                m = self._measurement(alpha, scale)
            out.append((m, float(m.map(self.d_in))))
        return out

    def spent(self) -> Fraction:
        """The step's exact privacy loss: the sum of its 2k measurements' privacy maps (<= epsilon_b)."""
        return len(self.features) * sum((_exact(e) for _, e in self.measurements()), Fraction(0))

    def estimate(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per column of ``columns`` (n, k), one column per feature, in its units."""
        data = np.asarray(columns, dtype=float)
        if data.ndim != 2 or data.shape[1] != len(self.features) or not np.isfinite(data).all():
            raise ParameterError(f"Private bounds need a finite (n, {len(self.features)}) array of values.")
        (low, _), (high, _) = self.measurements()
        lower, upper = np.empty(data.shape[1]), np.empty(data.shape[1])
        cands = self.candidates
        for j in range(data.shape[1]):
            values = data[:, j].tolist()
            lo, hi = float(low(values)), float(high(values))
            if lo >= hi:  # post-processing: the next candidate up (or down at the grid's top)
                i = int(np.searchsorted(cands, lo))
                lo, hi = (lo, float(cands[i + 1])) if i + 1 < len(cands) else (float(cands[i - 1]), lo)
            lower[j], upper[j] = lo, hi
        return lower, upper

    def apply(self, inputs: Any) -> tuple[Any, dict[str, list[float]]]:
        """The k-means inputs with :attr:`features` bounded by their estimates, clipped and scaled, and the
        estimates per feature. In memory (``KMeansInputs``), those columns must be in their own units
        (identity scaling: ``dpcore.data.prepare`` with ``private_epsilon`` leaves them so); a batch job's
        ``TableFeatures`` (:mod:`dpcore.outofcore.features`) gets the estimates as its bounds."""
        from dpcore.kmeans.registry import KMeansInputs

        if not isinstance(inputs, KMeansInputs):
            return self._apply_table(inputs)
        names = list(inputs.feature_names)
        missing = [f for f in self.features if f not in names]
        if missing or inputs.lower is None:
            raise ParameterError(
                f"The release's inputs lack the features {missing} of the private bounds step."
            )
        idx = [names.index(f) for f in self.features]
        lo, hi = self.estimate(inputs.X[:, idx])
        center, scale = np.zeros(len(names)), np.ones(len(names))
        if self.scaling == "minmax":
            center[idx], scale[idx] = (lo + hi) / 2, (hi - lo) / 2
        raw_lower, raw_upper = inputs.lower.copy(), inputs.upper.copy()
        raw_lower[idx], raw_upper[idx] = lo, hi
        X = inputs.X.copy()
        X[:, idx] = np.clip(X[:, idx], lo, hi)
        X = (X - center) / scale
        decode = inputs.inverse_transform
        new_decode = (
            None if decode is None else (lambda c: decode(np.asarray(c, dtype=float) * scale + center))
        )
        hidden = tuple(f for f in inputs.data_bounds if f not in self.features)
        out = replace(
            inputs,
            X=np.ascontiguousarray(X),
            lower=(raw_lower - center) / scale,
            upper=(raw_upper - center) / scale,
            inverse_transform=new_decode,
            data_bounds=hidden,
        )
        return out, {f: [float(lo[j]), float(hi[j])] for j, f in enumerate(self.features)}

    def _apply_table(self, features: Any) -> tuple[Any, dict[str, list[float]]]:
        """A batch job's features with the estimated bounds (its pending columns read once, in any order:
        a quantile does not depend on it); the scaling is the plan's."""
        names = list(features.feature_names)
        idx = [names.index(f) for f in self.features]
        values = features.rows.select(*self.features).to_pandas()[list(self.features)]
        lo, hi = self.estimate(values.to_numpy(dtype=float))
        raw_lower, raw_upper = features.raw_lower.copy(), features.raw_upper.copy()
        raw_lower[idx], raw_upper[idx] = lo, hi
        out = replace(features, raw_lower=raw_lower, raw_upper=raw_upper, scaling=self.scaling)
        return out, {f: [float(lo[j]), float(hi[j])] for j, f in enumerate(self.features)}
