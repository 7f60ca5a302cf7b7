"""Trips from a table of fixes, under public limits: what every trajectory release reads.

Each step is a function of one person's fixes alone (and of public limits the curator enters, never of the
data), so a table with one person's fixes added or removed gives trips that differ by that person's
trips only, and the limits bound them: at most ``max_trips`` trips of at most ``max_fixes`` fixes.

1. Fixes outside the public region are dropped.
2. Trips: by the trip column, else a new trip starts where a person's consecutive fixes are more than
   ``gap_s`` seconds apart.
3. Speed filter: a fix reached from the previous fix of its trip faster than ``max_speed_mps`` (or at
   the same instant from elsewhere) is GPS noise and is dropped (one pass); trips left with fewer than two
   fixes are dropped.
4. At most ``max_trips`` trips per person: a person with more keeps a uniformly random ``max_trips`` of
   them, drawn with the release's sampler independently of the values (the person's trips ranked by start
   time take iid uniform keys in turn, the smallest kept; persons over the cap in the order of their id as
   text, as :func:`dpcore.location.contribution.cap_per_user` does for rows, so an engine streaming the
   persons in that order draws the same keys: :mod:`dpcore.trajectory.outofcore`).
5. Each trip is cut after its first ``max_fixes`` fixes.

Positions are mapped to metres on the region's azimuthal equidistant plane (centred on the region's
centre, a public point), where the mechanisms and metrics work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpcore.errors import DataError, ParameterError
from dpcore.location.contribution import draw_kept_ranks
from dpcore.location.geometry import FloatArray, Region, validate_latlon
from dpcore.mechanisms import Sampler

__all__ = [
    "TripLimits",
    "TripSet",
    "cap_trips",
    "find_trips",
    "parse_times",
    "person_codes",
    "plane_box",
    "prepare_block",
    "prepare_trips",
]


@dataclass(frozen=True)
class TripLimits:
    """The public limits of a trajectory release (entered by the curator, never read from the data)."""

    region: Region
    max_trips: int = 2
    max_fixes: int = 60
    gap_s: float = 1200.0
    max_speed_mps: float = 70.0

    def __post_init__(self) -> None:
        if not isinstance(self.region, Region):
            raise ParameterError("trajectory limits need a public region: region=Region(lat_min, ...).")
        for name, low, high in (("max_trips", 1, 1000), ("max_fixes", 2, 10_000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not low <= v <= high:
                raise ParameterError(
                    f"{name} must be a whole number in [{low}, {high}] that you know holds for every "
                    f"person (never read from the data); got {v!r}."
                )
            object.__setattr__(self, name, int(v))
        for name in ("gap_s", "max_speed_mps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
                raise ParameterError(f"{name} must be a positive number; got {v!r}.")
            object.__setattr__(self, name, float(v))

    @property
    def scope(self) -> str:
        """What a release under these limits protects, in words."""
        m, n = self.max_trips, self.max_fixes
        return f"at most {m} trip{'s' * (m != 1)} of at most {n} fixes per person"


@dataclass(frozen=True)
class TripSet:
    """Trips as polylines in metres: trip i is ``x[offsets[i]:offsets[i + 1]]`` (and ``y``); ``person``
    holds each trip's person code (or None for synthetic trips)."""

    x: FloatArray
    y: FloatArray
    offsets: np.ndarray
    person: np.ndarray | None = None

    @property
    def n_trips(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_fixes(self) -> int:
        return int(self.x.size)

    @property
    def lengths(self) -> np.ndarray:
        """Fixes per trip."""
        return np.diff(self.offsets)

    @property
    def trip_of(self) -> np.ndarray:
        """Trip index of every fix."""
        return np.repeat(np.arange(self.n_trips), self.lengths)

    def take(self, trips: np.ndarray) -> TripSet:
        """The trips ``trips`` (indices, in that order)."""
        trips = np.asarray(trips, dtype=np.int64)
        lens = self.lengths[trips]
        starts = np.repeat(self.offsets[trips], lens)
        within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        idx = starts + within
        person = None if self.person is None else self.person[trips]
        return TripSet(self.x[idx], self.y[idx], np.r_[0, np.cumsum(lens)].astype(np.int64), person)

    def to_latlon(self, region: Region) -> tuple[FloatArray, FloatArray]:
        """Latitude and longitude of every fix (projected back in chunks of 64K fixes: no large
        temporaries, the same values)."""
        proj, n = region.projection(), 1 << 16
        parts = [proj.inverse(self.x[i : i + n], self.y[i : i + n]) for i in range(0, self.n_fixes, n)]
        if len(parts) <= 1:
            return parts[0] if parts else proj.inverse(self.x, self.y)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def plane_box(region: Region) -> tuple[float, float, float]:
    """(x0, y0, side): the square in plane metres that covers the region (public: from its edges)."""
    bx, by = region.projection().forward(*region.boundary(200))
    side = float(max(bx.max() - bx.min(), by.max() - by.min()))
    return float(bx.min()), float(by.min()), side * (1 + 1e-9)


@dataclass(frozen=True)
class Prepared:
    """Prepared trips and curator-only counts of what each step removed (data-dependent diagnostics)."""

    trips: TripSet
    counts: dict[str, int]


def parse_times(time: ArrayLike, tz: str = "UTC") -> pd.Series:
    """Timestamps as UTC: values with a zone or offset are converted, naive ones read in ``tz`` (an IANA
    name, e.g. "Europe/Paris"); unreadable values become NaT."""
    raw = time if isinstance(time, pd.Series) else pd.Series(np.asarray(time))
    raw = raw.reset_index(drop=True)
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ParameterError(
            f"Unknown time zone {tz!r}; give an IANA name such as UTC or Europe/Paris."
        ) from None
    if pd.api.types.is_numeric_dtype(raw.dtype) or pd.api.types.is_bool_dtype(raw.dtype):
        raise DataError(
            "the time column holds numbers, not timestamps; choose the column of dates and times."
        )
    try:
        return _utc(raw, zone)
    except (ValueError, OverflowError, TypeError):  # incl. pandas' OutOfBoundsDatetime
        raise DataError(
            "the time column holds values that are not timestamps (e.g. 2026-03-02T08:00:00Z); choose the "
            "column of dates and times."
        ) from None


def _utc(raw: pd.Series, zone: ZoneInfo) -> pd.Series:
    if isinstance(raw.dtype, pd.DatetimeTZDtype):
        return raw.dt.tz_convert("UTC")
    if pd.api.types.is_datetime64_dtype(raw.dtype):
        return raw.dt.tz_localize(zone, ambiguous="NaT", nonexistent="NaT").dt.tz_convert("UTC")
    text = raw.astype(str)
    aware = text.str.contains(r"(?:Z|[+-]\d\d:?\d\d)$", regex=True)
    out = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns, UTC]")
    if aware.any():
        out[aware] = pd.to_datetime(text[aware], utc=True, errors="coerce", format="ISO8601")
    if (~aware).any():
        naive = pd.to_datetime(text[~aware], errors="coerce", format="ISO8601")
        out[~aware] = naive.dt.tz_localize(zone, ambiguous="NaT", nonexistent="NaT").dt.tz_convert("UTC")
    return out


