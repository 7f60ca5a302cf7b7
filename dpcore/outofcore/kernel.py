"""One numpy kernel per pass, fed blocks of rows from memory, DuckDB or Spark, partials added in order.

The interface (for every mechanism with an out-of-core path):

* a **kernel** is a picklable function of one block of rows, an array (m, c) (:func:`block`:
  float32 or float64, kernels compute in float64) holding the columns the engine
  projected, rows in the table's order, that returns its **partial** result, a tuple of numpy arrays
  (counts, sums, maxima, a few rows...);
* a **combine** function merges two partials (default :func:`add`, element-wise sums; :func:`maximum`,
  :func:`concatenate` and custom ones for the other passes) and must not depend on block sizes;
* a **feed** (:class:`Feed`) hands the kernel its blocks and combines the partials left to right in the
  blocks' order: :class:`MemoryFeed` (rows held in memory in a compact dtype), :class:`StreamFeed`
  (Arrow batches streamed from an engine each pass), :class:`SparkFeed` (the kernel run by Spark's
  executors with ``mapInArrow`` over a cached DataFrame, the driver combining the partitions' partials
  in partition order).

Blocks are canonical: rows [i B, (i + 1) B) of the table, B = :data:`BLOCK_ROWS`, whatever the engine's
batch sizes (:func:`rebatch`), so the in-memory release (``dpcore.kmeans.lloyd`` calls
:func:`lloyd_statistics`), the in-memory feed and the streamed one compute the same floating-point
operations in the same order: the same release with the same demo seed, by construction. Spark combines
per partition, so it is the same when each partition holds whole blocks in order (a table of at most B
rows always); otherwise its sums differ by the rounding of another order of additions.

Engines read, filter, project, drop missing rows, sample and count; every value a mechanism computes
(scaling, clipping, labels, sums, cells, certificates) is computed here, in numpy.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError

Partial = tuple[NDArray, ...]
Kernel = Callable[[NDArray], Partial]
Combine = Callable[[Partial, Partial], Partial]

BLOCK_ROWS = 1 << 19  # rows per canonical block (a float64 block of 10 columns: 42 MB)
DISTANCE_ENTRIES = 1 << 22  # centres x rows per distance product (32 MB of float64)
DEFAULT_BUDGET = 2 * 10**9  # bytes of prepared rows a release may hold in memory (DPCORE_MEMORY_BUDGET)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def memory_budget() -> int:
    """``DPCORE_MEMORY_BUDGET`` in bytes ("2GB", "500MB", "1.5GiB" or a number of bytes; default 2 GB):
    the largest prepared table a release reads into memory; above it every pass streams."""
    text = os.environ.get("DPCORE_MEMORY_BUDGET", "").strip()
    if not text:
        return DEFAULT_BUDGET
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)", text)
    if m is None or m[2].upper() not in _UNITS or float(m[1]) <= 0:
        raise ParameterError(
            f"DPCORE_MEMORY_BUDGET={text!r} is not an amount of memory; give e.g. 2GB, 500MB or a number of "
            "bytes."
        )
    return int(float(m[1]) * _UNITS[m[2].upper()])


# -- combining partials ----------------------------------------------------------------------------


def add(a: Partial, b: Partial) -> Partial:
    """Element-wise sums of two partials (counts, sums)."""
    return tuple(x + y for x, y in zip(a, b, strict=True))


def maximum(a: Partial, b: Partial) -> Partial:
    """Element-wise maxima of two partials."""
    return tuple(np.maximum(x, y) for x, y in zip(a, b, strict=True))


def concatenate(a: Partial, b: Partial) -> Partial:
    """Rows of two partials one after the other (a sample, candidate rows)."""
    return tuple(np.concatenate([x, y]) for x, y in zip(a, b, strict=True))


def reduce_blocks(
    blocks: Iterable[NDArray], kernel: Kernel, combine: Combine = add, workers: int = 1
) -> Partial | None:
    """``kernel`` on each block, the partials combined left to right in the blocks' order (None: no block).
    With ``workers`` > 1 the kernel runs on that many threads (numpy releases the GIL), at most twice as
    many blocks in flight; the partials are still combined in the blocks' order, so the result is the
    same."""
    out: Partial | None = None
    if workers <= 1:
        with _blas_threads(1):
            for blk in blocks:
                part = kernel(blk)
                out = part if out is None else combine(out, part)
        return out
    with _blas_threads(1), ThreadPoolExecutor(workers) as pool:
        flight: deque[Future[Partial]] = deque()
        for blk in blocks:
            flight.append(pool.submit(kernel, blk))
            if len(flight) >= 2 * workers:
                part = flight.popleft().result()
                out = part if out is None else combine(out, part)
        while flight:
            part = flight.popleft().result()
            out = part if out is None else combine(out, part)
    return out


@functools.cache
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_threads(n: int) -> Any:
    """BLAS limited to ``n`` threads for the block: the blocks are the parallelism, and the products of a
    block are thin (d columns), where OpenBLAS's threads cost more than they save (10x slower on a loaded
    machine, measured)."""
    return _controller().limit(limits=n, user_api="blas")


def workers() -> int:
    """Threads a pass runs its kernel on: the machine's cores (``os.cpu_count``), at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def block(a: NDArray) -> NDArray:
    """``a`` (m, c) as a kernel's block: its own float dtype (float32 or float64; kernels compute in
    float64), its own layout (a streamed block is column-major, as Arrow holds columns)."""
    return a if a.dtype.kind == "f" else a.astype(np.float64)


