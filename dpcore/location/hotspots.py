"""Location hotspots: private k-means on locations (Su et al. 2016; Machanavajjhala and Kifer 2015).

Points go through the region's ``PlaneMap`` f (metres around its centre, x east, y north): the azimuthal
equidistant projection on the region, the whole sphere mapped into the box B bounding the projected
region, k-Lipschitz everywhere (k = A / sin A, A the region's angular radius), so out-of-region points
never stretch a distance. The public bounds are B. ``policy="dp"`` runs ``DPLloydKMeans``: eps-DP, one
location added or removed. ``policy="blowfish"`` runs ``BlowfishKMeans`` with the L2 distance-threshold
graph of radius k theta in the plane: great-circle distance <= theta implies ||f(x) - f(y)||_2 <= k theta,
so the result is (eps, G^{d,theta})-Blowfish for great-circle metres, wherever the locations lie. Noise
goes through ``Sampler.privatize`` inside the estimators; the released centres (plane metres) are mapped
back to lat/lon by the exact inverse projection and clamped into the region (post-processing). A person
with up to g locations is protected by group privacy: the caller runs the estimator at eps / g
(``per_member_epsilon``). The mapped points are a ``PlanePoints``: rows in memory, or a table in an engine
whose rounds are one pass each (``dpcore.outofcore.plane``); the estimator draws the same noise either way.

Honest gain of Blowfish here (via ``dpcore.kmeans.blowfish``): a location crossing between two hotspot
cells can still move the per-cluster sums by almost the region's L1 width, so the per-round sum
sensitivity is within a few percent of bounded DP's (``sensitivity_gain_`` ~ 1.00-1.05 on the US airports)
and about twice DP-Lloyd's (which adds or removes a row: sum h, count 1 instead of 2 sum h, count 2).
Blowfish hotspots are therefore noisier than DP hotspots at the same eps, for a weaker guarantee.

Metrics (diagnostics on the true data): the fractional WCSS loss (WCSS_released - WCSS_true) / WCSS_true
in plane metres^2 against non-private k-means (Ravi et al. Fig. 2), and the mean great-circle distance
from each true hotspot to its nearest released one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from dpcore.errors import ParameterError
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.lloyd import DPLloydKMeans, noisy_lloyd_trials
from dpcore.location.geometry import FloatArray, PlaneMap, Region, haversine_m, validate_latlon
from dpcore.mechanisms import Sampler
from dpcore.policy import DistanceThresholdGraph

TRUE_SAMPLE = 10_000  # rows for the k-means++ inits of the non-private baseline
HotspotModel = DPLloydKMeans | BlowfishKMeans


class PlanePoints(ABC):
    """Kept locations through the region's ``PlaneMap`` f (metres around its centre), wherever they are:
    what the mean positions and the hotspots release from. Held in memory (:class:`ProjectedLocations`)
    or in an engine (:class:`dpcore.outofcore.plane.TablePlanePoints`); both give their number, the sums
    of f and a noisy-Lloyd fit, with the same noise draws."""

    region: Region

    @property
    def plane(self) -> PlaneMap:
        return PlaneMap.of(self.region)

    @property
    def bounds(self) -> tuple[FloatArray, FloatArray]:
        """The public bounds: the box B that f maps into."""
        return self.plane.lower, self.plane.upper

    @property
    def max_scale(self) -> float:
        """k: the map's Lipschitz constant (plane metres per great-circle metre)."""
        return self.plane.scale

    def to_latlon(self, centres: ArrayLike) -> FloatArray:
        """Plane points (..., 2) back to (..., 2) rows of (lat, lon), clamped into the region."""
        c = np.asarray(centres, dtype=float)
        return np.stack(self.region.clip(*self.plane.inverse(c[..., 0], c[..., 1])), axis=-1)

    @property
    @abstractmethod
    def n(self) -> int:
        """Number of points."""

    @abstractmethod
    def sums(self) -> FloatArray:
        """(2,): the sums of f over the points, x (east) then y (north)."""

    @abstractmethod
    def fit(self, estimator: HotspotModel) -> HotspotModel:
        """``estimator`` (public bounds :attr:`bounds`) fitted on the points."""


@dataclass(frozen=True)
class ProjectedLocations(PlanePoints):
    """Points in memory: ``X`` (n, 2) = f(lat, lon), east and north metres."""

    region: Region
    X: FloatArray

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    def sums(self) -> FloatArray:
        return np.array([self.X[:, 0].sum(), self.X[:, 1].sum()])

    def fit(self, estimator: HotspotModel) -> HotspotModel:
        return estimator.fit(self.X)


def project_locations(lat: ArrayLike, lon: ArrayLike, region: Region) -> ProjectedLocations:
    """Map the locations into the plane with ``PlaneMap.of(region)`` (bounds = the box B it maps into)."""
    if not isinstance(region, Region):
        raise ParameterError("this release needs a public region: pass region=Region(lat_min, ...).")
    x, y = PlaneMap.of(region).forward(*validate_latlon(lat, lon, table=True))
    return ProjectedLocations(region, np.column_stack([x, y]))


