"""A location release's region estimated privately: a preparation step for curators without a public region.

The box the release clamps into (its grid, map or projection) is normally public. Without one, OpenDP's DP
quantile (``make_private_quantile``: the exponential mechanism on a quantile score, Smith 2011; McKenna &
Sheldon 2020) picks the ``alpha`` and ``1 - alpha`` quantiles of the latitudes on a data-independent grid
of 0.01 degrees from -90 to 90, and of the longitudes on one from -180 to 180
(:class:`dpcore.private_bounds.BoundsStep` per coordinate). The four quantiles compose sequentially at
epsilon_b / 4 each (rounded down so that they add up to at most epsilon_b exactly), so the step is
epsilon_b-DP, ordinary differential privacy on the rows: for one row added or removed (OpenDP's symmetric
distance d_in = 1) or replaced by any other (d_in = 2); with a user column, for all rows of one user at once
(at most m kept per user, a uniformly random m drawn independently of the values,
:func:`dpcore.location.registry.keep_per_user`; d_in = m or 2m). The release then clamps into the
estimated region: a function of the estimate and the rows, so it composes sequentially with the step.

Its ledger charge (:meth:`dpcore.plan.ReleasePlan`): epsilon_b on the release's own account, in the same
transaction. A differentially private release's step uses the release's neighbours; a
geo-indistinguishable or Blowfish release's step uses bounded neighbours (one location replaced by any
other), whose epsilon_b bounds the loss of every pair of locations whatever their distance, so it is at
most epsilon_b on a pair within the protected radius r (a level epsilon_b) or the threshold theta
(:func:`dpcore.accounts.factor` is 1): the plan checks that factor before charging it so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import check_random_state
from dpcore.private_bounds import BoundsStep
from dpcore.steps import PrepStep

__all__ = ["LABEL", "LAT_GRID", "LON_GRID", "MECHANISM", "WHOLE_EARTH", "RegionStep"]

MECHANISM = "private_region"
LABEL = "region estimated privately (OpenDP quantile; ε-DP on the rows)"  # its ledger row, in words
LAT_GRID: np.ndarray = np.arange(-9000, 9001) / 100  # degrees, 0.01 apart
LON_GRID: np.ndarray = np.arange(-18000, 18001) / 100
#: The box a release's input holds until the step estimates its region (nothing is clamped by it).
WHOLE_EARTH = Region(-90.0, 90.0, -180.0, 180.0)


def _exact(x: float) -> Fraction:
    return Fraction(repr(float(x)))


@dataclass(frozen=True)
class RegionStep(PrepStep):
    """Estimate the region (lat_min, lat_max, lon_min, lon_max) with epsilon_b = ``epsilon`` (pure DP) under
    ``neighbours`` ("unbounded": a row or user added or removed; "bounded": replaced), for all rows of one
    user at once when ``per_user`` = m (None: each row its own person), at quantiles ``alpha`` and
    ``1 - alpha`` of each coordinate."""

    mechanism: ClassVar[str] = MECHANISM  # its ledger row
    title: ClassVar[str] = "private region"
    kind: ClassVar[str] = "private_region"  # a plan's preparation step; :meth:`fields`: its private_bounds
    spends: ClassVar[bool] = True

    epsilon: float
    neighbours: str = "bounded"
    per_user: int | None = None
    alpha: float = 0.01

    def __post_init__(self) -> None:
        if self.per_user is not None and (
            isinstance(self.per_user, bool) or not isinstance(self.per_user, int) or self.per_user < 1
        ):
            raise ParameterError(f"per_user must be None or a whole number >= 1, got {self.per_user!r}.")
        try:
            object.__setattr__(self, "epsilon", float(self.epsilon))
        except (TypeError, ValueError):
            raise ParameterError(f"ε_b of the private region must be a number: {self.epsilon!r}.") from None
        self.parts  # noqa: B018 -- BoundsStep checks epsilon, neighbours and alpha

    @property
    def parts(self) -> tuple[BoundsStep, BoundsStep]:
        """The latitude and the longitude step, each at the largest float half of epsilon_b whose two
        copies do not exceed epsilon_b exactly (each then splits it over its two quantiles)."""
        eps = self.epsilon
        half = eps / 2
        while half > 0 and 2 * _exact(half) > _exact(eps):
            half = math.nextafter(half, 0.0)
        group = self.per_user or 1
        common = {"neighbours": self.neighbours, "alpha": self.alpha, "scaling": "none", "group": group}
        try:
            return (
                BoundsStep(("latitude",), half, candidates=LAT_GRID, **common),
                BoundsStep(("longitude",), half, candidates=LON_GRID, **common),
            )
        except ParameterError as err:
            raise ParameterError(str(err).replace("private bounds", "private region")) from None

    @property
    def per_quantile(self) -> float:
        """The epsilon of each of the four quantiles (at most epsilon_b / 4)."""
        return self.parts[0].per_quantile

    def spent(self) -> Fraction:
        """The step's exact privacy loss: the sum of its four measurements' privacy maps (<= epsilon_b)."""
        lat, lon = self.parts
        return lat.spent() + lon.spent()

    def rank_error(self, beta: float = 0.05) -> float:
        """Locations by which each edge's quantile may miss its target rank, with probability 1 - ``beta``
        (the longitudes' larger grid: :meth:`BoundsStep.rank_error`)."""
        return self.parts[1].rank_error(beta)

    def accuracy(self) -> str:
        """What ε_b buys, in words a curator can check against the table's size (which is not public)."""
        rows = self.rank_error()
        unit = "locations" if self.per_user is None else f"locations (each user's {self.per_user} at most)"
        enough = rows / self.alpha
        return (
            f"each edge may be off by up to {rows:,.0f} {unit} (95%) from its {self.alpha:.0%} rank, so it "
            f"is sure to fall among the data only with more than {enough:,.0f} {unit}; with fewer, an edge "
            "may land anywhere beyond the data on its side (a box far wider than the data) or cut into it; "
            "a larger ε_b helps"
        )

    def fields(self) -> dict[str, Any]:
        return {
            "region": "latitude and longitude quantiles",
            "epsilon": self.epsilon,
            "neighbours": self.neighbours,
            "per_user": self.per_user,
            "alpha": float(self.alpha),
        }

    def asked(self) -> dict[str, Any]:
        """What a page asks for (:meth:`fields` without the neighbours and unit, which the plan sets from
        its release)."""
        return {k: v for k, v in self.fields().items() if k not in ("neighbours", "per_user")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegionStep:
        try:
            if "region" not in data:
                raise KeyError("region")
            return cls(
                data["epsilon"],
                data.get("neighbours", "bounded"),
                data.get("per_user"),
                data.get("alpha", 0.01),
            )
        except (KeyError, TypeError) as err:
            raise ParameterError(f"The plan's private region step is malformed ({err}).") from None

    @property
    def text(self) -> str:
        """The step in words, for the plan's preparation (it replaces the public region)."""
        return (
            f"no public region: estimated privately at release: OpenDP's DP quantile at {self.alpha:g} and "
            f"{1 - self.alpha:g} of the latitudes and of the longitudes on fixed grids of 0.01° (-90..90, "
            f"-180..180), ε_b = {self.epsilon:g} in all (4 quantiles)"
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """The step's rows of "What will run"."""
        return [
            ("ε_b (private region)", f"{self.epsilon:.6g}"),
            ("Private region", f"{self.neighbours} neighbours; {self.accuracy()}"),
        ]

    def note(self, unit: str, release_epsilon: float) -> str:
        """The step in the release's guarantee (``unit``: what the release's epsilon counts)."""
        m = self.per_user
        who = "one location" if m is None else f"all of one user's locations (at most {m})"
        how = "added or removed" if self.neighbours == "unbounded" else "replaced by any others"
        counted = "" if unit == "ε" else f", counted as {unit} = {self.epsilon:g} on this account"
        return (
            f"The region was estimated privately first: ε_b = {self.epsilon:g} differential privacy for "
            f"{who} {how}{counted}; then the release ran at {unit} = {release_epsilon:.4g} in that region."
        )

    def estimate(self, lat: np.ndarray, lon: np.ndarray) -> Region:
        """The region of the coordinates ``lat``, ``lon`` (degrees; the rows of one user already capped)."""
        lat_step, lon_step = self.parts
        la, lo = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
        if la.shape != lo.shape or la.ndim != 1:
            raise ParameterError("The private region needs one latitude and one longitude per location.")
        (a,), (b,) = lat_step.estimate(la[:, None])
        (c,), (d,) = lon_step.estimate(lo[:, None])
        return Region(float(a), float(b), float(c), float(d))

    def apply(self, inputs: Any) -> tuple[Any, dict[str, float]]:
        """``inputs`` (:class:`~dpcore.location.registry.LocationInputs`, or a batch job's
        :class:`~dpcore.outofcore.locations.TableLocations`) with the estimated region, and the region.
        With users, the step reads at most :attr:`per_user` rows of each, a uniformly random subset drawn
        with OS entropy (the release keeps its own)."""
        if (self.per_user is not None) != inputs.has_users:
            raise ParameterError(
                "The private region step protects "
                + ("all rows of one user, but the locations have no user column." if self.per_user else
                   "one location, but the locations have a user column: the plan was made for another table.")
            )
        from dpcore.location.registry import LocationInputs, keep_per_user

        m, entropy = self.per_user or 1, check_random_state(None)
        if isinstance(inputs, LocationInputs):
            kept = keep_per_user(inputs, m, entropy)
            lat, lon = kept.lat, kept.lon
        else:  # an engine's table: the kept rows' two columns, read once
            rows = inputs.counted(m, entropy).points.rows.to_pandas()
            lat, lon = rows["la"].to_numpy(dtype=float), rows["lo"].to_numpy(dtype=float)
        region = self.estimate(lat, lon)
        return replace(inputs, region=region), region.to_dict()
