"""Issue 19, finding 5: planar Laplace releases sample exactly on a documented grid (Andres et al. 2013
discretisation, integer samplers of Canonne, Kamath & Steinke 2020) with the grid's eps correction in the
noise and in the guarantee; the lattice radius passes the KS test of the continuous Gamma(2, 1/eps)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpcore.exact import bernoulli_exp, discrete_laplace
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region
from dpcore.location.laplace import TangentPlane, lattice_laplace
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.mechanisms import Sampler
from dpcore.plan import ReleasePlan
from dpcore.policy import GeoIndistinguishability

REGION = Region(60.0, 75.0, 5.0, 40.0)


def test_released_points_lie_on_the_grid_and_the_noise_carries_the_correction() -> None:
    rng = np.random.default_rng(1)
    inputs = LocationInputs(rng.uniform(61, 74, 400), rng.uniform(6, 39, 400), None, REGION)
    spec = LOCATIONS["planar_laplace"]
    params = spec.validate_params({"radius_m": 1000.0})
    out = spec.release(inputs, epsilon=1.0, delta=0.0, params=params, random_state=Sampler(seed=3))
    u = out.details["grid_step_m"]
    assert u == 1.0 and out.details["epsilon_per_metre"] == 1.0 / (1000.0 + 1.5 * u)
    x, y = TangentPlane(*REGION.centre).forward(out.table["lat"], out.table["lon"])
    assert np.abs(x / u - np.rint(x / u)).max() < 1e-6 and np.abs(y / u - np.rint(y / u)).max() < 1e-6
    assert REGION.contains(out.table["lat"], out.table["lon"]).all()
    plan = ReleasePlan(
        domain="location",
        mechanism="planar_laplace",
        epsilon=1.0,
        policy=GeoIndistinguishability.from_level(1.0, 1000.0),
        dataset_name="d",
        fingerprint="0" * 64,
        params={"radius_m": 1000.0, "max_per_user": 4},
        scope=scope_sentence(True, 4),
    )
    assert "public 1 m grid, sampled exactly" in plan.guarantee
    assert "0.25 / (r + 1.5 u) = 0.0002496 per metre" in plan.guarantee
    assert plan.cost == (1.0, 0.0)  # the correction is in the noise: the level spent stays l


def test_lattice_radius_is_gamma_and_angle_uniform() -> None:
    eps_u = 0.004  # eps per metre times u: mean radius 500 grid steps
    a, b = lattice_laplace(20_000, eps_u, Sampler(seed=5))
    r = np.hypot(a, b)
    ks = stats.kstest(r, stats.gamma(2, scale=1 / eps_u).cdf)
    assert ks.pvalue > 0.01, ks
    assert stats.kstest(np.arctan2(b, a), stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > 0.01


def test_integer_samplers_are_exact_in_distribution() -> None:
    rng = np.random.default_rng(2)
    gamma = np.array([0, 1, 3, 5, 7]) * 2**40 // 4  # 0, 0.25, 0.75, 1.25, 1.75
    hits = bernoulli_exp(np.repeat(gamma, 20_000), 40, rng).reshape(5, -1).sum(axis=1)
    for g, k in zip(gamma / 2**40, hits, strict=True):
        assert stats.binomtest(int(k), 20_000, float(np.exp(-g))).pvalue > 1e-3, (g, k)
    y = discrete_laplace(20_000, 3, 2, rng)  # Pr[y] proportional to exp(-0.75 |y|)
    values = np.arange(-8, 9)
    p = np.exp(-0.75 * np.abs(values))
    observed = np.array([np.sum(y == v) for v in values])
    expected = p / np.sum(np.exp(-0.75 * np.abs(np.arange(-60, 61)))) * y.size
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


@pytest.mark.parametrize("mode", ["demo", "secure"])
def test_both_release_modes_draw_on_the_lattice(mode: str) -> None:
    a, b = lattice_laplace(500, 0.01, Sampler(seed=1) if mode == "demo" else Sampler())
    assert a.dtype == np.int64 and b.dtype == np.int64 and a.size == b.size == 500
