"""Helpers of the Locations page: region presets, cached dpcore calls, the inputs of a release.

Nothing here computes privacy or utility: noise, sensitivities, metrics and figures come from
``dpcore.location`` and ``dpcore.plots.location``. Cached functions are keyed by ``key`` (the dataset
fingerprint, its cleaning steps and the chosen columns) plus the parameters; arrays are passed as
``_lat``/``_lon``/``_users`` (not hashed). On a table of more than ``DIAGNOSTIC_ROWS`` rows the comparison
reads a uniform sample of that many rows, the same for the same key (:func:`sample_note` says so); releases
read every row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from dpcore.diagnostic_sample import DIAGNOSTIC_ROWS, diagnostic_sample, sample_label
from dpcore.errors import DPCoreError
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region, validate_latlon
from dpcore.location.grids import DensityGrid, adaptive_grid, uniform_grid
from dpcore.location.hotspots import (
    location_hotspots,
    nearest_hotspot_distance_m,
    project_locations,
    true_hotspots,
)
from dpcore.location.laplace import PlanarLaplace
from dpcore.location.plan_steps import columns_step, region_step
from dpcore.location.prilocation import PriLocation
from dpcore.location.private_region import WHOLE_EARTH, RegionStep
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.location.sweep import location_sweep
from dpcore.mechanisms import Sampler
from dpcore.plan import PrepStep

__all__ = [
    "CUSTOM_REGION",
    "EPS_OPTIONS",
    "PRESETS",
    "Coordinates",
    "Diagnostics",
    "HotspotDiagnostics",
    "Params",
    "coordinates",
    "data_extent",
    "data_key",
    "default_region",
    "diagnostics",
    "hotspot_diagnostics",
    "release_inputs",
    "release_params",
    "release_scope",
    "release_steps",
    "sample_note",
    "sweep",
]

CUSTOM_REGION = "Custom (enter the box below)"
PRESETS: dict[str, tuple[float, float, float, float] | None] = {
    "Contiguous US (24, 50, -125, -66)": (24.0, 50.0, -125.0, -66.0),
    "Europe (34, 72, -25, 45)": (34.0, 72.0, -25.0, 45.0),
    "Whole world (-90, 90, -180, 180)": (-90.0, 90.0, -180.0, 180.0),
    CUSTOM_REGION: None,
}
SAMPLE_REGIONS = {"us_airports": "Contiguous US (24, 50, -125, -66)"}  # the sample's documented scope
EPS_OPTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
PLOT_POINTS = 5000  # points drawn on a map (a fixed random subset beyond that)
DIAGNOSTIC_SEED = 0  # diagnostic noise only (Sampler.diagnostic): never used for a release
HOTSPOTS = {"dp_hotspots": "dp", "blowfish_hotspots": "blowfish"}


def default_region(origin: Mapping[str, Any] | None) -> str | None:
    """The preset a bundled sample is documented to cover; None (the curator chooses) for any other table."""
    return SAMPLE_REGIONS.get((origin or {}).get("sample", ""))


@dataclass(frozen=True)
class Params:
    """The curator's location parameters (section 2 of the page); ``geo_eps`` and ``radius_m`` come from
    the geo-indistinguishability policy (None without one)."""

    hs_m: float
    theta_m: float
    geo_eps: float | None
    radius_m: float | None
    n_clusters: int
    grid_size: int
    hotspot_k: int = 8
    max_per_user: int = 1


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
    radius_m: float | None = None,
) -> pd.DataFrame:
    """``dpcore.location.sweep.location_sweep`` (diagnostic noise), cached per data key and parameters, on
    every row up to ``DIAGNOSTIC_ROWS``, else on a uniform sample of that many drawn once per ``key``;
    ``radius_m`` is the geo-indistinguishability policy's r (planar Laplace at level eps within it)."""
    rows = diagnostic_sample(len(_lat), key)
    return location_sweep(
        _lat[rows],
        _lon[rows],
        _users[rows],
        list(mechanisms),
        list(eps),
        trials,
        region=Region(*box),
        hs_m=hs_m,
        n_clusters=n_clusters,
        grid_size=grid_size,
        hotspot_k=hotspot_k,
        theta_m=theta_m,
        radius_m=radius_m,
        random_state=DIAGNOSTIC_SEED,
    )


def sample_note(n_rows: int) -> str:
    """The label of a comparison on ``n_rows`` rows: empty when it read every row."""
    return sample_label(min(n_rows, DIAGNOSTIC_ROWS), n_rows)


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
    random_state, region = Sampler.diagnostic(DIAGNOSTIC_SEED), Region(*box)
    n = _lat.size
    sample = np.sort(random_state.rng.choice(n, size=min(n, PLOT_POINTS), replace=False))
    planar = PlanarLaplace(geo_eps, region=region, random_state=random_state)
    z_lat, z_lon = planar.release(_lat[sample], _lon[sample])
    note = ""
    try:
        model = PriLocation(
            eps, region, hs_m=hs_m, n_clusters=n_clusters, grid_size=grid_size, random_state=random_state
        )
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
        uniform=uniform_grid(_lat, _lon, eps, region, n_estimate=float(n), random_state=random_state),
        adaptive=adaptive_grid(_lat, _lon, eps, region, n_estimate=float(n), random_state=random_state),
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


def data_extent(coords: Coordinates) -> Region:
    """The data's own box (min and max, widened by 0.01 degree where they are equal): the comparison's
    region when the release estimates one privately. Not private: diagnostics only, never released."""
    lo_lat, hi_lat = float(coords.lat.min()), float(coords.lat.max())
    lo_lon, hi_lon = float(coords.lon.min()), float(coords.lon.max())
    if hi_lat <= lo_lat:
        lo_lat, hi_lat = max(lo_lat - 0.01, -90.0), min(hi_lat + 0.01, 90.0)
    if hi_lon <= lo_lon:
        lo_lon, hi_lon = max(lo_lon - 0.01, -180.0), min(hi_lon + 0.01, 180.0)
    return Region(lo_lat, hi_lat, lo_lon, hi_lon)


def release_steps(
    coords: Coordinates, region: Region, private_eps: float | None
) -> tuple[tuple[PrepStep, ...], dict[str, Any]]:
    """A release's public steps (its columns, and its public region unless it is estimated privately) and
    its private region step (:class:`~dpcore.location.private_region.RegionStep` with ε_b =
    ``private_eps``, completed by the plan; empty without one)."""
    columns = columns_step(*coords.columns)
    if private_eps is None:
        return (columns, region_step(region)), {}
    step = RegionStep(private_eps)
    return (columns, PrepStep(step.sentence(), False)), step.asked()


def release_inputs(coords: Coordinates, region: Region | None) -> LocationInputs:
    """What a location release reads: the coordinates, the user column's ids (None without one: each row
    is then a different person) and the public region (None: estimated privately at release, the whole
    Earth until then)."""
    users = coords.users if coords.user_column else None
    return LocationInputs(coords.lat, coords.lon, users, WHOLE_EARTH if region is None else region)


def release_params(mech: str, params: Params) -> dict[str, Any]:
    """The page's values of the parameters ``mech`` declares (its registry entry validates them)."""
    values = asdict(params)
    return {p.name: values[p.name] for p in LOCATIONS[mech].params if values.get(p.name) is not None}


def release_scope(coords: Coordinates, params: Params) -> str:
    """What the release protects: per user (at most ``max_per_user`` locations each) or per location."""
    return scope_sentence(coords.user_column is not None, params.max_per_user)
