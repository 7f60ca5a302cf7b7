"""Location hotspots: private k-means on locations (MECHANISMS.md s.4.4 and s.3.4-3.5).

Points are clamped into the public region and projected to metres (azimuthal equidistant around its
centre); the public bounds are the projected region's bounding box. ``policy="dp"`` runs
``DPLloydKMeans`` (eps-DP, one location added or removed); ``policy="blowfish"`` runs ``BlowfishKMeans``
with the L2 distance-threshold graph of radius k theta in the projection, k = a / sin(a) the projection's
largest scale factor (``LocalProjection.max_scale``): great-circle distance <= theta implies projected
distance <= k theta, so the result is (eps, G^{d,theta})-Blowfish for great-circle metres.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.location.geometry import FloatArray, Region, validate_latlon
from dpcore.mechanisms import Sampler
from dpcore.policy import DistanceThresholdGraph


def location_hotspots(
    lat: ArrayLike,
    lon: ArrayLike,
    n_clusters: int,
    epsilon: float,
    region: Region,
    *,
    policy: str = "dp",
    theta_m: float | None = None,
    random_state: int | Sampler | None = None,
) -> tuple[FloatArray, DPLloydKMeans | BlowfishKMeans]:
    """Released hotspot centres as rows (lat, lon), and the fitted estimator (budget log, sampling mode)."""
    if not isinstance(region, Region):
        raise ParameterError("hotspots need a public region: pass region=Region(lat_min, ...).")
    la, lo = region.clip(*validate_latlon(lat, lon, table=True))
    proj = region.projection()
    x, y = proj.forward(la, lo)
    bx, by = proj.forward(*region.boundary())
    bounds = (np.array([bx.min(), by.min()]), np.array([bx.max(), by.max()]))
    if policy == "dp":
        model: DPLloydKMeans | BlowfishKMeans = DPLloydKMeans(
            n_clusters, epsilon, bounds=bounds, random_state=random_state
        )
    elif policy == "blowfish":
        if theta_m is None or not (np.isfinite(theta_m) and theta_m > 0):
            raise ParameterError(
                "the Blowfish hotspots need theta_m, a positive number of metres (e.g. 10_000)."
            )
        graph = DistanceThresholdGraph(proj.max_scale(region) * float(theta_m), metric="l2")
        model = BlowfishKMeans(n_clusters, epsilon, bounds=bounds, graph=graph, random_state=random_state)
    else:
        raise ParameterError(f"policy must be 'dp' or 'blowfish' (got {policy!r}).")
    model.fit(np.column_stack([x, y]))
    c_lat, c_lon = proj.inverse(model.cluster_centers_[:, 0], model.cluster_centers_[:, 1])
    return np.column_stack([c_lat, c_lon]), model
