"""Helpers of the Locations page: region presets, mechanism texts, cached dpcore calls, release runners.

Nothing here computes privacy or utility: noise, sensitivities, metrics and figures come from
``dpcore.location`` and ``dpcore.plots.location``. Cached functions are keyed by ``key`` (the dataset
fingerprint, its cleaning steps and the chosen columns) plus the parameters; arrays are passed as
``_lat``/``_lon``/``_users`` (not hashed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dpcore.errors import DPCoreError
from dpcore.location.blowfish import mean_position
from dpcore.location.geometry import Region, validate_latlon
from dpcore.location.grids import DensityGrid, adaptive_grid, uniform_grid
from dpcore.location.hotspots import (
    location_hotspots,
    nearest_hotspot_distance_m,
    project_locations,
    true_hotspots,
)
from dpcore.location.laplace import PlanarLaplace
from dpcore.location.prilocation import PriLocation
from dpcore.location.sweep import location_sweep
from dpcore.mechanisms import Sampler
from dpcore.plots.location import density_heatmap, hotspot_map, released_map
from dpcore.policy import Blowfish, DistanceThresholdGraph, GeoIndistinguishability, Policy, PureDP

__all__ = [
    "EPS_OPTIONS",
    "PRESETS",
    "RELEASES",
    "Coordinates",
    "Diagnostics",
    "HotspotDiagnostics",
    "Params",
    "ReleaseSpec",
    "coordinates",
    "data_key",
    "diagnostics",
    "hotspot_diagnostics",
    "release_policy",
    "release_runner",
    "sweep",
]

PRESETS: dict[str, tuple[float, float, float, float] | None] = {
    "Contiguous US (24, 50, -125, -66)": (24.0, 50.0, -125.0, -66.0),
    "Europe (34, 72, -25, 45)": (34.0, 72.0, -25.0, 45.0),
    "Whole world (-90, 90, -180, 180)": (-90.0, 90.0, -180.0, 180.0),
    "Custom (enter the box below)": None,
}
EPS_OPTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
PLOT_POINTS = 5000  # points drawn on a map (a fixed random subset beyond that)
DIAGNOSTIC_SEED = 0  # diagnostic noise only (Sampler.diagnostic): never used for a release
HOTSPOTS = {"dp_hotspots": "dp", "blowfish_hotspots": "blowfish"}


@dataclass(frozen=True)
class ReleaseSpec:
    """A releasable mechanism: its label and its one-line guarantee (plain language)."""

    label: str
    guarantee: str


RELEASES: dict[str, ReleaseSpec] = {
    "planar_laplace": ReleaseSpec(
        "Planar Laplace (per location)",
        "ε-geo-indistinguishability, NOT ε-DP: replacing one person's location x by x' changes the "
        "probability of any reported location by at most e^(ε·d(x, x')), d in metres; nearby places are "
        "hidden from each other, far-apart places (other cities) are not.",
    ),
    "prilocation": ReleaseSpec(
        "PriLocation (users' visits)",
        "Blowfish-style (ε, HS) per visit, NOT ε-DP: moving one visit by at most HS metres within its "
        "released cluster changes any output's probability by at most e^ε. An adversary may learn which "
        "cluster a visit is in and (up to noise) how many visits a user has there, not where in it; a "
        "user with k visits is protected at k·ε.",
    ),
    "uniform_grid": ReleaseSpec(
        "Uniform density grid",
        "ε-DP (unbounded neighbours: one location added or removed): the noisy cell counts barely depend "
        "on any one point. Points outside the public region are clamped onto its edge.",
    ),
    "adaptive_grid": ReleaseSpec(
        "Adaptive density grid",
        "ε-DP (unbounded neighbours: one location added or removed): two levels of noisy counts, made "
        "consistent. Points outside the public region are clamped onto its edge.",
    ),
    "blowfish_mean": ReleaseSpec(
        "Mean position (Blowfish θ)",
        "(ε, θ)-Blowfish, NOT ε-DP: an adversary may learn the region a person is in but not their "
        "position within θ metres (replacing one location by one at most θ away changes any output's "
        "probability by at most e^ε). The group size is treated as public.",
    ),
    "dp_mean": ReleaseSpec(
        "Mean position (bounded DP)",
        "Bounded ε-DP: replacing one location by any other in the public region changes any output's "
        "probability by at most e^ε. The group size is treated as public.",
    ),
    "dp_hotspots": ReleaseSpec(
        "DP hotspots (DP-Lloyd)",
        "ε-DP (unbounded neighbours: one location added or removed), with the public region as the bounds: "
        "the released hotspot centres barely depend on any one location. Points outside the region are "
        "clamped onto its edge.",
    ),
    "blowfish_hotspots": ReleaseSpec(
        "Blowfish hotspots (distance threshold θ)",
        "(ε, G^{d,θ})-Blowfish, NOT ε-DP: an adversary may learn the region a person is in but not their "
        "position within θ metres (replacing one location inside the public region by one at most θ away "
        "changes any output's probability by at most e^ε); the number of locations is public. Honest "
        "gain: almost none here. A location crossing between two hotspot cells can still move a cluster "
        "sum by nearly the region's width, so the noise is within a few percent of bounded DP's and about "
        "twice DP hotspots' at the same ε (see sensitivity_gain_vs_bounded_dp in the manifest): prefer DP "
        "hotspots unless you need this policy.",
    ),
}


@dataclass(frozen=True)
class Params:
    """The curator's location parameters (section 2 of the page)."""

    hs_m: float
    theta_m: float
    geo_eps: float
    radius_m: float
    n_clusters: int
    grid_size: int
    hotspot_k: int = 8


