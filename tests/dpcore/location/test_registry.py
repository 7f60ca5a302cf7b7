"""The location registry: one module per mechanism, plain texts, validated parameters, releases that hold
only released values, the per-user cap and the scope sentence."""

from __future__ import annotations

import json
import re

import numpy as np
import plotly.graph_objects as go
import pytest
from scipy import stats

from dpcore.errors import DataError, ParameterError
from dpcore.location import LOCATIONS, LocationInputs
from dpcore.location.contribution import PER_LOCATION, cap_per_user, scope_sentence
from dpcore.location.geometry import Region, haversine_m
from dpcore.location.mechanisms import MODULES
from dpcore.mechanisms import Sampler
from dpcore.registry import DEFINITIONS_DP

US = Region(24.0, 50.0, -125.0, -66.0)
RELEASED_COLUMNS = {
    "planar_laplace": ["lat", "lon"],
    "prilocation": ["user", "lat", "lon"],
    "uniform_grid": ["lat_lo", "lat_hi", "lon_lo", "lon_hi", "noisy_count"],
    "adaptive_grid": ["lat_lo", "lat_hi", "lon_lo", "lon_hi", "noisy_count"],
    "blowfish_mean": ["lat", "lon", "n"],
    "dp_mean": ["lat", "lon", "n"],
    "dp_hotspots": ["hotspot", "lat", "lon"],
    "blowfish_hotspots": ["hotspot", "lat", "lon"],
}


@pytest.fixture(scope="module")
def inputs() -> dict[bool, LocationInputs]:
    """600 locations of 150 users (4 each) in the US box, plus 10 outside it; with and without users."""
    rng = np.random.default_rng(0)
    lat = np.r_[rng.uniform(30, 45, 600), rng.uniform(60, 89, 10)]
    lon = np.r_[rng.uniform(-120, -75, 600), rng.uniform(-179, 179, 10)]
    users = np.r_[np.repeat([f"person-{i}" for i in range(150)], 4), [f"far-{i}" for i in range(10)]]
    return {True: LocationInputs(lat, lon, users, US), False: LocationInputs(lat, lon, None, US)}


def test_one_module_per_mechanism_in_display_order() -> None:
    assert list(LOCATIONS) == list(MODULES) == list(RELEASED_COLUMNS)
    for key, spec in LOCATIONS.items():
        assert spec.domain == "location" and spec.key == key
        assert spec.release.__module__ == f"dpcore.location.mechanisms.{key}"


@pytest.mark.parametrize("key", list(RELEASED_COLUMNS))
def test_texts_are_plain_and_cite_papers_by_author_and_year(key: str) -> None:
    spec = LOCATIONS[key]
    assert spec.definition in {"pure_dp", "blowfish", "geo_ind"} and spec.is_dp
    assert spec.definition in DEFINITIONS_DP
    assert spec.summary.endswith(".") and "=" not in spec.summary
    assert not re.findall(r"\b[A-Z]{2,}\b", spec.summary), spec.summary  # no unexplained acronyms
    assert not re.search(r"seed|MECHANISMS", spec.citation + spec.formula + spec.summary)
    assert re.search(r"[A-Z][a-z]+.* (19|20)\d\d", spec.citation)
    assert spec.formula and not spec.needs_delta
    if key == "planar_laplace":
        assert "level l within r metres" in spec.summary


@pytest.mark.parametrize("key", list(RELEASED_COLUMNS))
def test_parameters_are_validated_once_with_a_public_cap_per_user(key: str) -> None:
    spec = LOCATIONS[key]
    defaults = spec.validate_params({})
    assert defaults["max_per_user"] == 1  # a constant, never read from the data
    with pytest.raises(ParameterError, match="has no parameter"):
        spec.validate_params({"colour": "red"})
    with pytest.raises(ParameterError, match="Most locations per user"):
        spec.validate_params({"max_per_user": 0})
    with pytest.raises(ParameterError, match=r"must be a int"):
        spec.validate_params({"max_per_user": 2.5})


@pytest.mark.parametrize("users", [True, False], ids=["per user", "per location"])
@pytest.mark.parametrize("key", list(RELEASED_COLUMNS))
def test_every_release_holds_only_released_values_and_states_its_scope(
    key: str, users: bool, inputs: dict[bool, LocationInputs]
) -> None:
    spec = LOCATIONS[key]
    params = spec.validate_params({"max_per_user": 3} if users else {})
    out = spec.release(inputs[users], epsilon=2.0, delta=0.0, params=params, random_state=Sampler(seed=1))
    assert list(out.table.columns) == RELEASED_COLUMNS[key]
    assert out.scope == ("per user (at most 3 locations each)" if users else PER_LOCATION)
    assert out.details["scope"] == out.scope and out.details["region"] == US.to_dict()
    json.dumps(out.details)  # publishable facts only, as JSON
    assert all(isinstance(f, go.Figure) for f in out.figures) and out.figures
    for fig in out.figures:
        assert not any("true" in (t.name or "").lower() or "raw" in (t.name or "").lower() for t in fig.data)
    if {"lat", "lon"} <= set(out.table.columns) and key != "prilocation":
        # no released location is an input location
        d = haversine_m(
            out.table.lat.to_numpy()[:, None],
            out.table.lon.to_numpy()[:, None],
            inputs[users].lat[None, :],
            inputs[users].lon[None, :],
        )
        assert d.min() > 0.0
    with pytest.raises(ParameterError, match="delta"):
        spec.release(inputs[users], epsilon=1.0, delta=1e-6, params=params, random_state=Sampler(seed=1))


