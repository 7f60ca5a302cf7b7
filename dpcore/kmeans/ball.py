"""L2-ball geometry for the Gaussian k-means mechanisms, and their per-pass kernels on a block of rows.

The public ball has centre ``c`` = the midpoint of the public bounds and radius ``R`` (given by the
curator, or half the diagonal of the bounds box, which contains every row inside the bounds). Rows are
mapped to y = (x - c) min(1, R / ||x - c||): inside the ball of radius R about 0, so adding or removing
one row moves a sum of rows by at most R in L2 (replacing one, by at most 2R), whatever the dimension.

Every kernel takes one block of rows and returns counts and sums that add up over blocks (a table read in
batches gives the same statistics as one array): :func:`nearest_statistics` for a Lloyd round,
:func:`prefix_codes` with :func:`code_statistics` for the levels and leaves of the LSH prefix tree.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

from dpcore.errors import ParameterError

__all__ = [
    "MAX_DEPTH",
    "ball_geometry",
    "clip_to_ball",
    "code_statistics",
    "group_sums",
    "nearest_statistics",
    "prefix_codes",
    "project_to_ball",
    "uncentre",
]

MAX_DEPTH = 30  # tree levels; codes carry a leading 1 bit, so level l needs l + 1 bits of an int64


def ball_geometry(bounds: tuple[NDArray, NDArray], radius: float) -> tuple[NDArray, float]:
    """(centre, R): the public box's midpoint and ``radius``, or for 0 the box's half-diagonal."""
    lower, upper = (np.asarray(b, dtype=float) for b in bounds)
    if not (math.isfinite(radius) and radius >= 0):
        raise ParameterError(
            f"the public radius must be a finite number >= 0 (0 = the bounds box's); got {radius!r}."
        )
    r = float(radius) or float(np.linalg.norm((upper - lower) / 2))
    return (lower + upper) / 2, r


def clip_to_ball(block: NDArray, centre: NDArray, radius: float) -> NDArray:
    """y = (x - c) min(1, R / ||x - c||) per row: the rows centred on ``centre`` and inside radius R."""
    y = np.asarray(block, dtype=float) - centre
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    return y * np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))


def project_to_ball(points: NDArray, radius: float) -> NDArray:
    """Centred points pulled radially into the ball of radius R (post-processing of released values)."""
    norms = np.linalg.norm(points, axis=-1, keepdims=True)
    return points * np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))


def uncentre(points: NDArray, centre: NDArray, bounds: tuple[NDArray, NDArray]) -> NDArray:
    """Centred points back to the feature space, inside the public box (clipping towards the box's
    centre only shortens a point inside the ball, so it stays in both)."""
    return np.clip(points + centre, bounds[0], bounds[1])


def nearest_statistics(y: NDArray, centres: NDArray) -> tuple[NDArray, NDArray]:
    """Counts (K,) and sums (K, d) of the rows ``y`` of one block by nearest centre (ties: lowest index).

    One Lloyd round's statistics; they add up over blocks. Adding or removing a row of the ball changes
    the counts by one unit vector and the sums by one row (L2 <= R)."""
    k = centres.shape[0]
    score = (centres * centres).sum(axis=1) - 2.0 * (y @ centres.T)  # ||y - c||^2 - ||y||^2
    label = np.argmin(score, axis=1)
    return group_sums(y, label, k)


def group_sums(y: NDArray, group: NDArray, n_groups: int) -> tuple[NDArray, NDArray]:
    """Counts (G,) and sums (G, d) of the rows ``y`` by ``group`` index (one sparse product)."""
    m = group.size
    onehot = sparse.csr_matrix((np.ones(m), (group, np.arange(m))), shape=(n_groups, m))
    return np.bincount(group, minlength=n_groups).astype(float), np.asarray(onehot @ y)


def prefix_codes(y: NDArray, normals: NDArray, offsets: NDArray) -> NDArray:
    """(m, L + 1) int64 hash-prefix codes: code_0 = 1, code_l = 2 code_(l-1) + [<y, v_l> < b_l].

    Bit l is the side of the public random hyperplane {<y, v_l> = b_l} (SimHash with offsets); each row
    has exactly one code per level, so it belongs to exactly one node of every level of the tree."""
    bits = (y @ normals.T < offsets).astype(np.int64)  # (m, L)
    codes = np.ones((y.shape[0], bits.shape[1] + 1), dtype=np.int64)
    for level in range(bits.shape[1]):
        codes[:, level + 1] = 2 * codes[:, level] + bits[:, level]
    return codes


def code_statistics(
    y: NDArray, codes: NDArray, nodes: NDArray, with_sums: bool = False
) -> tuple[NDArray, NDArray | None]:
    """Counts (N,) and, with ``with_sums``, sums (N, d) of the rows whose code is each of ``nodes``.

    ``codes`` (m,) are the rows' codes at the nodes' level and ``nodes`` a sorted array of distinct codes
    (rows of other codes are ignored). A row is in at most one node, so adding or removing it changes the
    counts by at most one unit vector and the sums by at most one row."""
    if nodes.size == 0:
        return np.zeros(0), (np.zeros((0, y.shape[1])) if with_sums else None)
    slot = np.minimum(np.searchsorted(nodes, codes), nodes.size - 1)
    hit = nodes[slot] == codes
    if not with_sums:
        return np.bincount(slot[hit], minlength=nodes.size).astype(float), None
    return group_sums(y[hit], slot[hit], nodes.size)
