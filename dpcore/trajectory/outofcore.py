"""DPT's counts by passes over a table in DuckDB or Spark, for tables above the in-memory row limit.

The engine only reads, converts and orders: every fix's person id as text, its trip id as text (with a
trip column), its UTC time in whole microseconds, latitude and longitude, ordered by person, trip and time
(text in code-point order, as :func:`dpcore.trajectory.prepare.person_codes` ranks it). :func:`fix_blocks`
numbers persons and trips in that order and cuts the rows into blocks of whole persons; every value is
computed by the same numpy functions as in memory, block by block:
:func:`~dpcore.trajectory.prepare.prepare_block` (region, trips, speed filter, the per-person cap,
truncation), the trips per own reference system, then, after the noisy selection of reference systems
(in memory), the start cells and prefix-tree grams of the kept trips (:meth:`DPT.true_counts`), added up.
The cap's uniform keys come from the release's sampler in the persons' canonical order, so they are the
keys drawn in memory:

* **DuckDB** (:class:`TrajectoryTable`): the rows streamed as Arrow batches in their stored order,
  checked batch by batch (no sort for a table stored in order), or, from the first row out of order on,
  again from the start with ORDER BY and the sampler put back (:meth:`TrajectoryTable.fit_model`);
  pass 1 prepares each block with keys drawn block after block (and recorded) and keeps the prepared trips
  while they fit ``cache_bytes``, from which the counts are taken (one scan in all); otherwise pass 2
  prepares the same blocks again with the recorded keys (nothing drawn).
* **Spark** (:class:`SparkTrajectories`): the rows range-partitioned by person (partition i holds whole
  persons, all before those of partition i + 1), sorted within partitions and cached; each pass runs the
  kernels on the executors (``mapInArrow``), one partial per partition, added by the driver in partition
  order. Pass 1 counts the keys each partition's cap needs; the driver draws them partition after
  partition; pass 2 prepares with them (trips per own system, diagnostics); pass 3 counts after the
  selection. The sampler never leaves the driver: executors receive their keys only.

Memory is bounded by a few blocks, the cache (DuckDB) and the counts (at most the cells x 9^phi grams of
the model). The release is the in-memory one with the same demo seed (rows with the same person, trip and
time stamp aside: their order decides which one the speed filter drops).
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.outofcore.kernel import reuse_heap, workers
from dpcore.trajectory.dpt import DPT, Hierarchy, own_levels
from dpcore.trajectory.prepare import (
    Candidates,
    Prepared,
    TripLimits,
    TripSet,
    cap_trips,
    find_trips,
    prepare_block,
)

__all__ = ["SparkTrajectories", "TrajectoryTable", "fix_blocks", "merge_counts"]

Counts = dict[str, tuple[np.ndarray, np.ndarray]]
Block = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # code, tcode, seconds, lat, lon
# Blocks are small: a block's temporaries (about 40 arrays of its rows) stay below numpy's huge-page
# threshold (4 MB) and are reused from the heap, where 1M-row blocks paid fresh (huge) pages on every array
# (10M fixes: 1.3 s of system time in the trip finding alone, against 0.05 s with 64K rows)
BATCH_ROWS = 1 << 16
BLOCK_ROWS = 1 << 16  # at least this many rows per block (whole persons)
CHANGED = "The table changed between two passes of the release; run it again."
CACHE_BYTES = 256 * 10**6  # pass 1's prepared trips kept for the counts while they fit (else pass 2)
_THREADS = min(workers(), 4)  # a block in flight per thread: about 15 MB each


def _changes(column: Any, last: Any) -> np.ndarray:
    """True where a sorted Arrow column's value differs from the one before (``last``: the previous
    batch's last value, None at the start)."""
    import pyarrow.compute as pc

    n = len(column)
    out = np.empty(n, dtype=bool)
    out[0] = last is None or column[0].as_py() != last
    if n > 1:
        out[1:] = pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return out


class OutOfOrder(Exception):
    """Rows streamed in their stored order were not ordered by person, trip and time after all."""


