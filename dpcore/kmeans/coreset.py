"""Gaussian k-means in the L2 ball: a private LSH-tree coreset, k-means++ on it, and Gaussian DP-Lloyd.

Two estimators share the ball geometry and kernels of :mod:`dpcore.kmeans.ball` and the exact Gaussian
accounting of :mod:`dpcore.kmeans.gaussian_accounting`; both are (eps, delta)-DP for one row added or
removed (or, with ``neighbours="bounded"``, replaced), with a public ball (centre the bounds' midpoint):

- :class:`LSHCoresetKMeans` releases one private summary, the private coreset of an LSH prefix tree
  (Chang, Ghazi, Kumar & Manurangsi 2021): public random hyperplanes split the ball level by level; each
  level releases Gaussian counts of the nodes whose parent was large enough to branch (a row is in one
  node per level: L2 sensitivity 1, bounded sqrt 2); the leaves release Gaussian sums of their rows
  (sensitivity R, bounded 2R). The leaves' noisy means, weighted by their noisy counts, are clustered by
  weighted k-means++ (Arthur & Vassilvitskii 2007): post-processing, no further access to the rows.
- :class:`GaussianLloydKMeans` starts from that clustering computed with part of the budget (so its
  initial centres lie inside the data's ball) and runs T Lloyd rounds, each releasing Gaussian counts
  (sensitivity 1) and sums (R) per cluster: DP-Lloyd in L2 (Blum, Dwork, McSherry & Nissim 2005; Su et al.
  2016) with Gaussian noise.

Per-query noise follows from one composed budget (no eps added per round): shares of mu^2 for tree counts,
leaf sums, round counts and round sums (counts : sums = 1 : sqrt(d) within a round, which minimises
d / t_s^2 + 1 / t_c^2, the centre's noise variance in units of (R / n_k)^2).
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from dpcore.errors import ParameterError
from dpcore.kmeans.ball import (
    MAX_DEPTH,
    ball_geometry,
    clip_to_ball,
    code_statistics,
    nearest_statistics,
    prefix_codes,
    project_to_ball,
    uncentre,
)
from dpcore.kmeans.gaussian_accounting import GaussianSpend, gaussian_spend
from dpcore.kmeans.lloyd import check_bounds
from dpcore.mechanisms import Sampler, check_random_state

__all__ = [
    "COUNT_SHARE",
    "INIT_SHARE",
    "FeedRows",
    "GaussianLloydKMeans",
    "InMemoryRows",
    "LSHCoresetKMeans",
    "RowStatistics",
    "TreeResult",
    "gaussian_lloyd_rounds",
    "private_tree",
    "sensitivities",
    "weighted_kmeans_pp",
]

Neighbours = Literal["unbounded", "bounded"]
COUNT_SHARE = 0.2  # of the tree's mu^2, spent on its level counts (the rest on the leaf sums)
INIT_SHARE = 0.5  # of Gaussian DP-Lloyd's mu^2, spent on the private initialisation (the tree)
LOW_NOISE = 10.0  # a node of m >= LOW_NOISE sqrt(d) sigma_s / R rows has a mean within ~R / 10 of noise
KMEANS_PP_STARTS = 5


class RowStatistics(Protocol):
    """The passes over the (clipped, centred) rows the mechanisms need; each adds up over blocks."""

    def level_counts(self, level: int, nodes: NDArray) -> NDArray: ...

    def leaf_statistics(self, level: int, nodes: NDArray) -> tuple[NDArray, NDArray]: ...

    def nearest(self, centres: NDArray) -> tuple[NDArray, NDArray]: ...


class InMemoryRows:
    """:class:`RowStatistics` of rows already in memory: ``y`` clipped and centred, codes computed once."""

    def __init__(self, y: NDArray, normals: NDArray, offsets: NDArray) -> None:
        self.y = y
        self.codes = prefix_codes(y, normals, offsets)

    def level_counts(self, level: int, nodes: NDArray) -> NDArray:
        return code_statistics(self.y, self.codes[:, level], nodes)[0]

    def leaf_statistics(self, level: int, nodes: NDArray) -> tuple[NDArray, NDArray]:
        counts, sums = code_statistics(self.y, self.codes[:, level], nodes, with_sums=True)
        return counts, sums  # type: ignore[return-value]

    def nearest(self, centres: NDArray) -> tuple[NDArray, NDArray]:
        return nearest_statistics(self.y, centres)


class _CodePass:
    """Kernel of one tree pass on a block of raw rows: prepared, clipped to the ball, hashed; counts (and
    sums) of the rows whose code at ``level`` is one of ``nodes``. Picklable (it travels to executors)."""

    def __init__(self, rows: FeedRows, level: int, nodes: NDArray, with_sums: bool) -> None:
        self.prepare, self.centre, self.radius = rows.prepare, rows.centre, rows.radius
        self.normals, self.offsets = rows.normals[:level], rows.offsets[:level]
        self.level, self.nodes, self.with_sums = level, nodes, with_sums

    def __call__(self, raw: NDArray) -> tuple[NDArray, ...]:
        y = clip_to_ball(self.prepare(raw), self.centre, self.radius)
        codes = prefix_codes(y, self.normals, self.offsets)[:, self.level]
        counts, sums = code_statistics(y, codes, self.nodes, self.with_sums)
        return (counts,) if sums is None else (counts, sums)


class _NearestPass:
    """Kernel of one Gaussian Lloyd round on a block of raw rows: counts and sums by nearest centre."""

    def __init__(self, rows: FeedRows, centres: NDArray) -> None:
        self.prepare, self.centre, self.radius, self.centres = rows.prepare, rows.centre, rows.radius, centres

    def __call__(self, raw: NDArray) -> tuple[NDArray, ...]:
        return nearest_statistics(clip_to_ball(self.prepare(raw), self.centre, self.radius), self.centres)


class FeedRows:
    """:class:`RowStatistics` by passes over a feed of raw row blocks (``dpcore.outofcore.kernel.Feed``:
    in memory, streamed from an engine, or on Spark executors): ``prepare`` maps a raw block to the
    feature space; each statistic is the sum of the blocks' partials."""

    def __init__(
        self, feed: Any, prepare: Any, centre: NDArray, radius: float, normals: NDArray, offsets: NDArray
    ) -> None:
        self.feed, self.prepare, self.centre, self.radius = feed, prepare, centre, radius
        self.normals, self.offsets = normals, offsets

    def _reduce(self, kernel: Any, shapes: tuple[tuple[int, ...], ...]) -> tuple[NDArray, ...]:
        out = self.feed.reduce(kernel)
        return tuple(np.zeros(s) for s in shapes) if out is None else out

    def level_counts(self, level: int, nodes: NDArray) -> NDArray:
        return self._reduce(_CodePass(self, level, nodes, False), ((nodes.size,),))[0]

    def leaf_statistics(self, level: int, nodes: NDArray) -> tuple[NDArray, NDArray]:
        d = self.normals.shape[1]
        counts, sums = self._reduce(_CodePass(self, level, nodes, True), ((nodes.size,), (nodes.size, d)))
        return counts, sums

    def nearest(self, centres: NDArray) -> tuple[NDArray, NDArray]:
        counts, sums = self._reduce(_NearestPass(self, centres), (centres.shape[:1], centres.shape))
        return counts, sums