def hotspot_estimator(
    data: PlanePoints,
    n_clusters: int,
    epsilon: float,
    *,
    policy: str = "dp",
    theta_m: float | None = None,
    neighbours: str = "unbounded",
    random_state: int | Sampler | None = None,
    private_size: bool = False,
) -> HotspotModel:
    """The unfitted estimator: DPLloydKMeans (``neighbours`` "unbounded" or "bounded"; ``private_size``: its
    rounds from a noisy row count under bounded neighbours too), or BlowfishKMeans with theta scaled by
    ``max_scale``."""
    if policy == "dp":
        return DPLloydKMeans(
            n_clusters,
            epsilon,
            bounds=data.bounds,
            neighbours=neighbours,
            random_state=random_state,
            private_size=private_size,
        )
    if policy != "blowfish":
        raise ParameterError(f"policy must be 'dp' or 'blowfish' (got {policy!r}).")
    if theta_m is None or not (np.isfinite(theta_m) and theta_m > 0):
        raise ParameterError("the Blowfish hotspots need theta_m, a positive number of metres (e.g. 10_000).")
    graph = DistanceThresholdGraph(data.max_scale * float(theta_m), metric="l2")
    return BlowfishKMeans(n_clusters, epsilon, bounds=data.bounds, graph=graph, random_state=random_state)


def fit_hotspots(data: PlanePoints, model: HotspotModel) -> tuple[FloatArray, HotspotModel]:
    """``model`` (from :func:`hotspot_estimator`) fitted on ``data``: its centres as rows (lat, lon), and
    the model."""
    return data.to_latlon(data.fit(model).cluster_centers_), model


def location_hotspots(
    lat: ArrayLike,
    lon: ArrayLike,
    n_clusters: int,
    epsilon: float,
    region: Region,
    *,
    policy: str = "dp",
    theta_m: float | None = None,
    neighbours: str = "unbounded",
    random_state: int | Sampler | None = None,
) -> tuple[FloatArray, HotspotModel]:
    """Released hotspot centres as rows (lat, lon), and the fitted estimator (budget log, sampling mode)."""
    data = project_locations(lat, lon, region)
    model = hotspot_estimator(
        data,
        n_clusters,
        epsilon,
        policy=policy,
        theta_m=theta_m,
        neighbours=neighbours,
        random_state=random_state,
    )
    return fit_hotspots(data, model)


def true_hotspots(data: ProjectedLocations, n_clusters: int, random_state: int = 0) -> FloatArray:
    """Non-private k-means centres (K, 2) in projected metres: a diagnostic (never released).

    k-means++, best of 10 inits. Above TRUE_SAMPLE rows the 10 inits run on a seeded sample of that many
    rows and Lloyd on all rows refines the best: 5x faster, WCSS within 0.02% of 10 full inits (100k visits).
    """
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
        raise ParameterError(f"the number of hotspots K must be a whole number >= 1 (got {n_clusters!r}).")
    if n_clusters > data.X.shape[0]:
        raise ParameterError(
            f"K = {n_clusters} hotspots exceeds the {data.X.shape[0]} locations; choose a smaller K."
        )
    X, k = data.X, int(n_clusters)
    with threadpool_limits(1):  # OpenMP threads cost ~20x more than they save on a few thousand 2-D rows
        if X.shape[0] <= TRUE_SAMPLE:
            return KMeans(k, n_init=10, random_state=random_state).fit(X).cluster_centers_
        rows = np.random.default_rng(random_state).choice(X.shape[0], TRUE_SAMPLE, replace=False)
        start = KMeans(k, n_init=10, random_state=random_state).fit(X[rows]).cluster_centers_
        return KMeans(k, init=start, n_init=1).fit(X).cluster_centers_


def hotspot_trials(
    data: ProjectedLocations,
    n_clusters: int,
    eps_grid: Sequence[float],
    trials: int,
    random_state: Sampler,
    *,
    policy: str = "dp",
    theta_m: float | None = None,
) -> FloatArray:
    """Released centres (E, trials, K, 2) in projected metres: ``trials`` fits per eps, diagnostic noise.

    All E x trials runs go through ``noisy_lloyd_trials`` at once (same budget plan, init, sensitivities
    and noise scales as one ``fit`` per trial): a curator diagnostic, never released.
    """
    if random_state.mode != "diagnostic":
        raise ParameterError("hotspot trials are a diagnostic: pass Sampler.diagnostic(seed).")
    eps = [float(e) for e in eps_grid]
    if not eps:
        raise ParameterError("give at least one eps > 0 to run hotspot trials, e.g. [0.5, 1, 2].")
    model = hotspot_estimator(
        data, n_clusters, eps[0], policy=policy, theta_m=theta_m, random_state=random_state
    )
    return noisy_lloyd_trials(model, data.X, eps, trials, random_state)


def nearest_hotspot_distance_m(true_latlon: ArrayLike, released_latlon: ArrayLike) -> float:
    """Mean over true hotspots of the great-circle metres to the nearest released one."""
    t, r = np.asarray(true_latlon, dtype=float), np.asarray(released_latlon, dtype=float)
    if t.ndim != 2 or r.ndim != 2 or t.shape[1] != 2 or r.shape[1] != 2 or not (len(t) and len(r)):
        raise ParameterError("pass hotspots as non-empty (K, 2) arrays of (lat, lon) rows.")
    d = haversine_m(t[:, None, 0], t[:, None, 1], r[None, :, 0], r[None, :, 1])
    return float(d.min(axis=1).mean())