def fix_blocks(
    batches: Iterable[Any], has_trip: bool, min_rows: int = BLOCK_ROWS, check: bool = False
) -> Iterator[Block]:
    """Arrow batches of (p, [t,] us, lat, lon) ordered by person text p, trip text t and time us, as blocks
    (person codes, trip codes, seconds, lat, lon) of whole persons with at least ``min_rows`` rows (the
    last one shorter); codes rise with the text (only their order and equality matter). A block is cut at
    the first person start ``min_rows`` rows after the last cut: inside a batch a view of its arrays, the
    rows held from earlier batches joined to it otherwise. ``check``: verify that order
    (:func:`_sorted_after`) and raise :class:`OutOfOrder` at the first batch that breaks it (rows in their
    stored order)."""
    held: list[Block] = []  # the rows since the last cut, in pieces
    count, code, tcode = 0, -1, -1
    last: tuple[Any, ...] | None = None
    last_p = last_t = None
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        if check:
            keys = ["p", "t", "us"] if has_trip else ["p", "us"]
            if not _sorted_after(batch, keys, last):
                raise OutOfOrder
            last = tuple(batch.column(k)[n - 1].as_py() for k in keys)
        p = batch.column("p")
        new = _changes(p, last_p)
        starts = np.flatnonzero(new)  # where a person starts
        codes = code + np.cumsum(new)
        if has_trip:
            t = batch.column("t")
            new |= _changes(t, last_t)
            last_t = t[n - 1].as_py()
        tcodes = tcode + np.cumsum(new)
        code, tcode, last_p = int(codes[-1]), int(tcodes[-1]), p[n - 1].as_py()
        sec = batch.column("us").to_numpy(zero_copy_only=False) / 1e6  # as prepare_trips reads times
        lat = batch.column("lat").to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        lon = batch.column("lon").to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        part: Block = (codes, tcodes, sec, lat, lon)
        begin = 0
        while True:
            # the first person start leaving at least min_rows rows (at least one) before it
            at = int(np.searchsorted(starts, begin + max(min_rows - count, 0 if count else 1)))
            if at == starts.size:
                break
            cut = int(starts[at])
            yield _join([*held, _rows(part, begin, cut)])
            held, count, begin = [], 0, cut
        held.append(_rows(part, begin, n))
        count += n - begin
    if count:
        yield _join(held)


def _sorted_after(batch: Any, keys: list[str], last: tuple[Any, ...] | None) -> bool:
    """True if the batch's rows, after a row whose ``keys`` are ``last`` (None: none), are ordered by those
    keys (text in code-point order, as an engine sorts VARCHAR: UTF-8 bytes, Python's ``str`` order)."""
    import pyarrow.compute as pc

    if last is not None and tuple(batch.column(k)[0].as_py() for k in keys) < last:
        return False
    n = batch.num_rows
    tied = None  # rows whose earlier keys equal the row before's
    for name in keys:
        col = batch.column(name)
        a, b = col.slice(1, n - 1), col.slice(0, n - 1)
        before = pc.less(a, b) if tied is None else pc.and_(pc.less(a, b), tied)
        if pc.any(before).as_py():
            return False
        same = pc.equal(a, b)
        tied = same if tied is None else pc.and_(tied, same)
    return True


def _rows(b: Block, start: int, stop: int) -> Block:
    return tuple(a[start:stop] for a in b)  # type: ignore[return-value]


def _join(held: list[Block]) -> Block:
    if len(held) == 1:
        return held[0]
    return tuple(np.concatenate(parts) for parts in zip(*held, strict=True))  # type: ignore[return-value]


def merge_counts(parts: Iterable[Counts | None], group: int = 32) -> Counts | None:
    """Sums by name of sets of (sorted keys, counts) (None: no set), merged ``group`` sets at a time into
    the total: one sort of their keys per group, and memory for a group's sets only."""
    total: Counts | None = None
    pending: list[Counts] = []
    for part in parts:
        if part is not None:
            pending.append(part)
        if len(pending) == group:
            total, pending = _merged([total, *pending] if total is not None else pending), []
    if pending:
        return _merged([total, *pending] if total is not None else pending)
    return total


