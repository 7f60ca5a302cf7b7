"""Bounding each person's contribution: a public cap per user, and the sentence that says what is protected.

With a user column, a release protects a person (all of their rows) only if it knows how many rows one
person can have: the curator gives a public maximum m per user (never derived from the data), at most m
rows of each user are kept and the noise is calibrated for a person with m rows. Without a user column
every row is taken to be a different person, and the release protects one location.

Which rows are kept (:func:`cap_per_user`): each user with c > m rows keeps a uniformly random m of them,
drawn with the release's sampler (secure: OS entropy; demo: its seed) and independently of every value.
The users over the cap are put in a canonical order (by their id as text); one block of c iid uniform
keys per such user is drawn from the sampler in that order; the user's rows, ranked by (lat, lon), take
the keys of their block in turn, and the m rows with the smallest keys are kept. A fixed ranking of the
rows composed with iid keys is a uniformly random ranking, so the set kept is a uniform m-subset of the
user's rows whatever their values, independent of every other user: in a neighbouring table (a row
added, removed, replaced or moved by any distance) the kept rows are distributed as the same positions
of the user's rows, which is what group privacy for m rows needs (a cap that ranks rows by a function
of their values alone, with no fresh randomness per row, keeps a far outlier among 100 identical rows
about half the time and among 100 rows each moved by a metre a twentieth of the time). The ranking and the
canonical order need no row order, so an engine (DuckDB, Spark) keeps exactly the rows kept in memory
with the same sampler (:class:`dpcore.outofcore.locations.TableLocations`): it reads the over-cap users'
counts, the kept (user, rank) pairs are drawn in Python by :func:`draw_kept_ranks` and joined back.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dpcore.errors import DataError, ParameterError
from dpcore.mechanisms import Sampler

PER_LOCATION = "per location (each row is one person's location)"


def scope_sentence(has_users: bool, max_per_user: int) -> str:
    """What a release protects: "per user (at most m locations each)" or "per location (...)"."""
    if not has_users:
        return PER_LOCATION
    m = check_max_per_user(max_per_user)
    return f"per user (at most {m} location{'s' if m != 1 else ''} each)"


def check_max_per_user(m: int) -> int:
    """``m`` as an int >= 1, else a ParameterError naming the fix."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ParameterError(
            f"the maximum number of locations per user must be a whole number >= 1 (got {m!r}); enter the "
            "public limit you know holds (e.g. 5), never one read from the data."
        )
    return int(m)


def user_codes(users: ArrayLike, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row's user, user label of each code); DataError for a length mismatch or missing ids."""
    arr = np.asarray(users)
    if arr.shape != (n,):
        raise DataError(f"the user column has {arr.size} values for {n} locations; give one user per row.")
    codes, labels = pd.factorize(arr)
    if (codes < 0).any():
        raise DataError(f"{int((codes < 0).sum())} row(s) have no user id; drop or fill those rows first.")
    return np.asarray(codes), np.asarray(labels)


def canonical_order(users: ArrayLike) -> np.ndarray:
    """Positions of ``users`` sorted by their id as text (stable): the same order for ids in memory and
    ids read back from an engine."""
    return np.argsort(np.array([str(u) for u in np.asarray(users, dtype=object)], dtype=str), kind="stable")


def keep_smallest(codes: np.ndarray, keys: NDArray, m: int) -> np.ndarray:
    """Sorted indices of the rows kept: the m rows of each user (``codes``) with the smallest ``keys``."""
    codes = np.asarray(codes)
    order = np.lexsort((keys, codes))
    grp = codes[order]
    first = np.r_[0, np.flatnonzero(np.diff(grp)) + 1] if grp.size else np.array([], dtype=int)
    rank = np.arange(grp.size) - np.repeat(first, np.diff(np.r_[first, grp.size]))
    return np.sort(order[rank < m])


def draw_kept_ranks(counts: NDArray, m: int, random_state: Sampler) -> tuple[np.ndarray, np.ndarray]:
    """(block, rank) of each row kept for over-cap users with ``counts`` (c > m, in canonical order): a
    block of c iid uniform keys per user drawn in that order, the m smallest kept; rank is the position in
    the block (the row's rank by (lat, lon) within its user)."""
    counts = np.asarray(counts, dtype=np.int64)
    block = np.repeat(np.arange(counts.size), counts)
    pos = keep_smallest(block, random_state.rng.random(block.size), m)
    starts = np.cumsum(counts) - counts
    return block[pos], pos - starts[block[pos]]


def cap_per_user(
    codes: np.ndarray,
    labels: np.ndarray,
    lat: NDArray,
    lon: NDArray,
    max_per_user: int,
    random_state: Sampler,
) -> np.ndarray:
    """Sorted indices of the rows kept: all rows of a user with at most m, else a uniformly random m of
    them drawn with ``random_state`` independently of the values (module docstring)."""
    m = check_max_per_user(max_per_user)
    codes = np.asarray(codes)
    counts = np.bincount(codes, minlength=len(labels))
    over = np.flatnonzero(counts > m)
    if not over.size:
        return np.arange(codes.size)
    over = over[canonical_order(np.asarray(labels)[over])]
    block_of_code = np.full(counts.size, -1)
    block_of_code[over] = np.arange(over.size)
    block = block_of_code[codes]
    rows = np.flatnonzero(block >= 0)
    rows = rows[np.lexsort((lon[rows], lat[rows], block[rows]))]  # by block, then (lat, lon) in the block
    kept_block, rank = draw_kept_ranks(counts[over], m, random_state)
    starts = np.cumsum(counts[over]) - counts[over]
    return np.sort(np.concatenate([np.flatnonzero(block < 0), rows[starts[kept_block] + rank]]))
