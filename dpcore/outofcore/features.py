"""The prepared feature space of a table that stays in its engine: the engine reads, filters and projects
the feature columns; the kernels of :mod:`dpcore.outofcore.kernel` scale and clip them in numpy.

:class:`TableFeatures` mirrors :func:`dpcore.data.prepare` for numeric features with public bounds: each
value is clipped to its public bounds [lo, hi] and scaled, x_s = (clip(x, lo, hi) - center) / scale
(``minmax``: center (lo + hi) / 2 and scale (hi - lo) / 2, so the box becomes [-1, 1]; ``none``: 0 and 1),
by the same numpy operations on the same float64 values (:class:`~dpcore.outofcore.kernel.Scaled`), so
bit for bit. Rows with a missing or infinite feature are dropped by the engine (the plan's "drop" step).
Scaling that reads the data (standardising) and encodings of categories or dates are not computed out of
core: refused.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpcore.errors import DataError, ParameterError
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.lloyd import DPLloydKMeans, NoisyLloydBase, check_bounds
from dpcore.kmeans.registry import KMeansInputs
from dpcore.outofcore.feeds import compact_dtype, is_spark, open_feed
from dpcore.outofcore.kernel import Feed, Scaled, fit_statistics

Scaling = Literal["minmax", "none"]
SCALINGS: tuple[str, ...] = ("minmax", "none")
_IN_MEMORY = frozenset({"X", "labels", "true_centers", "require_labels"})
SPILL_FOLDER = Path(tempfile.gettempdir()) / "dpcore-duckdb"  # where DuckDB spills, not the working folder


def is_infinite(x: ir.FloatingValue) -> ir.BooleanValue:
    """x is +inf or -inf on every engine (Ibis compiles ``isinf`` to FALSE on Spark, which kept such rows)."""
    return (x == ibis.literal(np.inf)) | (x == ibis.literal(-np.inf))


def require_columns(table: ir.Table, names: Sequence[str]) -> None:
    """DataError naming the ``names`` that ``table`` lacks: the plan was made on another table."""
    missing = [n for n in names if n not in table.columns]
    if missing:
        raise DataError(
            f"The source has no column(s) {', '.join(map(repr, missing))}; the plan was made on a table "
            "with them. Point --source at the same table."
        )


@dataclass(frozen=True, eq=False)
class TableFeatures:
    """Numeric features of an Ibis table with public bounds and a data-independent scaling.

    ``raw_lower``/``raw_upper`` are the curator's public bounds in the columns' units; ``lower``/``upper``
    the bounds in the scaled space (what the DP mechanisms clip to). ``rows`` is the source table with
    the rows that miss a feature removed; :meth:`scaled` gives the feature expressions over it.

    A release's table is described as for in-memory inputs (feature names, public bounds, inverse
    scaling): other attributes of :class:`~dpcore.kmeans.registry.KMeansInputs` come from
    :attr:`described`; the rows themselves (``X``, ``labels``) are not in memory, and a mechanism that
    reads them is refused with a ``ParameterError``. A release on it runs the mechanism's out-of-core
    capability (:class:`dpcore.registry.TableInputs`).
    """

    out_of_core: ClassVar[Literal[True]] = True
    table: ir.Table
    feature_names: tuple[str, ...]
    raw_lower: NDArray
    raw_upper: NDArray
    scaling: Scaling = "minmax"

    def __post_init__(self) -> None:
        names = tuple(self.feature_names)
        if not names or len(set(names)) != len(names):
            raise ParameterError("Name at least one feature, each once.")
        require_columns(self.table, names)
        schema = self.table.schema()
        bad = [n for n in names if not (schema[n].is_numeric() or schema[n].is_boolean())]
        if bad:
            raise DataError(
                f"Feature(s) {', '.join(map(repr, bad))} are not numeric in the source ("
                f"{', '.join(str(schema[n]) for n in bad)}); the out-of-core engine takes numeric features "
                "only (categories and dates need an encoding read from the data). Encode them in the table."
            )
        if self.scaling not in SCALINGS:
            raise ParameterError(
                f"Scaling {self.scaling!r} reads the data (or is unknown); out of core use one of "
                f"{', '.join(SCALINGS)} (min-max to the public bounds keeps the guarantee)."
            )
        lower, upper = check_bounds((self.raw_lower, self.raw_upper), len(names))
        object.__setattr__(self, "feature_names", names)
        object.__setattr__(self, "raw_lower", lower)
        object.__setattr__(self, "raw_upper", upper)

    @classmethod
    def from_bounds(
        cls, table: ir.Table, bounds: Mapping[str, tuple[float, float]], scaling: Scaling = "minmax"
    ) -> TableFeatures:
        """Features named by ``bounds`` ({name: (lower, upper)}, in order) over ``table``."""
        names = tuple(bounds)
        lo = np.array([float(bounds[n][0]) for n in names])
        hi = np.array([float(bounds[n][1]) for n in names])
        return cls(table, names, lo, hi, scaling)

    # -- the scaling, exactly as dpcore.data.prepare computes it ----------------------------------

    @property
    def center(self) -> NDArray:
        if self.scaling == "minmax":
            return (self.raw_lower + self.raw_upper) / 2
        return np.zeros(len(self.feature_names))

    @property
    def scale(self) -> NDArray:
        if self.scaling == "minmax":
            half = (self.raw_upper - self.raw_lower) / 2
            return np.where(half > 0, half, 1.0)
        return np.ones(len(self.feature_names))

    @property
    def lower(self) -> NDArray:
        return (self.raw_lower - self.center) / self.scale

    @property
    def upper(self) -> NDArray:
        return (self.raw_upper - self.center) / self.scale

    @property
    def bounds(self) -> tuple[NDArray, NDArray]:
        return self.lower, self.upper

    def require_bounds(self, label: str) -> tuple[NDArray, NDArray]:
        """The public bounds of the scaled space (always given here)."""
        return self.bounds

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @functools.cached_property
    def described(self) -> KMeansInputs:
        """The release's description as in-memory inputs: names, public bounds and inverse scaling; its
        only rows are the public box's two corners (lower, upper), never data."""
        corners = np.stack([self.lower, self.upper])
        return KMeansInputs(corners, None, self.lower, self.upper, self.feature_names, self.inverse_transform)

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _IN_MEMORY:
            raise ParameterError(
                "This mechanism reads the rows in memory; out of core DP-Lloyd, Blowfish k-means and the "
                "colored mechanism run (their passes run in the engine). Release it from the dashboard."
            )
        return getattr(self.described, name)

    # -- expressions ------------------------------------------------------------------------------

    @functools.cached_property
    def rows(self) -> ir.Table:
        """The source rows whose features are all present and finite (prepare's "drop" of the others)."""
        t = self.table
        keep = [t[n].notnull() for n in self.feature_names]
        keep += [
            ~(t[n].isnan() | is_infinite(t[n])) for n in self.feature_names if t.schema()[n].is_floating()
        ]
        return t.filter(keep)

    @property
    def dtype(self) -> type[np.floating]:
        """The compact dtype of the raw feature values held in memory (:func:`~.feeds.compact_dtype`)."""
        return compact_dtype(self.table, list(self.feature_names))

    def raw(self) -> ir.Table:
        """Columns x0..x{d-1}: the raw feature values of :attr:`rows`, as :attr:`dtype` (exact)."""
        kind = "float32" if self.dtype == np.float32 else "float64"
        t = self.rows
        return t.select(**{f"x{j}": t[n].cast(kind) for j, n in enumerate(self.feature_names)})

    @property
    def scaling_map(self) -> Scaled:
        """The kernel that scales raw blocks as ``prepare`` does."""
        return Scaled(self.raw_lower, self.raw_upper, self.center, self.scale)

    @contextlib.contextmanager
    def feed(self) -> Iterator[Feed]:
        """The feed of the raw feature rows for one release's passes (:func:`~.feeds.open_feed`: in memory
        when they fit the budget, counted on the source's rows)."""
        upper = 0 if is_spark(self.table) else int(self.table.count().execute())
        with open_feed(self.raw(), upper, self.dtype) as feed:
            yield feed

    def n_rows(self) -> int:
        """Number of rows with every feature present (one COUNT pass: the filter reads every row)."""
        return int(self.rows.count().execute())

    def inverse_transform(self, centres: NDArray) -> pd.DataFrame:
        """Scaled points (e.g. released centroids) back to the columns' units."""
        raw = np.atleast_2d(np.asarray(centres, dtype=np.float64) * self.scale + self.center)
        return pd.DataFrame({name: raw[:, j] for j, name in enumerate(self.feature_names)})

    # -- passes -----------------------------------------------------------------------------------

    def nearest_statistics(self, centres: NDArray, feed: Feed) -> tuple[NDArray, NDArray]:
        """Per-cluster counts (B, K) and sums (B, K, d) of the prepared rows of ``feed``, clipped to the
        scaled bounds and centred, under nearest-centre assignment to each of B centre sets (B, K, d): one
        pass of :class:`~dpcore.outofcore.kernel.LloydPass`."""
        lower, upper = self.bounds
        return fit_statistics(feed, self.scaling_map, lower, upper, inside=True)(centres)

    def fit_lloyd(self, estimator: NoisyLloydBase) -> NoisyLloydBase:
        """Fit DP-Lloyd or Blowfish k-means by T passes of the Lloyd kernel over the :meth:`feed` (read into
        memory once when it fits): the same budget schedule, initial centres, statistics and noise draws
        as ``estimator.fit`` on the rows."""
        if type(estimator) not in (DPLloydKMeans, BlowfishKMeans):
            raise ParameterError(
                f"{type(estimator).__name__} does not run out of core; use DP-Lloyd or Blowfish k-means."
            )
        lower, upper = self.bounds
        with self.feed() as feed:
            statistics = fit_statistics(feed, self.scaling_map, lower, upper, inside=True)
            return estimator.fit_statistics(feed.n, self.n_features, statistics)
