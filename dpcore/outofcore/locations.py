"""Location releases out of core: per-user bounding, grid counts, mean positions and hotspots as passes.

:class:`TableLocations` is a location release's input when the table stays in DuckDB or Spark (through
Ibis): the latitude, longitude and (optional) user columns and the curator's public region. The release
functions take it where they take rows in memory (:class:`dpcore.location.registry.LocationInputs`):
both give :meth:`~TableLocations.counted` (the points a grid counts) and :meth:`~TableLocations.projected`
(the kept points through the region's map to metres). Each step is the in-memory step written as an
expression with the same floating-point operations in the same order:

1. validation (one aggregate): every coordinate present, finite, |lat| <= 90 and |lon| <= 180, else the
   in-memory ``DataError``;
2. per-user bounding (``dpcore.location.contribution.cap_per_user``): one GROUP BY reads the counts of
   the users with more than m rows; their kept (user, rank) pairs are drawn in Python with the release's
   random_state as in memory (:func:`~dpcore.location.contribution.draw_kept_ranks`: a uniformly random m of
   each such user's rows, whatever their values) and joined back to the rows ranked by (lat, lon) within
   their user (one window sort); the count of kept rows is sum over users of min(count, m);
3. grids (Qardaji, Yang and Li 2013): a kernel pass (:class:`CellPass`) clamps each kept point onto the
   region and counts its cells with the in-memory code (:class:`~dpcore.location.grids.ClampedPoints`);
   the adaptive grid's second level is one more pass. Counts, hence releases, are identical;
4. mean positions and hotspots (Machanavajjhala and Kifer 2015; Su et al. 2016): the kept points through
   ``PlaneMap.forward`` in numpy (:mod:`dpcore.outofcore.plane`); the mean reads n and the two sums (one
   pass), each DP-Lloyd / Blowfish round the per-cluster counts and sums (one pass). With the rows in the
   in-memory order the releases are the in-memory ones bit for bit; the per-user bounding's join may
   hand the kept rows in another order, and the sums then differ by the rounding of that order.

The engine validates, groups users, ranks and joins (step 1 and 2); every value a release computes is
computed by the kernels of :mod:`dpcore.outofcore.kernel` on the kept rows' feed (read into memory once
when it fits the budget). Noise is drawn in Python by the release's sampler, in the in-memory order.
Planar Laplace and PriLocation read the rows in memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property

import ibis
import ibis.expr.types as ir
import numpy as np
from numpy.typing import NDArray

from dpcore.errors import DataError, ParameterError
from dpcore.location.contribution import (
    canonical_order,
    check_max_per_user,
    draw_kept_ranks,
    scope_sentence,
)
from dpcore.location.geometry import Region
from dpcore.location.grids import ClampedPoints
from dpcore.location.registry import Counted, Projected
from dpcore.mechanisms import Sampler
from dpcore.outofcore.features import is_infinite, require_columns
from dpcore.outofcore.feeds import feed_of
from dpcore.outofcore.kernel import Feed, Partial
from dpcore.outofcore.plane import TablePlanePoints


class CellPass:
    """Kernel: a block of (lat, lon) rows clamped onto ``region`` and counted per cell of the m x m grid
    (``m2`` None), or per leaf when level-1 cell c of the m x m grid is cut into m2[c] x m2[c]: the
    in-memory :class:`~dpcore.location.grids.ClampedPoints` counts."""

    def __init__(self, region: Region, m: int, m2: NDArray | None = None) -> None:
        self.region, self.m, self.m2 = region, m, m2

    def __call__(self, raw: NDArray) -> Partial:
        points = ClampedPoints(*self.region.clip(raw[:, 0], raw[:, 1]), self.region)
        if self.m2 is None:
            return (points.cell_counts(self.m),)
        return (points.leaf_counts(self.m, self.m2),)


@dataclass(frozen=True, eq=False)
class TablePoints:
    """Kept points of an engine (``rows``: columns ``la``, ``lo`` in degrees), counted per cell by
    :class:`CellPass`; the :class:`~dpcore.location.grids.PointCounts` of an out-of-core grid. ``n`` is
    given."""

    rows: ir.Table
    region: Region
    n: int

    @functools.cached_property
    def feed(self) -> Feed:
        """The rows' feed, made on first use (read into memory when they fit the budget)."""
        return feed_of(self.rows, self.n, n=self.n)

    def _count(self, pass_: CellPass, size: int) -> NDArray:
        out = self.feed.reduce(pass_)
        return np.zeros(size, dtype=np.int64) if out is None else out[0]

    def cell_counts(self, m: int) -> NDArray:
        return self._count(CellPass(self.region, m), m * m)

    def leaf_counts(self, m1: int, m2: NDArray) -> NDArray:
        return self._count(CellPass(self.region, m1, m2), int(np.sum(m2**2)))


