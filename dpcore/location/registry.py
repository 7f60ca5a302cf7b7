"""The location mechanisms' registry, their common input and the per-user contribution step.

``LOCATIONS`` holds one :class:`~dpcore.registry.MechanismSpec` per module of
``dpcore.location.mechanisms``; ``LOCATIONS[key].release(inputs, epsilon=..., delta=0.0, params=...,
random_state=...)`` runs one release from a :class:`LocationInputs`. Every release keeps at most the public
``max_per_user`` rows of each user (a uniformly random subset drawn with the release's sampler,
independently of the values: ``contribution.cap_per_user``) when there is a user column,
calibrates its noise for a person with that many rows, and returns its scope sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcore.accounts import Relation
from dpcore.accuracy import LOCATION_ERROR_M
from dpcore.errors import ParameterError
from dpcore.location.contribution import cap_per_user, check_max_per_user, scope_sentence, user_codes
from dpcore.location.geometry import FloatArray, Region, validate_latlon
from dpcore.location.grids import ClampedPoints, PointCounts
from dpcore.location.hotspots import PlanePoints, project_locations
from dpcore.mechanisms import Sampler
from dpcore.registry import Metric, Param, Registry

__all__ = [
    "ERROR_M",
    "LOCATIONS",
    "MAX_PER_USER",
    "RANGE_ERROR",
    "WCSS_LOSS",
    "Counted",
    "Kept",
    "LocationInputs",
    "Projected",
    "chosen_neighbours",
    "keep_per_user",
    "kept_details",
    "kept_diagnostics",
    "no_delta",
    "per_user_contribution",
    "threshold_relation",
]

LOCATIONS = Registry("location")

MAX_PER_USER = Param(
    "max_per_user",
    "Most locations per user (public)",
    int,
    1,
    low=1,
    high=100_000,
    help="A limit you know holds for every user, never read from the data: each user's extra rows are "
    "dropped at random and the noise protects a user with this many locations. Used only with a user column.",
)



def chosen_neighbours(params: Mapping[str, Any], policy: Any = None) -> Relation:
    """The relation a differentially private release calibrated for ``params["neighbours"]`` protects: one
    person's locations added or removed, or replaced (whatever the policy)."""
    return Relation("dp", params["neighbours"])


def threshold_relation(name: str) -> Callable[[Mapping[str, Any], Any], Relation]:
    """The Blowfish relation of a release calibrated for the great-circle threshold ``params[name]``
    (metres): one location replaced by one at most that far away (whatever the policy's graph)."""

    def relation(params: Mapping[str, Any], policy: Any = None) -> Relation:
        return Relation("blowfish", "threshold", float(params[name]), "haversine")

    return relation


def per_user_contribution(params: Mapping[str, Any], scope: str) -> int | None:
    """m = ``max_per_user`` when the release protects all rows of one user (its scope is "per user (at most
    m locations each)"), else None (one location)."""
    m = params[MAX_PER_USER.name]
    return m if scope == scope_sentence(True, m) else None


#: The location trials' metrics (:mod:`dpcore.location.trial_data`).
ERROR_M = Metric(LOCATION_ERROR_M, "Location error (m)")
RANGE_ERROR = Metric("median_relative_error", "Rectangle queries: median relative error")
WCSS_LOSS = Metric("fractional_wcss_loss", "Hotspots: fractional WCSS loss (vs non-private k-means)")


@dataclass(frozen=True)
class LocationInputs:
    """What a location release reads: coordinates in degrees, a user id per row (or None: each row is a
    different person) and the curator's public region. Checked on creation (``DataError``)."""

    lat: FloatArray
    lon: FloatArray
    users: np.ndarray | None
    region: Region

    def __post_init__(self) -> None:
        lat, lon = validate_latlon(self.lat, self.lon, table=True)
        object.__setattr__(self, "lat", lat)
        object.__setattr__(self, "lon", lon)
        if self.users is not None:
            object.__setattr__(self, "users", np.asarray(self.users))
            user_codes(self.users, lat.size)
        if not isinstance(self.region, Region):
            raise ParameterError(
                "a location release needs a public region: pass region=Region(lat_min, ...)."
            )

    @property
    def has_users(self) -> bool:
        return self.users is not None

    @property
    def n_rows(self) -> int:
        return int(self.lat.size)

    def counted(self, max_per_user: int, random_state: Sampler) -> Counted:
        """The rows a grid counts: :func:`keep_per_user`'s, clamped onto the region."""
        kept = keep_per_user(self, max_per_user, random_state)
        return Counted(ClampedPoints.of(kept.lat, kept.lon, self.region), kept.group, kept.scope)

    def projected(self, max_per_user: int, random_state: Sampler) -> Projected:
        """The rows a mean position or hotspots release: :func:`keep_per_user`'s, through the region's map."""
        kept = keep_per_user(self, max_per_user, random_state)
        return Projected(project_locations(kept.lat, kept.lon, self.region), kept.group, kept.scope)


@dataclass(frozen=True)
class Kept:
    """The rows a release uses: at most ``group`` per person (``codes``: user code per row, or None)."""

    lat: FloatArray
    lon: FloatArray
    codes: np.ndarray | None
    labels: np.ndarray | None
    group: int
    scope: str

    @property
    def n(self) -> int:
        return int(self.lat.size)


@dataclass(frozen=True)
class Counted:
    """The rows a grid release counts (``points``: in memory or in an engine), at most ``group`` a person."""

    points: PointCounts
    group: int
    scope: str

    @property
    def n(self) -> int:
        return self.points.n


@dataclass(frozen=True)
class Projected:
    """The rows a mean position or hotspots release (``points``: mapped to the plane, in memory or in an
    engine), at most ``group`` a person."""

    points: PlanePoints
    group: int
    scope: str

    @property
    def n(self) -> int:
        return self.points.n


def keep_per_user(inputs: LocationInputs, max_per_user: int, random_state: Sampler) -> Kept:
    """With users: min(count, m) rows of each user, a uniformly random subset drawn with ``random_state``
    independently of the values (:func:`~dpcore.location.contribution.cap_per_user`), and group m;
    without: every row, group 1."""
    m = check_max_per_user(max_per_user)
    if inputs.users is None:
        return Kept(inputs.lat, inputs.lon, None, None, 1, scope_sentence(False, m))
    codes, labels = user_codes(inputs.users, inputs.lat.size)
    keep = cap_per_user(codes, labels, inputs.lat, inputs.lon, m, random_state)
    return Kept(inputs.lat[keep], inputs.lon[keep], codes[keep], labels, m, scope_sentence(True, m))


def no_delta(delta: float) -> None:
    """Location mechanisms spend epsilon only."""
    if delta != 0:
        raise ParameterError(f"this location mechanism spends no delta; pass delta = 0 (got {delta!r}).")


def kept_details(kept: Kept | Counted | Projected, inputs: LocationInputs) -> dict[str, Any]:
    """Manifest facts every location release shares: scope, the per-user cap, the public region."""
    out: dict[str, Any] = {"scope": kept.scope, "region": inputs.region.to_dict()}
    if inputs.has_users:
        out["max_per_user"] = kept.group
    return out


def kept_diagnostics(kept: Kept | Counted | Projected, inputs: LocationInputs) -> dict[str, Any]:
    """Curator-only counts: rows given and rows used after the per-user cap (data-dependent)."""
    return {"rows_given": inputs.n_rows, "rows_used": kept.n}


# Registers every mechanism (each module imports the names above from this, by then initialised, module).
from dpcore.location import mechanisms as _mechanisms  # noqa: E402,F401
