"""Spherical geometry in metres: haversine distance, bearings, destination points, local projection.

All distances are great-circle metres on a sphere of radius R = 6,371,008.8 m (the IUGG mean radius).
Degrees are never treated as metres: planar methods work in a local azimuthal equidistant projection
around a public reference point, which keeps distances from that point exact; ``PlaneMap`` extends it to
the whole sphere without stretching any distance by more than its scale factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpcore.errors import DataError, ParameterError

EARTH_RADIUS_M = 6_371_008.8
# Points projected at once: a chunk's temporaries (64 KB each) stay in the cache and in the heap, where
# larger ones are fresh mappings whose page faults cost as much as the trigonometry (64K points: 88 ns a
# point against 45 ns in chunks of 8K, measured on a 2-core VM)
CHUNK_POINTS = 1 << 13

FloatArray = NDArray[np.float64]


def validate_latlon(
    lat: ArrayLike, lon: ArrayLike, *, table: bool = False, allow_empty: bool = False
) -> tuple[FloatArray, FloatArray]:
    """Float arrays of latitudes and longitudes (degrees), checked for shape, NaN and range.

    Raises ``DataError`` when ``table`` (the values come from the curator's table), else ``ParameterError``.
    """
    err = DataError if table else ParameterError
    try:
        la = np.atleast_1d(np.asarray(lat, dtype=float))
        lo = np.atleast_1d(np.asarray(lon, dtype=float))
    except (TypeError, ValueError) as exc:
        raise err(
            f"latitude/longitude must be numbers in degrees ({exc}); convert the columns to numbers first."
        ) from exc
    if la.shape != lo.shape:
        raise err(f"latitude and longitude have different shapes {la.shape} and {lo.shape}; pass pairs.")
    if la.size == 0 and not allow_empty:
        raise err("no locations were given; pass at least one (latitude, longitude) pair.")
    bad = ~(np.isfinite(la) & np.isfinite(lo))
    if bad.any():
        raise err(
            f"{int(bad.sum())} location(s) have a missing or infinite latitude/longitude; drop or fill those "
            "rows first (e.g. with the missing-values step)."
        )
    if np.any(np.abs(la) > 90):
        raise err(
            f"latitude must be in [-90, 90] degrees (found {la[np.abs(la) > 90][0]:g}); check that the "
            "latitude and longitude columns are not swapped and are in degrees."
        )
    if np.any(np.abs(lo) > 180):
        raise err(
            f"longitude must be in [-180, 180] degrees (found {lo[np.abs(lo) > 180][0]:g}); check that the "
            "columns are in degrees (not projected metres) and not swapped."
        )
    return la, lo


def wrap_lon(lon: ArrayLike) -> FloatArray:
    """Longitude wrapped to [-180, 180)."""
    return (np.asarray(lon, dtype=float) + 180.0) % 360.0 - 180.0


def haversine_m(lat1: ArrayLike, lon1: ArrayLike, lat2: ArrayLike, lon2: ArrayLike) -> FloatArray:
    """Great-circle distance in metres (haversine formula), broadcasting over its arguments."""
    p1, l1, p2, l2 = (np.radians(np.asarray(a, dtype=float)) for a in (lat1, lon1, lat2, lon2))
    h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin((l2 - l1) / 2) ** 2
    return 2.0 * EARTH_RADIUS_M * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def initial_bearing_deg(lat1: ArrayLike, lon1: ArrayLike, lat2: ArrayLike, lon2: ArrayLike) -> FloatArray:
    """Initial great-circle bearing from point 1 to point 2, degrees clockwise from north in [0, 360)."""
    p1, l1, p2, l2 = (np.radians(np.asarray(a, dtype=float)) for a in (lat1, lon1, lat2, lon2))
    dl = l2 - l1
    y = np.sin(dl) * np.cos(p2)
    x = np.cos(p1) * np.sin(p2) - np.sin(p1) * np.cos(p2) * np.cos(dl)
    return np.degrees(np.arctan2(y, x)) % 360.0


def destination_point(
    lat: ArrayLike, lon: ArrayLike, bearing_deg: ArrayLike, distance_m: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Point reached by moving ``distance_m`` metres along the great circle at the initial bearing.

    phi2 = asin(sin phi1 cos delta + cos phi1 sin delta cos theta),
    lambda2 = lambda1 + atan2(sin theta sin delta cos phi1, cos delta - sin phi1 sin phi2), delta = d / R.
    Longitude is wrapped to [-180, 180); latitude is clipped to [-90, 90] against rounding.
    """
    p1 = np.radians(np.asarray(lat, dtype=float))
    l1 = np.radians(np.asarray(lon, dtype=float))
    th = np.radians(np.asarray(bearing_deg, dtype=float))
    dl = np.asarray(distance_m, dtype=float) / EARTH_RADIUS_M
    sin_p2 = np.clip(np.sin(p1) * np.cos(dl) + np.cos(p1) * np.sin(dl) * np.cos(th), -1.0, 1.0)
    p2 = np.arcsin(sin_p2)
    l2 = l1 + np.arctan2(np.sin(th) * np.sin(dl) * np.cos(p1), np.cos(dl) - np.sin(p1) * sin_p2)
    return np.clip(np.degrees(p2), -90.0, 90.0), wrap_lon(np.degrees(l2))


@dataclass(frozen=True)
class Region:
    """A public latitude/longitude box entered by the curator (never the data's own min/max).

    Boxes crossing the antimeridian are not supported: ``lon_min < lon_max`` in [-180, 180].
    """

    lat_min: float
    lat_max: float
    lon_min: float
    lon_max: float

    def __post_init__(self) -> None:
        vals = (self.lat_min, self.lat_max, self.lon_min, self.lon_max)
        if not all(isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) for v in vals):
            raise ParameterError(f"region bounds must be finite numbers in degrees (got {vals}).")
        if not (-90 <= self.lat_min < self.lat_max <= 90):
            raise ParameterError(
                f"region latitudes must satisfy -90 <= lat_min < lat_max <= 90 (got {self.lat_min:g}, "
                f"{self.lat_max:g}); enter the public box's south and north edges."
            )
        if not (-180 <= self.lon_min < self.lon_max <= 180):
            raise ParameterError(
                f"region longitudes must satisfy -180 <= lon_min < lon_max <= 180 (got {self.lon_min:g}, "
                f"{self.lon_max:g}); boxes crossing the antimeridian are not supported, split them."
            )

    @property
    def centre(self) -> tuple[float, float]:
        """(lat, lon) of the box centre: the public reference point of its local projection."""
        return (self.lat_min + self.lat_max) / 2.0, (self.lon_min + self.lon_max) / 2.0

    def contains(self, lat: ArrayLike, lon: ArrayLike) -> NDArray[np.bool_]:
        la, lo = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
        return (la >= self.lat_min) & (la <= self.lat_max) & (lo >= self.lon_min) & (lo <= self.lon_max)

    def clip(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """Clamp points into the box (per coordinate)."""
        return (
            np.clip(np.asarray(lat, dtype=float), self.lat_min, self.lat_max),
            np.clip(np.asarray(lon, dtype=float), self.lon_min, self.lon_max),
        )

    def boundary(self, per_edge: int = 2000) -> tuple[FloatArray, FloatArray]:
        """Points along the box's four edges (for projected extents)."""
        t = np.linspace(0.0, 1.0, per_edge)
        lat_e = self.lat_min + t * (self.lat_max - self.lat_min)
        lon_e = self.lon_min + t * (self.lon_max - self.lon_min)
        lat = np.concatenate([lat_e, lat_e, np.full_like(t, self.lat_min), np.full_like(t, self.lat_max)])
        lon = np.concatenate([np.full_like(t, self.lon_min), np.full_like(t, self.lon_max), lon_e, lon_e])
        return lat, lon

    def projection(self) -> LocalProjection:
        return LocalProjection(*self.centre)

    def to_dict(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in ("lat_min", "lat_max", "lon_min", "lon_max")}


@dataclass(frozen=True)
class LocalProjection:
    """Azimuthal equidistant projection to metres around a public reference point (lat0, lon0).

    x = rho sin(beta), y = rho cos(beta), with rho the great-circle distance from the reference and
    beta the initial bearing; the inverse moves rho metres at bearing beta (destination point), so the
    round trip is exact. Distances from the reference are exact; a point at angular distance a is stretched
    tangentially by a / sin(a) (radially not at all), see ``max_scale``.
    """

    lat0: float
    lon0: float

    def __post_init__(self) -> None:
        validate_latlon(self.lat0, self.lon0)

    def forward(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """The point's unit vector u in the reference's east, north and up axes,
        e = cos p2 sin dl, n = cos p1 sin p2 - sin p1 cos p2 cos dl, v = sin p1 sin p2 + cos p1 cos p2 cos dl;
        then rho = R atan2(||(e, n)||, v) (the great-circle distance, accurate at every distance) and
        (x, y) = rho (e, n) / ||(e, n)|| (the initial bearing's sine and cosine), (0, 0) at the reference.
        Four sines and cosines per point (the haversine and bearing formulas need ten), computed in chunks of
        :data:`CHUNK_POINTS` points (the same values)."""
        la, lo = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
        la, lo = np.broadcast_arrays(la, lo)
        x, y = np.empty(la.shape), np.empty(la.shape)
        fa, fo, fx, fy = la.reshape(-1), lo.reshape(-1), x.reshape(-1), y.reshape(-1)
        for i in range(0, fa.size, CHUNK_POINTS):
            fx[i : i + CHUNK_POINTS], fy[i : i + CHUNK_POINTS] = self._forward(
                fa[i : i + CHUNK_POINTS], fo[i : i + CHUNK_POINTS]
            )
        return x, y

    def enu(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(e, n, v): the points' unit vectors in the reference's east, north and up axes (formulas in
        :meth:`forward`)."""
        p1, l1 = math.radians(float(self.lat0)), math.radians(float(self.lon0))
        p2, dl = np.radians(np.asarray(lat, dtype=float)), np.radians(np.asarray(lon, dtype=float)) - l1
        sin_p2, cos_p2, cos_dl = np.sin(p2), np.cos(p2), np.cos(dl)
        e = cos_p2 * np.sin(dl)
        n = math.cos(p1) * sin_p2 - math.sin(p1) * cos_p2 * cos_dl
        v = math.sin(p1) * sin_p2 + math.cos(p1) * cos_p2 * cos_dl
        return e, n, v

    def _forward(self, lat: FloatArray, lon: FloatArray) -> tuple[FloatArray, FloatArray]:
        e, n, v = self.enu(lat, lon)
        h = np.sqrt(e * e + n * n)  # |e|, |n| <= 1: no overflow
        rho = EARTH_RADIUS_M * np.arctan2(h, v)
        per = np.divide(rho, h, out=np.zeros_like(rho), where=h > 0)
        return e * per, n * per

    def inverse(self, x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
        xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        return destination_point(self.lat0, self.lon0, np.degrees(np.arctan2(xa, ya)), np.hypot(xa, ya))

    def cap_angle(self, region: Region) -> float:
        """A: the largest angular distance (radians) from the reference to the region's boundary, < pi/2."""
        lat, lon = region.boundary()
        a = float(np.max(haversine_m(self.lat0, self.lon0, lat, lon))) / EARTH_RADIUS_M
        if a >= math.pi / 2:
            raise ParameterError(
                "the region is too large for a local projection (it reaches 90 degrees from its centre); "
                "split it into smaller regions."
            )
        return a

    def max_scale(self, region: Region) -> float:
        """Largest local scale factor k = A / sin(A) over the cap of radius A = ``cap_angle(region)``.

        Any two points of that cap are at most k times farther apart in the projection than on the sphere
        (the cap is geodesically convex and the projected straight segment is no longer than the projected
        geodesic, whose length is at most k times the geodesic's).
        """
        a = self.cap_angle(region)
        return 1.0 if a == 0 else a / math.sin(a)


def unit_vectors(lat: ArrayLike, lon: ArrayLike) -> FloatArray:
    """Earth-centred unit vectors (..., 3); the chord R ||u - v|| is a metric below the great-circle one."""
    p, lam = np.radians(np.asarray(lat, dtype=float)), np.radians(np.asarray(lon, dtype=float))
    return np.stack([np.cos(p) * np.cos(lam), np.cos(p) * np.sin(lam), np.sin(p)], axis=-1)


@dataclass(frozen=True)
class PlaneMap:
    """The whole sphere mapped into the box B bounding the region's projection, k-Lipschitz everywhere.

    f = clamp_B o P o retract_A o fold (Blowfish-safe handling of points outside the public region):
    ``fold`` reflects the hemisphere opposite the reference onto the near one (1-Lipschitz); ``retract_A``
    pulls a point farther than A = ``cap_angle`` radially back to angular distance A (1-Lipschitz: radial
    lengths shrink and, as sin increases below 90 degrees, so do tangential ones); P, the azimuthal
    equidistant projection, is k-Lipschitz on that cap, k = A / sin A; the coordinate clamp to B is
    1-Lipschitz in L1 and L2. So ||f(x) - f(y)||_2 <= k d(x, y) for ALL x, y (great-circle metres), and
    f = P on the region: out-of-region points never stretch a distance, unlike clamping lat and lon.
    """

    region: Region
    projection: LocalProjection
    angle: float
    scale: float
    lower: FloatArray
    upper: FloatArray

    @classmethod
    def of(cls, region: Region) -> PlaneMap:
        """The region's map (cached per region)."""
        if not isinstance(region, Region):
            raise ParameterError("this release needs a public region: pass region=Region(lat_min, ...).")
        return _plane_map(region)

    @classmethod
    def _build(cls, region: Region) -> PlaneMap:
        proj = region.projection()
        angle = proj.cap_angle(region)
        x, y = proj.forward(*region.boundary(per_edge=20_000))
        return cls(
            region,
            proj,
            angle,
            proj.max_scale(region),
            np.array([x.min(), y.min()]),
            np.array([x.max(), y.max()]),
        )

    def forward(self, lat: ArrayLike, lon: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """f(lat, lon) in metres (x east, y north of the region centre), inside [lower, upper]."""
        ue, un, v = self.projection.enu(lat, lon)
        uu = np.abs(v)
        h = np.hypot(ue, un)
        rho = EARTH_RADIUS_M * np.minimum(np.arctan2(h, uu), self.angle)
        safe = np.where(h > 0, h, 1.0)
        x = np.where(h > 0, rho * ue / safe, 0.0)
        y = np.where(h > 0, rho * un / safe, 0.0)
        return np.clip(x, self.lower[0], self.upper[0]), np.clip(y, self.lower[1], self.upper[1])

    def inverse(self, x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """Exact inverse of the projection P (points of B outside P(region) land outside the region)."""
        return self.projection.inverse(x, y)

    @property
    def l1_diameter(self) -> float:
        """Largest L1 distance between two points of B: (W + H), the box's width plus height."""
        return float(np.sum(self.upper - self.lower))


@lru_cache(maxsize=32)
def _plane_map(region: Region) -> PlaneMap:
    return PlaneMap._build(region)
