"""The out-of-core kernel: one function per pass on blocks of rows, partials added in the blocks' order,
the same result whether the blocks come from memory or from a stream of Arrow batches."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpcore.errors import ParameterError
from dpcore.kmeans.cells import cluster_statistics
from dpcore.metrics import nearest_sets
from dpcore.outofcore import kernel


def test_lloyd_kernel_is_the_in_memory_statistics_and_ties_go_to_the_lowest_index() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (3000, 3))
    centres = rng.uniform(-0.8, 0.8, (2, 4, 3))
    centres[1, 2] = centres[1, 0]  # a duplicate centre: every row it could win goes to index 0
    counts, sums = kernel.lloyd_statistics(X, centres)
    want_n, want_s = cluster_statistics(X, nearest_sets(X, centres)[0], 4)
    assert np.array_equal(counts, want_n) and counts[1, 2] == 0
    assert np.allclose(sums, want_s, rtol=1e-13, atol=1e-12)  # one-hot products: another order of additions


def test_scaling_is_prepares_division_bit_for_bit() -> None:
    """Scaled computes (clip(x, lo, hi) - center) / scale as prepare does; a power-of-two scale is a
    product with its exact reciprocal, the same values."""
    rng = np.random.default_rng(5)
    raw = (rng.normal(0, 3, (2000, 4)) * 10.0 ** rng.integers(-30, 30, (2000, 4))).astype(np.float32)
    lo, hi = np.array([-1e25, -2.0, 0.0, -np.pi]), np.array([1e25, 6.0, 1e-20, 7.0])
    for scale in ([2.0**-70, 4.0, 2.0**-66, 0.5], [3.0, 4.0, 0.1, 1.0]):
        scale = np.asarray(scale)
        center = (lo + hi) / 2
        scaled = kernel.Scaled(lo, hi, center, scale)
        assert (scaled.inverse is not None) == (scale[0] != 3.0)
        want = (np.clip(raw.astype(np.float64), lo, hi) - center) / scale
        got = scaled(raw)
        assert got.shape == want.shape and np.array_equal(got, want)
        assert np.array_equal(scaled.columns(np.asfortranarray(raw)), want.T)


def test_memory_and_streamed_blocks_give_the_same_partials_bit_for_bit(monkeypatch) -> None:
    """Many more blocks than the stream's ring of reused buffers, on two threads, in chunks of 50 rows:
    the same partials as the rows in memory."""
    monkeypatch.setattr(kernel, "BLOCK_ROWS", 64)
    monkeypatch.setattr(kernel, "CHUNK_ROWS", 50)
    monkeypatch.setattr(kernel, "workers", lambda: 2)
    rng = np.random.default_rng(1)
    X = rng.normal(0, 0.4, (1000, 3))
    centres = rng.uniform(-0.5, 0.5, (1, 3, 3))
    sizes = [100, 37, 300, 1, 562]  # an engine's batches: not the canonical blocks

    def batches():
        start = 0
        for m in sizes:
            part = X[start : start + m]
            yield pa.RecordBatch.from_arrays([pa.array(part[:, j]) for j in range(3)], names=list("abc"))
            start += m

    stream = kernel.StreamFeed(batches, len(X))
    memory = kernel.MemoryFeed(X)
    pass_ = kernel.LloydPass(lambda raw: np.asarray(raw, dtype=np.float64), -np.ones(3), np.ones(3), centres)
    a, b = memory.reduce(pass_), stream.reduce(pass_)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert [len(blk) for blk in memory.blocks()] == [64] * 15 + [40]
    assert len(stream.ring) == kernel.in_flight(2) + 1 < 16
    assert all(np.array_equal(x, y) for x, y in zip(a, stream.reduce(pass_), strict=True))  # ring reused
    c = kernel.lloyd_statistics(np.clip(X, -1, 1), centres)
    assert np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])
    assert a[0].sum() == 1000
    assert kernel.MemoryFeed(X[:0]).reduce(pass_) is None


def test_combines_and_the_memory_budget(monkeypatch) -> None:
    a, b = (np.array([1.0, 5.0]),), (np.array([3.0, 2.0]),)
    assert np.array_equal(kernel.maximum(a, b)[0], [3.0, 5.0])
    assert np.array_equal(kernel.concatenate(a, b)[0], [1.0, 5.0, 3.0, 2.0])
    monkeypatch.delenv("DPCORE_MEMORY_BUDGET", raising=False)
    assert kernel.memory_budget() == 2 * 10**9
    monkeypatch.setenv("DPCORE_MEMORY_BUDGET", "1.5GiB")
    assert kernel.memory_budget() == int(1.5 * 2**30)
    monkeypatch.setenv("DPCORE_MEMORY_BUDGET", "lots")
    with pytest.raises(ParameterError, match="DPCORE_MEMORY_BUDGET"):
        kernel.memory_budget()


def test_the_passes_ask_glibc_to_keep_freed_memory() -> None:
    """``mallopt`` is found and accepts both settings where the C library is glibc (a no-op elsewhere)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert kernel.reuse_heap() is True


@pytest.mark.spark
def test_spark_s_cached_blocks_give_the_memory_partials_bit_for_bit(spark, monkeypatch) -> None:
    """Spark caches each partition's canonical blocks as raw bytes, a block in several pieces when it is
    larger than PIECE_BYTES (here 3 pieces of a 64-row block), and a pass reads them back as arrays: with
    one partition the same partials as the rows in memory, and n counted while the cache is built."""
    monkeypatch.setattr(kernel, "BLOCK_ROWS", 64)
    monkeypatch.setattr(kernel, "CHUNK_ROWS", 50)
    monkeypatch.setattr(kernel, "PIECE_BYTES", 3 * 25 * 4)  # 25 rows of 3 float32 columns a piece
    rng = np.random.default_rng(2)
    X = rng.normal(0, 0.4, (1000, 3)).astype(np.float32)
    table = pd.DataFrame(X, columns=list("abc"))
    frame = spark.createDataFrame(table, "a float, b float, c float").coalesce(1)
    feed = kernel.SparkFeed(frame)
    try:
        assert feed.n == 1000
        assert feed.blocks.count() == 15 * 3 + 2  # 15 blocks of 64 rows in 3 pieces, one of 40 in 2
        centres = rng.uniform(-0.5, 0.5, (1, 3, 3))
        pass_ = kernel.LloydPass(np.asarray, -np.ones(3), np.ones(3), centres)
        a, b = kernel.MemoryFeed(X).reduce(pass_), feed.reduce(pass_)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)) and a[0].sum() == 1000
        sizes, firsts = feed.reduce(lambda blk: (np.array([len(blk)]), blk[:1].copy()), kernel.concatenate)
        assert sizes.tolist() == [64] * 15 + [40]  # the pieces joined again into the canonical blocks
        assert np.array_equal(firsts, X[::64])
    finally:
        feed.release()
