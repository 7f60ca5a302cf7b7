"""Planar Laplace: eps-geo-indistinguishability for single locations (Andres et al. 2013).

Density (eps^2 / 2 pi) exp(-eps ||z - x||). A release (:class:`PlanarLaplace`, secure or demo sampling) is
the discretisation of Andres et al. (2013, s.4.2) computed exactly, so no floating-point operation touches
a probability (Mironov 2012):

* P: the orthographic projection onto the plane tangent at a public origin (the region's centre), in
  metres: an orthogonal projection of R^3, so ||P(x) - P(x')|| <= chord <= d(x, x') (great-circle metres)
  for any two points of the sphere.
* The input is snapped to the nearest point g of the public grid u Z^2 (moves it <= u / sqrt(2)), then
  moved by n in Z^2 drawn exactly with Pr[n] proportional to exp(-eps u q(n)), q(n) in [||n||,
  ||n|| + 1/128] (:func:`lattice_laplace`); the output grid point g + n is mapped back (post-processing).
* Hence Pr[o | x] / Pr[o | x'] <= exp(eps (||g - g'|| u + u / 128)) <= exp(eps (d(x, x') + 1.5 u)): the
  correction eps' = eps (1 + 1.5 u / r) within a radius r, so a level l within r runs its noise at
  eps = l / (r + 1.5 u) per metre and keeps exactly level l within r (and l d / r beyond r).

The great-circle float random_state :func:`planar_laplace` (theta ~ U[0, 2 pi), r from the inverse of
C_eps(r) = 1 - (1 + eps r) e^(-eps r), a Gamma(2, 1/eps) radius, moved along the great circle) serves the
diagnostic mode and the comparison baselines; its output is never released.

Guarantee: eps-geo-indistinguishability: for any two locations x, x' the output distributions differ by at
most a factor exp(eps d(x, x')), d in metres, with eps as corrected above for a release. Neighbour
relation: one location x replaced by any x'. Truncation to a public region (remap to the nearest grid point
inside it, never resample) is post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.exact import bernoulli_exp, discrete_laplace, dyadic_floor
from dpcore.location.geometry import (
    EARTH_RADIUS_M,
    FloatArray,
    Region,
    destination_point,
    haversine_m,
    unit_vectors,
    validate_latlon,
)
from dpcore.mechanisms import Sampler, _check_epsilon, check_random_state
from dpcore.policy import geo_radius_quantile

RADIUS_QUANTILES = (0.5, 0.9, 0.95)
#: Snapping both inputs (<= u / sqrt(2) each) and rounding the norm up (< u / 128) add < 1.5 u to a distance.
SLACK_STEPS = 1.5
#: 181 / 256 <= 1 / sqrt(2): the L1 proposal's rate times ||n||_1 never exceeds the target's rate times ||n||.
_L1_RATE = 181
_MAX_STEPS = 1 << 26  # |a|, |b| below it: a^2 + b^2 is exact in float64 and the integer weights fit int64


def default_grid_step(epsilon_per_metre: float) -> float:
    """The public grid step u of a release: the power of ten <= 0.001 / eps (a mean noise of 2000 to 20,000
    steps; the correction 1.5 eps u <= 0.0015 in level)."""
    return 10.0 ** math.floor(math.log10(0.001 / _check_epsilon(epsilon_per_metre)))


#: The calibration a spec declares for noise sampled exactly on a public grid (its guarantee adds
#: :func:`grid_note`).
GRID_CALIBRATION = "exact on a public grid"


def grid_note(level: float, radius_m: float) -> str:
    """The guarantee's sentence on the grid of a release at ``level`` per location within ``radius_m``."""
    u = default_grid_step(level / radius_m)
    return (
        f"Outputs lie on a public {u:g} m grid, sampled exactly (Andres et al. 2013 discretisation); "
        f"the noise runs at {level:.3g} / (r + {SLACK_STEPS:g} u) = {noise_epsilon(level, radius_m, u):.4g} "
        "per metre, so the level within r holds with the grid."
    )


