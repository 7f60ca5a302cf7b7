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
  executors with ``mapInArrow`` over the blocks Spark caches as raw bytes, the driver combining the
  partitions' partials in partition order).

Blocks are canonical: rows [i B, (i + 1) B) of the table, B = :data:`BLOCK_ROWS`, whatever the engine's
batch sizes (:func:`assemble`), so the in-memory release (``dpcore.kmeans.lloyd`` calls
:func:`lloyd_statistics`), the in-memory feed and the streamed one compute the same floating-point
operations in the same order: the same release with the same demo seed, by construction. Spark combines
per partition, so it is the same when each partition holds whole blocks in order (a table of at most B
rows always); otherwise its sums differ by the rounding of another order of additions.

Inside a block a kernel computes chunk by chunk (:data:`CHUNK_ROWS` rows, :func:`chunks`), each chunk
copied by columns into float64 (:func:`columns`), so its temporaries stay small and every elementwise
operation runs along the rows; the chunks' partials are added in order too.

Engines read, filter, project, drop missing rows, sample and count; every value a mechanism computes
(scaling, clipping, labels, sums, cells, certificates) is computed here, in numpy.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
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

BLOCK_ROWS = 1 << 19  # rows per canonical block: a task of a pass, combined in the blocks' order
CHUNK_ROWS = 1 << 14  # rows a kernel computes at once (:func:`chunks`; 10 float64 columns: 1.3 MB)
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
    reuse_heap()
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
            if len(flight) >= in_flight(workers):
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


def allocate(shape: tuple[int, ...], dtype: Any) -> NDArray:
    """A new array in fresh anonymous memory (``mmap``) that numpy has not advised for transparent huge
    pages: where the kernel compacts memory to serve such a fault (THP defrag "madvise", a common
    default), first touching numpy's own large arrays costs up to 10x more (800 MB: 3.4 s against 0.4 s,
    measured on a 2-core VM). For the large stores of a release: rows read into memory, stream buffers."""
    count = int(np.prod(shape))
    nbytes = max(1, count * np.dtype(dtype).itemsize)
    if not hasattr(mmap, "MAP_ANONYMOUS"):  # not POSIX
        return np.empty(shape, dtype=dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape)


@functools.cache
def reuse_heap() -> bool:
    """Ask the C library's ``malloc`` (glibc) to keep freed memory for reuse, once per process: blocks
    below 4 MB from the heap (``M_MMAP_THRESHOLD``) and up to 64 MB of free heap kept
    (``M_TRIM_THRESHOLD``). By default a numpy temporary of 128 KB or more is a fresh mapping, or the heap
    is trimmed as soon as it is freed, so every such temporary of a pass page-faults again: finding the
    trips of 10M fixes in 64K-row blocks took 1.20 s, against 0.73 s with these settings (measured on a
    2-core VM). The passes call it; True when set, False where there is no ``mallopt`` (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(-3, 4 << 20)) and bool(mallopt(-1, 64 << 20))  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def prefetched(items: Iterable[Any], depth: int = 2) -> Iterator[Any]:
    """``items`` in order, each asked for by one background thread up to ``depth`` ahead of the consumer:
    an engine prepares its next batch while this thread copies or computes on the last one (DuckDB and
    numpy release the GIL). Leaving early waits for at most ``depth`` items in progress."""
    it, end = iter(items), object()
    with ThreadPoolExecutor(1) as pool:  # one thread: the calls of next run in order
        ahead = deque(pool.submit(next, it, end) for _ in range(depth))
        while (item := ahead.popleft().result()) is not end:
            ahead.append(pool.submit(next, it, end))
            yield item


def in_flight(workers: int) -> int:
    """Blocks :func:`reduce_blocks` has handed to its kernels and not yet combined, at most: a block's
    memory may be reused once that many later blocks have been asked for."""
    return 2 * workers if workers > 1 else 1


def assemble(batches: Iterable[Any], size: int, ring: list[NDArray] | None = None) -> Iterator[NDArray]:
    """Arrow record batches of numeric columns without nulls cut again into the canonical blocks (m, c) of
    :data:`BLOCK_ROWS` rows (the last shorter), copied into a ring of reused (c, BLOCK_ROWS) buffers
    (float32 when every column is float32, else float64): block i is written into buffer i mod len(ring),
    so a consumer must be done with a block before ``size`` more are asked for (:func:`reduce_blocks`:
    ``in_flight(workers) + 1``). ``ring``: the buffers to reuse (``size`` of them, allocated on first use:
    a feed keeps them across its passes); default one pass's own."""
    ring = [] if ring is None else ring
    fill = index = 0
    for batch in batches:
        cols = [c.to_numpy(zero_copy_only=False) for c in batch.columns]
        if not ring:
            dtype = np.float32 if all(str(c.type) == "float" for c in batch.columns) else np.float64
            ring.extend(allocate((len(cols), BLOCK_ROWS), dtype) for _ in range(size))
        at, m = 0, batch.num_rows
        while at < m:
            buf = ring[index % len(ring)]
            take = min(BLOCK_ROWS - fill, m - at)
            for j, col in enumerate(cols):
                buf[j, fill : fill + take] = col[at : at + take]
            fill, at = fill + take, at + take
            if fill == BLOCK_ROWS:
                yield buf.T
                fill, index = 0, index + 1
    if fill:
        yield ring[index % len(ring)][:, :fill].T


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
        self.ring: list[NDArray] = []  # :func:`assemble`'s buffers, reused by every pass

    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        threads = workers()
        blocks = assemble(self.batches(), in_flight(threads) + 1, self.ring)
        return reduce_blocks(blocks, kernel, combine, threads)


