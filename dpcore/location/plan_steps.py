"""A location release's public inputs as typed plan steps: written by the Locations page, read by a batch job.

Two steps, neither read from the data: the columns (:class:`LocationColumns`: latitude, longitude, and
the user column or None when each row is its own person) and the public region (:class:`PublicRegion`,
each bound a float kept exactly). ``python -m dpcore run-plan`` rebuilds the release's input from their
fields (:func:`read_location_steps`); their sentences are derived from the fields, never parsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.steps import PrepStep, column, number

__all__ = ["LocationColumns", "PublicRegion", "read_location_steps"]


@dataclass(frozen=True)
class LocationColumns(PrepStep):
    """The coordinate columns and the user column (``user`` None: each row is a different person)."""

    kind: ClassVar[str] = "location_columns"
    lat: str
    lon: str
    user: str | None = None

    def __post_init__(self) -> None:
        column(self.lat, "The latitude column")
        column(self.lon, "The longitude column")
        if self.user is not None:
            column(self.user, "The user column")

    @property
    def text(self) -> str:
        who = "none" if self.user is None else json.dumps(self.user)
        return (
            f"location columns: latitude {json.dumps(self.lat)}, longitude {json.dumps(self.lon)}, user {who}"
        )


@dataclass(frozen=True)
class PublicRegion(PrepStep):
    """The curator's public latitude/longitude box (:class:`~dpcore.location.geometry.Region`)."""

    kind: ClassVar[str] = "public_region"
    lat_min: float
    lat_max: float
    lon_min: float
    lon_max: float

    def __post_init__(self) -> None:
        for name in ("lat_min", "lat_max", "lon_min", "lon_max"):
            object.__setattr__(self, name, number(getattr(self, name), f"The region's {name}"))
        Region(self.lat_min, self.lat_max, self.lon_min, self.lon_max)  # refuses an invalid box

    @classmethod
    def of(cls, region: Region) -> PublicRegion:
        return cls(region.lat_min, region.lat_max, region.lon_min, region.lon_max)

    @property
    def region(self) -> Region:
        return Region(self.lat_min, self.lat_max, self.lon_min, self.lon_max)

    @property
    def text(self) -> str:  # repr: the shortest text that reads back as the same float
        return (
            f"public region: lat {self.lat_min!r}..{self.lat_max!r}, lon {self.lon_min!r}..{self.lon_max!r}"
        )


def read_location_steps(steps: Iterable[PrepStep]) -> tuple[str, str, str | None, Region]:
    """(latitude column, longitude column, user column or None, region) from a plan's steps; a plan without
    them (made before the columns were recorded) is refused with the fix. When the plan estimates its
    region privately at release (a :class:`~dpcore.location.private_region.RegionStep`, instead of a
    public region), the region is :data:`~dpcore.location.private_region.WHOLE_EARTH` until the step
    replaces it."""
    from dpcore.location.private_region import WHOLE_EARTH, RegionStep

    steps = tuple(steps)
    columns = next((s for s in steps if isinstance(s, LocationColumns)), None)
    region = next((s.region for s in steps if isinstance(s, PublicRegion)), None)
    if any(isinstance(s, RegionStep) for s in steps):
        if region is not None:
            raise ParameterError(
                "The plan records a public region and estimates one privately; make the plan again on the "
                "Locations page."
            )
        region = WHOLE_EARTH
    if columns is None or region is None:
        raise ParameterError(
            "The plan does not record its location columns and public region; make the plan again on the "
            "Locations page and download it."
        )
    return columns.lat, columns.lon, columns.user, region