def noise_epsilon(level: float, radius_m: float, step_m: float) -> float:
    """eps = l / (r + 1.5 u) per metre: snapping to the grid adds < 1.5 u to any distance, so two locations
    at most r apart stay within level l."""
    return level / (radius_m + SLACK_STEPS * step_m)


@dataclass(frozen=True)
class TangentPlane:
    """Orthographic projection onto the plane tangent at a public origin, in metres: R times the
    orthogonal projection of the unit vector, so 1-Lipschitz for great-circle metres on the whole sphere."""

    lat: float
    lon: float

    def _axes(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        lam = math.radians(self.lon)
        centre = unit_vectors(self.lat, self.lon)
        east = np.array([-math.sin(lam), math.cos(lam), 0.0])
        return centre, east, np.cross(centre, east)

    def forward(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        _, east, north = self._axes()
        v = unit_vectors(lat, lon)
        return EARTH_RADIUS_M * (v @ east), EARTH_RADIUS_M * (v @ north)

    def inverse(self, x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(lat, lon) on the near hemisphere; points beyond the horizon (radius R) go onto it."""
        centre, east, north = self._axes()
        px, py = np.asarray(x, dtype=float) / EARTH_RADIUS_M, np.asarray(y, dtype=float) / EARTH_RADIUS_M
        shrink = 1.0 / np.maximum(np.hypot(px, py), 1.0)
        px, py = px * shrink, py * shrink
        w = np.sqrt(np.maximum(1.0 - px * px - py * py, 0.0))
        v = w[..., None] * centre + px[..., None] * east + py[..., None] * north
        lat = np.degrees(np.arcsin(np.clip(v[..., 2], -1.0, 1.0)))
        return lat, np.degrees(np.arctan2(v[..., 1], v[..., 0]))


def lattice_laplace(size: int, rate: float, random_state: Sampler) -> tuple[np.ndarray, np.ndarray]:
    """``size`` exact draws n = (a, b) in Z^2 with Pr[n] proportional to exp(-rate' q(n)), rate' the largest
    24-bit dyadic <= ``rate`` (eps u), q(n) = (floor(256 ||n||) + 2) / 256 in (||n||, ||n|| + 1/128).

    Rejection from independent discrete Laplace axes of rate 181 rate' / 256 (Canonne et al. 2020),
    accepted with probability exp(-rate' (q(n) - 181 ||n||_1 / 256)) <= 1, an exact Bernoulli."""
    num, bits = dyadic_floor(rate)
    if not (0 <= bits <= 42 and num * 2.0**-bits >= 2.0**-19):
        raise ParameterError(
            f"the grid step gives {rate:.3g} of eps per step: keep eps x grid step between 2^-19 and 2^18 "
            "(leave the grid step to its default)."
        )
    a_out, b_out, filled = np.empty(size, np.int64), np.empty(size, np.int64), 0
    while filled < size:
        m = size - filled
        a = discrete_laplace(m, _L1_RATE * num, bits + 8, random_state.rng)
        b = discrete_laplace(m, _L1_RATE * num, bits + 8, random_state.rng)
        if max(np.abs(a).max(initial=0), np.abs(b).max(initial=0)) >= _MAX_STEPS:  # about e^-64: no data read
            raise ParameterError("the planar noise left the sampler's range; run the release again.")
        q = np.floor(np.sqrt((a * a + b * b).astype(float)) * 256.0).astype(np.int64) + 2
        ok = bernoulli_exp(num * (q - _L1_RATE * (np.abs(a) + np.abs(b))), bits + 8, random_state.rng)
        k = int(ok.sum())
        a_out[filled : filled + k], b_out[filled : filled + k] = a[ok], b[ok]
        filled += k
    return a_out, b_out


def sample_displacement(n: int, epsilon: float, random_state: Sampler) -> tuple[FloatArray, FloatArray]:
    """(radius metres, bearing degrees) of n float planar Laplace draws from ``random_state.rng``
    (diagnostics).

    p = (k + 1/2) / 2^53 with k uniform on {0, ..., 2^53 - 1}: uniform on (0, 1), never 0 or 1.
    """
    p = (random_state.rng.integers(0, 2**53, n) + 0.5) * 2.0**-53
    radius = np.asarray(geo_radius_quantile(_check_epsilon(epsilon), p), dtype=float).reshape(n)
    return radius, 360.0 * random_state.rng.random(n)


def planar_laplace(
    lat: ArrayLike, lon: ArrayLike, epsilon: float, random_state: int | Sampler | None = None
) -> tuple[FloatArray, FloatArray]:
    """Each location moved by float planar Laplace noise along the great circle; ``epsilon`` per METRE.

    The density of eps-geo-indistinguishability, sampled in floating point: for diagnostics and comparison
    baselines, never a release (:class:`PlanarLaplace` releases). ``random_state``: as in
    :func:`~dpcore.mechanisms.check_random_state`.
    """
    la, lo = validate_latlon(lat, lon)
    eps = _check_epsilon(epsilon)
    r, bearing = sample_displacement(la.size, eps, check_random_state(random_state))
    return destination_point(la, lo, bearing, r)


class PlanarLaplace:
    """Planar Laplace release with the (level l within radius r) parametrisation, on a public grid.

    Give ``epsilon`` (per metre) or ``level`` and ``radius_m`` (eps = l / r, Zhu et al. 2017, s.12.3.1).
    Secure and demo sampling draw exactly on the grid of step ``grid_step_m`` (default
    :func:`default_grid_step`) in the tangent plane at ``region``'s centre (or ``origin``), with the noise at
    l / (r + 1.5 u) per metre, so two locations at most r apart differ by at most a factor e^l (given
    ``epsilon`` per metre: exp(eps (d + 1.5 u)) for locations d metres apart); see the module docstring.
    ``region`` remaps outputs outside it to the nearest grid point inside it (the nearest point of the box
    when none is near), never resampling. Diagnostic sampling draws the float great-circle noise instead.

    >>> from dpcore.location.geometry import Region, haversine_m
    >>> us = Region(24.0, 50.0, -125.0, -66.0)
    >>> lat, lon = PlanarLaplace(level=1.0, radius_m=1000.0, region=us).release([40.7], [-74.0])
    >>> bool(haversine_m(40.7, -74.0, lat, lon)[0] < 100_000)  # a few km off, almost surely
    True
    """

    def __init__(
        self,
        epsilon: float | None = None,
        *,
        level: float | None = None,
        radius_m: float | None = None,
        grid_step_m: float | None = None,
        region: Region | None = None,
        origin: tuple[float, float] | None = None,
        random_state: int | Sampler | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.level = level
        self.radius_m = radius_m
        self.grid_step_m = grid_step_m
        self.region = region
        self.origin = origin
        self.random_state = random_state

    @property
    def epsilon_per_metre(self) -> float:
        """The nominal eps per metre: ``epsilon``, or l / r."""
        if self.epsilon is not None:
            if self.level is not None or self.radius_m is not None:
                raise ParameterError("give either epsilon (per metre) or level and radius_m, not both.")
            return _check_epsilon(self.epsilon)
        if self.level is None or self.radius_m is None:
            raise ParameterError(
                "planar Laplace needs epsilon per metre, or a privacy level within a radius "
                "(e.g. level=1, radius_m=200 gives epsilon = 0.005 per metre)."
            )
        level = _check_epsilon(self.level)
        radius = float(self.radius_m)
        if not np.isfinite(radius) or radius <= 0:
            raise ParameterError(f"radius_m must be a positive number of metres (got {self.radius_m!r}).")
        return level / radius

    @property
    def step_m(self) -> float:
        """The grid step u in metres (given, else :func:`default_grid_step`)."""
        if self.grid_step_m is None:
            return default_grid_step(self.epsilon_per_metre)
        u = self.grid_step_m
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not (math.isfinite(u) and u >= 0.01):
            raise ParameterError(f"grid_step_m must be a number of metres >= 0.01 (got {u!r}).")
        return float(u)

    @property
    def noise_epsilon_per_metre(self) -> float:
        """eps of the noise: l / (r + 1.5 u) for a level within a radius, else ``epsilon``."""
        if self.epsilon is not None:
            return self.epsilon_per_metre
        return noise_epsilon(self.epsilon_per_metre * float(self.radius_m), float(self.radius_m), self.step_m)  # type: ignore[arg-type]

    def radius_quantiles(self, qs: tuple[float, ...] = RADIUS_QUANTILES) -> dict[float, float]:
        """Radius in metres that contains the noise at the nominal eps with each probability (50/90/95% by
        default); a release's noise is wider by the factor 1 + 1.5 u / r."""
        r = geo_radius_quantile(self.epsilon_per_metre, qs)
        return {q: float(v) for q, v in zip(qs, np.atleast_1d(r), strict=True)}

    def plane(self) -> TangentPlane:
        """The tangent plane of the grid, at the region's centre or ``origin`` (public, never the data's)."""
        if self.region is not None:
            return TangentPlane(*self.region.centre)
        if self.origin is None:
            raise ParameterError(
                "planar Laplace releases on a public grid around a public reference point: pass "
                "region=Region(...) or origin=(lat, lon) (never a point computed from the data)."
            )
        return TangentPlane(*map(float, self.origin))

    def release(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """Noisy (lat, lon); sets ``sampling_mode_`` and the diagnostic ``displacement_m_`` (not released)."""
        la, lo = validate_latlon(lat, lon)
        random_state = check_random_state(self.random_state)
        eps = self.noise_epsilon_per_metre
        if random_state.mode == "diagnostic":
            z_lat, z_lon = destination_point(la, lo, *sample_displacement(la.size, eps, random_state)[::-1])
            if self.region is not None:
                z_lat, z_lon = self.region.clip(z_lat, z_lon)
        else:
            plane, u = self.plane(), self.step_m
            x, y = plane.forward(la, lo)
            a, b = lattice_laplace(la.size, eps * u, random_state)
            ix, iy = np.rint(x / u).astype(np.int64) + a, np.rint(y / u).astype(np.int64) + b
            z_lat, z_lon = self._truncate(plane, u, ix, iy)
        self.sampling_mode_ = random_state.mode
        self.displacement_m_ = haversine_m(la, lo, z_lat, z_lon)
        return z_lat, z_lon

    def _truncate(
        self, plane: TangentPlane, u: float, ix: np.ndarray, iy: np.ndarray
    ) -> tuple[FloatArray, FloatArray]:
        """Grid point (ix, iy) u as (lat, lon); outside the region, the nearest grid point inside it among
        the 5x5 around the grid point of the output clamped onto the region, or the clamped output itself if
        none of those lies inside (a grid step larger than the region)."""
        z_lat, z_lon = plane.inverse(ix * u, iy * u)
        if self.region is None:
            return z_lat, z_lon
        out = ~self.region.contains(z_lat, z_lon)
        if not out.any():
            return z_lat, z_lon
        c_lat, c_lon = self.region.clip(z_lat[out], z_lon[out])
        cx, cy = plane.forward(c_lat, c_lon)
        ox, oy = (o.ravel() for o in np.meshgrid(np.arange(-2, 3), np.arange(-2, 3)))
        gx = (np.rint(cx / u)[:, None] + ox[None, :]) * u
        gy = (np.rint(cy / u)[:, None] + oy[None, :]) * u
        g_lat, g_lon = plane.inverse(gx, gy)
        dist = np.where(
            self.region.contains(g_lat, g_lon),
            np.hypot(gx - (ix[out] * u)[:, None], gy - (iy[out] * u)[:, None]),
            np.inf,
        )
        best = np.argmin(dist, axis=1)
        rows = np.arange(best.size)
        ok = np.isfinite(dist[rows, best])
        z_lat[out] = np.where(ok, g_lat[rows, best], c_lat)
        z_lon[out] = np.where(ok, g_lon[rows, best], c_lon)
        return z_lat, z_lon

    def get_params(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in ("epsilon", "level", "radius_m", "grid_step_m", "region", "origin", "random_state")
        }