def _seconds(time: ArrayLike) -> np.ndarray:
    raw = time if isinstance(time, pd.Series) else pd.Series(np.asarray(time))
    t = pd.to_datetime(raw.reset_index(drop=True), utc=True, errors="coerce")
    if t.isna().any():
        raise DataError(
            f"{int(t.isna().sum())} timestamp(s) could not be read; drop those rows or fix the column "
            "(ISO 8601 with a time zone, e.g. 2026-03-02T08:00:00Z)."
        )
    micros = t.dt.tz_localize(None).to_numpy().astype("datetime64[us]").astype(np.int64)
    return micros / 1e6  # seconds since 1970 (UTC), from whole microseconds as an engine reads them


def prepare_trips(
    person: ArrayLike,
    time: ArrayLike,
    lat: ArrayLike,
    lon: ArrayLike,
    limits: TripLimits,
    random_state: Sampler,
    trip: ArrayLike | None = None,
) -> Prepared:
    """The trips a release reads (module docstring); ``random_state`` draws which trips a person keeps."""
    la, lo = validate_latlon(lat, lon, table=True, allow_empty=True)
    n = la.size
    who = np.asarray(person)
    if who.shape != (n,) or pd.isna(pd.Series(who, dtype=object)).any():
        raise DataError("every fix needs a person id (one per row); drop or fill rows without one.")
    sec = _seconds(time) if n else np.zeros(0)
    codes = person_codes(who)
    tcodes = np.zeros(n, dtype=np.int64) if trip is None else person_codes(np.asarray(trip))
    return prepare_block(codes, tcodes, sec, la, lo, limits, random_state, trip is not None)


def person_codes(values: ArrayLike) -> np.ndarray:
    """Canonical codes: the rank of each value's text among the distinct texts (code-point order, as an
    engine sorts VARCHAR), so persons over the cap are met in the same order in memory and in an engine."""
    return np.unique(np.asarray(values).astype(str), return_inverse=True)[1].ravel().astype(np.int64)


def prepare_block(
    codes: np.ndarray,
    tcodes: np.ndarray,
    sec: np.ndarray,
    la: np.ndarray,
    lo: np.ndarray,
    limits: TripLimits,
    random_state: Sampler,
    has_trip: bool,
) -> Prepared:
    """Steps 1-5 on fixes whose persons are all here (``codes``: canonical person codes, ``tcodes``: trip
    codes, ``sec``: UTC seconds): the whole table in memory, or one block of whole persons of a stream in
    canonical order (the cap's draws then follow one another as in memory)."""
    return cap_trips(find_trips(codes, tcodes, sec, la, lo, limits, has_trip), limits, random_state)