def test_per_location_rows_are_shuffled_and_capped_per_user(inputs: dict[bool, LocationInputs]) -> None:
    spec = LOCATIONS["planar_laplace"]
    params = spec.validate_params({"radius_m": 1.0, "max_per_user": 2})
    out = spec.release(inputs[True], epsilon=50.0, delta=0.0, params=params, random_state=Sampler(seed=2))
    assert len(out.table) == 150 * 2 + 10  # at most 2 of each user's rows
    assert out.details["level_per_location"] == 25.0
    assert out.details["epsilon_per_metre"] == 25.0 / (1.0 + 1.5 * out.details["grid_step_m"])  # r = 1 m
    inside = LocationInputs(inputs[False].lat[:600], inputs[False].lon[:600], None, US)
    per_location = spec.release(
        inside, epsilon=50.0, delta=0.0, params=params, random_state=Sampler(seed=2)
    ).table
    # Level 50 within 1 m: each output lies metres from its input; the order is not the input order.
    d = haversine_m(
        per_location.lat.to_numpy()[:, None],
        per_location.lon.to_numpy()[:, None],
        inside.lat[None, :],
        inside.lon[None, :],
    )
    source = d.argmin(axis=1)
    assert np.array_equal(np.sort(source), np.arange(len(source))) and d.min(axis=1).max() < 100.0
    assert stats.spearmanr(source, np.arange(len(source))).pvalue > 1e-3  # row order tells nothing


def test_the_cap_keeps_a_uniformly_random_subset_of_each_users_rows() -> None:
    codes = np.repeat(np.arange(4), 5)  # 4 users with 5 rows each, all at one place
    labels, same = np.arange(4), np.zeros(20)
    random_state = Sampler(seed=3)
    counts = np.zeros(20)
    for _ in range(2000):
        kept = cap_per_user(codes, labels, same, same, 2, random_state)
        assert np.all(np.bincount(codes[kept], minlength=4) == 2)
        counts[kept] += 1
    assert stats.chisquare(counts.reshape(4, 5).sum(axis=0)).pvalue > 1e-3  # no position is favoured
    state = random_state.rng.bit_generator.state
    kept = cap_per_user(np.array([0, 0, 1]), labels[:2], same[:3], same[:3], 5, random_state)
    assert np.array_equal(kept, [0, 1, 2])
    assert random_state.rng.bit_generator.state == state  # no user over the cap: nothing is drawn


def test_scope_sentences_and_input_errors() -> None:
    assert scope_sentence(True, 1) == "per user (at most 1 location each)"
    assert scope_sentence(True, 5) == "per user (at most 5 locations each)"
    assert scope_sentence(False, 5) == "per location (each row is one person's location)"
    with pytest.raises(ParameterError, match="never one read from the data"):
        scope_sentence(True, 0)
    with pytest.raises(DataError, match="one user per row"):
        LocationInputs(np.zeros(3), np.zeros(3), np.array(["a", "b"]), US)
    with pytest.raises(DataError, match="latitude must be in"):
        LocationInputs(np.array([95.0]), np.array([0.0]), None, US)
    with pytest.raises(ParameterError, match="public region"):
        LocationInputs(np.zeros(1), np.zeros(1), None, (24, 50, -125, -66))  # type: ignore[arg-type]


def test_planar_laplace_spends_the_level_within_the_radius_per_user(
    inputs: dict[bool, LocationInputs],
) -> None:
    """Level l within r for a person with m locations: each location moves with l / (m r) per metre."""
    spec = LOCATIONS["planar_laplace"]
    out = spec.release(
        inputs[True],
        epsilon=1.0,
        delta=0.0,
        params=spec.validate_params({"radius_m": 500.0, "max_per_user": 4}),
        random_state=Sampler(seed=4),
    )
    assert out.details["level"] == 1.0 and out.details["radius_m"] == 500.0
    u = out.details["grid_step_m"]  # the grid's correction: l' / (r + 1.5 u) per metre
    assert out.details["level_per_location"] == 0.25
    assert out.details["epsilon_per_metre"] == 0.25 / (500 + 1.5 * u)
