"""A trajectory release's public inputs as typed plan steps (written by the Trajectories page, read back by
:func:`read_trajectory_steps`): the columns with the time zone naive timestamps are read in
(:class:`TrajectoryColumns`) and the public region, time gap and speed limit (:class:`PublicTripLimits`,
each number a float kept exactly). Neither is read from the data; their sentences are derived, never
parsed."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.steps import PrepStep, column, number

__all__ = ["PublicTripLimits", "TrajectoryColumns", "read_trajectory_steps"]


@dataclass(frozen=True)
class TrajectoryColumns(PrepStep):
    """The person, timestamp, coordinate and trip columns (``trip`` None: trips split at the time gap), and
    the zone naive timestamps are read in."""

    kind: ClassVar[str] = "trajectory_columns"
    person: str
    time: str
    lat: str
    lon: str
    trip: str | None = None
    tz: str = "UTC"

    def __post_init__(self) -> None:
        for name in ("person", "time", "lat", "lon", "tz"):
            column(getattr(self, name), f"The {name} column" if name != "tz" else "The time zone")
        if self.trip is not None:
            column(self.trip, "The trip column")

    @property
    def columns(self) -> dict[str, str | None]:
        """The columns by role (person, time, lat, lon, trip)."""
        return {"person": self.person, "time": self.time, "lat": self.lat, "lon": self.lon, "trip": self.trip}

    @property
    def text(self) -> str:
        trip = "none (split at the gap)" if self.trip is None else json.dumps(self.trip)
        return (
            f"trajectory columns: person {json.dumps(self.person)}, time {json.dumps(self.time)} "
            f"(naive times read as {self.tz}), "
            f"latitude {json.dumps(self.lat)}, longitude {json.dumps(self.lon)}, trip {trip}"
        )


@dataclass(frozen=True)
class PublicTripLimits(PrepStep):
    """The public region, the time gap (s) that starts a new trip and the speed limit (m/s) above which a
    fix is dropped."""

    kind: ClassVar[str] = "trip_limits"
    lat_min: float
    lat_max: float
    lon_min: float
    lon_max: float
    gap_s: float
    max_speed_mps: float

    def __post_init__(self) -> None:
        for name in ("lat_min", "lat_max", "lon_min", "lon_max", "gap_s", "max_speed_mps"):
            object.__setattr__(self, name, number(getattr(self, name), f"The trip limits' {name}"))
        Region(self.lat_min, self.lat_max, self.lon_min, self.lon_max)  # refuses an invalid box
        if self.gap_s <= 0 or self.max_speed_mps <= 0:
            raise ParameterError("The time gap and the speed limit must be positive.")

    @classmethod
    def of(cls, region: Region, gap_s: float, max_speed_mps: float) -> PublicTripLimits:
        return cls(region.lat_min, region.lat_max, region.lon_min, region.lon_max, gap_s, max_speed_mps)

    @property
    def region(self) -> Region:
        return Region(self.lat_min, self.lat_max, self.lon_min, self.lon_max)

    @property
    def text(self) -> str:  # repr: the shortest text that reads back as the same float
        return (
            f"public trip limits: region lat {self.lat_min!r}..{self.lat_max!r}, lon {self.lon_min!r}.."
            f"{self.lon_max!r}; new trip after a gap of {self.gap_s!r} s; fixes faster than "
            f"{self.max_speed_mps!r} m/s dropped"
        )


def read_trajectory_steps(
    steps: Iterable[PrepStep],
) -> tuple[dict[str, str | None], str, Region, float, float]:
    """(columns by role, time zone, region, gap s, speed m/s) from a plan's steps; refused with the fix
    otherwise."""
    steps = tuple(steps)
    columns = next((s for s in steps if isinstance(s, TrajectoryColumns)), None)
    limits = next((s for s in steps if isinstance(s, PublicTripLimits)), None)
    if columns is None or limits is None:
        raise ParameterError(
            "The plan does not record its trajectory columns and public limits; make the plan again on the "
            "Trajectories page and download it."
        )
    return columns.columns, columns.tz, limits.region, limits.gap_s, limits.max_speed_mps
