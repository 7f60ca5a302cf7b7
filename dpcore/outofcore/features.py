"""The prepared feature space of a table that stays in its engine: Ibis expressions, no rows in Python.

:class:`TableFeatures` mirrors :func:`dpcore.data.prepare` for numeric features with public bounds: each
value is clipped to its public bounds [lo, hi] and scaled, x_s = (clip(x, lo, hi) - center) / scale
(``minmax``: center (lo + hi) / 2 and scale (hi - lo) / 2, so the box becomes [-1, 1]; ``none``: 0 and 1),
with the same floating-point operations in the same order, so DuckDB or Spark and numpy compute the same
values. Rows with a missing or infinite feature are dropped (the plan's "drop" step). Scaling that reads
the data (standardising) and encodings of categories or dates are not computed out of core: refused.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import duckdb
import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
import sqlglot as sg
import sqlglot.expressions as sge
from numpy.typing import NDArray

from dpcore.errors import DataError, ParameterError
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.lloyd import DPLloydKMeans, NoisyLloydBase, check_bounds
from dpcore.kmeans.registry import KMeansInputs
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput

Scaling = Literal["minmax", "none"]
SCALINGS: tuple[str, ...] = ("minmax", "none")
_IN_MEMORY = frozenset({"X", "labels", "true_centers", "require_labels"})
MEMORY_LIMIT = 1_500_000_000  # bytes DuckDB may hold while prepared rows are cached (the rest spills)
SPILL_FOLDER = Path(tempfile.gettempdir()) / "dpcore-duckdb"  # where DuckDB spills, not the working folder
# largest cache (8 bytes a value): beyond it so much spills that a pass over the cache costs as much as
# one over the source (DuckDB, 20M x 10 rows: a sixth spilled, passes ~25% faster; 45% spilled, no faster)
CACHE_LIMIT = 3 * MEMORY_LIMIT // 2
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def total(terms: Sequence[ir.NumericValue]) -> ir.NumericValue:
    """t_0 + t_1 + ... left to right (no leading 0 term)."""
    return functools.reduce(operator.add, terms)


def const(value: float) -> ir.FloatingValue:
    """A float64 constant that every engine reads back bit for bit: its shortest round-trip text cast to
    DOUBLE (a bare literal may be parsed as a DECIMAL first and rounded twice)."""
    return ibis.literal(repr(float(value))).cast("float64")


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


def nearest_label(t: ir.Table, centres: NDArray) -> ir.Table:
    """``t`` (columns x0..x{d-1}) with ``label``, the index of the nearest of the K centres (K, d) (ties to
    the lowest index), by the expansion of ||x - c_k||^2 that the in-memory ``dpcore.metrics.nearest_sets``
    uses, relative to the first centre: s_0 = 0 and s_k = ||x - c_k||^2 - ||x - c_0||^2 = (||c_k||^2 -
    ||c_0||^2) - 2 x.(c_k - c_0) as columns (K - 1 dot products, no POWER), then the first k at their
    minimum (c wins if s_c <= s_o for every o > c, the first such c); each stage is its own SELECT. Equal
    centres get equal scores (a copy of c_0 exactly 0), so the lowest index wins."""
    k, d = centres.shape
    if k == 1:
        return t.mutate(label=ibis.literal(0))
    step = 2.0 * (centres[1:] - centres[0])
    sq = np.einsum("kj,kj->k", centres, centres)
    score = {
        f"d{c}": const(sq[c] - sq[0]) - total([t[f"x{j}"] * const(step[c - 1, j]) for j in range(d)])
        for c in range(1, k)
    }
    t = t.mutate(**score)
    dk = [const(0.0), *(t[name] for name in score)]
    wins = [functools.reduce(operator.and_, [dk[c] <= dk[o] for o in range(c + 1, k)]) for c in range(k - 1)]
    first = [(won, c) for c, won in enumerate(wins)]
    return t.mutate(label=ibis.cases(*first, else_=k - 1)).drop(*score)


def labelled_statistics(rows: ir.Table, centres: NDArray) -> tuple[NDArray, NDArray]:
    """Per-cluster counts (B, K) and sums (B, K, d) of ``rows`` (columns x0..x{d-1}) under nearest-centre
    assignment (:func:`nearest_label`) to each of B centre sets (B, K, d): one GROUP BY pass per set."""
    b, k, d = centres.shape
    counts, sums = np.zeros((b, k)), np.zeros((b, k, d))
    for r in range(b):
        t = nearest_label(rows, centres[r])
        agg = t.group_by("label").aggregate(n=t.count(), **{f"s{j}": t[f"x{j}"].sum() for j in range(d)})
        out = agg.to_pandas()
        at = out["label"].to_numpy(dtype=np.intp)
        counts[r, at] = out["n"].to_numpy(dtype=float)
        sums[r, at] = out[[f"s{j}" for j in range(d)]].to_numpy(dtype=float)
    return counts, sums


def _bytes(setting: str) -> float:
    """DuckDB's memory text ("18.8 GiB", "953.6 MiB") in bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", setting)
    return float(m[1]) * _UNITS[m[2]] if m and m[2] in _UNITS else float("inf")