def rebatch(columns: Iterable[NDArray], rows: int | None = None) -> Iterator[NDArray]:
    """Consecutive column arrays (c, m_i) cut again into blocks of ``rows`` (default :data:`BLOCK_ROWS`)
    rows, the last shorter, each a :func:`block` (m, c)."""
    rows = rows or BLOCK_ROWS
    held: list[NDArray] = []
    count = 0
    for a in columns:
        if not a.shape[1]:
            continue
        held.append(a)
        count += a.shape[1]
        while count >= rows:
            joined = held[0] if len(held) == 1 else np.concatenate(held, axis=1)
            yield np.ascontiguousarray(joined[:, :rows]).T
            rest = joined[:, rows:]
            held, count = ([rest] if rest.shape[1] else []), rest.shape[1]
    if count:
        yield np.ascontiguousarray(np.concatenate(held, axis=1) if len(held) > 1 else held[0]).T


def arrow_columns(batch: Any) -> NDArray:
    """A pyarrow RecordBatch of numeric columns without nulls as an array (c, m): float32 when every column
    is float32, else float64."""
    same = all(str(c.type) == "float" for c in batch.columns)
    out = np.empty((batch.num_columns, batch.num_rows), dtype=np.float32 if same else np.float64)
    for j, column in enumerate(batch.columns):
        out[j] = column.to_numpy(zero_copy_only=False)
    return out


# -- feeds -----------------------------------------------------------------------------------------


class Feed(ABC):
    """Rows (n of them, c columns) handed to kernels by canonical blocks; :meth:`reduce` is one pass."""

    n: int

    @abstractmethod
    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        """One pass: ``kernel`` on every block, the partials combined in order (None: no rows)."""


class MemoryFeed(Feed):
    """Rows (n, c) held in memory (float64, or a compact float32 copy of values that are float32 in the
    source: the same values); blocks are slices of it (:func:`block`)."""

    def __init__(self, rows: NDArray) -> None:
        self.rows = rows
        self.n = int(rows.shape[0])

    def blocks(self) -> Iterator[NDArray]:
        for start in range(0, self.n, BLOCK_ROWS):
            yield block(self.rows[start : start + BLOCK_ROWS])

    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        return reduce_blocks(self.blocks(), kernel, combine, workers())


class StreamFeed(Feed):
    """Rows streamed from an engine at every pass: ``batches()`` returns a new iterator of Arrow record
    batches of the projected columns, rows in the table's order."""

    def __init__(self, batches: Callable[[], Iterable[Any]], n: int) -> None:
        self.batches = batches
        self.n = int(n)

    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        arrays = (arrow_columns(b) for b in self.batches())
        return reduce_blocks(rebatch(arrays), kernel, combine, workers())


def _partition_pass(kernel: Kernel, combine: Combine) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function ``mapInArrow`` runs on an executor: the kernel over its partition's canonical blocks,
    one row (partition id, pickled partial) out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        part = reduce_blocks(rebatch(arrow_columns(b) for b in batches), kernel, combine)
        if part is not None:
            pid = TaskContext.get().partitionId()
            yield pa.RecordBatch.from_pydict({"part": [pid], "value": [pickle.dumps(part)]})

    return run


class SparkFeed(Feed):
    """A cached Spark DataFrame of the projected columns: each pass runs the kernel on the executors
    (``mapInArrow``), one partial per partition, which the driver combines in partition order. The
    kernel and this package travel with the task (pickled by value), so executors need numpy and pyarrow
    only."""

    def __init__(self, frame: Any, n: int) -> None:
        self.frame = frame
        self.n = int(n)

    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        from pyspark import cloudpickle

        import dpcore

        cloudpickle.register_pickle_by_value(dpcore)
        try:
            pass_ = _partition_pass(kernel, combine)
            rows = self.frame.mapInArrow(pass_, "part long, value binary").collect()
        finally:
            cloudpickle.unregister_pickle_by_value(dpcore)
        parts = [pickle.loads(r["value"]) for r in sorted(rows, key=lambda r: r["part"])]
        return reduce_blocks(parts, lambda p: p, combine)


# -- kernels ---------------------------------------------------------------------------------------


