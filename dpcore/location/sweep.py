"""Error-vs-epsilon sweep of the location mechanisms (internal comparison, never a release).

All noise comes from ``Sampler.diagnostic`` (fast numpy noise): the results are curator diagnostics
computed on the true data. Everything that does not depend on eps is computed once per sweep: checked
points, user codes, PriLocation's unit vectors (``prepare_visits``), query boxes and their true answers,
the projected mean and the sensitivities. Shortcuts that keep the distributions exact:

* planar Laplace's great-circle displacement equals its radius (destination-point formula, tested), so its
  DE is drawn directly: r / HS ~ Gamma(2, 1/eps) i.i.d. per visit, for all trials and eps at once;
* PriLocation runs ``run_prilocation(..., diagnostic=True)``: float32 selection scores (relative to each
  cluster centre, sub-metre precision) and weight noise drawn only for (user, cluster) pairs with visits,
  the only ones the DE depends on;
* the mean positions draw the noise of every trial and eps in one call;
* the hotspots (``hotspots``) project the points and fit non-private k-means once, then score every
  trial's released centres by grid filtering (``dpcore.kmeans.cells.PlanarCells``: exact nearest
  centres, whole cells scored as scatter + n ||mean - c||^2), which also runs their Lloyd rounds.

Grids are sized with the true n (as if the curator entered it). Metrics: ``distance_error`` (DE, Zhu et al.
2017, eqs. 12.17-12.18, in units of HS; for planar Laplace at level eps within the policy's radius r, as
released, or at eps / HS per metre without a geo-indistinguishability policy; for PriLocation at eps),
``median_relative_error`` of random rectangle queries (density grids, Qardaji et al. 2013),
``mean_error_m`` (great-circle metres between the true and the released mean position, both through the
region's ``PlaneMap``: Blowfish with the curator's theta vs bounded DP), ``fractional_wcss_loss`` of the
hotspots ((WCSS_released - WCSS_true) / WCSS_true in plane metres^2 vs non-private k-means, Ravi et al. 2021
Fig. 2; DP-Lloyd and Blowfish with the curator's theta). Every row counts as one person (per location).
Small matrix products run with one BLAS thread (threads only add overhead there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

from dpcore.errors import ParameterError
from dpcore.kmeans.cells import PlanarCells
from dpcore.location.blowfish import blowfish_mean_sensitivity, dp_mean_sensitivity
from dpcore.location.geometry import FloatArray, PlaneMap, Region, haversine_m, validate_latlon
from dpcore.location.grids import adaptive_grid, random_boxes, relative_error, true_box_counts, uniform_grid
from dpcore.location.hotspots import ProjectedLocations, hotspot_trials, project_locations, true_hotspots
from dpcore.location.prilocation import PriLocation, Visits, distance_error, prepare_visits, run_prilocation
from dpcore.location.registry import LOCATIONS
from dpcore.mechanisms import Sampler, _check_epsilon, laplace_scale

MECHANISMS: dict[str, tuple[str, str]] = {
    "planar_laplace": ("Per-location planar Laplace (ε / HS per metre)", "distance_error"),
    "prilocation": ("PriLocation", "distance_error"),
    "uniform_grid": ("Uniform grid (UG)", "median_relative_error"),
    "adaptive_grid": ("Adaptive grid (AG)", "median_relative_error"),
    "blowfish_mean": ("Mean position, Blowfish θ", "mean_error_m"),
    "dp_mean": ("Mean position, bounded DP", "mean_error_m"),
    "dp_hotspots": ("DP hotspots (DP-Lloyd)", "fractional_wcss_loss"),
    "blowfish_hotspots": ("Blowfish hotspots (distance threshold θ)", "fractional_wcss_loss"),
}
HOTSPOTS = {"dp_hotspots": "dp", "blowfish_hotspots": "blowfish"}
COLUMNS = ["mechanism", "label", "epsilon", "trial", "metric", "value"]
Progress = Callable[[float, str], None]
MAX_TRIALS = 50  # trials per eps of one comparison
MAX_EPS_VALUES = 25  # eps values of one comparison
MAX_QUERIES = 1000  # random rectangle queries scoring the density grids
DRAW_ENTRIES = 2_000_000  # numbers drawn or scored at once (bounded memory whatever the rows and trials)


@dataclass(frozen=True)
class _SweepData:
    """The eps-independent parts of a sweep, computed once."""

    lat: FloatArray
    lon: FloatArray
    visits: Visits
    region: Region
    hs_m: float
    n_clusters: int
    grid_size: int | None
    boxes: FloatArray
    truth: FloatArray | None
    plane: PlaneMap
    mean_xy: tuple[float, float]
    mean_latlon: tuple[float, float]
    hotspot_k: int
    theta_m: float
    seed: int
    radius_m: float | None = None

    @cached_property
    def hotspots(self) -> tuple[ProjectedLocations, PlanarCells, float]:
        """Projected locations, their grid cells for WCSS scoring and the WCSS of non-private k-means."""
        proj = project_locations(self.lat, self.lon, self.region)
        cells = PlanarCells(proj.X)
        return proj, cells, float(cells.wcss(true_hotspots(proj, self.hotspot_k, self.seed)[None])[0])


def _seed(seed: int, mech: str) -> int:
    """A per-mechanism diagnostic seed, independent of which other mechanisms are swept."""
    return int(np.random.SeedSequence([seed, list(MECHANISMS).index(mech)]).generate_state(1)[0])


def _planar_laplace(data: _SweepData, eps: FloatArray, trials: int, random_state: Sampler) -> FloatArray:
    """DE of every (trial, eps) in units of HS, at level eps within the policy's radius r when the sweep has
    one (eps / r per metre: DE = Gamma(2, 1) r / (eps HS)), else at eps / HS per metre; the draws of at most
    ``DRAW_ENTRIES`` visits' radii at a time (the same draws, in the same order, as all at once)."""
    per_user = np.bincount(data.visits.codes)
    starts = np.r_[0, np.cumsum(per_user)[:-1]]
    runs, visits = trials * eps.size, int(per_user.sum())
    de = np.empty(runs)
    step = max(1, DRAW_ENTRIES // visits)
    for start in range(0, runs, step):
        # Draws are i.i.d. per visit, so visit i of the sorted layout can take any user's slot.
        g = random_state.rng.gamma(2.0, 1.0, (min(step, runs - start), visits))
        de[start : start + step] = (np.add.reduceat(g, starts, axis=1) / per_user).mean(axis=1)
    scale = 1.0 if data.radius_m is None else data.radius_m / data.hs_m
    return de.reshape(trials, eps.size) / eps * scale


def _prilocation(data: _SweepData, eps: float, random_state: Sampler) -> float:
    model = PriLocation(
        eps, data.region, hs_m=data.hs_m, n_clusters=data.n_clusters, grid_size=data.grid_size
    )
    e, hs, k, step = model.checked_params()
    run = run_prilocation(
        data.visits, e, hs, data.region, k, data.grid_size, step, random_state, diagnostic=True
    )
    if run.kept.size == 0:
        return float("nan")
    return distance_error(data.visits.codes[run.kept], run.displacement_m(data.visits), hs)


def _grid(data: _SweepData, mech: str, eps: float, random_state: Sampler) -> float:
    build = uniform_grid if mech == "uniform_grid" else adaptive_grid
    grid = build(
        data.lat, data.lon, eps, data.region, n_estimate=float(data.lat.size), random_state=random_state
    )
    return float(np.median(relative_error(grid.range_query(data.boxes), data.truth, data.lat.size)))


def _mean(data: _SweepData, mech: str, eps: FloatArray, trials: int, random_state: Sampler) -> FloatArray:
    n = data.lat.size
    sens = (
        blowfish_mean_sensitivity(n, data.theta_m, data.region)
        if mech == "blowfish_mean"
        else dp_mean_sensitivity(n, data.region)
    )
    scale = np.array([laplace_scale(sens, e) for e in eps])
    noise = random_state.laplace((trials, eps.size, 2), 1.0) * scale[None, :, None]
    r_lat, r_lon = data.plane.inverse(data.mean_xy[0] + noise[..., 0], data.mean_xy[1] + noise[..., 1])
    return haversine_m(*data.mean_latlon, r_lat, r_lon)


def _hotspots(data: _SweepData, mech: str, eps: FloatArray, trials: int, random_state: Sampler) -> FloatArray:
    proj, cells, base = data.hotspots
    centres = hotspot_trials(
        proj, data.hotspot_k, eps.tolist(), trials, random_state, policy=HOTSPOTS[mech], theta_m=data.theta_m
    )
    sets = centres.reshape(-1, *centres.shape[2:])
    # chunks of centre sets: grid filtering holds (sets x K x cells) bounds and up to n rows per set
    step = max(1, DRAW_ENTRIES // max(sets.shape[1] * cells.count.size, data.lat.size))
    scores = np.concatenate([cells.wcss(sets[i : i + step]) for i in range(0, len(sets), step)])
    return (scores.reshape(centres.shape[:2]).T - base) / base


def _check_radius(radius_m: float) -> float:
    """The policy radius r in metres (positive and finite), else a ParameterError."""
    r = float(radius_m)
    if not (math.isfinite(r) and r > 0):
        raise ParameterError(f"the radius r must be a positive number of metres (got {radius_m!r}).")
    return r


def _check_settings(
    hs_m: float, n_clusters: int, grid_size: int | None, n_queries: int, hotspot_k: int, theta_m: float
) -> None:
    """The sweep's settings within the ranges the registry declares for them (a ParameterError naming
    the setting and its range otherwise); ``n_queries`` from 1 to ``MAX_QUERIES``."""
    settings = {"hs_m": hs_m, "n_clusters": n_clusters}
    if grid_size is not None:
        settings["grid_size"] = grid_size
    LOCATIONS["prilocation"].validate_params(settings)
    LOCATIONS["blowfish_hotspots"].validate_params({"hotspot_k": hotspot_k, "theta_m": theta_m})
    whole = not isinstance(n_queries, bool) and isinstance(n_queries, (int, np.integer))
    if not whole or not 1 <= n_queries <= MAX_QUERIES:
        raise ParameterError(f"n_queries must be a whole number from 1 to {MAX_QUERIES} (got {n_queries!r}).")


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
    hotspot_k: int = 8,
    theta_m: float = 50_000.0,
    radius_m: float | None = None,
    random_state: int = 0,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Tidy frame (mechanism, label, epsilon, trial, metric, value) over eps_grid x trials.

    ``hotspot_k`` and ``theta_m`` (metres) set the hotspot mechanisms (K, the Blowfish threshold) and the
    Blowfish mean's threshold, as their releases use them. ``radius_m``, the geo-indistinguishability
    policy's radius r, makes planar Laplace run as it is released: eps is its level within r (without
    it, eps / HS per metre, comparable with PriLocation at the same eps).
    ``random_state`` (an int) seeds the diagnostic samplers. ``progress(fraction, text)`` is called as the
    work advances (e.g. a Streamlit progress bar).
    """
    unknown = sorted(set(mechanisms) - set(MECHANISMS))
    if unknown:
        raise ParameterError(f"unknown mechanism(s) {unknown}; use some of {sorted(MECHANISMS)}.")
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or not 1 <= trials <= MAX_TRIALS:
        raise ParameterError(f"trials must be a whole number from 1 to {MAX_TRIALS} (got {trials!r}).")
    if not 1 <= len(eps_grid) <= MAX_EPS_VALUES:
        raise ParameterError(
            f"give 1 to {MAX_EPS_VALUES} epsilon values to sweep, e.g. [0.5, 1, 2] (got {len(eps_grid)})."
        )
    eps = np.array([_check_epsilon(e) for e in eps_grid])
    _check_settings(hs_m, n_clusters, grid_size, n_queries, hotspot_k, theta_m)
    if not isinstance(region, Region):
        raise ParameterError("the sweep needs a public region: pass region=Region(lat_min, ...).")
    report = progress or (lambda _f, _t: None)
    trials = int(trials)
    with threadpool_limits(1, user_api="blas"):
        la, lo = validate_latlon(lat, lon, table=True)
        plane = PlaneMap.of(region)
        x, y = plane.forward(la, lo)
        m_lat, m_lon = plane.inverse(x.mean(), y.mean())
        boxes = random_boxes(region, n_queries, Sampler.diagnostic(random_state))
        grids = {"uniform_grid", "adaptive_grid"} & set(mechanisms)
        data = _SweepData(
            lat=la,
            lon=lo,
            visits=prepare_visits(users, la, lo, region),
            region=region,
            hs_m=float(hs_m),
            n_clusters=n_clusters,
            grid_size=grid_size,
            boxes=boxes,
            truth=true_box_counts(la, lo, boxes, region) if grids else None,
            plane=plane,
            mean_xy=(float(x.mean()), float(y.mean())),
            mean_latlon=(float(m_lat), float(m_lon)),
            hotspot_k=hotspot_k,
            theta_m=float(theta_m),
            seed=random_state,
            radius_m=None if radius_m is None else _check_radius(radius_m),
        )
        frames = []
        total, done = len(mechanisms) * eps.size, 0
        for mech in mechanisms:
            diagnostic = Sampler.diagnostic(_seed(random_state, mech))
            label, metric = MECHANISMS[mech]
            if mech == "planar_laplace" and radius_m is not None:
                label = f"Per-location planar Laplace (level ε within r = {radius_m:,.0f} m)"
            report(done / total, f"{label}...")
            if mech == "planar_laplace":
                values = _planar_laplace(data, eps, trials, diagnostic)
            elif mech in ("blowfish_mean", "dp_mean"):
                values = _mean(data, mech, eps, trials, diagnostic)
            elif mech in HOTSPOTS:
                values = _hotspots(data, mech, eps, trials, diagnostic)
            else:
                values = np.empty((trials, eps.size))
                for i, e in enumerate(eps):
                    report((done + i) / total, f"{label}: ε = {e:g}")
                    for t in range(trials):
                        values[t, i] = (
                            _prilocation(data, e, diagnostic)
                            if mech == "prilocation"
                            else _grid(data, mech, e, diagnostic)
                        )
            done += eps.size
            t_idx, e_idx = np.meshgrid(np.arange(trials), np.arange(eps.size), indexing="ij")
            frames.append(
                pd.DataFrame(
                    {
                        "mechanism": mech,
                        "label": label,
                        "epsilon": eps[e_idx.ravel()],
                        "trial": t_idx.ravel(),
                        "metric": metric,
                        "value": values.ravel(),
                    }
                )
            )
    report(1.0, "done")
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]
