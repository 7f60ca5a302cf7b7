"""Planar Laplace: eps-geo-indistinguishability for single locations (Andres et al. 2013).

Density (eps^2 / 2 pi) exp(-eps ||z - x||): the angle theta ~ U[0, 2 pi) and the radius from
the inverse of C_eps(r) = 1 - (1 + eps r) e^(-eps r), r = -(1/eps) (W_{-1}((p - 1)/e) + 1), p ~ U(0, 1)
(a Gamma(2, 1/eps) draw; E[r] = 2/eps), computed by ``dpcore.policy.geo_radius_quantile``, the one radius
quantile of the engine (right Lambert-W branch down to p = 1e-300). The point is moved r metres along
the great circle at bearing theta (destination-point formula), so the great-circle displacement is
exactly the planar radius.

Guarantee: eps-geo-indistinguishability: for any two locations x, x' the output distributions differ by at
most a factor exp(eps d(x, x')), d in metres. Neighbour relation: one location x replaced by any x'.

Snapping to a grid of step u (local projection around a public reference) and truncation to a public
region (remap to the nearest grid point inside it, never resample) are post-processing. The finite-
precision correction eps' of Andres et al. s.4 is NOT applied: the guarantee above is for exact real
arithmetic, and float sampling may leak low-order bits (Mironov 2012).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.location.geometry import (
    FloatArray,
    LocalProjection,
    Region,
    destination_point,
    haversine_m,
    validate_latlon,
)
from dpcore.mechanisms import Sampler, _check_epsilon
from dpcore.policy import geo_radius_quantile

RADIUS_QUANTILES = (0.5, 0.9, 0.95)


def as_sampler(rng: Sampler | int | None) -> Sampler:
    """``None`` -> secure ``Sampler()``; an int -> demo ``Sampler(seed)``; a ``Sampler`` as is."""
    if rng is None:
        return Sampler()
    if isinstance(rng, Sampler):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return Sampler(int(rng))
    raise ParameterError(f"rng must be a dpcore Sampler, an integer demo seed or None (got {rng!r}).")


def sample_displacement(n: int, epsilon: float, sampler: Sampler) -> tuple[FloatArray, FloatArray]:
    """(radius metres, bearing degrees) of n planar Laplace draws from ``sampler.rng``.

    p = (k + 1/2) / 2^53 with k uniform on {0, ..., 2^53 - 1}: uniform on (0, 1), never 0 or 1.
    """
    p = (sampler.rng.integers(0, 2**53, n) + 0.5) * 2.0**-53
    radius = np.asarray(geo_radius_quantile(_check_epsilon(epsilon), p), dtype=float).reshape(n)
    return radius, 360.0 * sampler.rng.random(n)


def planar_laplace(
    lat: ArrayLike, lon: ArrayLike, epsilon: float, rng: Sampler | int | None = None
) -> tuple[FloatArray, FloatArray]:
    """Release each location with planar Laplace noise; ``epsilon`` is per METRE (e.g. 0.01 = 1 per 100 m).

    eps-geo-indistinguishability: for any two locations x, x' the output distributions differ by at most a
    factor exp(eps d(x, x')), d in metres. ``rng``: a Sampler (None = secure), or an int demo seed.
    """
    la, lo = validate_latlon(lat, lon)
    eps = _check_epsilon(epsilon)
    r, bearing = sample_displacement(la.size, eps, as_sampler(rng))
    return destination_point(la, lo, bearing, r)


class PlanarLaplace:
    """Planar Laplace release with the (level l within radius r) parametrisation, snapping and truncation.

    eps-geo-indistinguishability: for any two locations x, x' the output distributions differ by at most a
    factor exp(eps d(x, x')), d in metres. Give ``epsilon`` (per metre) or ``level`` and ``radius_m``
    (eps = l / r, Zhu et al. 2017, s.12.3.1). ``grid_step_m`` snaps outputs to a square grid of that step in
    the azimuthal equidistant projection around ``region``'s centre (or ``origin``); ``region`` remaps outputs
    outside it to the nearest grid point inside it (the nearest point of the box without a grid), never
    resampling. Both are post-processing: the guarantee is unchanged and the eps' finite-precision
    correction of Andres et al. is not applied.
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
        rng: Sampler | int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.level = level
        self.radius_m = radius_m
        self.grid_step_m = grid_step_m
        self.region = region
        self.origin = origin
        self.rng = rng

    @property
    def epsilon_per_metre(self) -> float:
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

    def radius_quantiles(self, qs: tuple[float, ...] = RADIUS_QUANTILES) -> dict[float, float]:
        """Radius in metres that contains the noise with each probability (50/90/95% by default)."""
        r = geo_radius_quantile(self.epsilon_per_metre, qs)
        return {q: float(v) for q, v in zip(qs, np.atleast_1d(r), strict=True)}

    def _projection(self) -> LocalProjection:
        if self.region is not None:
            return self.region.projection()
        if self.origin is None:
            raise ParameterError(
                "snapping to a grid needs a public reference point: pass region=Region(...) or "
                "origin=(lat, lon) (never a point computed from the data)."
            )
        return LocalProjection(*self.origin)

    def release(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """Noisy (lat, lon); sets ``sampling_mode_`` and the diagnostic ``displacement_m_`` (not released)."""
        la, lo = validate_latlon(lat, lon)
        if self.grid_step_m is not None and not (np.isfinite(self.grid_step_m) and self.grid_step_m > 0):
            raise ParameterError(
                f"grid_step_m must be a positive number of metres (got {self.grid_step_m!r})."
            )
        sampler = as_sampler(self.rng)
        r, bearing = sample_displacement(la.size, self.epsilon_per_metre, sampler)
        z_lat, z_lon = destination_point(la, lo, bearing, r)
        if self.grid_step_m is not None:
            z_lat, z_lon = self._snap(z_lat, z_lon)
        elif self.region is not None:
            z_lat, z_lon = self.region.clip(z_lat, z_lon)
        self.sampling_mode_ = sampler.mode
        self.displacement_m_ = haversine_m(la, lo, z_lat, z_lon)
        return z_lat, z_lon

    def _snap(self, z_lat: FloatArray, z_lon: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Nearest grid point; with a region, the nearest grid point inside it among the 5x5 around the
        grid point of the clamped output (measured from the unclamped output), or the clamped output itself
        if none of those lies inside (a grid step larger than the region)."""
        proj, u = self._projection(), float(self.grid_step_m)  # type: ignore[arg-type]
        zx, zy = proj.forward(z_lat, z_lon)
        if self.region is None:
            return proj.inverse(np.round(zx / u) * u, np.round(zy / u) * u)
        cx, cy = proj.forward(*self.region.clip(z_lat, z_lon))
        ox, oy = (o.ravel() for o in np.meshgrid(np.arange(-2, 3), np.arange(-2, 3)))
        gx = (np.round(cx / u)[:, None] + ox[None, :]) * u
        gy = (np.round(cy / u)[:, None] + oy[None, :]) * u
        g_lat, g_lon = proj.inverse(gx, gy)
        inside = self.region.contains(g_lat, g_lon)
        dist = np.where(inside, np.hypot(gx - zx[:, None], gy - zy[:, None]), np.inf)
        best = np.argmin(dist, axis=1)
        rows = np.arange(len(zx))
        ok = np.isfinite(dist[rows, best])
        out_lat = np.where(ok, g_lat[rows, best], self.region.clip(z_lat, z_lon)[0])
        out_lon = np.where(ok, g_lon[rows, best], self.region.clip(z_lat, z_lon)[1])
        return out_lat, out_lon

    def get_params(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in ("epsilon", "level", "radius_m", "grid_step_m", "region", "origin", "rng")
        }