@dataclass(frozen=True, eq=False)
class TableLocations:
    """A location release's input in an engine: ``lat``/``lon`` columns in degrees, an optional ``user``
    column (None: each row is a different person) and the public ``region``. Validated on creation by one
    aggregate (``DataError`` as for rows in memory)."""

    table: ir.Table
    lat_column: str
    lon_column: str
    user_column: str | None
    region: Region
    n_rows: int = field(default=0, init=False)  # the table's rows, counted by the validation

    def __post_init__(self) -> None:
        if not isinstance(self.region, Region):
            raise ParameterError(
                "a location release needs a public region: pass region=Region(lat_min, ...)."
            )
        require_columns(self.table, [self.lat_column, self.lon_column, *filter(None, [self.user_column])])
        schema = self.table.schema()
        bad = [c for c in (self.lat_column, self.lon_column) if not schema[c].is_numeric()]
        if bad:
            raise DataError(
                f"Column(s) {', '.join(map(repr, bad))} are not numbers in degrees; convert them in the "
                "table."
            )
        self._validate()

    @cached_property
    def _coordinates(self) -> ir.Table:
        t = self.table
        cols = {"la": t[self.lat_column].cast("float64"), "lo": t[self.lon_column].cast("float64")}
        if self.user_column is not None:
            u = t[self.user_column]
            cols["user"] = (
                ibis.cases((u.isnan(), ibis.null(u.type())), else_=u) if u.type().is_floating() else u
            )
        return t.select(**cols)

    def _validate(self) -> None:
        """validate_latlon's checks, and user_codes' refusal of rows without a user id, in one aggregate over
        the table (``n_rows`` is its row count)."""
        t = self._coordinates
        finite = (
            t.la.notnull()
            & t.lo.notnull()
            & ~(t.la.isnan() | is_infinite(t.la) | t.lo.isnan() | is_infinite(t.lo))
        )
        null = ibis.null("float64")
        no_user = t.user.isnull().sum() if self.user_column is not None else ibis.literal(0)
        stats = t.aggregate(
            n=t.count(),
            n_ok=finite.sum(),
            lat=ibis.cases((finite, t.la.abs()), else_=null).max(),
            lon=ibis.cases((finite, t.lo.abs()), else_=null).max(),
            no_user=no_user,
        ).to_pandas()
        span = stats.iloc[0]
        n, n_ok = int(span["n"]), int(span["n_ok"] or 0)
        if n == 0:
            raise DataError("no locations were given; pass at least one (latitude, longitude) pair.")
        if int(span["no_user"] or 0):  # as user_codes refuses them in memory (not one user of them all)
            raise DataError(f"{int(span['no_user'])} row(s) have no user id; drop or fill those rows first.")
        if n_ok < n:
            raise DataError(
                f"{n - n_ok} location(s) have a missing or infinite latitude/longitude; drop or fill those "
                "rows first (e.g. with the missing-values step)."
            )
        if float(span["lat"]) > 90:
            raise DataError(
                f"latitude must be in [-90, 90] degrees (found |lat| up to {float(span['lat']):g}); check "
                "that the latitude and longitude columns are not swapped and are in degrees."
            )
        if float(span["lon"]) > 180:
            raise DataError(
                f"longitude must be in [-180, 180] degrees (found |lon| up to {float(span['lon']):g})."
            )
        object.__setattr__(self, "n_rows", n)

    @property
    def has_users(self) -> bool:
        return self.user_column is not None

    def _kept(self, max_per_user: int, random_state: Sampler) -> tuple[ir.Table, int, int, str]:
        """(the kept rows (columns ``la``, ``lo``), their number, the group g, the scope sentence): with
        users, the rows :func:`~dpcore.location.contribution.cap_per_user` keeps in memory, with the same
        draws from ``random_state``."""
        m = check_max_per_user(max_per_user)
        t = self._coordinates
        if self.user_column is None:
            return t.select("la", "lo"), self.n_rows, 1, scope_sentence(False, m)
        per_user = t.group_by("user").aggregate(c=t.count())
        capped = ibis.cases((per_user.c > m, m), else_=per_user.c)
        n = int(per_user.aggregate(n=capped.sum()).to_pandas()["n"].iloc[0])
        over = per_user.filter(per_user.c > m).to_pandas()
        if over.empty:
            return t.select("la", "lo"), n, m, scope_sentence(True, m)
        over = over.iloc[canonical_order(over["user"].to_numpy())]
        block, rank = draw_kept_ranks(over["c"].to_numpy(), m, random_state)
        picked = ibis.memtable({"p_user": over["user"].to_numpy()[block], "p_rank": rank.astype(np.int64)})
        ranked = t.mutate(
            rank=ibis.row_number().over(group_by=t.user, order_by=[t.la, t.lo]),
            c=t.count().over(group_by=t.user),
        )
        joined = ranked.left_join(picked, [ranked.user == picked.p_user, ranked.rank == picked.p_rank])
        rows = joined.filter((joined.c <= m) | joined.p_rank.notnull()).select("la", "lo")
        return rows, n, m, scope_sentence(True, m)

    def counted(self, max_per_user: int, random_state: Sampler) -> Counted:
        """The rows a grid counts (see the module docstring), with the sampler drawn as in memory."""
        rows, n, group, scope = self._kept(max_per_user, random_state)
        return Counted(TablePoints(rows, self.region, n), group, scope)

    def projected(self, max_per_user: int, random_state: Sampler) -> Projected:
        """The rows a mean position or hotspots release: the kept rows, mapped by the region's ``PlaneMap``
        in each pass (:class:`dpcore.outofcore.plane.TablePlanePoints`), with the sampler drawn as in
        memory."""
        rows, n, group, scope = self._kept(max_per_user, random_state)
        return Projected(TablePlanePoints(self.region, rows, n), group, scope)
