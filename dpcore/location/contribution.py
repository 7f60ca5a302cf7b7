"""Bounding each person's contribution: a public cap per user, and the sentence that says what is protected.

With a user column, a release protects a person (all of their rows) only if it knows how many rows one
person can have: the curator gives a public maximum m per user (never derived from the data), at most m
rows of each user are kept and the noise is calibrated for a person with m rows. The rows kept are those
with the m smallest keys frac(lat s1 + lon s2), s1 and s2 drawn in [2^16, 2^17) from the release's sampler:
a pseudo-random choice that depends on the user's own rows only (so the cap is stable: adding or removing
one person changes no one else's rows) and that an engine (DuckDB, Spark) computes bit for bit, so a
release read from a large table keeps the same rows as one in memory. Without a user column every row
is taken to be a different person, and the release protects one location.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dpcore.errors import DataError, ParameterError
from dpcore.mechanisms import Sampler

PER_LOCATION = "per location (each row is one person's location)"
KEY_SCALE = 65536.0  # 2^16: the key multipliers s1, s2 lie in [2^16, 2^17)


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


def key_salt(sampler: Sampler) -> NDArray:
    """The two multipliers (s1, s2) of :func:`content_keys`, uniform in [2^16, 2^17), from ``sampler``."""
    return KEY_SCALE * (1.0 + sampler.rng.random(2))


def content_keys(lat: NDArray, lon: NDArray, salt: NDArray) -> NDArray:
    """frac(x), x = lat s1 + lon s2 (x - floor(x), in this order, as an engine computes it)."""
    x = lat * float(salt[0]) + lon * float(salt[1])
    return x - np.floor(x)


def keep_smallest(codes: np.ndarray, keys: NDArray, m: int) -> np.ndarray:
    """Sorted indices of the rows kept: the m rows of each user (``codes``) with the smallest ``keys``."""
    codes = np.asarray(codes)
    order = np.lexsort((keys, codes))
    grp = codes[order]
    first = np.r_[0, np.flatnonzero(np.diff(grp)) + 1] if grp.size else np.array([], dtype=int)
    rank = np.arange(grp.size) - np.repeat(first, np.diff(np.r_[first, grp.size]))
    return np.sort(order[rank < m])


def cap_per_user(codes: np.ndarray, max_per_user: int, sampler: Sampler) -> np.ndarray:
    """Sorted indices of the rows kept: for each user, min(count, m) of its rows chosen uniformly at random
    (a random key per row, then the m smallest keys of each user, whatever the row order)."""
    m = check_max_per_user(max_per_user)
    codes = np.asarray(codes)
    return keep_smallest(codes, sampler.rng.random(codes.size), m)