def _memory_setting(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


@functools.cache
def _default_memory() -> str:
    """DuckDB's default ``memory_limit`` on this machine, as text."""
    with duckdb.connect() as con:
        return _memory_setting(con)


@contextlib.contextmanager
def _duckdb_memory(backend: object, limit: int) -> Iterator[None]:
    """DuckDB's ``memory_limit`` lowered to ``limit`` bytes for the block, then RESET, when the connection
    has DuckDB's default; a limit its user set is theirs and stays (DuckDB reads it back rounded, so it
    could not be restored exactly). Other engines: untouched."""
    if getattr(backend, "name", None) != "duckdb":
        yield
        return
    con = backend.con  # type: ignore[attr-defined]
    with _spill_folder(con):
        before = _memory_setting(con)
        if before != _default_memory() or _bytes(before) <= limit:
            yield
            return
        con.execute(f"SET memory_limit = '{int(limit)}B'")
        try:
            yield
        finally:
            con.execute("RESET memory_limit")


@contextlib.contextmanager
def _spill_folder(con: Any) -> Iterator[None]:
    """DuckDB's default spill folder is ``.tmp`` in the working directory (the app's checkout, perhaps
    read-only): for the block it is :data:`SPILL_FOLDER` in the system's temporary directory instead (and
    stays so once DuckDB has spilled there: it refuses to switch a folder it has used)."""
    if con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0] != ".tmp":
        yield
        return
    con.execute(f"SET temp_directory = '{SPILL_FOLDER}'")
    try:
        yield
    finally:
        with contextlib.suppress(duckdb.NotImplementedException):
            con.execute("RESET temp_directory")


@contextlib.contextmanager
def cached(table: ir.Table, memory_limit: int = MEMORY_LIMIT) -> Iterator[ir.Table]:
    """``table`` computed once and kept by its engine for the passes that follow (Ibis ``cache``: a DuckDB
    temporary table, a persisted Spark DataFrame), released on leaving the block. Meanwhile DuckDB holds
    at most ``memory_limit`` bytes (unless its user set a limit) and spills the rest to its
    ``temp_directory``, so memory stays bounded whatever the table's size."""
    with _duckdb_memory(table.get_backend(), memory_limit):
        # Ibis 12's PySpark cache compiles the expression without registering its in-memory tables
        table.get_backend()._run_pre_execute_hooks(table)  # type: ignore[attr-defined]
        kept = table.cache()
        try:
            yield kept
        finally:
            _release(kept)


def _release(kept: ir.Table) -> None:
    """Drop a cached table. Ibis 12 writes its DROP with sqlglot's former ``this`` argument, which sqlglot
    30 renders without the name ("DROP TABLE IF EXISTS", a syntax error on DuckDB); the table is then
    dropped here by name with the current ``tables`` argument."""
    try:
        kept.release()
    except Exception:
        name = kept.op().name  # type: ignore[attr-defined]
        kept.get_backend().raw_sql(sge.Drop(kind="TABLE", tables=[sg.table(name, quoted=True)], exists=True))


