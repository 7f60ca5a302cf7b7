"""Geometry and planar Laplace (Andres et al. 2013): KS tests at the equator, 70 N, antimeridian, poles."""

import numpy as np
import pytest
from scipy import stats

from dpcore.errors import DataError, ParameterError
from dpcore.location.geometry import (
    LocalProjection,
    Region,
    destination_point,
    haversine_m,
    initial_bearing_deg,
    validate_latlon,
)
from dpcore.location.laplace import PlanarLaplace, TangentPlane, planar_laplace
from dpcore.mechanisms import Sampler
from dpcore.policy import geo_radius_quantile

EPS = 0.01  # per metre: mean displacement 200 m


@pytest.mark.parametrize("lat0, lon0", [(0.0, 10.0), (70.0, 25.0), (-70.0, -60.0), (45.0, 179.999)])
def test_displacement_is_gamma_and_bearing_uniform(lat0: float, lon0: float) -> None:
    n = 20_000
    la, lo = planar_laplace(np.full(n, lat0), np.full(n, lon0), EPS, random_state=Sampler(seed=11))
    d = haversine_m(lat0, lon0, la, lo)
    assert stats.kstest(d, stats.gamma(2, scale=1 / EPS).cdf).pvalue > 0.01
    assert abs(d.mean() - 2 / EPS) < 0.03 * 2 / EPS
    b = initial_bearing_deg(lat0, lon0, la, lo)
    assert stats.kstest(b, stats.uniform(0, 360).cdf).pvalue > 0.01


def test_degrees_as_metres_bug_would_fail_at_70n() -> None:
    """Adding metre noise to lon as if degrees were equal everywhere gives the wrong distribution at 70 N."""
    rng = np.random.default_rng(3)
    r = stats.gamma(2, scale=1 / EPS).rvs(20_000, random_state=rng)
    th = rng.uniform(0, 2 * np.pi, r.size)
    deg = r / 111_195.0
    wrong = haversine_m(70.0, 25.0, 70.0 + deg * np.cos(th), 25.0 + deg * np.sin(th))
    assert stats.kstest(wrong, stats.gamma(2, scale=1 / EPS).cdf).pvalue < 1e-6


@pytest.mark.parametrize("lat0, lon0", [(89.9, 0.0), (-89.9, 120.0), (0.0, -180.0), (10.0, 179.9999)])
def test_outputs_stay_valid_near_poles_and_antimeridian(lat0: float, lon0: float) -> None:
    la, lo = planar_laplace(np.full(5000, lat0), np.full(5000, lon0), 1e-4, random_state=5)
    assert np.all((la >= -90) & (la <= 90)) and np.all((lo >= -180) & (lo < 180))
    d = haversine_m(lat0, lon0, la, lo)
    assert stats.kstest(d, stats.gamma(2, scale=1e4).cdf).pvalue > 0.01


def test_destination_then_haversine_round_trip() -> None:
    rng = np.random.default_rng(0)
    lat, lon = rng.uniform(-89, 89, 2000), rng.uniform(-180, 180, 2000)
    r, b = rng.uniform(1, 2_000_000, 2000), rng.uniform(0, 360, 2000)
    la2, lo2 = destination_point(lat, lon, b, r)
    np.testing.assert_allclose(haversine_m(lat, lon, la2, lo2), r, rtol=1e-6)
    ok = r > 100
    diff = (initial_bearing_deg(lat, lon, la2, lo2) - b + 180) % 360 - 180
    assert np.max(np.abs(diff[ok])) < 1e-5


def test_projection_round_trip_and_exact_radial_distance() -> None:
    proj = LocalProjection(40.0, -100.0)
    rng = np.random.default_rng(1)
    la, lo = rng.uniform(25, 50, 500), rng.uniform(-125, -66, 500)
    x, y = proj.forward(la, lo)
    la2, lo2 = proj.inverse(x, y)
    np.testing.assert_allclose(la2, la, atol=1e-9)
    np.testing.assert_allclose(lo2, lo, atol=1e-9)
    np.testing.assert_allclose(np.hypot(x, y), haversine_m(40.0, -100.0, la, lo), rtol=1e-12)


def test_radius_quantiles_match_policy_and_gamma() -> None:
    q = np.array([0.5, 0.9, 0.95])
    r = geo_radius_quantile(EPS, q)
    np.testing.assert_allclose(r, stats.gamma(2, scale=1 / EPS).ppf(q), rtol=1e-9)
    pl = PlanarLaplace(level=1.0, radius_m=100.0)
    assert pl.epsilon_per_metre == pytest.approx(EPS)
    assert pl.radius_quantiles()[0.9] == pytest.approx(r[1])


def test_snapping_and_truncation_are_remaps_inside_region() -> None:
    region = Region(40.0, 40.1, -74.1, -74.0)
    pl = PlanarLaplace(EPS, grid_step_m=50.0, region=region, random_state=Sampler(seed=2))
    la, lo = pl.release(np.full(3000, 40.05), np.full(3000, -74.0))
    assert region.contains(la, lo).all()
    assert pl.sampling_mode_ == "demo"
    x, y = TangentPlane(*region.centre).forward(la, lo)
    np.testing.assert_allclose(x / 50 - np.round(x / 50), 0, atol=1e-6)
    np.testing.assert_allclose(y / 50 - np.round(y / 50), 0, atol=1e-6)
    # Outputs that fell outside (east of lon -74.0) were remapped, not resampled: they sit on the edge.
    assert np.mean(lo > -74.0 - 0.001) > 0.2


def test_secure_sampler_default() -> None:
    pl = PlanarLaplace(EPS, origin=(0.0, 0.0))
    pl.release([0.0], [0.0])
    assert pl.sampling_mode_ == "secure"


@pytest.mark.parametrize(
    "lat, lon, match",
    [
        ([91.0], [0.0], "latitude must be in"),
        ([0.0], [181.0], "longitude must be in"),
        ([np.nan], [0.0], "missing"),
        ([], [], "no locations"),
        ([1.0, 2.0], [1.0], "different shapes"),
    ],
)
def test_validation_errors_name_problem_and_fix(lat: list, lon: list, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        planar_laplace(lat, lon, EPS, random_state=1)
    with pytest.raises(DataError, match=match):
        validate_latlon(lat, lon, table=True)


def test_parameter_errors() -> None:
    with pytest.raises(ParameterError, match="epsilon"):
        planar_laplace([0.0], [0.0], 0.0, random_state=1)
    with pytest.raises(ParameterError, match="not both"):
        _ = PlanarLaplace(0.1, level=1, radius_m=10).epsilon_per_metre
    with pytest.raises(ParameterError, match="public reference"):
        PlanarLaplace(0.1, grid_step_m=10).release([0.0], [0.0])
    with pytest.raises(ParameterError, match="antimeridian"):
        Region(0, 10, 170, -170)
    with pytest.raises(ParameterError, match="random_state"):
        planar_laplace([0.0], [0.0], 0.1, random_state="seed")  # type: ignore[arg-type]
