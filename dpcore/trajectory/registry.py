"""The trajectory mechanisms' registry and their common input.

``TRAJECTORIES`` holds one :class:`~dpcore.registry.MechanismSpec` per module of
``dpcore.trajectory.mechanisms``; ``TRAJECTORIES[key].release(inputs, epsilon=..., delta=0.0,
params=..., random_state=...)`` runs one release from a :class:`TrajectoryInputs`: the trips are prepared
under the public limits (:mod:`dpcore.trajectory.prepare`; ``max_trips`` and ``max_fixes`` are parameters of
the plan, the region, time gap and speed limit public steps of it) and the mechanism protects one person's
trips added or removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcore.accounts import Relation
from dpcore.errors import ParameterError
from dpcore.location.geometry import Region, validate_latlon
from dpcore.mechanisms import Sampler
from dpcore.registry import Metric, Param, Registry
from dpcore.trajectory.dpt import DPT
from dpcore.trajectory.metrics import METRICS
from dpcore.trajectory.prepare import Prepared, TripLimits, prepare_trips

__all__ = [
    "MAX_FIXES",
    "MAX_TRIPS",
    "NEIGHBOURS",
    "TRAJECTORIES",
    "TRIP_METRICS",
    "TrajectoryInputs",
    "person_contribution",
    "person_relation",
    "scope_of",
]

TRAJECTORIES = Registry("trajectory")

MAX_TRIPS = Param(
    "max_trips",
    "Most trips per person (public)",
    int,
    2,
    low=1,
    high=1000,
    help="A limit you know holds, never read from the data: a person's extra trips are dropped at random "
    "and the noise protects a person with this many trips.",
)
MAX_FIXES = Param(
    "max_fixes",
    "Most fixes per trip (public)",
    int,
    60,
    low=2,
    high=10_000,
    help="Longer trips are cut after this many fixes; the noise protects trips of this length.",
)
NEIGHBOURS = Param(
    "neighbours",
    "Neighbouring datasets",
    str,
    "unbounded",
    choices=("unbounded",),
    help="unbounded: one person's trips (at most the limits above) added or removed.",
)



def person_relation(params: Mapping[str, Any], policy: Any = None) -> Relation:
    """The relation a release protects: one person (all their rows) added or removed (``neighbours``)."""
    return Relation("dp", params[NEIGHBOURS.name])


def person_contribution(params: Mapping[str, Any], scope: str) -> int:
    """m x L: the fixes of one person a release reads (at most m trips of at most L fixes), whatever the
    scope sentence."""
    return int(params[MAX_TRIPS.name]) * int(params[MAX_FIXES.name])


#: What a trajectory trial's synthetic trips are scored by (:func:`dpcore.trajectory.metrics.utility`).
TRIP_METRICS = tuple(Metric(name, title) for name, title in METRICS.items())


def scope_of(max_trips: int, max_fixes: int) -> str:
    """The unit of protection in words: "per person (at most m trips of at most L fixes each)"."""
    return TripLimits(Region(0, 1, 0, 1), max_trips=max_trips, max_fixes=max_fixes).scope


@dataclass(frozen=True)
class TrajectoryInputs:
    """What a trajectory release reads: one row per fix (person id, timestamp, latitude, longitude,
    optionally a trip id) and the public region, time gap between trips (seconds, used without a trip
    column) and speed limit (m/s)."""

    person: np.ndarray
    time: Any
    lat: np.ndarray
    lon: np.ndarray
    trip: np.ndarray | None
    region: Region
    gap_s: float = 1200.0
    max_speed_mps: float = 70.0

    def __post_init__(self) -> None:
        lat, lon = validate_latlon(self.lat, self.lon, table=True)
        object.__setattr__(self, "lat", lat)
        object.__setattr__(self, "lon", lon)
        if not isinstance(self.region, Region):
            raise ParameterError("a trajectory release needs a public region: pass region=Region(...).")

    def fit_model(
        self, model: DPT, params: dict[str, Any], random_state: Sampler
    ) -> tuple[TripLimits, dict[str, int]]:
        """Fit ``model`` on the trips prepared under the limits of ``params``; (limits, curator-only
        counts of what preparation removed). :class:`dpcore.trajectory.outofcore.TrajectoryTable` does the
        same by passes over an engine's rows."""
        limits, prepared = self.prepared(params, random_state)
        model.fit(prepared.trips)
        return limits, prepared.counts

    def prepared(self, params: dict[str, Any], random_state: Sampler) -> tuple[TripLimits, Prepared]:
        """The public limits of ``params`` and the trips prepared under them (``random_state`` drops
        trips)."""
        limits = TripLimits(
            self.region,
            max_trips=params["max_trips"],
            max_fixes=params["max_fixes"],
            gap_s=self.gap_s,
            max_speed_mps=self.max_speed_mps,
        )
        out = prepare_trips(self.person, self.time, self.lat, self.lon, limits, random_state, trip=self.trip)
        return limits, out


# Registers every mechanism (each module imports the names above from this, by then initialised, module).
from dpcore.trajectory import mechanisms as _mechanisms  # noqa: E402,F401