@dataclass(frozen=True)
class Coordinates:
    """The chosen columns' values, checked by dpcore (degrees, in range, no missing values)."""

    lat: np.ndarray
    lon: np.ndarray
    users: np.ndarray
    columns: tuple[str, str, str | None]

    @property
    def user_column(self) -> str | None:
        return self.columns[2]


def coordinates(frame: pd.DataFrame, lat_col: str, lon_col: str, user_col: str | None) -> Coordinates:
    """Latitude/longitude from ``frame`` via ``dpcore`` validation (``DataError`` for bad values).

    Without a user column every row is its own user (one visit each).
    """
    lat, lon = validate_latlon(frame[lat_col].to_numpy(), frame[lon_col].to_numpy(), table=True)
    users = np.arange(lat.size) if user_col is None else frame[user_col].astype(str).to_numpy()
    return Coordinates(lat, lon, users, (lat_col, lon_col, user_col))


def data_key(fingerprint: str, cleaning: Sequence[str], columns: Sequence[str | None]) -> str:
    """Cache key of the chosen coordinates: table fingerprint, cleaning steps and column names."""
    return json.dumps({"fingerprint": fingerprint, "cleaning": list(cleaning), "columns": list(columns)})


@st.cache_data(show_spinner=False, max_entries=8)
def sweep(
    key: str,
    _lat: np.ndarray,
    _lon: np.ndarray,
    _users: np.ndarray,
    mechanisms: tuple[str, ...],
    eps: tuple[float, ...],
    trials: int,
    box: tuple[float, float, float, float],
    hs_m: float,
    n_clusters: int,
    grid_size: int,
    hotspot_k: int,
    theta_m: float,
) -> pd.DataFrame:
    """``dpcore.location.sweep.location_sweep`` (diagnostic noise), cached per data key and parameters."""
    return location_sweep(
        _lat,
        _lon,
        _users,
        list(mechanisms),
        list(eps),
        trials,
        region=Region(*box),
        hs_m=hs_m,
        n_clusters=n_clusters,
        grid_size=grid_size,
        hotspot_k=hotspot_k,
        theta_m=theta_m,
        seed=DIAGNOSTIC_SEED,
    )


@dataclass(frozen=True)
class Diagnostics:
    """One diagnostic draw of each mechanism at one setting (raw data inside: never released)."""

    sample: np.ndarray
    laplace_lat: np.ndarray
    laplace_lon: np.ndarray
    displacement_m: np.ndarray
    prilocation: pd.DataFrame | None
    prilocation_note: str
    uniform: DensityGrid
    adaptive: DensityGrid