def _merged(parts: list[Counts]) -> Counts:
    out = {}
    for name in parts[0]:
        keys = np.concatenate([p[name][0] for p in parts])
        vals = np.concatenate([p[name][1] for p in parts])
        uniq, inv = np.unique(keys, return_inverse=True)
        out[name] = (uniq, np.bincount(inv.ravel(), weights=vals, minlength=uniq.size).astype(np.int64))
    return out


def _add_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in (*a, *(k for k in b if k not in a))}


class _Recorder:
    """The sampler's generator seen by the cap: draws from it and records them (DuckDB's pass 1)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng_ = rng
        self.draws: list[np.ndarray] = []

    @property
    def rng(self) -> _Recorder:
        return self

    def random(self, size: int) -> np.ndarray:
        out = self.rng_.random(size)
        self.draws.append(out)
        return out


class _Replay:
    """Keys given back in order, from recorded draws or one array cut as asked (``done`` checks all were
    read: a table that changed between passes asks for other numbers)."""

    def __init__(self, draws: Iterable[np.ndarray]) -> None:
        self.keys = np.concatenate([np.zeros(0), *draws])
        self.at = 0

    @property
    def rng(self) -> _Replay:
        return self

    def random(self, size: int) -> np.ndarray:
        out = self.keys[self.at : self.at + size]
        self.at += size
        if out.size != size:
            raise ParameterError(CHANGED)
        return out

    def done(self) -> None:
        if self.at != self.keys.size:
            raise ParameterError(CHANGED)


class _Tally:
    """Counts the keys the cap asks for, without drawing (Spark's pass 1; the trips it keeps are unused)."""

    def __init__(self) -> None:
        self.n = 0

    @property
    def rng(self) -> _Tally:
        return self

    def random(self, size: int) -> np.ndarray:
        self.n += size
        return np.zeros(size)


@dataclass(frozen=True)
class _Kernels:
    """The per-block functions of the passes (picklable: the limits and the model's public shape only, no
    sampler)."""

    limits: TripLimits
    has_trip: bool
    model: dict[str, Any]  # DPT's keyword arguments but epsilon and random_state

    @property
    def hier(self) -> Hierarchy:
        return Hierarchy(*self.model["box"], finest=self.model["finest"], levels=self.model["levels"])

    def prepare(self, b: Block, draws: Any) -> Prepared:
        return prepare_block(*b, self.limits, draws, self.has_trip)

    def find(self, b: Block) -> Candidates:
        return find_trips(*b, self.limits, self.has_trip)

    def cap(self, found: Candidates, draws: Any) -> Prepared:
        return cap_trips(found, self.limits, draws)

    def own(self, trips: TripSet) -> np.ndarray:
        """Each trip's own reference system."""
        return own_levels(trips, self.hier) if trips.n_trips else np.zeros(0, dtype=np.int64)

    def per_system(self, own: np.ndarray) -> np.ndarray:
        """Trips per own reference system."""
        return np.bincount(own, minlength=self.model["levels"]).astype(float)

    def counts(self, trips: TripSet, selected: np.ndarray, own: np.ndarray | None = None) -> Counts:
        return DPT(1.0, **self.model).true_counts(trips, selected, own)  # true counts: no epsilon, no noise

    def empty(self) -> Counts:
        none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        levels = (f"level {j}" for j in range(1, self.model["order"] + 2))
        return {name: none for name in ("start cells", *levels)}


def _kernels(
    model: DPT, params: dict[str, Any], region: Region, gap_s: float, speed: float, has_trip: bool
) -> _Kernels:
    limits = TripLimits(
        region, max_trips=params["max_trips"], max_fixes=params["max_fixes"], gap_s=gap_s, max_speed_mps=speed
    )
    shape = {k: getattr(model, k) for k in ("max_trips", "max_fixes", "box", "finest", "levels", "order")}
    return _Kernels(limits, has_trip, shape)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class TrajectoryTable:
    """Fixes in a DuckDB relation (``source``: a table name, or ``read_parquet('...')``) with the columns
    ``person``, ``time`` (TIMESTAMPTZ, or text/timestamps read in ``tz``), ``lat``, ``lon`` and optionally
    ``trip``; the public region, time gap and speed limit. ``scans`` counts the passes run."""

    con: Any
    source: str
    columns: dict[str, str | None]
    region: Region
    gap_s: float = 1200.0
    max_speed_mps: float = 70.0
    tz: str = "UTC"
    batch_rows: int = BATCH_ROWS
    block_rows: int = BLOCK_ROWS
    cache_bytes: int = CACHE_BYTES
    scans: int = field(default=0, init=False)

    def _query(self, stored: bool = False) -> str:
        """The fixes projected and converted, without missing values: ordered by person, trip and time, or
        (``stored``) in the table's stored order."""
        q = {k: (None if v is None else _quote(v)) for k, v in self.columns.items()}
        trip = "" if q.get("trip") is None else f"CAST({q['trip']} AS VARCHAR) AS t, "
        return (
            f"SELECT CAST({q['person']} AS VARCHAR) AS p, {trip}"
            f"epoch_us(CAST({q['time']} AS TIMESTAMPTZ)) AS us, "
            f"CAST({q['lat']} AS DOUBLE) AS lat, CAST({q['lon']} AS DOUBLE) AS lon FROM {self.source} "
            f"WHERE {q['person']} IS NOT NULL AND {q['time']} IS NOT NULL AND {q['lat']} IS NOT NULL "
            f"AND {q['lon']} IS NOT NULL{'' if stored else ' ORDER BY p, ' + ('t, ' if trip else '') + 'us'}"
        )

    def _blocks(self, stored: bool = False) -> Iterator[Block]:
        """One scan's blocks (:func:`fix_blocks`): sorted by the engine, or (``stored``) in the stored
        order, checked (:class:`OutOfOrder`)."""
        self.scans += 1
        self.con.execute(f"SET TimeZone = '{self.tz}'")
        reader = self.con.sql(self._query(stored)).to_arrow_reader(self.batch_rows)
        try:
            yield from fix_blocks(reader, self.columns.get("trip") is not None, self.block_rows, check=stored)
        finally:
            reader.close()  # a pass left early frees the connection for the next query

    def _again(self, stored: bool) -> Iterator[Block]:
        """The blocks of pass 2, in pass 1's order."""
        try:
            yield from self._blocks(stored)
        except OutOfOrder:
            raise ParameterError(CHANGED) from None

    def fit_model(
        self, model: DPT, params: dict[str, Any], random_state: Sampler
    ) -> tuple[TripLimits, dict[str, int]]:
        """Fit ``model`` on the table's trips under the limits of ``params``: one or two scans, or one more
        when the table is not stored in order. Pass 1 first reads the rows in their stored order, checked as
        they stream: a table stored by person, trip and time (as GPS logs often are) needs no sort. At the
        first row out of that order it stops, puts the sampler back where it was (nothing it drew is used)
        and reads the rows sorted by the engine (ORDER BY)."""
        reuse_heap()
        state = random_state.rng.bit_generator.state
        try:
            return self._fit(model, params, random_state, stored=True)
        except OutOfOrder:
            random_state.rng.bit_generator.state = state
            return self._fit(model, params, random_state, stored=False)

    def _fit(
        self, model: DPT, params: dict[str, Any], random_state: Sampler, stored: bool
    ) -> tuple[TripLimits, dict[str, int]]:
        """:meth:`fit_model` with the rows in one order. Steps that draw nothing (finding the trips,
        counting) run on threads (the machine's cores, at most 4), the cap's draws in the blocks' order."""
        has_trip = self.columns.get("trip") is not None
        k = _kernels(model, params, self.region, self.gap_s, self.max_speed_mps, has_trip)
        recorder = _Recorder(random_state.rng)
        per_block: list[list[np.ndarray]] = []
        true_rs = np.zeros(model.levels)
        counts: dict[str, int] = {}
        kept: list[TripSet] | None = []  # pass 1's prepared trips while they fit ``cache_bytes``
        owns: list[Future[np.ndarray]] = []  # their own systems
        held = 0
        with ThreadPoolExecutor(_THREADS) as pool:
            for found in _in_order(pool, k.find, self._blocks(stored)):
                start = len(recorder.draws)
                out = k.cap(found, recorder)
                per_block.append(recorder.draws[start:])
                owns.append(pool.submit(k.own, out.trips))
                if kept is not None:
                    held += out.trips.x.nbytes * 3 + out.trips.offsets.nbytes * 2
                    if held <= self.cache_bytes:
                        kept.append(out.trips)
                    else:
                        kept = None
                counts = _add_counts(counts, out.counts)
            own = [f.result() for f in owns]
            for levels in own:
                true_rs += k.per_system(levels)

            def counts_of(selected: np.ndarray) -> Counts:
                if kept is not None:
                    cached = zip(kept, own, strict=True)
                    parts = _in_order(pool, lambda t: k.counts(t[0], selected, t[1]), cached)
                else:
                    found = _in_order(pool, k.find, self._again(stored))
                    trips = (k.cap(f, _Replay(d)).trips for f, d in zip(found, per_block, strict=True))
                    parts = _in_order(pool, lambda t: k.counts(t, selected), trips)
                total = merge_counts(parts)
                return k.empty() if total is None else total

            model.fit_counts(true_rs, counts_of)
        return k.limits, counts


def _in_order(pool: ThreadPoolExecutor, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
    """``fn`` of each item, run on ``pool`` (one item per thread in flight ahead), in the items' order."""
    flight: deque[Future[Any]] = deque()
    for item in items:
        flight.append(pool.submit(fn, item))
        if len(flight) > _THREADS:
            yield flight.popleft().result()
    while flight:
        yield flight.popleft().result()


def _spark_pass(job: Callable[[int, Iterator[Block]], Any], has_trip: bool, block_rows: int) -> Any:
    """The function ``mapInArrow`` runs on an executor: ``job(partition id, blocks of whole persons)``,
    one row (partition id, pickled partial) out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        reuse_heap()
        pid = TaskContext.get().partitionId()
        part = job(pid, fix_blocks(batches, has_trip, block_rows))
        yield pa.RecordBatch.from_pydict({"part": [pid], "value": [pickle.dumps(part)]})

    return run


class _KeyCount:
    """Spark's pass 1 job: the keys the cap asks for in a partition."""

    def __init__(self, k: _Kernels) -> None:
        self.k = k

    def __call__(self, pid: int, blocks: Iterator[Block]) -> int:
        tally = _Tally()
        for b in blocks:
            self.k.prepare(b, tally)
        return tally.n


class _OwnSystems:
    """Spark's pass 2 job: trips per own system and the curator-only counts, with the partition's keys."""

    def __init__(self, k: _Kernels, keys: dict[int, np.ndarray]) -> None:
        self.k, self.keys = k, keys

    def __call__(self, pid: int, blocks: Iterator[Block]) -> tuple[np.ndarray, dict[str, int]]:
        replay = _Replay([self.keys.get(pid, np.zeros(0))])
        rs, counts = np.zeros(self.k.hier.levels), {}
        for b in blocks:
            out = self.k.prepare(b, replay)
            rs += self.k.per_system(self.k.own(out.trips))
            counts = _add_counts(counts, out.counts)
        replay.done()
        return rs, counts


class _GramCounts:
    """Spark's pass 3 job: the counts after the selection, with the partition's keys."""

    def __init__(self, k: _Kernels, keys: dict[int, np.ndarray], selected: np.ndarray) -> None:
        self.k, self.keys, self.selected = k, keys, selected

    def __call__(self, pid: int, blocks: Iterator[Block]) -> Counts | None:
        replay = _Replay([self.keys.get(pid, np.zeros(0))])
        total = merge_counts([self.k.counts(self.k.prepare(b, replay).trips, self.selected) for b in blocks])
        replay.done()
        return total


@dataclass
class SparkTrajectories:
    """Fixes in a Spark DataFrame ``frame`` with the columns named by ``columns`` (``person``, ``time``:
    a timestamp, or text read in ``tz``; ``lat``, ``lon``, optionally ``trip``); the public region, time
    gap and speed limit. Each :meth:`fit_model` caches the rows in person ranges (Spark's shuffle
    partitions) for its three passes (``scans`` counts them) and releases the cache."""

    frame: Any
    columns: dict[str, str | None]
    region: Region
    gap_s: float = 1200.0
    max_speed_mps: float = 70.0
    tz: str = "UTC"
    block_rows: int = BLOCK_ROWS
    scans: int = field(default=0, init=False)

    def _ordered(self) -> Any:
        """The fixes projected, range-partitioned by person and sorted within partitions; times read in
        ``tz`` (bound when the frame is analysed, so the session's zone is restored at once)."""
        from pyspark.sql import functions as F

        c = {k: v if v is None else F.col("`" + v.replace("`", "``") + "`") for k, v in self.columns.items()}
        session = self.frame.sparkSession
        zone = session.conf.get("spark.sql.session.timeZone")
        session.conf.set("spark.sql.session.timeZone", self.tz)
        try:
            cols = [c["person"].cast("string").alias("p")]
            if c.get("trip") is not None:
                cols.append(c["trip"].cast("string").alias("t"))
            cols += [
                F.unix_micros(c["time"].cast("timestamp")).alias("us"),
                c["lat"].cast("double").alias("lat"),
                c["lon"].cast("double").alias("lon"),
            ]
            present = c["person"].isNotNull() & c["time"].isNotNull() & c["lat"].isNotNull()
            rows = self.frame.where(present & c["lon"].isNotNull()).select(*cols)
            order = ["p", *(["t"] if c.get("trip") is not None else []), "us"]
            return rows.repartitionByRange("p").sortWithinPartitions(*order)
        finally:
            session.conf.set("spark.sql.session.timeZone", zone)

    def _run(self, frame: Any, job: Any) -> list[Any]:
        """One pass: ``job`` on every partition; the partials in partition order."""
        from pyspark import cloudpickle

        import dpcore

        self.scans += 1
        cloudpickle.register_pickle_by_value(dpcore)
        try:
            run = _spark_pass(job, self.columns.get("trip") is not None, self.block_rows)
            rows = frame.mapInArrow(run, "part long, value binary").collect()
        finally:
            cloudpickle.unregister_pickle_by_value(dpcore)
        return [(r["part"], pickle.loads(r["value"])) for r in sorted(rows, key=lambda r: r["part"])]

    def fit_model(
        self, model: DPT, params: dict[str, Any], random_state: Sampler
    ) -> tuple[TripLimits, dict[str, int]]:
        """Fit ``model`` on the table's trips under the limits of ``params``: three passes."""
        has_trip = self.columns.get("trip") is not None
        k = _kernels(model, params, self.region, self.gap_s, self.max_speed_mps, has_trip)
        frame = self._ordered().cache()
        try:
            keys = {pid: random_state.rng.random(n) for pid, n in self._run(frame, _KeyCount(k)) if n}
            true_rs, counts = np.zeros(model.levels), {}
            for _, (rs, part) in self._run(frame, _OwnSystems(k, keys)):
                true_rs += rs
                counts = _add_counts(counts, part)

            def counts_of(selected: np.ndarray) -> Counts:
                total = merge_counts(part for _, part in self._run(frame, _GramCounts(k, keys, selected)))
                return k.empty() if total is None else total

            model.fit_counts(true_rs, counts_of)
        finally:
            frame.unpersist()
        return k.limits, counts
