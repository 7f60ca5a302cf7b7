"""Helpers of the Locations page: region presets, cached dpcore calls, the inputs of a release.

Nothing here computes privacy or utility, and nothing names a mechanism: the comparison runs the trials
the specs of ``dpcore.location.LOCATIONS`` declare, the diagnostic maps are the curator figures each spec
declares (true vs released, ...) or else its own release figures, drawn with diagnostic noise. Cached
functions are keyed by ``key`` (the dataset fingerprint, its cleaning steps and the chosen columns) plus
the parameters (as canonical JSON); arrays are passed as ``_lat``/``_lon``/``_users`` (not hashed). On a
table of more than ``DIAGNOSTIC_ROWS`` rows the comparison and the maps read a uniform sample of that many
rows, the same for the same key (:func:`sample_note` says so); releases read every row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from dpcore.diagnostic_sample import DIAGNOSTIC_ROWS, diagnostic_sample, sample_label
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region, validate_latlon
from dpcore.location.plan_steps import LocationColumns, PublicRegion
from dpcore.location.private_region import WHOLE_EARTH, RegionStep
from dpcore.location.registry import LOCATIONS, MAX_PER_USER, LocationInputs
from dpcore.location.sweep import location_sweep
from dpcore.mechanisms import Sampler
from dpcore.plots.kmeans import diagnostic_annotation
from dpcore.steps import PrepStep

__all__ = [
    "CUSTOM_REGION",
    "EPS_OPTIONS",
    "PRESETS",
    "Coordinates",
    "compared_params",
    "coordinates",
    "data_extent",
    "data_key",
    "default_region",
    "diagnostic_figures",
    "params_json",
    "release_inputs",
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
DIAGNOSTIC_SEED = 0  # diagnostic noise only (Sampler.diagnostic): never used for a release


def default_region(origin: Mapping[str, Any] | None) -> str | None:
    """The preset a bundled sample is documented to cover; None (the curator chooses) for any other table."""
    return SAMPLE_REGIONS.get((origin or {}).get("sample", ""))


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


def data_key(fingerprint: str, cleaning: Sequence[PrepStep], columns: Sequence[str | None]) -> str:
    """Cache key of the chosen coordinates: table fingerprint, cleaning steps and column names."""
    steps = [s.to_dict() for s in cleaning]
    return json.dumps({"fingerprint": fingerprint, "cleaning": steps, "columns": list(columns)})


def params_json(params: Mapping[str, Any]) -> str:
    """Parameters (or mechanism key -> parameters) as canonical JSON: a cache key and a comparison's kept
    settings (:func:`compared_params` reads them back)."""
    return json.dumps(params, sort_keys=True)


def compared_params(settings: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Mechanism key -> the parameters a kept comparison (``settings``, as the page keeps them) ran with."""
    return json.loads(settings[5])


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
    params: str,
) -> pd.DataFrame:
    """``dpcore.location.sweep.location_sweep`` (diagnostic noise) with each mechanism's parameters
    (``params``: :func:`params_json`), cached per data key and settings, on every row up to
    ``DIAGNOSTIC_ROWS``, else on a uniform sample of that many drawn once per ``key``."""
    rows = diagnostic_sample(len(_lat), key)
    return location_sweep(
        _lat[rows],
        _lon[rows],
        _users[rows],
        list(mechanisms),
        list(eps),
        trials,
        region=Region(*box),
        params=json.loads(params),
        random_state=DIAGNOSTIC_SEED,
    )


def sample_note(n_rows: int) -> str:
    """The label of a comparison on ``n_rows`` rows: empty when it read every row."""
    return sample_label(min(n_rows, DIAGNOSTIC_ROWS), n_rows)


@st.cache_data(show_spinner="Drawing the diagnostic maps...", max_entries=8)
def diagnostic_figures(
    key: str,
    _lat: np.ndarray,
    _lon: np.ndarray,
    _users: np.ndarray | None,
    box: tuple[float, float, float, float],
    mechanism: str,
    eps: float,
    params: str,
    tiles: bool = False,
    nonnegative: bool = False,
) -> dict[str, Any]:
    """``mechanism``'s curator figures at ``eps`` with its parameters (``params``: its own, as JSON), chart
    name -> figure, drawn once with diagnostic noise (fixed seed) on the comparison's rows: the figures its
    spec declares (``diagnostic_figures``: e.g. true vs released, with ``tiles`` and ``nonnegative``
    passed on), else its release figures stamped as diagnostics. They read the true data: never released."""
    rows = diagnostic_sample(len(_lat), key)
    users = None if _users is None else _users[rows]
    inputs = LocationInputs(_lat[rows], _lon[rows], users, Region(*box))
    spec = LOCATIONS[mechanism]
    values = spec.validate_params(json.loads(params))
    sampler = Sampler.diagnostic(DIAGNOSTIC_SEED)
    if spec.diagnostic_figures is not None:
        return dict(
            spec.diagnostic_figures(
                inputs, epsilon=eps, params=values, random_state=sampler, tiles=tiles, nonnegative=nonnegative
            )
        )
    out = spec.release(inputs, epsilon=eps, delta=0.0, params=values, random_state=sampler)
    return {f"map_{mechanism}_{j}": diagnostic_annotation(fig) for j, fig in enumerate(out.figures)}


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
    columns = LocationColumns(*coords.columns)
    if private_eps is None:
        return (columns, PublicRegion.of(region)), {}
    step = RegionStep(private_eps)
    return (columns, step), step.asked()


def release_inputs(coords: Coordinates, region: Region | None) -> LocationInputs:
    """What a location release reads: the coordinates, the user column's ids (None without one: each row
    is then a different person) and the public region (None: estimated privately at release, the whole
    Earth until then)."""
    users = coords.users if coords.user_column else None
    return LocationInputs(coords.lat, coords.lon, users, WHOLE_EARTH if region is None else region)


def release_scope(coords: Coordinates, params: Mapping[str, Any]) -> str:
    """What a release with ``params`` protects: per user (at most ``max_per_user`` locations each) or per
    location."""
    return scope_sentence(coords.user_column is not None, int(params.get(MAX_PER_USER.name, 1)))
