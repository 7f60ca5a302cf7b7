"""What the location mechanisms' diagnostic trials share within one comparison, computed once, on first use.

A location mechanism's spec declares ``trial(data, eps, trials, random_state, params)``, which returns
{metric: values}: ``data`` is a :class:`TrialData`, ``eps`` the checked eps grid (E,), ``params`` the
mechanism's declared parameters (validated), ``random_state`` a diagnostic sampler; every value array is
(trials, E) and the keys are the names of the metrics the spec declares. Everything here reads the true
data: curator diagnostics only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpcore.kmeans.cells import PlanarCells
from dpcore.location.geometry import FloatArray, PlaneMap, Region
from dpcore.location.grids import ClampedPoints, random_boxes, true_box_counts
from dpcore.location.hotspots import ProjectedLocations, project_locations, true_hotspots
from dpcore.location.prilocation import Visits, prepare_visits
from dpcore.mechanisms import Sampler

__all__ = ["DRAW_ENTRIES", "TrialData"]

DRAW_ENTRIES = 2_000_000  # numbers drawn or scored at once (bounded memory whatever the rows and trials)


@dataclass(frozen=True, eq=False)
class TrialData:
    """The checked coordinates (degrees), a user per row, the public region, the number of random
    rectangle queries and the comparison's diagnostic seed; the eps-independent parts of the trials as
    cached properties."""

    lat: FloatArray
    lon: FloatArray
    users: np.ndarray
    region: Region
    n_queries: int
    seed: int
    _wcss: dict[int, float] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return int(self.lat.size)

    @cached_property
    def visits(self) -> Visits:
        """The rows grouped by user (PriLocation's and planar Laplace's per-user errors)."""
        return prepare_visits(self.users, self.lat, self.lon, self.region)

    @cached_property
    def clamped(self) -> ClampedPoints:
        """The rows clamped onto the region (what a grid counts)."""
        return ClampedPoints.of(self.lat, self.lon, self.region)

    @cached_property
    def boxes(self) -> FloatArray:
        """Random rectangle queries over the region (diagnostic draws from the seed)."""
        return random_boxes(self.region, self.n_queries, Sampler.diagnostic(self.seed))

    @cached_property
    def box_truth(self) -> FloatArray:
        """The true count of every query box."""
        return true_box_counts(self.lat, self.lon, self.boxes, self.region)

    @cached_property
    def plane(self) -> PlaneMap:
        return PlaneMap.of(self.region)

    @cached_property
    def mean_xy(self) -> tuple[float, float]:
        """The true mean position in the region's plane (metres)."""
        x, y = self.plane.forward(self.lat, self.lon)
        return float(x.mean()), float(y.mean())

    @cached_property
    def mean_latlon(self) -> tuple[float, float]:
        la, lo = self.plane.inverse(*self.mean_xy)
        return float(la), float(lo)

    @cached_property
    def projected(self) -> tuple[ProjectedLocations, PlanarCells]:
        """The rows through the region's map and their grid cells (WCSS scoring by grid filtering)."""
        proj = project_locations(self.lat, self.lon, self.region)
        return proj, PlanarCells(proj.X)

    def true_wcss(self, k: int) -> float:
        """WCSS of non-private k-means with ``k`` centres on the projected rows (once per k)."""
        if k not in self._wcss:
            proj, cells = self.projected
            self._wcss[k] = float(cells.wcss(true_hotspots(proj, k, self.seed)[None])[0])
        return self._wcss[k]
