"""Utility of synthetic trips against the true ones (He et al. 2015's measures; curator-only diagnostics).

All work on trips in plane metres inside the public square (x0, y0, side):

- range-count query error: Q random rectangles (each side uniform in 10-50% of the square's); a query
  counts the trips with a point in the rectangle (points on a 128 x 128 raster); relative error
  |synthetic - true| / max(true, floor), floor = 1% of the true number of trips; the mean over queries;
- trip-length and diameter distances: Jensen-Shannon divergence (base 2, in [0, 1]) between histograms
  of 40 equal bins up to 3 and 1.5 times the side (diameter: the largest extent over 16 directions,
  within 0.5% of the largest distance between two points);
- density distance: Jensen-Shannon divergence of the share of points per cell of a 16 x 16 grid;
- frequent patterns: F1 of the top-k (k = 50) transitions between cells of a 16 x 16 grid (each trip's
  cell sequence with repeats removed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcore.trajectory.prepare import TripSet

__all__ = ["METRICS", "Queries", "Reference", "diameters", "jsd", "trip_lengths", "utility"]

METRICS = {
    "range_error": "Range-query relative error",
    "length_jsd": "Trip-length distance (JSD)",
    "diameter_jsd": "Diameter distance (JSD)",
    "density_jsd": "Density distance (JSD)",
    "pattern_f1": "Top-50 transitions F1",
}
_RASTER = 128
_CELLS = 16
_TOP = 50


@dataclass(frozen=True)
class Queries:
    """Random rectangles in raster cells (inclusive bounds), drawn once per comparison (public)."""

    x_lo: np.ndarray
    x_hi: np.ndarray
    y_lo: np.ndarray
    y_hi: np.ndarray

    @classmethod
    def draw(cls, n: int, rng: np.random.Generator) -> Queries:
        w = rng.integers(_RASTER // 10, _RASTER // 2, (2, n))
        x = rng.integers(0, _RASTER - w[0])
        y = rng.integers(0, _RASTER - w[1])
        return cls(x, x + w[0] - 1, y, y + w[1] - 1)


def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (base 2) of two histograms (normalised here); 1 when one is empty."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.sum() <= 0 or q.sum() <= 0:
        return 1.0 if p.sum() != q.sum() else 0.0
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def _cells(trips: TripSet, box: tuple[float, float, float], n: int) -> tuple[np.ndarray, np.ndarray]:
    x0, y0, side = box
    ix = np.clip(((trips.x - x0) / side * n).astype(np.int64), 0, n - 1)
    iy = np.clip(((trips.y - y0) / side * n).astype(np.int64), 0, n - 1)
    return ix, iy


def _query_counts(trips: TripSet, box: tuple[float, float, float], q: Queries) -> np.ndarray:
    """Trips with a point in each rectangle."""
    if trips.n_trips == 0:
        return np.zeros(q.x_lo.size)
    ix, iy = _cells(trips, box, _RASTER)
    pair = np.unique(trips.trip_of * (_RASTER * _RASTER) + iy * _RASTER + ix)
    trip, cell = np.divmod(pair, _RASTER * _RASTER)
    cy, cx = np.divmod(cell, _RASTER)
    out = np.empty(q.x_lo.size)
    for i in range(q.x_lo.size):  # pairs are sorted by trip: count where the trip changes
        inside = trip[(cx >= q.x_lo[i]) & (cx <= q.x_hi[i]) & (cy >= q.y_lo[i]) & (cy <= q.y_hi[i])]
        out[i] = np.count_nonzero(np.diff(inside)) + 1 if inside.size else 0
    return out


def _per_trip(trips: TripSet, values: np.ndarray, reduce: np.ufunc) -> np.ndarray:
    out = np.zeros(trips.n_trips)
    nonempty = trips.lengths > 0
    if nonempty.any():
        out[nonempty] = reduce.reduceat(values, trips.offsets[:-1][nonempty])
    return out


def trip_lengths(trips: TripSet) -> np.ndarray:
    """Length of each trip's polyline (metres)."""
    step = np.r_[np.hypot(np.diff(trips.x), np.diff(trips.y)), 0.0]
    step[trips.offsets[1:] - 1] = 0.0  # no step from a trip's last point to the next trip
    return _per_trip(trips, step, np.add)


def diameters(trips: TripSet) -> np.ndarray:
    """Largest extent of each trip over 16 directions (>= cos(pi/32) = 99.5% of its diameter)."""
    out = np.zeros(trips.n_trips)
    for a in np.linspace(0, np.pi, 16, endpoint=False):
        proj = trips.x * np.cos(a) + trips.y * np.sin(a)
        out = np.maximum(out, _per_trip(trips, proj, np.maximum) - _per_trip(trips, proj, np.minimum))
    return out


def _transitions(trips: TripSet, box: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    ix, iy = _cells(trips, box, _CELLS)
    cell = iy * _CELLS + ix
    same_trip = np.r_[trips.trip_of[1:] == trips.trip_of[:-1]] if trips.n_fixes > 1 else np.zeros(0, bool)
    moves = same_trip & (cell[1:] != cell[:-1])
    keys, counts = np.unique(cell[:-1][moves] * _CELLS**2 + cell[1:][moves], return_counts=True)
    return keys, counts


def _top(keys: np.ndarray, counts: np.ndarray) -> set[int]:
    order = np.lexsort((keys, -counts))[:_TOP]
    return set(keys[order].tolist())


@dataclass(frozen=True)
class Reference:
    """The true trips' side of every measure, computed once per comparison."""

    box: tuple[float, float, float]
    queries: Queries
    n_trips: int
    query_counts: np.ndarray
    length_hist: np.ndarray
    diameter_hist: np.ndarray
    density: np.ndarray
    top: set[int]

    @classmethod
    def of(cls, true: TripSet, box: tuple[float, float, float], queries: Queries) -> Reference:
        return cls(
            box,
            queries,
            true.n_trips,
            _query_counts(true, box, queries),
            _hist(trip_lengths(true), 3 * box[2]),
            _hist(diameters(true), 1.5 * box[2]),
            _density(true, box),
            _top(*_transitions(true, box)),
        )


def _hist(values: np.ndarray, top: float) -> np.ndarray:
    bins = np.linspace(0, top, 41)
    return np.histogram(np.minimum(values, top), bins)[0]


def _density(trips: TripSet, box: tuple[float, float, float]) -> np.ndarray:
    ix, iy = _cells(trips, box, _CELLS)
    return np.bincount(iy * _CELLS + ix, minlength=_CELLS**2)


def utility(ref: Reference, synthetic: TripSet) -> dict[str, float]:
    """The five measures of ``synthetic`` against the true trips of ``ref`` (module docstring)."""
    box, side = ref.box, ref.box[2]
    floor = max(0.01 * ref.n_trips, 1.0)
    qs = _query_counts(synthetic, box, ref.queries)
    top_s = _top(*_transitions(synthetic, box))
    hit = len(ref.top & top_s)
    f1 = 2 * hit / (len(ref.top) + len(top_s)) if ref.top or top_s else 1.0
    return {
        "range_error": float(np.mean(np.abs(qs - ref.query_counts) / np.maximum(ref.query_counts, floor))),
        "length_jsd": jsd(ref.length_hist, _hist(trip_lengths(synthetic), 3 * side)),
        "diameter_jsd": jsd(ref.diameter_hist, _hist(diameters(synthetic), 1.5 * side)),
        "density_jsd": jsd(ref.density, _density(synthetic, box)),
        "pattern_f1": f1,
    }
