"""Locations mapped to the plane out of core: the mean positions' sums and the hotspots' k-means passes.

:class:`TablePlanePoints` is the :class:`~dpcore.location.hotspots.PlanePoints` of an engine's kept rows
(columns ``la``, ``lo`` in degrees): each pass maps a block through
:meth:`dpcore.location.geometry.PlaneMap.forward` in numpy (:class:`Forward`, the in-memory map itself),
then the mean reads the two sums (:class:`SumsPass`) and each DP-Lloyd / Blowfish round the per-cluster
counts and sums (:class:`~dpcore.outofcore.kernel.LloydPass`), partials added in the blocks' order; n is
given. Noise is drawn in Python by the estimator's random_state, in the order of the in-memory fit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ibis.expr.types as ir
import numpy as np
from numpy.typing import NDArray

from dpcore.location.geometry import FloatArray, PlaneMap, Region
from dpcore.location.hotspots import HotspotModel, PlanePoints
from dpcore.outofcore.feeds import feed_of
from dpcore.outofcore.kernel import Feed, Partial, fit_statistics


class Forward:
    """Kernel step: a block of (lat, lon) rows in degrees to (x, y) metres by ``PlaneMap.forward``."""

    def __init__(self, plane: PlaneMap) -> None:
        self.plane = plane

    def __call__(self, raw: NDArray) -> NDArray:
        x, y = self.plane.forward(np.asarray(raw[:, 0], dtype=float), np.asarray(raw[:, 1], dtype=float))
        return np.column_stack([x, y])


class SumsPass:
    """Kernel: (sum x, sum y) of a block's mapped points, as ``ProjectedLocations.sums`` sums them."""

    def __init__(self, forward: Forward) -> None:
        self.forward = forward

    def __call__(self, raw: NDArray) -> Partial:
        X = self.forward(raw)
        return (np.array([X[:, 0].sum(), X[:, 1].sum()]),)


@dataclass(frozen=True, eq=False)
class TablePlanePoints(PlanePoints):
    """The kept points of an engine (``rows``: columns ``la``, ``lo`` in degrees) through the region's
    ``PlaneMap``; ``n_rows`` is their number, counted by the caller."""

    region: Region
    rows: ir.Table
    n_rows: int

    @property
    def n(self) -> int:
        return self.n_rows

    @functools.cached_property
    def feed(self) -> Feed:
        """The rows' feed, made on first use (read into memory when they fit the budget)."""
        return feed_of(self.rows, self.n_rows, n=self.n_rows)

    def sums(self) -> FloatArray:
        """(sum x, sum y): one :class:`SumsPass`."""
        out = self.feed.reduce(SumsPass(Forward(self.plane)))
        return np.zeros(2) if out is None else out[0]

    def fit(self, estimator: HotspotModel) -> HotspotModel:
        """``estimator.fit_statistics``: each round's true counts and sums by one Lloyd pass over the mapped
        points (clipped to the box B and centred, as ``estimator.fit`` does)."""
        lower, upper = self.bounds
        statistics = fit_statistics(self.feed, Forward(self.plane), lower, upper)
        return estimator.fit_statistics(self.n, 2, statistics)