def sensitivities(neighbours: str, radius: float) -> tuple[float, float]:
    """L2 sensitivities (counts, sums) of per-node statistics when each row is in at most one node:
    (1, R) for one row added or removed; (sqrt 2, 2R) for one row replaced (it may leave one node for
    another: two counts move by 1; or stay and move by ||x - x'|| <= 2R)."""
    if neighbours == "unbounded":
        return 1.0, radius
    if neighbours == "bounded":
        return math.sqrt(2.0), 2.0 * radius
    raise ParameterError(f"neighbours must be 'unbounded' or 'bounded', got {neighbours!r}.")


@dataclass(frozen=True)
class TreeResult:
    """The private coreset (centred points, weights = noisy counts) and the tree's public shape."""

    points: NDArray
    weights: NDArray
    levels: int
    min_node: float


def private_tree(
    rows: RowStatistics,
    n_features: int,
    depth: int,
    noise: Any,
    sigma_count: float,
    sigma_sum: float,
    radius: float,
    n_clusters: int,
) -> TreeResult:
    """The LSH prefix tree's private coreset from noisy statistics only.

    Level 0 releases the noisy row count n~; a node branches if its noisy count is >= 3 m and a child is
    kept if its noisy count is >= m, m = max(1, min(10 sqrt(d) sigma_s / R, n~ / (2K))). Every level
    releases the counts of all children of the branching nodes (zeros included), so which counts are
    released depends only on earlier releases. Leaves (kept nodes without kept children) release noisy
    sums; their means, pulled into the ball, are the coreset's points, weighted by their noisy counts."""
    root = np.array([1], dtype=np.int64)
    n_noisy = float(noise(rows.level_counts(0, root), sigma_count)[0])
    low_noise = LOW_NOISE * math.sqrt(n_features) * sigma_sum / radius
    min_node = max(1.0, min(low_noise, n_noisy / (2 * n_clusters)))
    nodes, counts = root, np.array([max(n_noisy, 1.0)])
    leaves: list[tuple[int, NDArray, NDArray]] = []
    level = 0
    while level < depth:
        branch = counts >= 3 * min_node
        if not branch.any():
            break
        children = np.sort(np.concatenate([2 * nodes[branch], 2 * nodes[branch] + 1]))
        child_counts = noise(rows.level_counts(level + 1, children), sigma_count)
        kept = child_counts >= min_node
        parents_kept = np.isin(nodes, children[kept] // 2)
        leaf = ~branch | ~parents_kept
        leaves.append((level, nodes[leaf], counts[leaf]))
        nodes, counts = children[kept], child_counts[kept]
        level += 1
    leaves.append((level, nodes, counts))
    points, weights = [], []
    for lvl, codes, noisy_counts in leaves:
        if codes.size == 0:
            continue
        sums = noise(rows.leaf_statistics(lvl, codes)[1], sigma_sum)
        points.append(project_to_ball(sums / noisy_counts[:, None], radius))
        weights.append(noisy_counts)
    return TreeResult(np.vstack(points), np.concatenate(weights), level, min_node)


def weighted_kmeans_pp(points: NDArray, weights: NDArray, n_clusters: int, seed: int) -> tuple[NDArray, int]:
    """K centres of weighted k-means (k-means++ starts) on a public summary; fewer distinct points than K
    give repeated centres. Returns (centres, number of distinct centres)."""
    unique = np.unique(points, axis=0)
    k = min(n_clusters, unique.shape[0])
    if k == unique.shape[0]:  # each distinct point its own centre: the optimum, no search needed
        return unique[np.arange(n_clusters) % k], k
    if k == 1:  # one centre: the weighted mean is the optimum
        return np.repeat(np.average(points, axis=0, weights=weights)[None], n_clusters, axis=0), 1
    with warnings.catch_warnings(), threadpool_limits(1):  # a few hundred points: threads only cost
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(k, init="k-means++", n_init=KMEANS_PP_STARTS, random_state=seed)
        centres = km.fit(points, sample_weight=weights).cluster_centers_
    if k < n_clusters:
        centres = centres[np.arange(n_clusters) % k]
    return centres, k


def gaussian_lloyd_rounds(
    rows: RowStatistics,
    centres: NDArray,
    rounds: int,
    noise: Any,
    sigma_count: float,
    sigma_sum: float,
    radius: float,
) -> NDArray:
    """T Lloyd rounds on noisy counts n~_k and sums s~_k: c_k <- s~_k / n~_k pulled into the ball, kept as
    it was when n~_k < max(1, sqrt(d) sigma_s / R) (the noisy mean would be farther off than R)."""
    d = centres.shape[1]
    floor = max(1.0, math.sqrt(d) * sigma_sum / radius)
    for _ in range(rounds):
        counts, sums = rows.nearest(centres)
        n = noise(counts, sigma_count)
        s = noise(sums, sigma_sum)
        ok = n >= floor
        centres = centres.copy()
        centres[ok] = project_to_ball(s[ok] / n[ok, None], radius)
    return centres


class _BallGaussianBase(BaseEstimator, ABC):
    """Shared parameters, validation and sampling of the two Gaussian estimators."""

    @abstractmethod
    def _shares(self, d: int) -> dict[str, tuple[float, int]]:
        """Query -> (share of mu^2, releases) for d features."""

    def _check(self, n_features: int) -> tuple[NDArray, NDArray, NDArray, float]:
        if isinstance(self.n_clusters, bool) or not isinstance(self.n_clusters, int | np.integer):
            raise ParameterError(f"n_clusters must be a whole number >= 1, got {self.n_clusters!r}.")
        if self.n_clusters < 1:
            raise ParameterError(f"n_clusters must be a whole number >= 1, got {self.n_clusters!r}.")
        if not 1 <= int(self.depth) <= MAX_DEPTH:
            raise ParameterError(
                f"the tree depth must be a whole number from 1 to {MAX_DEPTH}, got {self.depth!r}."
            )
        lower, upper = check_bounds(self.bounds, n_features)
        centre, radius = ball_geometry((lower, upper), float(self.radius))
        return lower, upper, centre, radius

    def fit(self, X: ArrayLike, y: object = None) -> _BallGaussianBase:
        """Fit on the rows of X (n, d), clipped to the public ball."""
        data = np.asarray(X, dtype=float)
        if data.ndim != 2 or data.shape[0] == 0 or not np.isfinite(data).all():
            raise ParameterError("X must be a non-empty 2-D array of finite numbers.")
        lower, upper, centre, radius = self._check(data.shape[1])
        random_state = check_random_state(self.random_state)
        normals, offsets = self._hyperplanes(random_state, data.shape[1], radius)
        rows = InMemoryRows(clip_to_ball(data, centre, radius), normals, offsets)
        return self._fit_rows(rows, data.shape[1], (lower, upper), centre, radius, random_state)

    def fit_feed(self, feed: Any, prepare: Any, n_features: int) -> _BallGaussianBase:
        """Fit by passes over ``feed`` (blocks of raw rows, ``prepare`` mapping them to the feature space):
        the same mechanism, for tables that do not fit in memory."""
        lower, upper, centre, radius = self._check(n_features)
        random_state = check_random_state(self.random_state)
        normals, offsets = self._hyperplanes(random_state, n_features, radius)
        rows = FeedRows(feed, prepare, centre, radius, normals, offsets)
        return self._fit_rows(rows, n_features, (lower, upper), centre, radius, random_state)

    def _hyperplanes(self, random_state: Sampler, d: int, radius: float) -> tuple[NDArray, NDArray]:
        """Public random hyperplanes, one per level: unit normals v_l and offsets b_l = <v_l, u_l> for u_l
        uniform in the ball (data-independent; drawn from the release's sampler)."""
        rng = random_state.rng
        depth = int(self.depth)
        normals = rng.normal(size=(depth, d))
        normals /= np.linalg.norm(normals, axis=1, keepdims=True)
        g = rng.normal(size=(depth, d))
        u = g / np.linalg.norm(g, axis=1, keepdims=True) * radius * rng.random((depth, 1)) ** (1.0 / d)
        return normals, (normals * u).sum(axis=1)

    def _fit_rows(
        self,
        rows: RowStatistics,
        d: int,
        bounds: tuple[NDArray, NDArray],
        centre: NDArray,
        radius: float,
        random_state: Sampler,
    ) -> _BallGaussianBase:
        spend = gaussian_spend(float(self.epsilon), float(self.delta), self._shares(d))
        count_sens, sum_sens = sensitivities(self.neighbours, radius)

        def noise(values: NDArray, sigma: float) -> NDArray:
            return random_state.privatize(values, "gaussian", sigma)

        tree = private_tree(
            rows,
            d,
            int(self.depth),
            noise,
            spend.sigma("tree counts", count_sens),
            spend.sigma("leaf sums", sum_sens),
            radius,
            int(self.n_clusters),
        )
        seed = int(random_state.rng.integers(2**31 - 1))
        centres, distinct = weighted_kmeans_pp(tree.points, tree.weights, int(self.n_clusters), seed)
        if "round sums" in spend.queries:
            centres = gaussian_lloyd_rounds(
                rows,
                centres,
                int(self.n_iter),
                noise,
                spend.sigma("round counts", count_sens),
                spend.sigma("round sums", sum_sens),
                radius,
            )
        self.cluster_centers_ = uncentre(centres, centre, bounds)
        self.coreset_ = uncentre(tree.points, centre, bounds)
        self.coreset_weights_ = tree.weights
        self.distinct_centres_ = distinct
        self.tree_levels_ = tree.levels
        self.radius_ = radius
        self.spend_: GaussianSpend = spend
        self.n_features_in_ = d
        return self

    def predict(self, X: ArrayLike) -> NDArray[np.intp]:
        """Index of the nearest released centre per row."""
        if not hasattr(self, "cluster_centers_"):
            raise ParameterError("fit the estimator before predict.")
        data = np.asarray(X, dtype=float)
        return np.argmin(((data[:, None, :] - self.cluster_centers_[None]) ** 2).sum(axis=2), axis=1)


class LSHCoresetKMeans(_BallGaussianBase):
    """(eps, delta)-DP k-means for one row added or removed (``neighbours="bounded"``: replaced): one private
    summary, the LSH prefix tree's coreset (Chang, Ghazi, Kumar & Manurangsi 2021), then weighted
    k-means++ on it. ``radius`` is the public ball's (0: the bounds box's half-diagonal)."""

    def __init__(
        self,
        n_clusters: int = 4,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        *,
        bounds: tuple[Any, Any] | None = None,
        radius: float = 0.0,
        depth: int = 20,
        neighbours: Neighbours = "unbounded",
        random_state: int | Sampler | None = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.radius = radius
        self.depth = depth
        self.neighbours = neighbours
        self.random_state = random_state

    def _shares(self, d: int) -> dict[str, tuple[float, int]]:
        depth = int(self.depth)
        return {"tree counts": (COUNT_SHARE, depth + 1), "leaf sums": (1.0 - COUNT_SHARE, 1)}


class GaussianLloydKMeans(_BallGaussianBase):
    """(eps, delta)-DP k-means for one row added or removed (``neighbours="bounded"``: replaced): DP-Lloyd
    in the public L2 ball with Gaussian noise, composed exactly; initialised privately inside the ball by
    the LSH coreset's clustering (``INIT_SHARE`` of the budget), then ``n_iter`` noisy rounds."""

    def __init__(
        self,
        n_clusters: int = 4,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        *,
        bounds: tuple[Any, Any] | None = None,
        radius: float = 0.0,
        n_iter: int = 2,
        depth: int = 20,
        neighbours: Neighbours = "unbounded",
        random_state: int | Sampler | None = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.radius = radius
        self.n_iter = n_iter
        self.depth = depth
        self.neighbours = neighbours
        self.random_state = random_state

    def _shares(self, d: int) -> dict[str, tuple[float, int]]:
        rounds = int(self.n_iter)
        if rounds < 1:
            raise ParameterError(f"n_iter must be a whole number >= 1, got {self.n_iter!r}.")
        depth, root = int(self.depth), math.sqrt(d)
        lloyd = 1.0 - INIT_SHARE
        return {
            "tree counts": (INIT_SHARE * COUNT_SHARE, depth + 1),
            "leaf sums": (INIT_SHARE * (1.0 - COUNT_SHARE), 1),
            "round counts": (lloyd / (1.0 + root), rounds),
            "round sums": (lloyd * root / (1.0 + root), rounds),
        }