@st.cache_data(show_spinner="Drawing the diagnostic maps...", max_entries=8)
def diagnostics(
    key: str,
    _lat: np.ndarray,
    _lon: np.ndarray,
    _users: np.ndarray,
    box: tuple[float, float, float, float],
    geo_eps: float,
    eps: float,
    hs_m: float,
    n_clusters: int,
    grid_size: int,
) -> Diagnostics:
    """Planar Laplace, PriLocation and both grids drawn once with diagnostic noise (fixed seed)."""
    sampler, region = Sampler.diagnostic(DIAGNOSTIC_SEED), Region(*box)
    n = _lat.size
    sample = np.sort(sampler.rng.choice(n, size=min(n, PLOT_POINTS), replace=False))
    planar = PlanarLaplace(geo_eps, region=region, rng=sampler)
    z_lat, z_lon = planar.release(_lat[sample], _lon[sample])
    note = ""
    try:
        model = PriLocation(eps, region, hs_m=hs_m, n_clusters=n_clusters, grid_size=grid_size, rng=sampler)
        replaced = model.fit(_users, _lat, _lon).replaced_
    except DPCoreError as err:  # shown as a note; the other views still draw
        replaced, note = None, str(err)
    return Diagnostics(
        sample=sample,
        laplace_lat=z_lat,
        laplace_lon=z_lon,
        displacement_m=planar.displacement_m_,
        prilocation=replaced,
        prilocation_note=note,
        uniform=uniform_grid(_lat, _lon, eps, region, n_estimate=float(n), rng=sampler),
        adaptive=adaptive_grid(_lat, _lon, eps, region, n_estimate=float(n), rng=sampler),
    )


@dataclass(frozen=True)
class HotspotDiagnostics:
    """Non-private k-means hotspots and one diagnostic draw of each private one, as (K, 2) (lat, lon)."""

    true: np.ndarray
    released: dict[str, np.ndarray]
    mean_distance_m: dict[str, float]


@st.cache_data(show_spinner="Fitting the hotspots...", max_entries=8)
def hotspot_diagnostics(
    key: str,
    _lat: np.ndarray,
    _lon: np.ndarray,
    box: tuple[float, float, float, float],
    eps: float,
    hotspot_k: int,
    theta_m: float,
) -> HotspotDiagnostics:
    """True hotspots vs DP and Blowfish hotspots at one eps (fixed diagnostic seed; never released)."""
    region = Region(*box)
    data = project_locations(_lat, _lon, region)
    true = data.to_latlon(true_hotspots(data, hotspot_k, DIAGNOSTIC_SEED))
    released = {
        mech: location_hotspots(
            _lat,
            _lon,
            hotspot_k,
            eps,
            region,
            policy=policy,
            theta_m=theta_m,
            random_state=Sampler.diagnostic(DIAGNOSTIC_SEED),
        )[0]
        for mech, policy in HOTSPOTS.items()
    }
    dist = {mech: nearest_hotspot_distance_m(true, c) for mech, c in released.items()}
    return HotspotDiagnostics(true, released, dist)


def release_policy(mech: str, eps: float, *, hs_m: float, theta_m: float) -> Policy:
    """The policy a mechanism's release satisfies (recorded in the ledger and the manifest)."""
    if mech == "planar_laplace":
        return GeoIndistinguishability(eps)
    if mech == "prilocation":
        return Blowfish(eps, DistanceThresholdGraph(hs_m, "haversine"))
    if mech in ("blowfish_mean", "blowfish_hotspots"):
        return Blowfish(eps, DistanceThresholdGraph(theta_m, "haversine"))
    return PureDP(eps, neighbours="bounded" if mech == "dp_mean" else "unbounded")


ReleaseOutput = tuple[pd.DataFrame, list[go.Figure], dict[str, Any]]


