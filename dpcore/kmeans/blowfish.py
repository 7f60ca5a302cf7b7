"""Blowfish k-means: the DP-Lloyd loop with policy-specific sensitivities (He, Machanavajjhala & Ding
2014, "K-means clustering").

Guarantee: (eps, G)-Blowfish for the policy graph G: one row's value x replaced by a neighbour y of x in G
(Machanavajjhala & Kifer 2015 Defs. 5-6; docs/mathematics.md). Rows are clipped to the public box and
centred at its centre (as in DP-Lloyd); clipping is coordinate-wise 1-Lipschitz and keeps blocks and
unchanged attributes, so the clipped rows of G-neighbours are G-neighbours inside the box. Half-widths h_i,
widths r_i = 2 h_i.

Per round, replacing x by y (an edge) under the public Voronoi cells of the previous centres changes

* the K counts by 2 if x and y fall in different cells, else 0: Delta_N = 2 under every graph (004);
* the (K x d) sums by ||y - x||_1 in the same cell, by ||x||_1 + ||y||_1 across cells.

Seed 004 quotes the *whole-table* sum sensitivity (theta, block width, max_i r_i); for per-cluster
sums the cross-cell edges matter too, so we implement Delta_S = max(D, max over cell pairs of C_ab):

D, the largest ||y - x||_1 over edges inside the box:
  full domain sum_i r_i; partition (block width w from the public lower bound) sum_i min(w, r_i);
  distance threshold L1 min(theta, sum_i r_i); L2 max{sum v_i : ||v||_2 <= theta, 0 <= v_i <= r_i}
  (water-filling, <= sqrt(d) theta); attribute c: the sum of the c largest r_i.

C_ab, for cells a != b with unit normal u = (c_b - c_a) / ||c_b - c_a||_2 and offset beta = u.(c_a + c_b)/2:
  x in cell a means u.x <= beta, y in cell b means u.y >= beta, and u.(y - x) <= delta(u), the reach of an
  edge along u (full: sum |u_i| r_i; partition: sum |u_i| min(w, r_i); L1: greedy knapsack of theta over the
  largest |u_i|; L2: theta; attribute: the c largest |u_i| r_i). So x lies in the slab
  S_ab = box & {beta - delta <= u.x <= beta} and y in S_ba = box & {beta <= u.y <= beta + delta}, and with
  M(S) = max_{z in S} ||z||_1 (empty slab: no edge between a and b),
      C_ab = min(M(S_ab) + M(S_ba), 2 M(S_ab) + D, 2 M(S_ba) + D)       (||y||_1 <= ||x||_1 + ||y - x||_1).
  ||.||_1 is convex, so M(S) is attained at a vertex of the polytope S: a box vertex in the slab (then
  M = sum h) or a box edge crossing a slab face (d - 1 coordinates at +-h_i). We enumerate these
  vertices exactly for d <= 12 and use the sound bound M = sum h above that. Every C_ab <= sum_i r_i,
  so Delta_S never exceeds bounded DP's. Near a box corner a cross-cell edge can move almost 2 sum h,
  so the gain over bounded DP is real only when the cell boundaries stay away from the box corners
  (small d, few cells); the estimator records the per-round ratio to bounded DP in ``sensitivity_gain_``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpcore.errors import ParameterError, PolicyError
from dpcore.kmeans.lloyd import NoisyLloydBase, SensitivityFn
from dpcore.mechanisms import Sampler
from dpcore.policy import (
    AttributeGraph,
    Blowfish,
    DistanceThresholdGraph,
    FullDomainGraph,
    PartitionGraph,
)

MAX_ENUM_DIM = 12
SLAB_ENTRIES = 1_000_000  # slabs x box vertices per enumeration block (~8 MB of float64)
BlowfishGraph = FullDomainGraph | PartitionGraph | DistanceThresholdGraph | AttributeGraph


def _l2_box_l1_max(theta: float, caps: NDArray) -> float:
    """max sum_i v_i s.t. ||v||_2 <= theta, 0 <= v_i <= caps_i: v_i = min(caps_i, t) (water-filling)."""
    r = np.sort(caps)
    if float(np.sum(r**2)) <= theta**2:
        return float(np.sum(r))
    budget, m = theta**2, r.size
    for i in range(m):
        t = np.sqrt(budget / (m - i))
        if t <= r[i]:
            return float(np.sum(r[:i]) + (m - i) * t)
        budget -= r[i] ** 2
    return float(np.sum(r))


def edge_length_bound(graph: BlowfishGraph, widths: NDArray) -> float:
    """D: the largest ||y - x||_1 over edges (x, y) of the graph inside a box with these widths."""
    if isinstance(graph, FullDomainGraph):
        return float(np.sum(widths))
    if isinstance(graph, PartitionGraph):
        return float(np.sum(np.minimum(graph.block_width, widths)))
    if isinstance(graph, DistanceThresholdGraph):
        if graph.metric == "l1":
            return float(min(graph.theta, np.sum(widths)))
        return _l2_box_l1_max(graph.theta, widths)
    return float(np.sum(np.sort(widths)[::-1][: graph.c]))


def sensitivity_gain_bound(graph: BlowfishGraph, lower: ArrayLike, upper: ArrayLike) -> float:
    """Largest possible per-round gain of Blowfish over bounded DP: sum_i r_i / D (public inputs only).

    Delta_S = max(D, cross-cell terms) >= D, so no round's ``sensitivity_gain_`` exceeds this; the
    cross-cell terms often make the realised gain much smaller (about 1x in high dimension).
    """
    widths = np.asarray(upper, dtype=float) - np.asarray(lower, dtype=float)
    return float(np.sum(widths)) / edge_length_bound(graph, widths)


def edge_reach(graph: BlowfishGraph, u: NDArray, widths: NDArray) -> NDArray:
    """delta(u) >= max u.(y - x) over edges (x, y) inside the box, for directions u (..., d) -> (...)."""
    au = np.abs(u)
    if isinstance(graph, FullDomainGraph):
        return au @ widths
    if isinstance(graph, PartitionGraph):
        return au @ np.minimum(graph.block_width, widths)
    if isinstance(graph, DistanceThresholdGraph):
        if graph.metric == "l2":
            return np.full(au.shape[:-1], float(graph.theta))
        order = np.argsort(-au, axis=-1)
        w = widths[order]
        used_before = np.cumsum(w, axis=-1) - w
        alloc = np.clip(graph.theta - used_before, 0.0, w)
        return np.sum(np.take_along_axis(au, order, axis=-1) * alloc, axis=-1)
    return np.sum(-np.sort(-(au * widths), axis=-1)[..., : graph.c], axis=-1)


def slab_l1_max(half: NDArray, u: NDArray, low: NDArray, high: NDArray) -> NDArray:
    """max ||z||_1 over the box [-h, h] & {low <= u.z <= high} for directions u (..., d) -> (...).

    -inf where the slab misses the box. For d <= MAX_ENUM_DIM the maximum is taken over the polytope's
    candidate vertices, all slabs at once: sum h if a box vertex s * h lies in the slab, else the best
    point z_j = (face - u.z_(-j)) / u_j, |z_j| <= h_j, on a box edge (the other d - 1 coordinates at
    +-h) crossing a slab face. Above MAX_ENUM_DIM: the sound bound sum h for every non-empty slab.
    """
    d, u = half.size, np.asarray(u, dtype=float)
    shape = u.shape[:-1]
    u2 = u.reshape(-1, d)
    lo = np.broadcast_to(np.asarray(low, dtype=float), shape).ravel()
    hi = np.broadcast_to(np.asarray(high, dtype=float), shape).ravel()
    reach = np.abs(u2) @ half
    total = float(np.sum(half))
    out = np.where((lo > reach) | (hi < -reach), -np.inf, total)
    if d <= MAX_ENUM_DIM:
        signs = np.array(list(itertools.product((-1.0, 1.0), repeat=d)))
        step = max(1, SLAB_ENTRIES // signs.shape[0])
        for start in range(0, out.size, step):
            rows = slice(start, start + step)
            out[rows] = _enumerated_max(half, signs, u2[rows], lo[rows], hi[rows], out[rows])
    return out.reshape(shape)


def _enumerated_max(
    half: NDArray, signs: NDArray, u: NDArray, low: NDArray, high: NDArray, bound: NDArray
) -> NDArray:
    """Exact slab maxima (N,) for N slabs (u (N, d), low, high): box vertices, then box edges."""
    total = float(np.sum(half))
    proj = u @ (signs * half).T  # (N, 2^d): u.v for every box vertex v
    inside = np.any((proj >= low[:, None]) & (proj <= high[:, None]), axis=1)
    best = np.full(u.shape[0], -np.inf)
    faces = np.stack([low, high], axis=1)[:, None, :]  # (N, 1, 2)
    for j in range(half.size):
        uj = u[:, j]
        live = uj != 0.0
        base = proj[:, signs[:, j] > 0] - (uj * half[j])[:, None]  # u.z over the other coordinates
        zj = (faces - base[:, :, None]) / np.where(live, uj, 1.0)[:, None, None]
        ok = (np.abs(zj) <= half[j]) & live[:, None, None]
        cand = np.max(np.where(ok, np.abs(zj), -np.inf), axis=(1, 2))
        best = np.maximum(best, total - half[j] + cand)
    return np.where(np.isfinite(bound), np.where(inside, total, best), bound)


def blowfish_sum_sensitivity(graph: BlowfishGraph, centres: NDArray, half: NDArray) -> float:
    """Delta_S for the (K x d) per-cluster sums, rows in the centred box [-h, h], public centres (centred)."""
    return float(blowfish_sum_sensitivity_many(graph, np.asarray(centres, dtype=float)[None], half)[0])


def blowfish_sum_sensitivity_many(graph: BlowfishGraph, centres: NDArray, half: NDArray) -> NDArray:
    """Delta_S of the module docstring for B public centre sets (B, K, d) at once -> (B,).

    Every cell pair's direction, offset, reach and slab maxima M(S) (:func:`slab_l1_max`) are computed
    for all sets and pairs together.
    """
    widths = 2.0 * half
    D = edge_length_bound(graph, widths)
    ia, ib = np.triu_indices(centres.shape[1], 1)
    if ia.size == 0:
        return np.full(centres.shape[0], D)
    ca, cb = centres[:, ia], centres[:, ib]  # (B, P, d)
    diff = cb - ca
    norm = np.linalg.norm(diff, axis=-1)
    live = norm > 0.0  # identical centres: ties go to a, cell b is empty of a's competitors
    u = diff / np.where(live, norm, 1.0)[..., None]
    beta = np.einsum("bpj,bpj->bp", u, ca + cb) / 2.0
    delta = edge_reach(graph, u, widths)
    m_ab = slab_l1_max(half, u, beta - delta, beta)
    m_ba = slab_l1_max(half, u, beta, beta + delta)
    ok = live & np.isfinite(m_ab) & np.isfinite(m_ba)
    pair = np.minimum(m_ab + m_ba, np.minimum(2 * m_ab + D, 2 * m_ba + D))
    worst = np.max(np.where(ok, pair, D), axis=1)
    return np.minimum(np.maximum(worst, D), np.sum(widths))


class BlowfishKMeans(NoisyLloydBase):
    """Blowfish k-means (He, Machanavajjhala & Ding 2014): (eps, G)-Blowfish for policy graph G: one row's
    value replaced by a neighbour in G; counts get Lap(2 / eps_N), sums Lap(Delta_S / eps_S) with Delta_S
    from the module doc.

    Parameters as DPLloydKMeans (rows are replaced, never added, so n is public and T follows Su et al.'s
    rule without a count query), plus ``graph``: FullDomainGraph, PartitionGraph(block_width),
    DistanceThresholdGraph(theta, "l1" | "l2") or AttributeGraph(c) from dpcore.policy.
    Extra fitted: ``sensitivity_gain_`` (T,) = bounded-DP sum sensitivity / the one used.
    """

    def __init__(
        self,
        n_clusters: int = 3,
        epsilon: float = 1.0,
        bounds: Any = None,
        graph: BlowfishGraph | None = None,
        n_iter: int | None = None,
        count_share: float | None = None,
        random_state: int | Sampler | None = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.bounds = bounds
        self.graph = graph
        self.n_iter = n_iter
        self.count_share = count_share
        self.random_state = random_state

    def _policy(self) -> Blowfish:
        if self.graph is None:
            raise ParameterError(
                "BlowfishKMeans needs a policy graph: graph=FullDomainGraph(), PartitionGraph(block_width), "
                "DistanceThresholdGraph(theta, 'l1' or 'l2') or AttributeGraph(c) from dpcore.policy."
            )
        try:
            policy = Blowfish(self.epsilon, self.graph)
        except PolicyError as err:
            raise ParameterError(str(err)) from err
        if isinstance(self.graph, DistanceThresholdGraph) and self.graph.metric == "haversine":
            raise ParameterError(
                "Blowfish k-means supports the L1 and L2 distance-threshold graphs on feature space; the "
                "haversine metric is for location releases. Use metric='l1' or 'l2'."
            )
        return policy

    def _batch_sensitivities(self, half: NDArray) -> SensitivityFn:
        """Delta_N = 2, Delta_S from blowfish_sum_sensitivity_many on each run's previous centres."""
        graph = self.graph

        def per_run(centres: NDArray) -> tuple[NDArray, NDArray]:
            return np.full(centres.shape[0], 2.0), blowfish_sum_sensitivity_many(graph, centres, half)  # type: ignore[arg-type]

        return per_run

    def _run(self, *args: Any) -> BlowfishKMeans:
        """The shared fit (in memory or from a statistics oracle), plus ``sensitivity_gain_``."""
        super()._run(*args)
        lower, upper = self.bounds_
        self.sensitivity_gain_ = float(np.sum(upper - lower)) / self.sum_sensitivity_
        return self
