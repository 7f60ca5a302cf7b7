"""DPT's counts by passes over a table in DuckDB, for tables above the in-memory row limit.

The engine only reads, orders and numbers: each pass runs one query that gives every fix its canonical
person code (the rank of the person id as text, :func:`dpcore.trajectory.prepare.person_codes`), its trip
code, its UTC time in whole microseconds, latitude and longitude, ordered by person, trip and time, and
streams Arrow batches. :func:`person_blocks` cuts them into blocks of whole persons; every value is
computed by the same numpy functions as in memory, block by block:

* pass 1: :func:`~dpcore.trajectory.prepare.prepare_block` (region, trips, speed filter, the per-person
  cap, truncation) and the trips per own reference system; the cap's uniform keys are drawn from the
  release's sampler block after block, persons in canonical order, hence the same keys as in memory, and
  recorded;
* the noisy selection of reference systems (in memory, from pass 1's counts);
* the start cells and prefix-tree grams of the kept trips counted (:meth:`DPT.true_counts`) and added up:
  from pass 1's prepared trips when they fit ``cache_bytes`` (one scan in all), else by pass 2, which
  prepares the same blocks again with the recorded keys (the same trips kept, nothing drawn).

One or two scans, memory bounded by a few blocks, the cache and the counts (at most the cells x 9^phi
grams of the model):
the same release as in memory with the same demo seed (rows with the same person, trip and time stamp
aside: their order decides which one the speed filter drops).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.trajectory.dpt import DPT, Hierarchy, own_levels
from dpcore.trajectory.prepare import TripLimits, prepare_block

__all__ = ["TrajectoryTable", "merge_counts", "person_blocks"]

Counts = dict[str, tuple[np.ndarray, np.ndarray]]
BATCH_ROWS = 1 << 18
BLOCK_ROWS = 1 << 20  # at least this many rows per block (whole persons)
CACHE_BYTES = 256 * 10**6  # pass 1's prepared trips kept for the counts while they fit (else pass 2)


def person_blocks(batches: Iterable[Any], min_rows: int = BLOCK_ROWS) -> Iterator[np.ndarray]:
    """Arrow batches of (code, tcode, micros, lat, lon) ordered by code, as arrays (5, m) of whole persons
    with at least ``min_rows`` rows (the last one shorter)."""
    held: list[np.ndarray] = []
    count = 0
    for batch in batches:
        arr = np.empty((batch.num_columns, batch.num_rows))
        for j, column in enumerate(batch.columns):
            arr[j] = column.to_numpy(zero_copy_only=False)
        held.append(arr)
        count += arr.shape[1]
        if count < min_rows:
            continue
        joined = np.concatenate(held, axis=1) if len(held) > 1 else held[0]
        cut = int(np.searchsorted(joined[0], joined[0, -1], side="left"))  # the last person waits
        if cut == 0:
            held, count = [joined], joined.shape[1]
            continue
        yield joined[:, :cut]
        held, count = [joined[:, cut:]], joined.shape[1] - cut
    if count:
        yield np.concatenate(held, axis=1) if len(held) > 1 else held[0]


def merge_counts(a: Counts | None, b: Counts) -> Counts:
    """Sums of two sets of (sorted keys, counts) by name."""
    if a is None:
        return b
    out = {}
    for name in b:
        keys = np.concatenate([a[name][0], b[name][0]])
        vals = np.concatenate([a[name][1], b[name][1]])
        uniq, inv = np.unique(keys, return_inverse=True)
        out[name] = (uniq, np.bincount(inv.ravel(), weights=vals, minlength=uniq.size).astype(np.int64))
    return out


class _Recorder:
    """The sampler's generator seen by the cap: draws from it and records them (pass 1)."""

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
    """The recorded draws given back in order (pass 2)."""

    def __init__(self, draws: list[np.ndarray]) -> None:
        self.draws = iter(draws)

    @property
    def rng(self) -> _Replay:
        return self

    def random(self, size: int) -> np.ndarray:
        out = next(self.draws)
        if out.size != size:
            raise ParameterError("The table changed between two passes of the release; run it again.")
        return out


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

    def _query(self) -> str:
        q = {k: (None if v is None else '"' + v.replace('"', '""') + '"') for k, v in self.columns.items()}
        trip = "0" if q.get("trip") is None else f"DENSE_RANK() OVER (ORDER BY CAST({q['trip']} AS VARCHAR))"
        time = f"epoch_us(CAST({q['time']} AS TIMESTAMPTZ))"
        return (
            "SELECT CAST(DENSE_RANK() OVER "
            f"(ORDER BY CAST({q['person']} AS VARCHAR)) - 1 AS DOUBLE) AS code, "
            f"CAST({trip} AS DOUBLE) AS tcode, CAST({time} AS DOUBLE) AS us, "
            f"CAST({q['lat']} AS DOUBLE) AS lat, CAST({q['lon']} AS DOUBLE) AS lon FROM {self.source} "
            f"WHERE {q['person']} IS NOT NULL AND {q['time']} IS NOT NULL AND {q['lat']} IS NOT NULL "
            f"AND {q['lon']} IS NOT NULL ORDER BY code, tcode, us"
        )

    def _blocks(self) -> Iterator[np.ndarray]:
        self.scans += 1
        self.con.execute(f"SET TimeZone = '{self.tz}'")
        reader = self.con.sql(self._query()).to_arrow_reader(self.batch_rows)
        return person_blocks(reader, self.block_rows)

    def fit_model(
        self, model: DPT, params: dict[str, Any], sampler: Sampler
    ) -> tuple[TripLimits, dict[str, int]]:
        """Fit ``model`` on the table's trips under the limits of ``params``: two passes."""
        limits = TripLimits(
            self.region,
            max_trips=params["max_trips"],
            max_fixes=params["max_fixes"],
            gap_s=self.gap_s,
            max_speed_mps=self.max_speed_mps,
        )
        hier = Hierarchy(*model.box, finest=model.finest, levels=model.levels)
        has_trip = self.columns.get("trip") is not None
        recorder = _Recorder(sampler.rng)
        per_block: list[list[np.ndarray]] = []
        true_rs = np.zeros(hier.levels)
        counts: dict[str, int] = {}

        def prepare(b: np.ndarray, draws: Any) -> Any:
            codes, tcodes = b[0].astype(np.int64), b[1].astype(np.int64)
            return prepare_block(codes, tcodes, b[2] / 1e6, b[3], b[4], limits, draws, has_trip)

        kept: list[Any] | None = []  # pass 1's prepared trips while they fit ``cache_bytes``
        held = 0
        for b in self._blocks():
            start = len(recorder.draws)
            out = prepare(b, recorder)
            per_block.append(recorder.draws[start:])
            if kept is not None:
                held += out.trips.x.nbytes * 3 + out.trips.offsets.nbytes * 2
                if held <= self.cache_bytes:
                    kept.append(out.trips)
                else:
                    kept = None
            if out.trips.n_trips:
                true_rs += np.bincount(own_levels(out.trips, hier), minlength=hier.levels)
            for k, v in out.counts.items():
                counts[k] = counts.get(k, 0) + v

        def counts_of(selected: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
            total: Counts | None = None
            if kept is not None:
                blocks = iter(kept)
            else:
                blocks = (
                    prepare(b, _Replay(d)).trips for b, d in zip(self._blocks(), per_block, strict=True)
                )
            for trips in blocks:
                total = merge_counts(total, model.true_counts(trips, selected))
            if total is None:
                empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
                return {
                    name: empty
                    for name in ("start cells", *(f"level {j}" for j in range(1, model.order + 2)))
                }
            return total

        model.fit_counts(true_rs, counts_of)
        return limits, counts