def release_runner(
    mech: str,
    coords: Coordinates,
    region: Region,
    *,
    epsilon: float,
    geo_eps: float,
    hs_m: float,
    theta_m: float,
    n_clusters: int,
    grid_size: int,
    tiles: bool,
    hotspot_k: int = 8,
) -> Callable[[Sampler], ReleaseOutput]:
    """``run(sampler)`` for ``ui.release.release_panel``: one run of ``mech``; figures show released data."""
    label = RELEASES[mech].label
    lat, lon = coords.lat, coords.lon

    def run(sampler: Sampler) -> ReleaseOutput:
        if mech == "planar_laplace":
            z_lat, z_lon = PlanarLaplace(geo_eps, region=region, rng=sampler).release(lat, lon)
            table = pd.DataFrame({"lat": z_lat, "lon": z_lon})
            extra: dict[str, Any] = {"epsilon_per_metre": geo_eps, "truncation": "clamped to the region"}
        elif mech == "prilocation":
            model = PriLocation(
                epsilon, region, hs_m=hs_m, n_clusters=n_clusters, grid_size=grid_size, rng=sampler
            ).fit(coords.users, lat, lon)
            table = model.released()
            extra = {"hs_m": hs_m, "budget_log": model.budget_log_, "n_candidates": model.n_candidates_}
        elif mech in ("uniform_grid", "adaptive_grid"):
            build = uniform_grid if mech == "uniform_grid" else adaptive_grid
            grid = build(lat, lon, epsilon, region, rng=sampler)
            table = pd.DataFrame(grid.leaves, columns=["lat_lo", "lat_hi", "lon_lo", "lon_hi", "noisy_count"])
            extra = {
                "n_source": grid.n_source,
                "n_estimate": grid.n_estimate,
                "epsilon_count": grid.epsilon_count,
            }
            figure = density_heatmap(grid, title=f"{label}: released noisy counts (ε = {epsilon:g})")
            return table, [figure], {**extra, "region": region.to_dict()}
        elif mech in HOTSPOTS:
            return _hotspot_release(mech, coords, region, epsilon, theta_m, hotspot_k, tiles, sampler)
        else:
            policy = "blowfish" if mech == "blowfish_mean" else "dp"
            out = mean_position(lat, lon, epsilon, region, policy=policy, theta_m=theta_m, rng=sampler)
            table = pd.DataFrame({"lat": [out.lat], "lon": [out.lon], "n": [lat.size]})
            extra = {"l1_sensitivity_m": out.l1_sensitivity_m, "laplace_scale_m": out.laplace_scale_m}
        figure = released_map(table["lat"], table["lon"], tiles=tiles, title=f"{label}: released locations")
        return table, [figure], {**extra, "region": region.to_dict()}

    return run


def _hotspot_release(
    mech: str,
    coords: Coordinates,
    region: Region,
    epsilon: float,
    theta_m: float,
    hotspot_k: int,
    tiles: bool,
    sampler: Sampler,
) -> ReleaseOutput:
    """One DP-Lloyd / Blowfish k-means run on the projected locations; the figure shows released centres."""
    policy = HOTSPOTS[mech]
    centres, model = location_hotspots(
        coords.lat,
        coords.lon,
        hotspot_k,
        epsilon,
        region,
        policy=policy,
        theta_m=theta_m,
        random_state=sampler,
    )
    table = pd.DataFrame({"hotspot": np.arange(1, hotspot_k + 1), "lat": centres[:, 0], "lon": centres[:, 1]})
    lat0, lon0 = region.centre
    extra: dict[str, Any] = {
        "n_clusters": hotspot_k,
        "n_iter": int(model.n_iter_),
        "budget_log": [[name, float(e)] for name, e in model.budget_log_],
        "projection": f"azimuthal equidistant around the region centre ({lat0:g}, {lon0:g}), metres",
        "count_sensitivity": [float(v) for v in model.count_sensitivity_],
        "sum_l1_sensitivity_m": [float(v) for v in model.sum_sensitivity_],
    }
    if policy == "blowfish":
        extra["theta_m"] = theta_m
        extra["theta_projected_m"] = float(model.graph.theta)
        extra["sensitivity_gain_vs_bounded_dp"] = [float(v) for v in np.atleast_1d(model.sensitivity_gain_)]
    label = RELEASES[mech].label
    figure = hotspot_map(
        {label: (table["lat"], table["lon"])},
        tiles=tiles,
        title=f"{label}: released hotspot centres (K = {hotspot_k}, ε = {epsilon:g})",
    )
    return table, [figure], {**extra, "region": region.to_dict()}
