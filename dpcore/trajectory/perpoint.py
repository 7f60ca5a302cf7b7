"""Second baseline: planar Laplace on every fix, the person's budget split over their m x L fixes.

Guarantee: each fix is released with planar Laplace at level l / (m L) within the region's diagonal D
(:class:`dpcore.location.laplace.PlanarLaplace`, Andres et al. 2013), so moving all of one person's at
most m L fixes anywhere in the region changes any output's probability by at most e^l
(geo-indistinguishability composed per person). The number of trips and of fixes per trip is not
hidden: this baseline is for comparison only, to show why per-point noise fails on trajectories.
"""

from __future__ import annotations

import numpy as np

from dpcore.location.budget import per_member_epsilon
from dpcore.location.geometry import Region, haversine_m
from dpcore.location.laplace import PlanarLaplace
from dpcore.mechanisms import Sampler
from dpcore.trajectory.prepare import TripSet

__all__ = ["per_point_laplace"]


def per_point_laplace(
    trips: TripSet, region: Region, epsilon: float, max_trips: int, max_fixes: int, random_state: Sampler
) -> TripSet:
    """The trips with every fix moved by planar Laplace at level eps / (m L) within the diagonal."""
    diagonal = float(haversine_m(region.lat_min, region.lon_min, region.lat_max, region.lon_max)[()])
    level = per_member_epsilon(epsilon, max_trips * max_fixes)
    lat, lon = trips.to_latlon(region)
    mech = PlanarLaplace(level=level, radius_m=diagonal, region=region, random_state=random_state)
    z_lat, z_lon = mech.release(lat, lon) if trips.n_fixes else (np.zeros(0), np.zeros(0))
    x, y = region.projection().forward(z_lat, z_lon)
    return TripSet(np.asarray(x), np.asarray(y), trips.offsets.copy())