@dataclass(frozen=True, eq=False)
class TableFeatures:
    """Numeric features of an Ibis table with public bounds and a data-independent scaling.

    ``raw_lower``/``raw_upper`` are the curator's public bounds in the columns' units; ``lower``/``upper``
    the bounds in the scaled space (what the DP mechanisms clip to). ``rows`` is the source table with
    the rows that miss a feature removed; :meth:`scaled` gives the feature expressions over it.

    A release's table is described as for in-memory inputs (feature names, public bounds, inverse
    scaling): other attributes of :class:`~dpcore.kmeans.registry.KMeansInputs` come from
    :attr:`described`; the rows themselves (``X``, ``labels``) are not in memory, and a mechanism that
    reads them is refused with a ``ParameterError``.
    """

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

    def scaled(self, table: ir.Table | None = None) -> list[ir.FloatingValue]:
        """Per feature: (clip(x, lo, hi) - center) / scale over ``table`` (default :attr:`rows`)."""
        t = self.rows if table is None else table
        out = []
        for j, name in enumerate(self.feature_names):
            x = t[name].cast("float64")
            lo, hi = const(self.raw_lower[j]), const(self.raw_upper[j])
            clipped = ibis.cases((x < lo, lo), (x > hi, hi), else_=x)  # as np.clip (CASE: faster than LEAST)
            out.append((clipped - const(self.center[j])) / const(self.scale[j]))
        return out

    def n_rows(self) -> int:
        """Number of rows with every feature present (one COUNT pass: the filter reads every row)."""
        return int(self.rows.count().execute())

    def inverse_transform(self, centres: NDArray) -> pd.DataFrame:
        """Scaled points (e.g. released centroids) back to the columns' units."""
        raw = np.atleast_2d(np.asarray(centres, dtype=np.float64) * self.scale + self.center)
        return pd.DataFrame({name: raw[:, j] for j, name in enumerate(self.feature_names)})

    # -- passes -----------------------------------------------------------------------------------

    def centred(self) -> ir.Table:
        """Columns x0..x{d-1}: the scaled rows clipped to the scaled bounds and translated by their
        centre m = (lower + upper) / 2, exactly as the noisy-Lloyd estimators centre their rows."""
        lower, upper = self.bounds
        mid = (lower + upper) / 2.0
        # The scaled rows already lie in [lower, upper] bit for bit (rounding is monotone and lower, upper
        # are the bounds put through the same operations), so np.clip to them changes nothing.
        return self.rows.select(
            **{f"x{j}": x - const(mid[j]) if mid[j] else x for j, x in enumerate(self.scaled())}
        )

    def nearest_statistics(self, centres: NDArray, rows: ir.Table | None = None) -> tuple[NDArray, NDArray]:
        """Per-cluster counts (B, K) and sums (B, K, d) of :meth:`centred` rows (or ``rows``, the same
        columns, e.g. cached) under nearest-centre assignment to each of B centre sets (B, K, d) (centred
        coordinates; ties to the lowest index). One GROUP BY pass over the rows per centre set: the label
        is a SQL expression over the K public centres (:func:`nearest_label`)."""
        return labelled_statistics(self.centred() if rows is None else rows, centres)

    def local_release(
        self, key: str, *, epsilon: float, delta: float, params: dict, sampler: Sampler
    ) -> MechanismOutput:
        """The local mechanisms by their passes: colored (:mod:`dpcore.outofcore.colored`), white and white
        per cluster (:mod:`dpcore.outofcore.white`)."""
        from dpcore.outofcore.colored import colored_release
        from dpcore.outofcore.white import KEYS, white_release

        kw = {"epsilon": epsilon, "delta": delta, "sampler": sampler, "calibration": params["calibration"]}
        if key == "colored":
            return colored_release(self, params["n_clusters"], **kw).output
        if key in KEYS:
            return white_release(self, key, params["n_clusters"], **kw).output
        raise ParameterError(f"{key} does not run out of core; the colored and white mechanisms do.")

    @contextlib.contextmanager
    def centred_rows(self, cache_limit: int = CACHE_LIMIT) -> Iterator[tuple[int, ir.Table]]:
        """(n, the :meth:`centred` rows) for the passes of one release: computed once and :func:`cached`
        when their values (8 bytes each, counted on the source's rows) fit ``cache_limit`` bytes, n then
        their COUNT; otherwise the expression over the source, read again by every pass, and n from one
        COUNT pass."""
        if int(self.table.count().execute()) * self.n_features * 8 > cache_limit:
            yield self.n_rows(), self.centred()
            return
        with cached(self.centred()) as rows:
            yield int(rows.count().execute()), rows

    def fit_lloyd(self, estimator: NoisyLloydBase) -> NoisyLloydBase:
        """Fit DP-Lloyd or Blowfish k-means by T passes of :meth:`nearest_statistics` over the
        :meth:`centred_rows` (cached once when they fit): the same budget schedule, initial centres and
        noise draws as ``estimator.fit`` on the rows."""
        if type(estimator) not in (DPLloydKMeans, BlowfishKMeans):
            raise ParameterError(
                f"{type(estimator).__name__} does not run out of core; use DP-Lloyd or Blowfish k-means."
            )
        with self.centred_rows() as (n, rows):
            statistics: Callable[[NDArray], tuple[NDArray, NDArray]] = functools.partial(
                self.nearest_statistics, rows=rows
            )
            return estimator.fit_statistics(n, self.n_features, statistics)
