"""Per-cluster statistics of rows under nearest-centre assignment: the bincount kernel for any rows and a
grid index (:class:`PlanarCells`) that assigns 2-D rows cell by cell (the location sweep's fast path).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def cluster_statistics(X: NDArray, labels: NDArray, n_clusters: int) -> tuple[NDArray, NDArray]:
    """Per-cluster counts (B, K) and sums (B, K, d) of the rows of X under B labellings (B, n)."""
    b, n = labels.shape
    cells = (labels + n_clusters * np.arange(b)[:, None]).ravel()  # one bin per (labelling, cluster)
    size = b * n_clusters
    counts = np.bincount(cells, minlength=size).astype(float).reshape(b, n_clusters)
    sums = np.stack(
        [
            np.bincount(cells, weights=np.broadcast_to(X[:, j], (b, n)).ravel(), minlength=size)
            for j in range(X.shape[1])
        ],
        axis=-1,
    ).reshape(b, n_clusters, X.shape[1])
    return counts, sums


class PlanarCells:
    """Exact nearest-centre statistics of 2-D rows by grid filtering (the batched diagnostic path).

    Rows are binned once into a G x G grid of boxes; each non-empty cell keeps its count, sum, mean and
    scatter sum ||x - mean||^2. For centre sets (B, K, 2), centre k can be nearest to a row of a cell only
    if its squared distance to the cell's box is <= min_j (squared distance from c_j to the box's farthest
    corner), both sums of per-axis terms computed per grid column and row. A cell with one such centre goes
    to it whole; only the rows of the other cells are compared with all K centres (ties to the lowest
    index). Same labels as :func:`nearest_sets` up to float rounding at exact ties; per-cell sums round
    differently.
    """

    def __init__(self, X: NDArray, grid_size: int = 128) -> None:
        lo, width = X.min(axis=0), np.ptp(X, axis=0)
        width = np.where(width > 0, width, 1.0)
        ij = np.minimum((X - lo) / width * grid_size, grid_size - 1).astype(np.intp)
        cell = ij[:, 0] * grid_size + ij[:, 1]
        order = np.argsort(cell, kind="stable")
        first, self.start, self.count = np.unique(cell[order], return_index=True, return_counts=True)
        self.index = np.stack([first // grid_size, first % grid_size])  # (2, cells): grid column, row
        edges = lo[:, None] + width[:, None] * np.arange(grid_size + 1) / grid_size
        slack = 1e-9 * width[:, None]  # rows binned by rounding may sit an ulp outside their box
        self.edge_lo, self.edge_hi = edges[:, :-1] - slack, edges[:, 1:] + slack
        self.X = X[order]
        self.sums = np.add.reduceat(self.X, self.start, axis=0)
        self.means = self.sums / self.count[:, None]
        dev = self.X - np.repeat(self.means, self.count, axis=0)
        self.scatter = np.add.reduceat(np.einsum("ij,ij->i", dev, dev), self.start)

    def _resolve(self, centres: NDArray) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray]:
        """(run, cell, label) of the cells with one possible centre; (run, row) of the other rows."""
        b, k, d = centres.shape
        d_min = np.zeros((b, k, self.count.size))
        d_max = np.zeros_like(d_min)
        for j in range(d):  # per-axis terms on the G grid lines, gathered to the non-empty cells
            c = centres[:, :, j, None]
            lo, hi = self.edge_lo[j], self.edge_hi[j]
            gap = np.maximum(lo - c, 0.0) + np.maximum(c - hi, 0.0)
            far = np.maximum(np.abs(c - lo), np.abs(c - hi))
            d_min += np.take(gap * gap, self.index[j], axis=2)
            d_max += np.take(far * far, self.index[j], axis=2)
        possible = d_min <= d_max.min(axis=1, keepdims=True) * (1.0 + 1e-9)
        one = np.count_nonzero(possible, axis=1) == 1
        run, cell = np.nonzero(one)
        label = np.argmax(possible[run, :, cell], axis=1)
        o_run, o_cell = np.nonzero(~one)
        reps = self.count[o_cell]
        ends = np.cumsum(reps)
        rows = np.arange(ends[-1] if ends.size else 0) + np.repeat(self.start[o_cell] - ends + reps, reps)
        return run, cell, label, np.repeat(o_run, reps), rows

    def _nearest_rows(self, centres: NDArray, run: NDArray, rows: NDArray) -> tuple[NDArray, NDArray]:
        """Label and squared distance of sorted rows ``rows`` to the centres of their runs ``run``."""
        x = self.X[rows].T
        best = np.full(rows.size, np.inf)
        label = np.zeros(rows.size, dtype=np.intp)
        dist, diff = np.empty(rows.size), np.empty(rows.size)
        for j in range(centres.shape[1]):
            dist[:] = 0.0
            for axis in range(centres.shape[2]):
                np.subtract(x[axis], centres[run, j, axis], out=diff)
                diff *= diff
                dist += diff
            closer = dist < best
            label[closer] = j
            np.minimum(best, dist, out=best)
        return label, best

    def statistics(self, centres: NDArray) -> tuple[NDArray, NDArray]:
        """Per-cluster counts (B, K) and sums (B, K, 2) under nearest-centre assignment."""
        b, k, d = centres.shape
        run, cell, label, o_run, rows = self._resolve(centres)
        o_label, _ = self._nearest_rows(centres, o_run, rows)
        bins = np.r_[run * k + label, o_run * k + o_label]
        weights = np.r_[self.count[cell], np.ones(rows.size)]
        counts = np.bincount(bins, weights=weights, minlength=b * k).reshape(b, k)
        values = np.concatenate([self.sums[cell], self.X[rows]])
        sums = np.stack([np.bincount(bins, weights=values[:, j], minlength=b * k) for j in range(d)], axis=-1)
        return counts, sums.reshape(b, k, d)

    def wcss(self, centres: NDArray) -> NDArray:
        """WCSS sum_i min_k ||x_i - c_k||^2 of centre sets (B, K, 2); cells add scatter + n ||mean - c||^2."""
        run, cell, label, o_run, rows = self._resolve(centres)
        _, o_dist = self._nearest_rows(centres, o_run, rows)
        gap = self.means[cell] - centres[run, label]
        whole = self.scatter[cell] + self.count[cell] * np.einsum("ij,ij->i", gap, gap)
        b = centres.shape[0]
        return np.bincount(run, weights=whole, minlength=b) + np.bincount(o_run, weights=o_dist, minlength=b)
