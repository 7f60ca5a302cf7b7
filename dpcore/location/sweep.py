"""Error-vs-epsilon sweep of the location mechanisms (internal comparison, never a release).

All noise comes from ``Sampler.diagnostic`` (fast numpy noise): the results are curator diagnostics
computed on the true data. Shortcuts that keep the distributions exact: planar Laplace's great-circle
displacement equals its radius (destination-point formula, tested), so its DE uses Gamma(2, 1/eps) radii
drawn directly; the projected mean and the sensitivities are computed once. Grids are sized with the
true n (as if the curator entered it). Metrics: ``distance_error`` (DE, seed 002 eqs. 12.17-12.18;
for planar Laplace with eps / HS per metre, for PriLocation at eps), ``median_relative_error`` of random
rectangle queries (density grids, Qardaji et al. 2013), ``mean_error_m`` (great-circle metres between
the true and the released mean position: Blowfish with theta = HS vs bounded DP).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.location.blowfish import blowfish_mean_sensitivity, dp_mean_sensitivity
from dpcore.location.geometry import Region, haversine_m, validate_latlon
from dpcore.location.grids import adaptive_grid, random_boxes, relative_error, true_box_counts, uniform_grid
from dpcore.location.prilocation import PriLocation
from dpcore.mechanisms import Sampler, laplace_scale

MECHANISMS: dict[str, tuple[str, str]] = {
    "planar_laplace": ("Per-location planar Laplace (ε / HS per metre)", "distance_error"),
    "prilocation": ("PriLocation", "distance_error"),
    "uniform_grid": ("Uniform grid (UG)", "median_relative_error"),
    "adaptive_grid": ("Adaptive grid (AG)", "median_relative_error"),
    "blowfish_mean": ("Mean position, Blowfish θ = HS", "mean_error_m"),
    "dp_mean": ("Mean position, bounded DP", "mean_error_m"),
}


def location_sweep(
    lat: ArrayLike,
    lon: ArrayLike,
    users: ArrayLike,
    mechanisms: Sequence[str],
    eps_grid: Sequence[float],
    trials: int,
    *,
    region: Region,
    hs_m: float = 300_000.0,
    n_clusters: int = 80,
    grid_size: int | None = 30,
    n_queries: int = 50,
    seed: int = 0,
) -> pd.DataFrame:
    """Tidy frame (mechanism, label, epsilon, trial, metric, value) over eps_grid x trials."""
    unknown = sorted(set(mechanisms) - set(MECHANISMS))
    if unknown:
        raise ParameterError(f"unknown mechanism(s) {unknown}; use some of {sorted(MECHANISMS)}.")
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ParameterError(f"trials must be a whole number >= 1 (got {trials!r}).")
    la, lo = region.clip(*validate_latlon(lat, lon, table=True))
    codes = np.unique(np.asarray(users), return_inverse=True)[1]
    per_user = np.bincount(codes)
    boxes = random_boxes(region, n_queries, Sampler.diagnostic(seed))
    truth = (
        true_box_counts(la, lo, boxes, region)
        if {"uniform_grid", "adaptive_grid"} & set(mechanisms)
        else None
    )
    proj = region.projection()
    x, y = proj.forward(la, lo)
    mx, my = x.mean(), y.mean()
    m_lat, m_lon = proj.inverse(mx, my)
    mean_sens = {
        "blowfish_mean": blowfish_mean_sensitivity(la.size, hs_m, region),
        "dp_mean": dp_mean_sensitivity(la.size, region),
    }
    rows = []
    for t in range(int(trials)):
        for i, eps in enumerate(eps_grid):
            for mech in mechanisms:
                sampler = Sampler.diagnostic(seed + 1 + (t * len(eps_grid) + i) * len(MECHANISMS))
                if mech == "planar_laplace":
                    r = sampler.rng.gamma(2.0, hs_m / eps, la.size)
                    value = float(np.mean(np.bincount(codes, weights=r) / per_user) / hs_m)
                elif mech == "prilocation":
                    model = PriLocation(
                        eps, region, hs_m=hs_m, n_clusters=n_clusters, grid_size=grid_size, rng=sampler
                    ).fit(users, la, lo)
                    value = model.diagnostic_distance_error_
                elif mech in ("uniform_grid", "adaptive_grid"):
                    build = uniform_grid if mech == "uniform_grid" else adaptive_grid
                    grid = build(la, lo, eps, region, n_estimate=float(la.size), rng=sampler)
                    value = float(np.median(relative_error(grid.range_query(boxes), truth, la.size)))
                else:
                    noise = sampler.laplace(2, laplace_scale(mean_sens[mech], eps))
                    r_lat, r_lon = proj.inverse(mx + noise[0], my + noise[1])
                    value = float(haversine_m(m_lat, m_lon, r_lat, r_lon))
                label, metric = MECHANISMS[mech]
                rows.append((mech, label, float(eps), t, metric, value))
    return pd.DataFrame(rows, columns=["mechanism", "label", "epsilon", "trial", "metric", "value"])
