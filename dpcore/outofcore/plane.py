"""Locations mapped to the plane in an engine: the mean positions' sums and the hotspots' k-means passes.

:func:`plane_forward` is :meth:`dpcore.location.geometry.PlaneMap.forward` as Ibis expressions, the same
operations in the same order: the unit vector u = (cos p cos l, cos p sin l, sin p) (p, l in radians,
degrees times pi / 180), its dot products with the reference point's east, north and up axes
(u_e, u_n, |u_u|), h = sqrt(u_e^2 + u_n^2) (numpy: ``hypot``), rho = R min(atan2(h, |u_u|), A), then
(x, y) = (rho u_e / h, rho u_n / h) (0 where h = 0) clipped to the box B. The engines' sin, cos, atan2 and
sqrt may round differently from numpy's by an ulp, and they sum in another order, so the sums and the
statistics agree with the in-memory ones to about 1e-9 relative, not bit for bit; a label can differ only
for a point within rounding of two centres' bisector.

:class:`TablePlanePoints` is the :class:`~dpcore.location.hotspots.PlanePoints` of a table: n given, the
two sums by one aggregate, and a DP-Lloyd / Blowfish fit by ``fit_statistics`` with one GROUP BY pass per
round (:func:`dpcore.outofcore.features.labelled_statistics`) over the centred points, cached once when
they fit. Noise is drawn in Python by the estimator's sampler, in the order of the in-memory fit.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import ibis
import ibis.expr.types as ir
import numpy as np

from dpcore.location.geometry import EARTH_RADIUS_M, FloatArray, PlaneMap, Region
from dpcore.location.hotspots import HotspotModel, PlanePoints
from dpcore.outofcore.features import CACHE_LIMIT, cached, const, labelled_statistics, total

_DEGREE = math.pi / 180.0  # numpy's radians(v) is v * (pi / 180)


def _clip(v: ir.FloatingValue, lo: float, hi: float) -> ir.FloatingValue:
    """np.clip(v, lo, hi) as a CASE."""
    return ibis.cases((v < const(lo), const(lo)), (v > const(hi), const(hi)), else_=v)


def plane_forward(t: ir.Table, plane: PlaneMap) -> ir.Table:
    """``t`` (columns ``la``, ``lo``: degrees) as columns ``x``, ``y``: f(la, lo) in metres (module
    docstring), one SELECT per stage."""
    p, lam = t.la * const(_DEGREE), t.lo * const(_DEGREE)
    t = t.select(u0=p.cos() * lam.cos(), u1=p.cos() * lam.sin(), u2=p.sin())
    u = (t.u0, t.u1, t.u2)
    east, north, up = (total([u[i] * const(axis[i]) for i in range(3)]) for axis in plane.axes)
    t = t.select(ue=east, un=north, uu=up.abs())
    t = t.mutate(h=(t.ue * t.ue + t.un * t.un).sqrt())
    a, cap = t.h.atan2(t.uu), const(plane.angle)
    t = t.mutate(rho=const(EARTH_RADIUS_M) * ibis.cases((a > cap, cap), else_=a))
    x = ibis.cases((t.h > const(0.0), t.rho * t.ue / t.h), else_=const(0.0))
    y = ibis.cases((t.h > const(0.0), t.rho * t.un / t.h), else_=const(0.0))
    (x0, y0), (x1, y1) = plane.lower, plane.upper
    return t.select(x=_clip(x, x0, x1), y=_clip(y, y0, y1))


@dataclass(frozen=True, eq=False)
class TablePlanePoints(PlanePoints):
    """The mapped points of an Ibis table (columns ``x``, ``y``: metres, from :func:`plane_forward`);
    ``n_rows`` is their number, counted by the caller."""

    region: Region
    rows: ir.Table
    n_rows: int

    @classmethod
    def of(cls, t: ir.Table, region: Region, n: int) -> TablePlanePoints:
        """The points of ``t`` (columns ``la``, ``lo``: degrees) through ``PlaneMap.of(region)``."""
        return cls(region, plane_forward(t, PlaneMap.of(region)), n)

    @property
    def n(self) -> int:
        return self.n_rows

    def sums(self) -> FloatArray:
        """(sum x, sum y) in one aggregate."""
        out = self.rows.aggregate(sx=self.rows.x.sum(), sy=self.rows.y.sum()).to_pandas()
        return np.array([float(out["sx"].iloc[0]), float(out["sy"].iloc[0])])

    @contextlib.contextmanager
    def _centred(self, mid: FloatArray) -> Iterator[ir.Table]:
        """Columns x0, x1: the points minus the box's centre (the estimators' centring; they lie in B,
        so its clip changes nothing), cached when 16 bytes a point fit :data:`CACHE_LIMIT`."""
        centred = self.rows.select(x0=self.rows.x - const(mid[0]), x1=self.rows.y - const(mid[1]))
        if self.n * 16 > CACHE_LIMIT:
            yield centred
            return
        with cached(centred) as rows:
            yield rows

    def fit(self, estimator: HotspotModel) -> HotspotModel:
        """``estimator.fit_statistics``: each round's true counts and sums by one GROUP BY pass."""
        lower, upper = self.bounds
        with self._centred((lower + upper) / 2.0) as rows:
            statistics = functools.partial(labelled_statistics, rows)
            return estimator.fit_statistics(self.n, 2, statistics)