@dataclass(frozen=True)
class Candidates:
    """A block's trips after steps 1-3 (fixes ``x``, ``y``, ``c`` person codes, ``s`` seconds, by trip;
    trip i has ``size[i]`` fixes from ``first[i]``; ``valid``: at least two) and the counts so far."""

    x: np.ndarray
    y: np.ndarray
    c: np.ndarray
    s: np.ndarray
    size: np.ndarray
    first: np.ndarray
    counts: dict[str, int]

    @property
    def valid(self) -> np.ndarray:
        return self.size >= 2


def find_trips(
    codes: np.ndarray,
    tcodes: np.ndarray,
    sec: np.ndarray,
    la: np.ndarray,
    lo: np.ndarray,
    limits: TripLimits,
    has_trip: bool,
) -> Candidates:
    """Steps 1-3 (region, trips, speed filter): nothing drawn, so blocks may run in any order or at once."""
    n = la.size
    counts = {"fixes_given": n}
    inside = limits.region.contains(la, lo)
    counts["fixes_outside_region"] = int(n - inside.sum())
    if _ordered(codes, tcodes, sec):  # as an engine streams them: the stable sort would keep them in place
        order: slice | np.ndarray = slice(None) if counts["fixes_outside_region"] == 0 else inside
    else:
        keep = np.flatnonzero(inside)
        order = keep[np.lexsort((sec[keep], tcodes[keep], codes[keep]))]
    x, y = limits.region.projection().forward(la[order], lo[order])
    c, tc, s = codes[order], tcodes[order], sec[order]
    new = np.ones(c.size, dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (tc[1:] != tc[:-1])
    if not has_trip:
        new[1:] |= (s[1:] - s[:-1]) > limits.gap_s
    step = np.r_[0.0, np.hypot(np.diff(x), np.diff(y))]
    dt = np.r_[1.0, np.diff(s)]
    fast = ~new & ((step > limits.max_speed_mps * np.maximum(dt, 0)) | (dt <= 0))
    counts["fixes_too_fast"] = int(fast.sum())
    trip_id = np.cumsum(new) - 1
    ok = ~fast
    x, y, c, s, trip_id = x[ok], y[ok], c[ok], s[ok], trip_id[ok]
    n_trips = int(trip_id.max()) + 1 if trip_id.size else 0
    size = np.bincount(trip_id, minlength=n_trips)
    counts["trips_found"] = int(n_trips)
    counts["trips_too_short"] = int((size < 2).sum())
    return Candidates(x, y, c, s, size, np.cumsum(size) - size, counts)


def cap_trips(found: Candidates, limits: TripLimits, random_state: Sampler) -> Prepared:
    """Steps 4-5 (the per-person cap, drawn with ``random_state``; truncation) on a block's candidates."""
    x, y, size, first, valid = found.x, found.y, found.size, found.first, found.valid
    counts = dict(found.counts)
    t_person = found.c[first]  # a trip's first fix is never dropped as too fast
    f = first[valid]
    chosen = _cap_trips(t_person[valid], x[f], y[f], found.s[f], limits.max_trips, random_state)
    trips = np.flatnonzero(valid)[chosen]
    counts["trips_over_cap"] = int(valid.sum() - trips.size)
    lens = np.minimum(size[trips], limits.max_fixes)
    counts["fixes_truncated"] = int((size[trips] - lens).sum())
    within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    idx = np.repeat(first[trips], lens) + within
    out = TripSet(x[idx], y[idx], np.r_[0, np.cumsum(lens)].astype(np.int64), t_person[trips])
    counts["trips_used"] = out.n_trips
    counts["fixes_used"] = out.n_fixes
    return Prepared(out, counts)


def _ordered(codes: np.ndarray, tcodes: np.ndarray, sec: np.ndarray) -> bool:
    """True if the rows are sorted by (person, trip, time)."""
    dc, dt = np.diff(codes), np.diff(tcodes)
    return bool(np.all((dc > 0) | ((dc == 0) & ((dt > 0) | ((dt == 0) & (np.diff(sec) >= 0))))))


def _cap_trips(
    person: np.ndarray, x0: np.ndarray, y0: np.ndarray, t0: np.ndarray, m: int, random_state: Sampler
) -> np.ndarray:
    """Sorted indices of the trips kept: all of a person with at most m, else a uniformly random m (persons
    over the cap in the order of their canonical code, each's trips ranked by (start, x, y))."""
    if not person.size:
        return np.arange(0)
    base = int(person.min())
    per = np.bincount(person - base)
    over = np.flatnonzero(per > m)
    if not over.size:
        return np.arange(person.size)
    block_of = np.full(per.size, -1)
    block_of[over] = np.arange(over.size)
    block = block_of[person - base]
    rows = np.flatnonzero(block >= 0)
    rows = rows[np.lexsort((y0[rows], x0[rows], t0[rows], block[rows]))]
    kept_block, rank = draw_kept_ranks(per[over], m, random_state)
    starts = np.cumsum(per[over]) - per[over]
    return np.sort(np.concatenate([np.flatnonzero(block < 0), rows[starts[kept_block] + rank]]))
