"""A location release's public inputs as plan steps: written by the Locations page, read by a batch job.

Two steps, neither read from the data: the columns ("location columns: latitude "lat", longitude "lon",
user "id"" or user none; names as JSON strings) and the public region ("public region: lat 24.5..49.4,
lon -125.0..-66.9"; each bound the shortest text that reads back as the same float). ``python -m dpcore
run-plan`` rebuilds the release's input from them (:func:`read_location_steps`), so they must round-trip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.plan import PrepStep

_NUMBER = r"[-+0-9.eE]+"
_REGION = re.compile(
    rf"public region: lat (?P<a>{_NUMBER})\.\.(?P<b>{_NUMBER}), lon (?P<c>{_NUMBER})\.\.(?P<d>{_NUMBER})"
)
_COLUMNS = re.compile(
    r'location columns: latitude (?P<lat>".*?"), longitude (?P<lon>".*?"), user (?P<user>.*)'
)


def region_step(region: Region) -> PrepStep:
    """The public region, each bound written exactly (``repr`` of the float)."""
    a, b, c, d = (repr(float(v)) for v in (region.lat_min, region.lat_max, region.lon_min, region.lon_max))
    return PrepStep(f"public region: lat {a}..{b}, lon {c}..{d}", False)


def columns_step(lat: str, lon: str, user: str | None) -> PrepStep:
    """The coordinate and user columns (``user`` None: each row is a different person)."""
    who = "none" if user is None else json.dumps(user)
    return PrepStep(
        f"location columns: latitude {json.dumps(lat)}, longitude {json.dumps(lon)}, user {who}", False
    )


def read_location_steps(
    steps: Iterable[str], *, private_region: bool = False
) -> tuple[str, str, str | None, Region]:
    """(latitude column, longitude column, user column or None, region) from a plan's steps; a plan made
    before the columns were recorded, or with a step that does not parse, is refused with the fix. With
    ``private_region`` (the plan estimates its region privately at release: no public region step), the
    region is :data:`~dpcore.location.private_region.WHOLE_EARTH` until the step replaces it."""
    columns: tuple[str, str, str | None] | None = None
    region: Region | None = None
    for step in steps:
        if (m := _REGION.fullmatch(step)) is not None:
            region = Region(*(float(m[k]) for k in "abcd"))
        elif (m := _COLUMNS.fullmatch(step)) is not None:
            try:
                user = None if m["user"] == "none" else json.loads(m["user"])
                columns = (json.loads(m["lat"]), json.loads(m["lon"]), user)
            except ValueError as err:
                raise ParameterError(f"Cannot read the location columns in {step!r}.") from err
    if private_region:
        from dpcore.location.private_region import WHOLE_EARTH

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
    return (*columns, region)
