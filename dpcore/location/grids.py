"""Private density grids over a public region (Qardaji, Yang and Li 2013).

Uniform grid (UG): m x m cells over the curator's lat/lon box with m = sqrt(n eps / c), c = 10, and
Laplace(s / eps) on each cell count. Adaptive grid (AG): level 1 has m1 = max(10, ceil(sqrt(n eps/c)/4))
cells per side with budget alpha eps (alpha = 0.5); each cell with noisy count v is cut into m2 x m2 with
m2 = ceil(sqrt(max(v, 0) (1 - alpha) eps / c2)) (at most 256), c2 = 5, counted with the remaining
(1 - alpha) eps; then constrained inference (Qardaji et al. s.IV), with a = alpha:
v' = (a^2 m2^2 v + (1-a)^2 sum u) / (a^2 m2^2 + (1-a)^2) and u' = u + (v' - sum u) / m2^2, so parent = sum
of children.

Guarantee: eps-DP, cells of a level are disjoint (parallel composition) and levels add up (sequential).
Neighbours: ``"unbounded"`` (one person's points added or removed, s = g; n is then private, so the grid size
uses a curator-given public estimate of n or a noisy count that spends ``count_fraction`` of eps) or
``"bounded"`` (one person's points replaced by any others, s = 2 g; n is public under this relation for g = 1,
one point per person; for g > 1 a person's number of points is theirs to hide, so n is a noisy count as for
unbounded neighbours), where g = ``points_per_person`` is the public most points one person has among those
given (1: each point is one person; the caller enforces the cap). Budget parts come from ``split_budget``
(their sum never exceeds eps). The region is public; points outside it are clamped onto its edge, a remap of
each point on its own, so one person still changes at most g cells by one each. Cells are equal in degrees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.location.budget import BudgetLog, split_budget
from dpcore.location.geometry import FloatArray, Region, validate_latlon
from dpcore.mechanisms import Sampler, _check_epsilon, check_random_state

NEIGHBOURS = {"unbounded": 1.0, "bounded": 2.0}
MAX_CELLS_PER_SIDE = 1024


@dataclass(frozen=True)
class DensityGrid:
    """A released grid: level-1 ``counts`` on ``lat_edges`` x ``lon_edges`` and the finest ``leaves``
    (rows lat_lo, lat_hi, lon_lo, lon_hi, count), those of level-1 cell k (row-major) at rows
    leaf_offsets[k]:leaf_offsets[k + 1]; parent counts equal the sum of their leaves. ``budget_log`` holds
    the parts of eps (noisy count, levels); ``epsilon_spent`` is their exact sum, never above eps."""

    kind: str
    region: Region
    lat_edges: FloatArray
    lon_edges: FloatArray
    counts: FloatArray
    leaves: FloatArray
    leaf_offsets: np.ndarray
    epsilon_spent: float
    epsilon_count: float
    n_estimate: float
    n_source: str
    neighbours: str
    sampling_mode: str
    budget_log: tuple[tuple[str, float], ...]

    def range_query(self, boxes: ArrayLike) -> FloatArray:
        """Noisy counts of boxes (rows lat_lo, lat_hi, lon_lo, lon_hi), leaves assumed uniform inside.

        Level-1 cells fully inside a box contribute their (consistent) count; only the leaves of the
        cells the box edges cut are weighted by their overlap fraction. Vectorised over the boxes; a
        uniform grid (one leaf per cell) is the bilinear form fh' counts fw of the cover fractions.
        """
        b = np.atleast_2d(np.asarray(boxes, dtype=float))
        fh = _cover(self.lat_edges, b[:, 0], b[:, 1])
        fw = _cover(self.lon_edges, b[:, 2], b[:, 3])
        if len(self.leaves) == self.counts.size:
            return np.einsum("qi,ij,qj->q", fh, self.counts, fw)
        full_h, full_w = fh == 1.0, fw == 1.0
        out = np.einsum("qi,ij,qj->q", full_h.astype(float), self.counts, full_w.astype(float))
        chunk = max(1, 4_000_000 // self.counts.size)
        for s in range(0, len(b), chunk):
            q = slice(s, s + chunk)
            touched = (fh[q, :, None] > 0) & (fw[q, None, :] > 0)
            cut = touched & ~(full_h[q, :, None] & full_w[q, None, :])
            box, parent = np.nonzero(cut.reshape(cut.shape[0], -1))
            starts = self.leaf_offsets[parent]
            lengths = self.leaf_offsets[parent + 1] - starts
            idx = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
            box = np.repeat(box + s, lengths)
            lv, bb = self.leaves[idx], b[box]
            h = np.clip(np.minimum(lv[:, 1], bb[:, 1]) - np.maximum(lv[:, 0], bb[:, 0]), 0, None)
            w = np.clip(np.minimum(lv[:, 3], bb[:, 3]) - np.maximum(lv[:, 2], bb[:, 2]), 0, None)
            weight = h / (lv[:, 1] - lv[:, 0]) * w / (lv[:, 3] - lv[:, 2])
            out += np.bincount(box, weights=weight * lv[:, 4], minlength=len(b))
        return out


def _cover(edges: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """(boxes, intervals) fraction of each interval [edges[k], edges[k+1]] inside [lo, hi] of each box."""
    inter = np.minimum(edges[None, 1:], hi[:, None]) - np.maximum(edges[None, :-1], lo[:, None])
    return np.clip(inter, 0, None) / np.diff(edges)


def grid_side(n: float, epsilon: float, c: float) -> int:
    """m = sqrt(n eps / c) cells per side (Qardaji et al. guideline 1), at least 1, capped at 1024."""
    return int(min(MAX_CELLS_PER_SIDE, max(1, round(math.sqrt(max(n, 0.0) * epsilon / c)))))


class PointCounts(Protocol):
    """The points a grid counts, clamped onto the public region: their number and their counts per cell.

    :class:`ClampedPoints` holds them in memory; :class:`dpcore.outofcore.locations.TablePoints` counts
    them by passes of an engine (DuckDB or Spark) with the same floating-point operations, so both give
    the same counts."""

    @property
    def n(self) -> int: ...

    def cell_counts(self, m: int) -> np.ndarray:
        """(m * m,) points per cell of the m x m grid over the region (row-major, by :func:`cell_index`)."""
        ...

    def leaf_counts(self, m1: int, m2: np.ndarray) -> np.ndarray:
        """Points per leaf when level-1 cell c of the m1 x m1 grid is cut into m2[c] x m2[c] (leaves of cell
        c at offset[c]:offset[c + 1], offset the cumulative sum of m2^2, row-major inside the cell)."""
        ...


@dataclass(frozen=True)
class ClampedPoints:
    """Points in memory, validated (``DataError`` for the curator's bad values), clamped onto ``region``."""

    lat: FloatArray
    lon: FloatArray
    region: Region

    @classmethod
    def of(cls, lat: ArrayLike, lon: ArrayLike, region: Region) -> ClampedPoints:
        if not isinstance(region, Region):
            raise ParameterError("a density grid needs a public region: pass region=Region(lat_min, ...).")
        la, lo = region.clip(*validate_latlon(lat, lon, table=True))
        return cls(la, lo, region)

    @property
    def n(self) -> int:
        return int(self.lat.size)

    def cell_counts(self, m: int) -> np.ndarray:
        r = self.region
        i = cell_index(self.lat, r.lat_min, r.lat_max, m)
        j = cell_index(self.lon, r.lon_min, r.lon_max, m)
        return np.bincount(i * m + j, minlength=m * m)

    def leaf_counts(self, m1: int, m2: np.ndarray) -> np.ndarray:
        r = self.region
        i = cell_index(self.lat, r.lat_min, r.lat_max, m1)
        j = cell_index(self.lon, r.lon_min, r.lon_max, m1)
        lat_e, lon_e = grid_edges(r, m1)
        cell = i * m1 + j
        sub_i = cell_index(self.lat, lat_e[i], lat_e[i + 1], m2[cell])
        sub_j = cell_index(self.lon, lon_e[j], lon_e[j + 1], m2[cell])
        offset = np.concatenate([[0], np.cumsum(m2**2)])
        return np.bincount(offset[cell] + sub_i * m2[cell] + sub_j, minlength=int(offset[-1]))


def _prepare(
    points: PointCounts,
    epsilon: float,
    neighbours: str,
    n_estimate: float | None,
    count_fraction: float,
    random_state: Sampler,
    levels: list[tuple[str, Fraction]],
    points_per_person: int,
) -> tuple[BudgetLog, float, str, float]:
    """The budget log (noisy count first if any, then ``levels``), n for sizing and its source, the
    per-cell sensitivity s. ``levels`` are shares of the budget left after the count."""
    if neighbours not in NEIGHBOURS:
        raise ParameterError(f"neighbours must be 'unbounded' or 'bounded' (got {neighbours!r}).")
    g = points_per_person
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1:
        raise ParameterError(f"points_per_person must be a whole number >= 1 (got {g!r}).")
    eps = _check_epsilon(epsilon)
    s = NEIGHBOURS[neighbours] * int(g)
    if neighbours == "bounded" and g == 1:
        return split_budget(eps, levels), float(points.n), "public (bounded neighbours keep n fixed)", s
    if n_estimate is not None:
        if not (math.isfinite(n_estimate) and n_estimate > 0):
            raise ParameterError(f"n_estimate must be a positive number (got {n_estimate!r}).")
        return split_budget(eps, levels), float(n_estimate), "curator", s
    if not (0.0 < count_fraction < 1.0):
        raise ParameterError(f"count_fraction must be in (0, 1), e.g. 0.05 (got {count_fraction!r}).")
    share = Fraction(count_fraction)
    log = split_budget(eps, [("noisy count", share), *((name, (1 - share) * f) for name, f in levels)])
    n_hat = max(1.0, points.n + float(random_state.laplace(1, s / log[0][1])[0]))
    return log, n_hat, "noisy count", s


def _grid(
    kind: str,
    region: Region,
    edges: tuple[FloatArray, FloatArray],
    counts: FloatArray,
    leaves: FloatArray,
    offsets: np.ndarray,
    log: BudgetLog,
    n_hat: float,
    source: str,
    neighbours: str,
    random_state: Sampler,
) -> DensityGrid:
    eps_count = log[0][1] if log[0][0] == "noisy count" else 0.0
    return DensityGrid(
        kind,
        region,
        *edges,
        counts,
        leaves,
        offsets,
        math.fsum(e for _, e in log),
        eps_count,
        n_hat,
        source,
        neighbours,
        random_state.mode,
        tuple(log),
    )


def cell_index(
    values: FloatArray, lo: float | FloatArray, hi: float | FloatArray, m: int | np.ndarray
) -> np.ndarray:
    """Index in 0..m-1 of each value's cell when [lo, hi] is cut into m equal cells (broadcasts):
    clip(floor((v - lo) / (hi - lo) * m), 0, m - 1)."""
    return np.clip(np.floor((values - lo) / (hi - lo) * m).astype(int), 0, m - 1)


def grid_edges(region: Region, m: int) -> tuple[FloatArray, FloatArray]:
    """The lat and lon edges (m + 1 each) of the m x m grid over ``region``."""
    return (
        np.linspace(region.lat_min, region.lat_max, m + 1),
        np.linspace(region.lon_min, region.lon_max, m + 1),
    )


def uniform_grid(
    lat: ArrayLike, lon: ArrayLike, epsilon: float, region: Region, **options: Any
) -> DensityGrid:
    """UG: eps-DP m x m histogram of the points in ``region`` (Laplace(s / eps) per cell, s = g or 2 g);
    ``options`` as :func:`uniform_grid_of`."""
    return uniform_grid_of(ClampedPoints.of(lat, lon, region), epsilon, **options)


def uniform_grid_of(
    points: ClampedPoints | PointCounts,
    epsilon: float,
    *,
    neighbours: str = "unbounded",
    n_estimate: float | None = None,
    count_fraction: float = 0.05,
    c: float = 10.0,
    grid_size: int | None = None,
    points_per_person: int = 1,
    random_state: int | Sampler | None = None,
) -> DensityGrid:
    """:func:`uniform_grid` of counted points (in memory or in an engine: one pass of cell counts).

    neighbours: "unbounded" or "bounded"; n_estimate: a public estimate of n (unbounded), else a noisy count
    with ``count_fraction`` of eps; c: the grid-size constant; grid_size: m itself; points_per_person: g."""
    random_state = check_random_state(random_state)
    region: Region = points.region  # type: ignore[union-attr]
    log, n_hat, source, s = _prepare(
        points,
        epsilon,
        neighbours,
        n_estimate,
        count_fraction,
        random_state,
        [("grid", Fraction(1))],
        points_per_person,
    )
    eps_grid = log[-1][1]
    m = grid_side(n_hat, eps_grid, c) if grid_size is None else int(grid_size)
    if m < 1:
        raise ParameterError(f"grid_size must be a whole number >= 1 (got {grid_size!r}).")
    lat_e, lon_e = grid_edges(region, m)
    counts = points.cell_counts(m).astype(float)
    counts = (counts + random_state.laplace(m * m, s / eps_grid)).reshape(m, m)
    ii, jj = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    leaves = np.column_stack(
        [lat_e[ii.ravel()], lat_e[ii.ravel() + 1], lon_e[jj.ravel()], lon_e[jj.ravel() + 1], counts.ravel()]
    )
    return _grid(
        "uniform",
        region,
        (lat_e, lon_e),
        counts,
        leaves,
        np.arange(m * m + 1),
        log,
        n_hat,
        source,
        neighbours,
        random_state,
    )


def adaptive_grid(
    lat: ArrayLike, lon: ArrayLike, epsilon: float, region: Region, **options: Any
) -> DensityGrid:
    """AG (Qardaji et al. 2013): two-level eps-DP grid with constrained inference (see module docstring);
    ``options`` as :func:`adaptive_grid_of`."""
    return adaptive_grid_of(ClampedPoints.of(lat, lon, region), epsilon, **options)


def adaptive_grid_of(
    points: ClampedPoints | PointCounts,
    epsilon: float,
    *,
    neighbours: str = "unbounded",
    n_estimate: float | None = None,
    count_fraction: float = 0.05,
    alpha: float = 0.5,
    c: float = 10.0,
    c2: float = 5.0,
    points_per_person: int = 1,
    random_state: int | Sampler | None = None,
) -> DensityGrid:
    """:func:`adaptive_grid` of counted points (in an engine: one pass per level)."""
    if not (0.0 < alpha < 1.0):
        raise ParameterError(f"alpha must be in (0, 1), e.g. 0.5 (got {alpha!r}).")
    random_state = check_random_state(random_state)
    region: Region = points.region  # type: ignore[union-attr]
    a = Fraction(alpha)
    log, n_hat, source, s = _prepare(
        points,
        epsilon,
        neighbours,
        n_estimate,
        count_fraction,
        random_state,
        [("level 1", a), ("level 2", 1 - a)],
        points_per_person,
    )
    (_, e1), (_, e2) = log[-2:]
    eps_grid = e1 + e2
    m1 = int(min(MAX_CELLS_PER_SIDE, max(10, math.ceil(math.sqrt(n_hat * eps_grid / c) / 4))))
    lat_e, lon_e = grid_edges(region, m1)
    v = points.cell_counts(m1) + random_state.laplace(m1 * m1, s / e1)
    m2 = np.ceil(np.sqrt(np.maximum(v, 0.0) * e2 / c2)).astype(int).clip(1, 256)
    offset = np.concatenate([[0], np.cumsum(m2**2)])
    n_leaves = int(offset[-1])
    u = points.leaf_counts(m1, m2) + random_state.laplace(n_leaves, s / e2)
    parent = np.repeat(np.arange(m1 * m1), m2**2)
    sum_u = np.bincount(parent, weights=u, minlength=m1 * m1)
    a2m2 = alpha**2 * m2.astype(float) ** 2
    v_cons = (a2m2 * v + (1.0 - alpha) ** 2 * sum_u) / (a2m2 + (1.0 - alpha) ** 2)
    u_cons = u + ((v_cons - sum_u) / m2**2)[parent]
    # Leaf geometry: local (row, col) inside the parent cell.
    local = np.arange(n_leaves) - offset[parent]
    k = m2[parent]
    r, col = local // k, local % k
    pi, pj = parent // m1, parent % m1
    h = (lat_e[pi + 1] - lat_e[pi]) / k
    w = (lon_e[pj + 1] - lon_e[pj]) / k
    lat_lo, lon_lo = lat_e[pi] + r * h, lon_e[pj] + col * w
    leaves = np.column_stack([lat_lo, lat_lo + h, lon_lo, lon_lo + w, u_cons])
    return _grid(
        "adaptive",
        region,
        (lat_e, lon_e),
        v_cons.reshape(m1, m1),
        leaves,
        offset,
        log,
        n_hat,
        source,
        neighbours,
        random_state,
    )


def random_boxes(region: Region, n_queries: int, random_state: int | Sampler | None = None) -> FloatArray:
    """Random query rectangles: two uniform corners per axis inside the region (rows lat_lo, lat_hi, ...)."""
    random_state = check_random_state(random_state)
    u = random_state.rng.random((n_queries, 4))
    la = region.lat_min + np.sort(u[:, :2], axis=1) * (region.lat_max - region.lat_min)
    lo = region.lon_min + np.sort(u[:, 2:], axis=1) * (region.lon_max - region.lon_min)
    return np.column_stack([la, lo])


def true_box_counts(lat: ArrayLike, lon: ArrayLike, boxes: ArrayLike, region: Region) -> FloatArray:
    """Exact counts of the (clamped) points in each box (diagnostic, never released)."""
    la, lo = region.clip(*validate_latlon(lat, lon, table=True))
    b = np.atleast_2d(np.asarray(boxes, dtype=float))
    order = np.argsort(la)
    la, lo = la[order], lo[order]
    out = np.empty(len(b))
    for q, (a, bb, c, d) in enumerate(b):
        s, e = np.searchsorted(la, a, "left"), np.searchsorted(la, bb, "right")
        seg = lo[s:e]
        out[q] = np.count_nonzero((seg >= c) & (seg <= d))
    return out


def relative_error(noisy: ArrayLike, true: ArrayLike, n: int) -> FloatArray:
    """|noisy - true| / max(true, 0.001 n) per query (Qardaji et al. 2013)."""
    t = np.asarray(true, dtype=float)
    return np.abs(np.asarray(noisy, dtype=float) - t) / np.maximum(t, 0.001 * n)
