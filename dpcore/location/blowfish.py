"""Mean position of a group under the Blowfish distance-threshold policy (Machanavajjhala and Kifer 2015).

Every location goes through the region's ``PlaneMap`` f (metres around the public region's centre): f is
the azimuthal equidistant projection P on the region, maps the whole sphere into the box B bounding
P(region), and is k-Lipschitz everywhere, ||f(x) - f(y)||_2 <= k d(x, y) with k = A / sin A (A the
region's angular radius). So points outside the region never stretch a distance (clamping latitude and
longitude separately would: two points 38 km apart near the pole can clamp 1,000 km apart). The mean is
(1/n) sum f(x_i), n public; one person with at most g points (``points_per_person``, public) moves it by
at most g ||f(y) - f(x)||_1 / n per replaced point. Sensitivities (L1, since the noise is Laplace per
coordinate):

* Blowfish G^{d,theta}, d = great-circle metres: an edge has d(x, y) <= theta, so ||f(y) - f(x)||_2 <=
  k theta and, in the plane, ||.||_1 <= sqrt(2) ||.||_2: Delta_1 = sqrt(2) k theta g / n (L2: k theta g / n).
* Bounded eps-DP (full-domain graph): any x, y, Delta_1 = (W + H) g / n, with W + H the L1 diameter of B.

Guarantee: (eps, G^{d,theta})-Blowfish privacy: replacing one person's locations each by one at most theta
metres away changes the probability of any output by at most e^eps (e^(h eps) for h hops); the ``"dp"``
policy gives bounded eps-DP (one person's locations replaced by any others).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.location.budget import split_budget
from dpcore.location.geometry import PlaneMap, Region
from dpcore.location.hotspots import PlanePoints, project_locations
from dpcore.mechanisms import Sampler, _check_epsilon, check_random_state, laplace_scale


def blowfish_mean_sensitivity(
    n: int, theta_m: float, region: Region, norm: str = "l1", points_per_person: int = 1
) -> float:
    """Delta of the mean of n mapped points under G^{d,theta}: sqrt(2) k theta g / n (L1), k theta g / n
    (L2)."""
    if norm not in ("l1", "l2"):
        raise ParameterError(f"norm must be 'l1' or 'l2' (got {norm!r}).")
    if not (math.isfinite(theta_m) and theta_m > 0):
        raise ParameterError(f"theta must be a positive number of metres (got {theta_m!r}).")
    _check_count("n (the public group size)", n)
    _check_count("points_per_person", points_per_person)
    k = PlaneMap.of(region).scale
    return (math.sqrt(2.0) if norm == "l1" else 1.0) * k * theta_m * points_per_person / n


def dp_mean_sensitivity(n: int, region: Region, points_per_person: int = 1) -> float:
    """L1 Delta of the mean of n mapped points under bounded DP: (W + H) g / n, W + H the L1 diameter of B."""
    _check_count("n (the public group size)", n)
    _check_count("points_per_person", points_per_person)
    return PlaneMap.of(region).l1_diameter * points_per_person / n


def _check_count(name: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError(f"{name} must be a whole number >= 1 (got {n!r}).")


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
    n: float  # the group size: public, or a noisy count (then ``count_scale`` > 0)
    count_scale: float = 0.0
    budget_log: tuple[tuple[str, float], ...] = ()


def mean_position(
    lat: ArrayLike,
    lon: ArrayLike,
    epsilon: float,
    region: Region,
    *,
    policy: str = "blowfish",
    theta_m: float | None = None,
    points_per_person: int = 1,
    random_state: int | Sampler | None = None,
) -> MeanPositionRelease:
    """Noisy mean position of the rows (lat, lon): :func:`noisy_mean` of their mapped points."""
    _check_epsilon(epsilon)
    return noisy_mean(
        project_locations(lat, lon, region),
        epsilon,
        policy=policy,
        theta_m=theta_m,
        points_per_person=points_per_person,
        random_state=random_state,
    )


def noisy_mean(
    points: PlanePoints,
    epsilon: float,
    *,
    policy: str = "blowfish",
    theta_m: float | None = None,
    points_per_person: int = 1,
    public_n: bool = True,
    random_state: int | Sampler | None = None,
) -> MeanPositionRelease:
    """Noisy mean position: (sums of f) / n + Laplace(Delta_1 / eps) per coordinate, back to lat/lon.

    ``points``: the mapped points, in memory or in an engine (only n and the two sums are read).
    ``policy="blowfish"`` needs ``theta_m`` (G^{d,theta}); ``policy="dp"`` is bounded eps-DP. With
    ``public_n`` the group size n = number of rows is public (the relation keeps it: one row per person,
    or each row moved); ``points_per_person`` is the public most rows of one person. Without it (bounded
    DP for persons with 1 to g rows each, whose number of rows is theirs to hide) the bounded-DP mean is
    (S + Laplace(g (W + H) / eps_S)) / max(1, n + Laplace(g / eps_n)), S the sum of f minus the box's centre
    (each point within (W + H) / 2 of it in L1), eps_n = eps / 10 and eps_S the rest (``split_budget``).
    """
    eps = _check_epsilon(epsilon)
    region, n, g, plane = points.region, points.n, points_per_person, points.plane
    random_state = check_random_state(random_state)
    if policy == "dp" and not public_n:
        log = split_budget(eps, [("noisy count", Fraction(1, 10)), ("noisy sum", Fraction(9, 10))])
        (_, eps_n), (_, eps_s) = log
        mid = (plane.lower + plane.upper) / 2.0
        sens = dp_mean_sensitivity(1, region, g)  # of the centred sum: up to g points out, up to g in
        count_scale, b = laplace_scale(float(g), eps_n), laplace_scale(sens, eps_s)
        n_noisy = float(random_state.privatize(float(n), "laplace", count_scale))
        noisy = random_state.privatize(points.sums() - n * mid, "laplace", b)
        m_lat, m_lon = plane.inverse(*(mid + noisy / max(1.0, n_noisy)))
        return MeanPositionRelease(
            float(m_lat),
            float(m_lon),
            policy,
            sens,
            b,
            eps,
            random_state.mode,
            n_noisy,
            count_scale,
            tuple(log),
        )
    if policy == "blowfish":
        if theta_m is None:
            raise ParameterError(
                "the Blowfish distance-threshold policy needs theta_m (metres), e.g. 10_000."
            )
        sens = blowfish_mean_sensitivity(n, float(theta_m), region, points_per_person=g)
    elif policy == "dp":
        sens = dp_mean_sensitivity(n, region, g)
    else:
        raise ParameterError(f"policy must be 'blowfish' or 'dp' (got {policy!r}).")
    b = laplace_scale(sens, eps)
    noisy = random_state.privatize(points.sums() / n, "laplace", b)
    m_lat, m_lon = plane.inverse(noisy[0], noisy[1])
    return MeanPositionRelease(
        float(m_lat), float(m_lon), policy, sens, b, eps, random_state.mode, float(n), 0.0, (("mean", eps),)
    )
