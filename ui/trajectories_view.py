"""Helpers of the Trajectories page: reading the fixes, cached preparation and comparison, release inputs.

Nothing here computes privacy or utility: preparation, mechanisms, metrics and figures come from
``dpcore.trajectory`` and ``dpcore.plots.trajectory``. Cached functions are keyed by ``key`` (the dataset
fingerprint, its cleaning steps and the chosen columns) plus the public limits; arrays are passed as
``_fixes`` / ``_trips`` (not hashed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from dpcore.errors import DataError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.steps import PrepStep
from dpcore.trajectory.metrics import diameters, trip_lengths
from dpcore.trajectory.prepare import Prepared, TripLimits, TripSet, parse_times, prepare_trips
from dpcore.trajectory.registry import TrajectoryInputs
from dpcore.trajectory.sweep import Comparison, compare

__all__ = [
    "EPS_OPTIONS",
    "Fixes",
    "comparison",
    "data_key",
    "latlon_trips",
    "per_trip_km",
    "prepared",
    "read_fixes",
    "release_inputs",
]

EPS_OPTIONS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class Fixes:
    """The fixes as the page read them: columns by role, times in UTC (naive ones read in ``tz``)."""

    person: np.ndarray
    time: pd.Series
    lat: np.ndarray
    lon: np.ndarray
    trip: np.ndarray | None
    columns: tuple[str, str, str, str, str | None]
    tz: str

    @property
    def n_people(self) -> int:
        return int(pd.Series(self.person).nunique())


def read_fixes(
    frame: pd.DataFrame, person: str, time: str, lat: str, lon: str, trip: str | None, tz: str
) -> Fixes:
    """The chosen columns of ``frame``; a clear DataError when a timestamp cannot be read."""
    times = parse_times(frame[time], tz)
    bad = int(times.isna().sum())
    if bad:
        raise DataError(
            f"{bad:,} value(s) of '{time}' are not timestamps (e.g. 2026-03-02T08:00:00Z); choose the time "
            "column, or drop those rows on the Data page."
        )
    return Fixes(
        frame[person].to_numpy(),
        times,
        pd.to_numeric(frame[lat], errors="coerce").to_numpy(dtype=float),
        pd.to_numeric(frame[lon], errors="coerce").to_numpy(dtype=float),
        None if trip is None else frame[trip].to_numpy(),
        (person, time, lat, lon, trip),
        tz,
    )


def data_key(fingerprint: str, cleaning: Sequence[PrepStep], fixes: Fixes) -> str:
    return json.dumps([fingerprint, [s.to_dict() for s in cleaning], list(fixes.columns), fixes.tz])


@st.cache_data(max_entries=4, show_spinner=False)
def prepared(key: str, _fixes: Fixes, limits: tuple[float, ...]) -> Prepared:
    """The trips under the limits (lat_min, lat_max, lon_min, lon_max, m, L, gap s, speed), for the
    diagnostic map and the comparison (a fixed diagnostic sampler drops over-cap trips)."""
    a, b, c, d, m, n, gap, speed = limits
    lim = TripLimits(Region(a, b, c, d), max_trips=int(m), max_fixes=int(n), gap_s=gap, max_speed_mps=speed)
    f = _fixes
    return prepare_trips(f.person, f.time, f.lat, f.lon, lim, Sampler.diagnostic(0), trip=f.trip)


@st.cache_data(max_entries=4, show_spinner=False)
def comparison(
    key: str, _trips: TripSet, limits: tuple[float, ...], eps: tuple[float, ...], trials: int, params: str
) -> Comparison:
    """Every trajectory mechanism and the per-fix baseline over ``eps`` x ``trials`` on the prepared trips
    (diagnostic), each with its parameters (``params``: mechanism key -> parameters, as JSON)."""
    a, b, c, d, m, n, _, _ = limits
    return compare(
        _trips,
        Region(a, b, c, d),
        eps,
        max_trips=int(m),
        max_fixes=int(n),
        params=json.loads(params),
        trials=trials,
    )


def release_inputs(fixes: Fixes, region: Region, gap_s: float, max_speed_mps: float) -> TrajectoryInputs:
    return TrajectoryInputs(
        fixes.person, fixes.time, fixes.lat, fixes.lon, fixes.trip, region, gap_s, max_speed_mps
    )


def per_trip_km(sets: Mapping[str, TripSet], what: str) -> dict[str, np.ndarray]:
    """Each set's trip lengths or diameters (``what``) in km, for the histograms."""
    measure = trip_lengths if what == "length" else diameters
    return {name: measure(t) / 1000.0 for name, t in sets.items()}


def latlon_trips(trips: TripSet, region: Region) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lat, lon, offsets) of trips in plane metres, for the maps."""
    lat, lon = region.clip(*trips.to_latlon(region))
    return lat, lon, trips.offsets
