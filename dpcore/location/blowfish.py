"""Mean position of a group under the Blowfish distance-threshold policy (MECHANISMS.md s.4.4; seed 004).

The mean is computed in metres in the azimuthal equidistant projection around the public region's centre,
with n public and every point clamped into the region (the theta bound is for points inside it; clamping
is not a contraction of great-circle distance). Replacing one point x by y moves the mean by
(P(y) - P(x)) / n. Sensitivities (L1, since the noise is Laplace per coordinate):

* Blowfish G^{d,theta}, d = great-circle metres: an edge has d(x, y) <= theta, so the projected distance
  is ||P(y) - P(x)||_2 <= k theta, with k = a / sin(a) the projection's largest scale factor over the
  region (a = angular radius; ``LocalProjection.max_scale``). In the plane ||v||_1 <= sqrt(2) ||v||_2, so
  Delta_1 = sqrt(2) k theta / n (L2: k theta / n).
* Bounded eps-DP (full-domain graph): any x, y in the region, Delta_1 = (W + H) / n, with W, H the width
  and height of the bounding box of the projected region (the largest L1 distance within it).

Guarantee: (eps, G^{d,theta})-Blowfish privacy: replacing one person's location by one at most theta metres
away changes the probability of any output by at most e^eps (e^(k eps) for k hops); the ``"dp"`` policy
gives bounded eps-DP (one location replaced by any other in the region).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region, validate_latlon
from dpcore.location.laplace import as_sampler
from dpcore.mechanisms import Sampler, _check_epsilon, laplace_scale


def blowfish_mean_sensitivity(n: int, theta_m: float, region: Region, norm: str = "l1") -> float:
    """Delta of the projected mean of n under G^{d,theta}: sqrt(2) k theta / n (L1), k theta / n (L2)."""
    if norm not in ("l1", "l2"):
        raise ParameterError(f"norm must be 'l1' or 'l2' (got {norm!r}).")
    if not (math.isfinite(theta_m) and theta_m > 0):
        raise ParameterError(f"theta must be a positive number of metres (got {theta_m!r}).")
    _check_n(n)
    k = region.projection().max_scale(region)
    return (math.sqrt(2.0) if norm == "l1" else 1.0) * k * theta_m / n


def dp_mean_sensitivity(n: int, region: Region) -> float:
    """L1 Delta of the projected mean of n points under bounded DP: (W + H) / n of the projected region."""
    _check_n(n)
    proj = region.projection()
    x, y = proj.forward(*region.boundary(per_edge=20_000))
    return float((np.ptp(x) + np.ptp(y)) * (1.0 + 1e-6)) / n


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError(f"n (the public group size) must be a whole number >= 1 (got {n!r}).")


@dataclass(frozen=True)
class MeanPositionRelease:
    """A released mean position with the facts a manifest needs."""

    lat: float
    lon: float
    policy: str
    l1_sensitivity_m: float
    laplace_scale_m: float
    epsilon_spent: float
    sampling_mode: str


def mean_position(
    lat: ArrayLike,
    lon: ArrayLike,
    epsilon: float,
    region: Region,
    *,
    policy: str = "blowfish",
    theta_m: float | None = None,
    rng: Sampler | int | None = None,
) -> MeanPositionRelease:
    """Noisy mean position: projected mean + Laplace(Delta_1 / eps) per coordinate, back to lat/lon.

    ``policy="blowfish"`` needs ``theta_m`` (G^{d,theta}); ``policy="dp"`` is bounded eps-DP. The group size
    n = number of rows is treated as public.
    """
    eps = _check_epsilon(epsilon)
    if not isinstance(region, Region):
        raise ParameterError("the mean position needs a public region: pass region=Region(lat_min, ...).")
    la, lo = region.clip(*validate_latlon(lat, lon, table=True))
    n = la.size
    if policy == "blowfish":
        if theta_m is None:
            raise ParameterError(
                "the Blowfish distance-threshold policy needs theta_m (metres), e.g. 10_000."
            )
        sens = blowfish_mean_sensitivity(n, float(theta_m), region)
    elif policy == "dp":
        sens = dp_mean_sensitivity(n, region)
    else:
        raise ParameterError(f"policy must be 'blowfish' or 'dp' (got {policy!r}).")
    proj = region.projection()
    x, y = proj.forward(la, lo)
    sampler = as_sampler(rng)
    b = laplace_scale(sens, eps)
    noisy = sampler.privatize(np.array([x.mean(), y.mean()]), "laplace", b)
    m_lat, m_lon = proj.inverse(noisy[0], noisy[1])
    return MeanPositionRelease(float(m_lat), float(m_lon), policy, sens, b, eps, sampler.mode)