PIECE_BYTES = 64 << 20  # at most this many bytes of a block in one row of Spark's cache (SparkFeed)
PIECES = "block long, rows long, cols long, f32 boolean, value binary"  # the rows of Spark's cache


def _to_pieces(batches: Iterator[Any]) -> Iterator[Any]:
    """The function ``mapInArrow`` runs once per partition to build :class:`SparkFeed`'s cache: the
    partition's canonical blocks (:func:`assemble`), each as the raw bytes of its (c, m) array, cut into
    pieces of at most :data:`PIECE_BYTES`, one row each (block index, rows, columns, float32?, bytes)."""
    import pyarrow as pa

    for i, blk in enumerate(assemble(batches, 1)):
        cols = blk.T  # (c, m), a view of the buffer assemble reuses: copied into bytes at once
        step = max(1, PIECE_BYTES // (cols.shape[0] * cols.itemsize))
        for start in range(0, cols.shape[1], step):
            piece = np.ascontiguousarray(cols[:, start : start + step])
            row = {"block": [i], "rows": [piece.shape[1]], "cols": [piece.shape[0]]}
            row |= {"f32": [bool(piece.dtype == np.float32)], "value": [piece.tobytes()]}
            yield pa.RecordBatch.from_pydict(row)  # int64, bool and binary: the types of PIECES


def _from_pieces(batches: Iterable[Any]) -> Iterator[NDArray]:
    """The blocks (m, c) of a partition of :class:`SparkFeed`'s cache, in order: each piece a view of
    Arrow's buffer (no copy), a block of several pieces joined."""
    held: list[NDArray] = []
    at = None

    def joined() -> NDArray:
        return (held[0] if len(held) == 1 else np.concatenate(held, axis=1)).T

    for batch in batches:
        meta = zip(*(batch.column(k).to_pylist() for k in ("block", "rows", "cols", "f32")), strict=True)
        for j, (i, rows, cols, f32) in enumerate(meta):
            if i != at and held:
                yield joined()
                held = []
            at = i
            buf = batch.column("value")[j].as_buffer()
            held.append(np.frombuffer(buf, dtype=np.float32 if f32 else np.float64).reshape(cols, rows))
    if held:
        yield joined()


def _partition_pass(kernel: Kernel, combine: Combine) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function ``mapInArrow`` runs on an executor: the kernel over its partition's canonical blocks
    (:func:`_from_pieces`), one row (partition id, pickled partial) out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        part = reduce_blocks(_from_pieces(batches), kernel, combine)
        if part is not None:
            pid = TaskContext.get().partitionId()
            yield pa.RecordBatch.from_pydict({"part": [pid], "value": [pickle.dumps(part)]})

    return run


class SparkFeed(Feed):
    """A Spark DataFrame of the projected columns, cached by Spark as its partitions' canonical blocks
    (one pass of ``mapInArrow``: the raw bytes of each block's columns, in pieces of at most
    :data:`PIECE_BYTES`), so that a pass hands each executor its blocks as Arrow buffers, not rows
    converted one by one (1M x 10: 0.38-0.44 s a pass against 0.59-0.91 s from the cached rows, measured).
    Each pass runs the kernel on the executors (``mapInArrow``), one partial per partition, which the
    driver combines in partition order. The kernel and this package travel with the task (pickled by
    value), so executors need numpy and pyarrow only. :meth:`release` frees the cache."""

    def __init__(self, frame: Any) -> None:
        with _by_value():
            self.blocks = frame.mapInArrow(_to_pieces, PIECES).cache()
            self.n = sum(r["rows"] for r in self.blocks.select("rows").collect())  # builds the cache

    def reduce(self, kernel: Kernel, combine: Combine = add) -> Partial | None:
        with _by_value():
            pass_ = _partition_pass(kernel, combine)
            rows = self.blocks.mapInArrow(pass_, "part long, value binary").collect()
        parts = [pickle.loads(r["value"]) for r in sorted(rows, key=lambda r: r["part"])]
        return reduce_blocks(parts, lambda p: p, combine)

    def release(self) -> None:
        """Free Spark's cache of the blocks."""
        unpersist(self.blocks)


def unpersist(frame: Any) -> None:
    """``frame.unpersist()``, if the session is still there."""
    with contextlib.suppress(Exception):
        frame.unpersist()


@contextlib.contextmanager
def _by_value() -> Iterator[None]:
    """This package pickled by value into Spark's tasks (executors need not have it installed)."""
    from pyspark import cloudpickle

    import dpcore

    cloudpickle.register_pickle_by_value(dpcore)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(dpcore)


# -- kernels ---------------------------------------------------------------------------------------


def columns(rows: NDArray, out: NDArray | None = None) -> NDArray:
    """Rows (m, c) of any layout and float dtype as a C-ordered (c, m) float64 array (``out``, or a new
    one): the layout every kernel computes in (a numpy operation against a per-column vector then runs
    along m, not along c)."""
    if out is None:
        out = np.empty((rows.shape[1], rows.shape[0]))
    out[...] = rows.T  # float32 values are exact in float64
    return out


def chunks(rows: NDArray) -> Iterator[NDArray]:
    """``rows`` (m, c) cut into consecutive chunks of :data:`CHUNK_ROWS` rows (the last shorter): a kernel
    works chunk by chunk, so its temporaries stay in the cache and come from the heap (a fresh array of
    tens of MB is a fresh mapping, whose page faults cost more than the arithmetic)."""
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        yield rows[start : start + CHUNK_ROWS]


def lifted_chunks(rows: NDArray, fill: Callable[[NDArray, NDArray], Any], d: int) -> Iterator[NDArray]:
    """The :func:`chunks` of ``rows`` (m, c), each written by ``fill(chunk, out)`` as d float64 columns into
    ``out`` (d, m), the first d rows of one reused workspace whose last row is ones: yields that
    lifted chunk Xa (d + 1, m), valid until the next one is asked for. The row of ones makes the centres'
    scores one product (:func:`scores`) and the clusters' counts a column of their sums."""
    work = np.empty((d + 1, CHUNK_ROWS))
    work[d] = 1.0
    for part in chunks(rows):
        Xa = work[:, : part.shape[0]]
        fill(part, Xa[:d])
        yield Xa


def lift(centres: NDArray) -> NDArray:
    """B sets of K centres (B, K, d) as the rows [-2 c_k, ||c_k||^2] (B K, d + 1) of :func:`scores`."""
    flat = centres.reshape(-1, centres.shape[-1])
    return np.hstack([-2.0 * flat, np.einsum("ij,ij->i", flat, flat)[:, None]])


def scores(Xa: NDArray, lifted: NDArray, k: int) -> NDArray:
    """||c_k||^2 - 2 x.c_k (||x - c_k||^2 less the row's ||x||^2) of every row of a lifted chunk Xa
    (d + 1, m) for every centre (:func:`lift`), (B, K, m): one BLAS product."""
    return (lifted @ Xa).reshape(-1, k, Xa.shape[1])


def first_minima(s: NDArray) -> NDArray:
    """Per set and row the lowest index k of the smallest score, (B, m) of scores (B, K, m): ties go to
    the lowest index, and equal centres score equally, so a duplicate centre wins no row."""
    best = s.min(axis=1)
    labels = np.full(best.shape, s.shape[1] - 1, dtype=np.intp)
    for j in range(s.shape[1] - 2, -1, -1):
        np.copyto(labels, j, where=s[:, j] == best)
    return labels


def nearest_labels(X: NDArray, centres: NDArray) -> NDArray:
    """Index (B, m) of the nearest of K centres for each row of X (m, d) and each of B centre sets (B, K, d):
    :func:`first_minima` of the :func:`scores` of each chunk."""
    b, k, d = centres.shape
    lifted = lift(centres)
    parts = [first_minima(scores(Xa, lifted, k)) for Xa in lifted_chunks(X, columns, d)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((b, 0), dtype=np.intp)


def add_cluster_sums(Xa: NDArray, lifted: NDArray, k: int, acc: NDArray, hot: NDArray) -> None:
    """Add one lifted chunk's (Xa (d + 1, m)) per-cluster sums and counts to ``acc`` (B K, d + 1; the
    counts in the last column): one product of the chunk's one-hot assignment to the nearest centres
    (:func:`nearest_labels`), written into ``hot`` (B, K, >= m), with Xa. The assignment is the rows'
    equality with their smallest score; a row with two smallest scores, which that would count twice
    (the counts then add to more than m), is assigned again by :func:`first_minima`."""
    m = Xa.shape[1]
    s = scores(Xa, lifted, k)
    one = hot[:, :, :m]
    np.equal(s, s.min(axis=1, keepdims=True), out=one)
    flat = one.reshape(-1, m)
    part = flat @ Xa.T
    if np.any(part[:, -1].reshape(-1, k).sum(axis=1) != m):
        np.equal(first_minima(s)[:, None, :], np.arange(k).reshape(k, 1), out=one)
        part = flat @ Xa.T
    acc += part


def cluster_partial(lifted_rows: Iterable[NDArray], centres: NDArray) -> Partial:
    """Per-cluster counts (B, K) and sums (B, K, d) of lifted chunks (:func:`lifted_chunks`) under
    nearest-centre assignment to each of B centre sets (B, K, d), added chunk by chunk in order
    (:func:`add_cluster_sums`)."""
    b, k, d = centres.shape
    lifted = lift(centres)
    acc, hot = np.zeros((b * k, d + 1)), np.empty((b, k, CHUNK_ROWS))
    for Xa in lifted_rows:
        add_cluster_sums(Xa, lifted, k, acc, hot)
    return np.ascontiguousarray(acc[:, d].reshape(b, k)), np.ascontiguousarray(acc[:, :d].reshape(b, k, d))


def lloyd_partial(Xc: NDArray, centres: NDArray) -> Partial:
    """Per-cluster counts (B, K) and sums (B, K, d) of the block Xc (rows clipped and centred) under
    nearest-centre assignment (:func:`nearest_labels`) to each of B centre sets (B, K, d), chunk by chunk
    in the rows' order (:func:`cluster_partial`)."""
    return cluster_partial(lifted_chunks(Xc, columns, centres.shape[2]), centres)


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
    with its operations in its order (so the same values bit for bit); picklable. Where every scale is a
    power of two the division is a product with its exact reciprocal: both round the same real number,
    so the same values, at a third of the cost."""

    def __init__(self, lo: NDArray, hi: NDArray, center: NDArray, scale: NDArray) -> None:
        self.lo, self.hi, self.center, self.scale = lo, hi, center, scale
        mantissa, _ = np.frexp(np.asarray(scale, dtype=np.float64))
        self.inverse = 1.0 / np.asarray(scale, dtype=np.float64) if np.all(mantissa == 0.5) else None

    def columns(self, raw: NDArray, out: NDArray | None = None) -> NDArray:
        """The scaled values of raw rows (m, c) as a (c, m) float64 array (``out``, or a new one:
        :func:`columns`)."""
        out = columns(raw, out)
        col = functools.partial(np.reshape, shape=(-1, 1))
        np.clip(out, col(self.lo), col(self.hi), out=out)
        out -= col(self.center)
        if self.inverse is not None:
            out *= col(self.inverse)
        else:
            out /= col(self.scale)
        return out

    def __call__(self, raw: NDArray) -> NDArray:
        return self.columns(raw).T


def by_columns(prepare: Callable[[NDArray], NDArray]) -> Callable[[NDArray, NDArray], NDArray]:
    """``prepare`` as a :func:`lifted_chunks` fill, ``(raw, out) -> out``: its own ``columns`` when it has
    one (:class:`Scaled`), else its rows copied by columns (:func:`columns`)."""
    own = getattr(prepare, "columns", None)
    return own if own is not None else lambda raw, out: columns(prepare(raw), out)


class LloydPass:
    """The kernel of one noisy-Lloyd round on raw feature blocks: ``prepare`` (e.g. :class:`Scaled`; one
    with a ``columns`` method gives its values by columns directly), the estimators' clip to
    [lower, upper] and centring on (lower + upper) / 2, then the chunks' counts and sums as
    :func:`cluster_partial` adds them.

    ``inside``: ``prepare``'s values already lie in [lower, upper] bit for bit, so the clip changes nothing
    and is skipped (:class:`Scaled` to its own scaled bounds: clip(x, lo, hi) >= lo and the rounded
    subtraction and division are monotone, so x_s >= (lo - center) / scale = lower, and likewise <=
    upper)."""

    def __init__(self, prepare: Callable[[NDArray], NDArray], lower: NDArray, upper: NDArray,
                 centres: NDArray, inside: bool = False) -> None:
        self.prepare, self.lower, self.upper, self.centres = prepare, lower, upper, centres
        self.inside = inside

    def __call__(self, raw: NDArray) -> Partial:
        prepare = by_columns(self.prepare)
        lower, upper = self.lower.reshape(-1, 1), self.upper.reshape(-1, 1)
        mid = (lower + upper) / 2.0

        def fill(part: NDArray, out: NDArray) -> None:
            prepare(part, out)
            if not self.inside:
                np.clip(out, lower, upper, out=out)
            if mid.any():  # x - 0.0 is x: a box centred on 0 (min-max scaling) needs no pass
                out -= mid

        return cluster_partial(lifted_chunks(raw, fill, self.centres.shape[2]), self.centres)


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
