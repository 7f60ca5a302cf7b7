"""Feeds of an engine's rows for the kernels of :mod:`dpcore.outofcore.kernel`.

:func:`open_feed` turns an Ibis expression of numeric columns (the engine has read, filtered, projected
and dropped the missing rows) into a :class:`~dpcore.outofcore.kernel.Feed`:

* DuckDB, when the rows fit :func:`~dpcore.outofcore.kernel.memory_budget` (counted on the source's own
  rows, ``upper_rows``, an upper bound known without a pass for Parquet): read once, as Arrow batches, into
  one array of the compact dtype (:func:`compact_dtype`), then every pass runs on it
  (:class:`~dpcore.outofcore.kernel.MemoryFeed`);
* DuckDB above the budget: n by one COUNT, then every pass streams Arrow batches
  (:class:`~dpcore.outofcore.kernel.StreamFeed`), memory bounded by a few blocks;
* Spark: the DataFrame cached by Spark (released on leaving the block) and every pass run on the
  executors (:class:`~dpcore.outofcore.kernel.SparkFeed`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import ibis.expr.types as ir
import numpy as np

from dpcore.outofcore.kernel import (
    BLOCK_ROWS,
    Feed,
    MemoryFeed,
    SparkFeed,
    StreamFeed,
    allocate,
    memory_budget,
    prefetched,
    unpersist,
)

#: Source types whose every value a float32 holds exactly (the compact dtype's condition).
FLOAT32_EXACT = frozenset({"float16", "float32", "int8", "int16", "uint8", "uint16", "boolean"})


def compact_dtype(table: ir.Table, columns: list[str]) -> type[np.floating]:
    """float32 when every column's type is one float32 holds exactly (float32 or narrower floats, 8- and
    16-bit integers, booleans), else float64: a copy in it holds the source's values, so it changes no
    release (the kernels compute in float64 on the same values)."""
    schema = table.schema()
    return np.float32 if all(str(schema[c]) in FLOAT32_EXACT for c in columns) else np.float64


def is_spark(expr: ir.Table) -> bool:
    return getattr(expr.get_backend(), "name", None) == "pyspark"


def spark_frame(expr: ir.Table) -> Any:
    """The Spark DataFrame of an Ibis expression on the PySpark backend."""
    con = expr.get_backend()
    con._run_pre_execute_hooks(expr)  # registers the expression's in-memory tables
    return con._session.sql(con.compile(expr))


def _batches(expr: ir.Table) -> Iterator[Any]:
    """Arrow record batches of ``expr`` on DuckDB, in the table's order (its SQL run by the connection:
    Ibis 12's ``to_pyarrow_batches`` calls a cursor method DuckDB 2 no longer has)."""
    con = expr.get_backend()
    con._run_pre_execute_hooks(expr)  # registers the expression's in-memory tables
    return prefetched(con.con.sql(con.compile(expr)).to_arrow_reader(BLOCK_ROWS))


def read_rows(expr: ir.Table, upper_rows: int, dtype: Any) -> np.ndarray:
    """The rows of ``expr`` (at most ``upper_rows``) read once into an (n, c) array of ``dtype`` (stored
    by columns, as Arrow holds them, in memory not advised for huge pages: :func:`allocate`)."""
    c = len(expr.columns)
    store = allocate((c, upper_rows), dtype)
    n = 0
    for batch in _batches(expr):
        m = batch.num_rows
        for j, column in enumerate(batch.columns):  # one copy, straight from Arrow's buffer
            store[j, n : n + m] = column.to_numpy(zero_copy_only=False)
        n += m
    return store[:, :n].T


@contextlib.contextmanager
def open_feed(expr: ir.Table, upper_rows: int, dtype: Any = np.float64) -> Iterator[Feed]:
    """The feed of ``expr``'s rows (module docstring) for the passes of one release."""
    if is_spark(expr):
        feed = SparkFeed(spark_frame(expr))
        try:
            yield feed
        finally:
            feed.release()
        return
    yield feed_of(expr, upper_rows, dtype)


def feed_of(expr: ir.Table, upper_rows: int, dtype: Any = np.float64, n: int | None = None) -> Feed:
    """A feed without a block to release: in memory when it fits the budget, else streamed (DuckDB) or
    cached by Spark until the feed is collected; ``n``, the number of rows when the caller knows it,
    saves a COUNT (Spark counts anyway: building its cache gives n)."""
    if is_spark(expr):
        feed = SparkFeed(spark_frame(expr))  # computed once (a per-user cap's window and join), not per pass
        weakref.finalize(feed, unpersist, feed.blocks)  # not the feed: it would never be collected
        return feed
    if upper_rows * len(expr.columns) * np.dtype(dtype).itemsize <= memory_budget():
        return MemoryFeed(read_rows(expr, upper_rows, dtype))
    return StreamFeed(lambda: _batches(expr), int(expr.count().execute()) if n is None else n)