def nearest_labels(X: NDArray, centres: NDArray) -> NDArray:
    """Index (B, m) of the nearest of K centres for each row of X (m, d) and each of B centre sets (B, K, d):
    argmin_k ||c_k||^2 - 2 x.c_k (||x - c_k||^2 less the row's ||x||^2) by one BLAS product, then K
    comparisons with the best so far (strictly smaller wins: ties to the lowest index, equal centres
    score equally)."""
    b, k, d = centres.shape
    m = X.shape[0]
    labels = np.zeros((b, m), dtype=np.intp)
    step = max(1, DISTANCE_ENTRIES // (k * max(1, m)))  # centre sets per product
    for start in range(0, b, step):
        sets = centres[start : start + step]
        flat = sets.reshape(-1, d)
        dist = ((-2.0 * flat) @ X.T).reshape(len(sets), k, m)
        dist += np.einsum("ij,ij->i", flat, flat).reshape(len(sets), k, 1)
        best, lab = dist[:, 0].copy(), labels[start : start + step]
        for j in range(1, k):
            np.copyto(lab, j, where=dist[:, j] < best)
            np.minimum(best, dist[:, j], out=best)
    return labels


def lloyd_partial(Xc: NDArray, centres: NDArray) -> Partial:
    """Per-cluster counts (B, K) and sums (B, K, d) of the block Xc (rows clipped and centred) under
    nearest-centre assignment (:func:`nearest_labels`) to each of B centre sets (B, K, d), by ``bincount``
    (sequential sums in the rows' order)."""
    k, d = centres.shape[1:]
    labels = nearest_labels(Xc, centres)
    counts = np.stack([np.bincount(lab, minlength=k) for lab in labels]).astype(float)
    sums = np.stack([[np.bincount(lab, weights=Xc[:, j], minlength=k) for j in range(d)] for lab in labels])
    return counts, sums.transpose(0, 2, 1).copy()


def lloyd_statistics(Xc: NDArray, centres: NDArray) -> tuple[NDArray, NDArray]:
    """:func:`lloyd_partial` over the canonical blocks of rows in memory, summed in order: THE statistics
    of a noisy-Lloyd round, in memory and out of core."""
    out = MemoryFeed(Xc).reduce(lambda block: lloyd_partial(block, centres))
    if out is None:
        b, k, d = centres.shape
        return np.zeros((b, k)), np.zeros((b, k, d))
    return out[0], out[1]


class Scaled:
    """``dpcore.data.prepare``'s per-feature map of raw values, x_s = (clip(x, lo, hi) - center) / scale,
    with its operations in its order (so the same values bit for bit); picklable."""

    def __init__(self, lo: NDArray, hi: NDArray, center: NDArray, scale: NDArray) -> None:
        self.lo, self.hi, self.center, self.scale = lo, hi, center, scale

    def __call__(self, raw: NDArray) -> NDArray:
        out = np.clip(raw, self.lo, self.hi, dtype=np.float64)  # float32 values are exact in float64
        out -= self.center
        out /= self.scale
        return out


class LloydPass:
    """The kernel of one noisy-Lloyd round on raw feature blocks: ``prepare`` (e.g. :class:`Scaled`), the
    estimators' clip to [lower, upper] and centring on (lower + upper) / 2, then :func:`lloyd_partial`.

    ``inside``: ``prepare``'s values already lie in [lower, upper] bit for bit, so the clip changes nothing
    and is skipped (:class:`Scaled` to its own scaled bounds: clip(x, lo, hi) >= lo and the rounded
    subtraction and division are monotone, so x_s >= (lo - center) / scale = lower, and likewise <=
    upper)."""

    def __init__(self, prepare: Callable[[NDArray], NDArray], lower: NDArray, upper: NDArray,
                 centres: NDArray, inside: bool = False) -> None:
        self.prepare, self.lower, self.upper, self.centres = prepare, lower, upper, centres
        self.inside = inside

    def __call__(self, raw: NDArray) -> Partial:
        X = self.prepare(raw)
        Xc = X if self.inside else np.clip(X, self.lower, self.upper)
        mid = (self.lower + self.upper) / 2.0
        if mid.any():  # x - 0.0 is x: a box centred on 0 (min-max scaling) needs no pass
            Xc -= mid
        return lloyd_partial(Xc, self.centres)


def fit_statistics(
    feed: Feed, prepare: Callable[[NDArray], NDArray], lower: NDArray, upper: NDArray, inside: bool = False
):
    """The ``statistics(centres)`` oracle of ``NoisyLloydBase.fit_statistics`` over ``feed``: one pass of
    :class:`LloydPass` per round."""

    def statistics(centres: NDArray) -> tuple[NDArray, NDArray]:
        out = feed.reduce(LloydPass(prepare, lower, upper, centres, inside))
        if out is None:
            b, k, d = centres.shape
            return np.zeros((b, k)), np.zeros((b, k, d))
        return out[0], out[1]

    return statistics
