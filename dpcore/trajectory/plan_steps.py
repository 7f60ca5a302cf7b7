"""A trajectory release's public inputs as plan steps (written by the Trajectories page, read back by
:func:`read_trajectory_steps`): the columns (names as JSON strings, the time zone the timestamps are read
in) and the public region, time gap and speed limit (each number the shortest text that reads back as the
same float). Neither is read from the data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.plan import PrepStep

_NUMBER = r"[-+0-9.eE]+"
_LIMITS = re.compile(
    rf"public trip limits: region lat (?P<a>{_NUMBER})\.\.(?P<b>{_NUMBER}), "
    rf"lon (?P<c>{_NUMBER})\.\.(?P<d>{_NUMBER}); "
    rf"new trip after a gap of (?P<gap>{_NUMBER}) s; fixes faster than (?P<speed>{_NUMBER}) m/s dropped"
)
_COLUMNS = re.compile(
    r'trajectory columns: person (?P<person>".*?"), time (?P<time>".*?") '
    r"\(naive times read as (?P<tz>.*?)\), "
    r'latitude (?P<lat>".*?"), longitude (?P<lon>".*?"), trip (?P<trip>.*)'
)


def limits_step(region: Region, gap_s: float, max_speed_mps: float) -> PrepStep:
    """The public region, the time gap that starts a new trip and the speed limit, written exactly."""
    a, b, c, d = (repr(float(v)) for v in (region.lat_min, region.lat_max, region.lon_min, region.lon_max))
    return PrepStep(
        f"public trip limits: region lat {a}..{b}, lon {c}..{d}; new trip after a gap of {float(gap_s)!r} s; "
        f"fixes faster than {float(max_speed_mps)!r} m/s dropped",
        False,
    )


def columns_step(person: str, time: str, lat: str, lon: str, trip: str | None, tz: str = "UTC") -> PrepStep:
    """The person, timestamp (and the zone naive times are read in), coordinate and trip columns."""
    return PrepStep(
        f"trajectory columns: person {json.dumps(person)}, time {json.dumps(time)} "
        f"(naive times read as {tz}), "
        f"latitude {json.dumps(lat)}, longitude {json.dumps(lon)}, trip "
        + ("none (split at the gap)" if trip is None else json.dumps(trip)),
        False,
    )


def read_trajectory_steps(steps: Iterable[str]) -> tuple[dict[str, str | None], Region, float, float]:
    """(columns by role, region, gap s, speed m/s) from a plan's steps; refused with the fix otherwise."""
    columns: dict[str, str | None] | None = None
    limits: tuple[Region, float, float] | None = None
    for step in steps:
        if (m := _LIMITS.fullmatch(step)) is not None:
            limits = (Region(*(float(m[k]) for k in "abcd")), float(m["gap"]), float(m["speed"]))
        elif (m := _COLUMNS.fullmatch(step)) is not None:
            try:
                trip = None if m["trip"] == "none (split at the gap)" else json.loads(m["trip"])
                columns = {k: json.loads(m[k]) for k in ("person", "time", "lat", "lon")} | {"trip": trip}
                columns["tz"] = m["tz"]
            except ValueError as err:
                raise ParameterError(f"Cannot read the trajectory columns in {step!r}.") from err
    if columns is None or limits is None:
        raise ParameterError(
            "The plan does not record its trajectory columns and public limits; make the plan again on the "
            "Trajectories page and download it."
        )
    return (columns, *limits)
