"""DPT: differentially private synthetic trips from hierarchical reference systems (He, Cormode,
Machanavajjhala, Procopiuc and Srivastava 2015; Zhu et al. 2017, s.12.3.2).

Guarantee: eps-differential privacy for one person's trips added or removed, the person having at most
m trips of at most L fixes (the public limits of :mod:`dpcore.trajectory.prepare`).

Reference systems: grids over the public square covering the region, the finest with ``finest`` cells a
side, each next one with cells twice as large (``levels`` of them). A trip's own system is the finest
whose cell side is at least the trip's mean step between fixes (so consecutive fixes fall in the same or
neighbouring cells). Its anchor sequence a_1 ... a_l in system k: the cells of its fixes, repeats
removed, gaps between cells that do not touch filled by the cells of the straight line between them, cut
after L_k = min(L, 2 x cells a side) anchors (twice a straight crossing); consecutive anchors are then
always one of the 8 neighbours.

Budget (exact parts, :func:`dpcore.location.budget.split_budget`): eps/10 selects the systems, eps/10
counts the start cells, the rest is shared equally by the phi + 1 levels of the prefix trees.

1. Model selection: the number of trips whose own system is each one, + Laplace(m / eps_sel) (a trip
   counts in one system: L1 sensitivity m). The coarsest system is always used; a finer one when its noisy
   trip count is at least 40 m / eps_1 per cell (so that a cell's moves are counted well above their
   noise: with 1 m / eps_1, a 32-cell grid was chosen at 55,000 trips and doubled the range-query
   error). Each trip goes to the finest selected system at least as coarse as its own (a function of the
   trip and of the private selection: adaptive composition).
2. Start cells: the number of trips starting in each cell of the selected systems, + Laplace(m /
   eps_start) (one start per trip).
3. Noisy prefix trees of an order-phi Markov model: level j counts each j-gram of the sequences
   ^ a_1 ... a_l $ (^ start, $ end; level 1 the cells, level 2 every pair but the start pair). A trip in
   system k adds at most w_j(L_k) grams to level j (L_k for j <= 2, L_k + 3 - j above), all in system k,
   so with Laplace(b_jk), b_jk = m w_j(L_k) / eps_j, on system k's counts one person's privacy loss is at
   most sum over their trips of w_j(L_k) / b_jk <= eps_j, wherever their trips lie (the L1 distance
   weighted by 1 / b_jk has sensitivity eps_j). Level j + 1 is drawn only below nodes whose noisy count
   reaches 2 b_jk (the others' noisy children exist but are never read: post-processing of the full
   noisy tree).
4. Synthesis (post-processing): per system, round(noisy trip count) trips; the start cell from the noisy
   start counts; each next anchor (or $) from the longest context of at most phi tokens whose node was
   expanded, else from the noisy level-1 counts of the neighbours; direction-weighted sampling multiplies a
   neighbour's weight by max((1 + cos t) / 2, 0.05), t the angle between the move and the trip's last
   ``window`` moves (He et al.'s remedy for noise that turns trips back); at most L_k anchors. Each anchor
   is a uniform point of its cell, drawn independently (the model knows no position finer than the cell;
   one shared offset per trip made every trip length a sum of whole cell steps, a lumpy distribution
   whose distance to the true lengths grew as the noise shrank): no true position, count or time leaves.

``levels=1, order=1, window=0`` is the first baseline: one uniform grid with an order-1 Markov model.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpcore.errors import ParameterError
from dpcore.location.budget import BudgetLog, split_budget
from dpcore.mechanisms import Sampler, check_random_state
from dpcore.outofcore.kernel import workers
from dpcore.trajectory.prepare import TripSet

__all__ = ["DPT", "Hierarchy", "anchor_cap", "anchor_sequences", "gram_counts", "level_weight", "own_levels"]

START, END = 0, 1  # tokens; cell g is token g + 2
SELECT_TRIPS_PER_CELL = 40.0  # a finer system needs this many times m / eps_1 noisy trips per cell
WALK_ROWS = 1 << 14  # synthetic trips stepped at once (a step's temporaries stay small: no fresh pages)
_MOVES = np.array([(-1, -1), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1)])


@dataclass(frozen=True)
class Hierarchy:
    """Reference systems over the public square (x0, y0, side): level k has ``finest >> k`` cells a side."""

    x0: float
    y0: float
    side: float
    finest: int = 64
    levels: int = 4
    offsets: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.levels < 1 or self.finest < 2 or self.finest % (1 << (self.levels - 1)):
            raise ParameterError(
                f"the finest grid ({self.finest} cells a side) must halve {self.levels - 1} times into "
                "whole cells; choose e.g. 64 cells and 4 levels."
            )
        # first global cell id of each level (and the total at the end); a field, not a cached_property,
        # whose lock could not travel to Spark's executors with the passes (Python 3.11)
        offsets = np.r_[0, np.cumsum([int(self.cells(k)) ** 2 for k in range(self.levels)])]
        object.__setattr__(self, "offsets", offsets.astype(np.int64))

    def cells(self, k: int | np.ndarray) -> Any:
        return self.finest >> np.asarray(k)


    @property
    def n_cells(self) -> int:
        return int(self.offsets[-1])

    def cell_side(self, k: int | np.ndarray) -> Any:
        return self.side / self.cells(k)

    def level_of(self, gid: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, gid, side="right") - 1

    def split(self, gid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(level, ix, iy) of global cell ids."""
        k = self.level_of(gid)
        iy, ix = np.divmod(gid - self.offsets[k], self.cells(k))
        return k, ix, iy

    def centres(self, gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, ix, iy = self.split(np.asarray(gid, dtype=np.int64))
        v = self.cell_side(k)
        return self.x0 + (ix + 0.5) * v, self.y0 + (iy + 0.5) * v

    def neighbours(self, gid: np.ndarray) -> np.ndarray:
        """(n, 8) global ids of the 8 neighbours in the same system, -1 outside the grid."""
        k, ix, iy = self.split(np.asarray(gid, dtype=np.int64))
        g = self.cells(k)[:, None]
        nx, ny = ix[:, None] + _MOVES[:, 0], iy[:, None] + _MOVES[:, 1]
        inside = (nx >= 0) & (nx < g) & (ny >= 0) & (ny < g)
        return np.where(inside, self.offsets[k][:, None] + ny * g + nx, -1)


def own_levels(trips: TripSet, hier: Hierarchy) -> np.ndarray:
    """Each trip's own system: the finest whose cell side is at least its mean step (else the coarsest)."""
    step = np.hypot(np.diff(trips.x), np.diff(trips.y))
    inner = np.ones(step.size, dtype=bool)
    inner[trips.offsets[1:-1] - 1] = False  # steps across two trips
    total = np.bincount(trips.trip_of[:-1][inner], step[inner], minlength=trips.n_trips)
    mean = total / np.maximum(trips.lengths - 1, 1)
    sides = hier.cell_side(np.arange(hier.levels))
    return np.minimum(np.searchsorted(sides, mean, side="left"), hier.levels - 1)


def anchor_sequences(
    trips: TripSet, level: np.ndarray, hier: Hierarchy, max_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(global cell ids, offsets): each trip's anchors in system ``level[i]`` (module docstring)."""
    lv = np.repeat(np.asarray(level, dtype=np.int64), trips.lengths)
    g = hier.cells(lv)
    v = hier.side / g
    ix = np.clip(np.floor((trips.x - hier.x0) / v).astype(np.int64), 0, g - 1)
    iy = np.clip(np.floor((trips.y - hier.y0) / v).astype(np.int64), 0, g - 1)
    first = np.zeros(trips.n_fixes, dtype=bool)
    first[trips.offsets[:-1]] = True
    keep = first.copy()
    keep[1:] |= (ix[1:] != ix[:-1]) | (iy[1:] != iy[:-1])
    ix, iy, lv, first = ix[keep], iy[keep], lv[keep], first[keep]
    trip = np.cumsum(first) - 1
    dx, dy = np.r_[0, np.diff(ix)], np.r_[0, np.diff(iy)]
    dist = np.where(first, 1, np.maximum(np.abs(dx), np.abs(dy)))
    src = np.repeat(np.arange(ix.size), dist)
    i = np.arange(src.size) - np.repeat(np.cumsum(dist) - dist, dist) + 1  # 1..dist
    d = dist[src]
    ax = np.where(first[src], ix[src], ix[src] - dx[src] + np.floor(dx[src] * i / d + 0.5).astype(np.int64))
    ay = np.where(first[src], iy[src], iy[src] - dy[src] + np.floor(dy[src] * i / d + 0.5).astype(np.int64))
    gid = hier.offsets[lv[src]] + ay * hier.cells(lv[src]) + ax
    t = trip[src]
    n_per = np.bincount(t, minlength=trips.n_trips)
    rank = np.arange(t.size) - np.repeat(np.cumsum(n_per) - n_per, n_per)
    cut = rank < max_len
    lens = np.minimum(n_per, max_len)
    return gid[cut], np.r_[0, np.cumsum(lens)].astype(np.int64)


def _augmented(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens ^ a_1 ... a_l $ of every trip, concatenated, and their offsets."""
    lens = np.diff(offsets)
    n = lens.size
    out = np.empty(ids.size + 2 * n, dtype=np.int64)
    aug_off = offsets + 2 * np.arange(n + 1)
    out[aug_off[:-1]] = START
    out[aug_off[1:] - 1] = END
    body = np.ones(out.size, dtype=bool)
    body[aug_off[:-1]] = False
    body[aug_off[1:] - 1] = False
    out[body] = ids + 2
    return out, aug_off


def gram_counts(ids: np.ndarray, offsets: np.ndarray, j: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted keys, counts) of the j-grams of the sequences ^ a_1 ... a_l $ that a prefix tree's level j
    counts: level 1 the cells, level 2 every pair but (^, a_1) (the start cells, counted apart), level
    j >= 3 every j-gram; the key of (t_1, ..., t_j) is sum t_i base^(j - i)."""
    tok, aug_off = _augmented(ids, offsets)
    lens = np.diff(aug_off)
    n_win = np.maximum(lens - j + 1, 0)
    within = np.arange(int(n_win.sum())) - np.repeat(np.cumsum(n_win) - n_win, n_win)
    starts = np.repeat(aug_off[:-1], n_win) + within
    key = np.zeros(starts.size, dtype=np.int64)
    for i in range(j):
        key = key * base + tok[starts + i]
    if j == 1:
        key = key[key >= 2]
    elif j == 2:
        key = key[within > 0]
    return np.unique(key, return_counts=True)


def anchor_cap(max_fixes: int, cells: int | np.ndarray) -> Any:
    """L_k: anchors kept per trip in a system of ``cells`` a side, min(L, 2 x cells) (twice a straight
    crossing of the region)."""
    return np.minimum(max_fixes, 2 * np.asarray(cells))


def level_weight(j: int, cap: int | np.ndarray) -> Any:
    """Most j-grams one trip of at most ``cap`` anchors adds to level j: cap (j = 1, 2), cap + 3 - j."""
    return cap if j <= 2 else np.maximum(cap + 3 - j, 0)


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, found) of each query key in sorted ``keys`` (0 where absent)."""
    if keys.size == 0:
        return np.zeros(query.shape), np.zeros(query.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    found = keys[pos] == query
    return np.where(found, values[pos], 0.0), found


class DPT:
    """DPT synthetic trips (module docstring): ``fit(trips)`` releases the noisy model, ``sample()`` draws
    the synthetic trips from it (post-processing). ``budget_log_`` holds the exact budget parts,
    ``scale_`` the Laplace scale of every released count vector (per system for the tree levels);
    ``random_state_`` the sampler ``fit`` drew from, which ``sample`` goes on drawing from."""

    def __init__(
        self,
        epsilon: float,
        *,
        max_trips: int,
        max_fixes: int,
        box: tuple[float, float, float],
        finest: int = 64,
        levels: int = 4,
        order: int = 2,
        window: int = 3,
        random_state: int | Sampler | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.max_trips = max_trips
        self.max_fixes = max_fixes
        self.box = box
        self.finest = finest
        self.levels = levels
        self.order = order
        self.window = window
        self.random_state = random_state

    def _check(self) -> tuple[Hierarchy, Sampler]:
        if not 1 <= self.order <= 3:
            raise ParameterError(f"the Markov order must be 1, 2 or 3 (got {self.order!r}).")
        hier = Hierarchy(*self.box, finest=self.finest, levels=self.levels)
        return hier, check_random_state(self.random_state)

    def budget(self) -> BudgetLog:
        """(name, eps part): eps/10 for the systems, eps/10 for the start cells, the rest equally over the
        tree levels 1..phi + 1."""
        share = Fraction(8, 10 * (self.order + 1))
        levels = [(f"level {j}", share) for j in range(1, self.order + 2)]
        return split_budget(
            self.epsilon, [("reference systems", Fraction(1, 10)), ("start cells", Fraction(1, 10)), *levels]
        )

    def scales(self, hier: Hierarchy) -> dict[str, np.ndarray]:
        """Laplace scale of each released vector: m / eps_part for the systems' trip counts and the start
        cells (a trip counts once); m w_j(L_k) / eps_j for level j in system k (:func:`level_weight`)."""
        eps = dict(self.budget())
        m = self.max_trips
        caps = anchor_cap(self.max_fixes, hier.cells(np.arange(hier.levels)))
        out = {
            "reference systems": np.array(m / eps["reference systems"]),
            "start cells": np.array(m / eps["start cells"]),
        }
        for j in range(1, self.order + 2):
            out[f"level {j}"] = m * level_weight(j, caps) / eps[f"level {j}"]
        return out

    def fit(self, trips: TripSet) -> DPT:
        """Release the noisy model of ``trips`` (prepared under the public limits)."""
        hier = Hierarchy(*self.box, finest=self.finest, levels=self.levels)
        own = own_levels(trips, hier) if trips.n_trips else np.zeros(0, dtype=np.int64)
        true_rs = np.bincount(own, minlength=hier.levels).astype(float)
        return self.fit_counts(true_rs, lambda selected: self.true_counts(trips, selected))

    def fit_counts(
        self,
        true_rs: np.ndarray,
        counts_of: Callable[[np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]],
    ) -> DPT:
        """Release the noisy model from the trips' counts: ``true_rs`` (trips per own system) and
        ``counts_of(selected)`` (:meth:`true_counts` after the selection), computed in memory or by passes
        over an engine's rows (:mod:`dpcore.trajectory.outofcore`)."""
        hier, random_state = self._check()
        self.hierarchy_, self.random_state_ = hier, random_state
        self.budget_log_ = self.budget()
        self.scale_ = self.scales(hier)
        noisy_rs = random_state.privatize(true_rs, "laplace", float(self.scale_["reference systems"]))
        cells = hier.cells(np.arange(hier.levels)).astype(float) ** 2
        need = SELECT_TRIPS_PER_CELL * cells * self.max_trips / dict(self.budget_log_)["level 1"]
        selected = (noisy_rs >= need) | (np.arange(hier.levels) == hier.levels - 1)
        self.selected_ = np.flatnonzero(selected)
        assign_of = self.selected_[np.searchsorted(self.selected_, np.arange(hier.levels))]
        self.n_synthetic_ = np.bincount(assign_of, np.maximum(noisy_rs, 0), minlength=hier.levels)
        self.cells_ = np.concatenate(
            [np.arange(hier.offsets[k], hier.offsets[k + 1]) for k in self.selected_]
        )
        self.start_, self.tree_ = self._tree(hier, counts_of(self.selected_), random_state)
        return self

    def true_counts(
        self, trips: TripSet, selected: np.ndarray, own: np.ndarray | None = None
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Name -> (sorted keys, true counts) of every vector released after the selection ``selected``
        (sorted system levels, the coarsest included): "reference systems" (trips per own system), "start
        cells" (trips per first anchor cell) and "level j" (j-grams, :func:`gram_counts`). Keys absent count
        0. ``own``: the trips' :func:`own_levels` when known. The sensitivity tests read these."""
        hier = Hierarchy(*self.box, finest=self.finest, levels=self.levels)
        if own is None:
            own = own_levels(trips, hier) if trips.n_trips else np.zeros(0, dtype=np.int64)
        assign_of = selected[np.searchsorted(selected, np.arange(hier.levels))]
        ids, offsets = self.anchors(trips, assign_of[own], hier)
        out = {
            "reference systems": np.unique(own, return_counts=True),
            "start cells": np.unique(ids[offsets[:-1][np.diff(offsets) > 0]], return_counts=True),
        }
        for j in range(1, self.order + 2):
            out[f"level {j}"] = gram_counts(ids, offsets, j, hier.n_cells + 2)
        return out

    def anchors(self, trips: TripSet, level: np.ndarray, hier: Hierarchy) -> tuple[np.ndarray, np.ndarray]:
        """Anchor sequences of ``trips`` in systems ``level``, each cut at its system's L_k."""
        ids, offsets = anchor_sequences(trips, level, hier, self.max_fixes)
        lens = np.diff(offsets)
        cap = anchor_cap(self.max_fixes, hier.cells(np.asarray(level, dtype=np.int64)))
        rank = np.arange(ids.size) - np.repeat(offsets[:-1], lens)
        keep = rank < np.repeat(cap, lens)
        return ids[keep], np.r_[0, np.cumsum(np.minimum(lens, cap))].astype(np.int64)

    def _noisy(self, keys: np.ndarray, true: np.ndarray, name: str, random_state: Sampler) -> np.ndarray:
        """``true`` + Laplace noise at the scale of each key's system (its last cell's)."""
        base = self.hierarchy_.n_cells + 2
        last = keys % base
        cell = np.where(last >= 2, last, (keys // base) % base) - 2
        system = self.hierarchy_.level_of(cell)
        out = np.empty(keys.size)
        for k in np.unique(system):
            at = system == k
            out[at] = random_state.privatize(true[at], "laplace", float(self.scale_[name][k]))
        return out

    def threshold(self, keys: np.ndarray, j: int) -> np.ndarray:
        """2 b_{j,k}: the noisy count a level-j node needs to be expanded (or used as a context)."""
        base = self.hierarchy_.n_cells + 2
        last = keys % base
        cell = np.where(last >= 2, last, (keys // base) % base) - 2
        return 2 * self.scale_[f"level {j}"][self.hierarchy_.level_of(cell)]

    def _tree(
        self, hier: Hierarchy, true: dict[str, tuple[np.ndarray, np.ndarray]], random_state: Sampler
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """(noisy start counts of the selected cells, [(sorted keys, noisy counts)] of levels 1..phi + 1
        (the materialised nodes))."""
        base = hier.n_cells + 2
        cells = self.cells_
        value, _ = _lookup(true["start cells"][0], true["start cells"][1].astype(float), cells)
        start = random_state.privatize(value, "laplace", float(self.scale_["start cells"]))
        tree: list[tuple[np.ndarray, np.ndarray]] = []
        domain = cells + 2
        for j in range(1, self.order + 2):
            if j > 1:
                keys, noisy = tree[-1]
                expand = keys[(noisy >= self.threshold(keys, j - 1)) & (keys % base != END)]
                last = expand % base - 2
                cand = np.c_[hier.neighbours(last) + 2, np.full(last.size, END)]
                children = (expand[:, None] * base + cand)[cand >= 0]
                if j == 3:  # below the start cells: (^, a, x)
                    first = cells[start >= 2 * self.scale_["start cells"]]
                    cand = np.c_[hier.neighbours(first) + 2, np.full(first.size, END)]
                    children = np.r_[children, ((START * base + first + 2)[:, None] * base + cand)[cand >= 0]]
                domain = np.unique(children)
            keys, counts = true[f"level {j}"]
            value, _ = _lookup(keys, counts.astype(float), domain)
            tree.append((domain, self._noisy(domain, value, f"level {j}", random_state)))
        return start, tree

    def sample(self) -> TripSet:
        """Synthetic trips (each anchor a uniform point of its cell, metres)."""
        hier, rng = self.hierarchy_, self.random_state_.rng
        parts = []
        for k in self.selected_:
            n = int(np.rint(self.n_synthetic_[k]))
            if n > 0:
                parts.append(self._walks(hier, int(k), n, rng))
        if not parts:
            return TripSet(np.zeros(0), np.zeros(0), np.zeros(1, dtype=np.int64))
        ids = np.concatenate([p[0] for p in parts])
        lens = np.concatenate([p[1] for p in parts])
        k, ix, iy = hier.split(ids)
        side, u = hier.cell_side(k), rng.random((2, ids.size))
        x, y = hier.x0 + (ix + u[0]) * side, hier.y0 + (iy + u[1]) * side
        return TripSet(x, y, np.r_[0, np.cumsum(lens)].astype(np.int64))

    def _context_weights(
        self, hist: list[np.ndarray], rows: np.ndarray, t: int, cand_tok: np.ndarray
    ) -> np.ndarray:
        """Candidate weights from the longest expanded context of at most phi tokens (NaN rows: none)."""
        base = self.hierarchy_.n_cells + 2
        weight = np.full(cand_tok.shape, np.nan)
        for c in range(min(self.order, t + 1), 0, -1):
            todo = np.flatnonzero(np.isnan(weight[:, 0]))
            if not todo.size:
                break
            ctx = np.zeros(todo.size, dtype=np.int64)
            for i in range(c, 0, -1):  # tokens t - i (^ before the first anchor)
                pos = t - i
                tok = hist[pos][rows[todo]] + 2 if pos >= 0 else np.full(todo.size, START)
                ctx = ctx * base + tok
            if ctx.size and c >= 2 and t - c < 0:  # a context starting with ^: the start cell's count
                value, found = _lookup(self.cells_ + 2 + START * base, self.start_, ctx)
                ok = found & (value >= 2 * self.scale_["start cells"])
            else:
                value, found = _lookup(*self.tree_[c - 1], ctx)
                ok = found & (value >= self.threshold(ctx, c))
            hit = todo[ok]
            w, _ = _lookup(*self.tree_[c], ctx[ok][:, None] * base + cand_tok[hit])
            weight[hit] = np.where(cand_tok[hit] >= 0, np.maximum(w, 0), 0)
        return weight

    def _walks(
        self, hier: Hierarchy, k: int, n: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(anchor ids row by row, lengths) of n trips in system k."""
        cells = np.arange(hier.offsets[k], hier.offsets[k + 1])
        w0, _ = _lookup(self.cells_, self.start_, cells)
        w0 = np.maximum(w0, 0)
        p0 = w0 / w0.sum() if w0.sum() > 0 else np.full(cells.size, 1 / cells.size)
        cap = int(anchor_cap(self.max_fixes, hier.cells(k)))
        hist = [rng.choice(cells, n, p=p0)]  # hist[t][i]: trip i's anchor t (while it has one)
        lengths = np.ones(n, dtype=np.int64)
        lv1_keys, lv1 = self.tree_[0]
        mass, _ = _lookup(lv1_keys, np.maximum(lv1, 0), cells + 2)
        p_end = min(1.0, max(self.n_synthetic_[k], 1.0) / max(mass.sum(), 1.0))
        mv = _MOVES / np.hypot(_MOVES[:, 0], _MOVES[:, 1])[:, None]
        active = np.arange(n)
        table = hier.neighbours(cells)  # the system's cells' neighbours, looked up by row
        lv1_pos = np.maximum(lv1, 0)
        with ThreadPoolExecutor(workers()) as pool:
            for t in range(1, cap):
                if not active.size:
                    break
                u = rng.random(active.size)  # drawn first: the chunks then compute on threads, the same steps
                hist.append(np.full(n, -1, dtype=np.int64))

                def step(at: int, t: int = t, u: np.ndarray = u, active: np.ndarray = active) -> np.ndarray:
                    rows = active[at : at + WALK_ROWS]
                    last = hist[t - 1][rows]
                    nbr = table[last - cells[0]]
                    cand_tok = np.c_[np.where(nbr >= 0, nbr + 2, -1), np.full(last.size, END)]
                    weight = self._context_weights(hist, rows, t, cand_tok)
                    rest = np.isnan(weight[:, 0])
                    if rest.any():  # order 0: the neighbours' noisy cell counts, and the mean chance to stop
                        w, _ = _lookup(lv1_keys, lv1_pos, cand_tok[rest, :8])
                        w = np.where(cand_tok[rest, :8] >= 0, w, 0)
                        weight[rest] = np.c_[w, w.sum(axis=1) * p_end / max(1 - p_end, 1e-12)]
                    if self.window and t >= 2:
                        gx, gy = hier.centres(last)
                        fx, fy = hier.centres(hist[max(t - 1 - self.window, 0)][rows])
                        dx, dy = gx - fx, gy - fy
                        norm = np.hypot(dx, dy)
                        cos = (mv[:, 0][None, :] * dx[:, None] + mv[:, 1][None, :] * dy[:, None]) / np.where(
                            norm > 0, norm, 1
                        )[:, None]
                        weight[:, :8] *= np.where(norm[:, None] > 0, np.maximum((1 + cos) / 2, 0.05), 1.0)
                    total = weight.sum(axis=1)
                    below = np.cumsum(weight, axis=1) < (u[at : at + WALK_ROWS] * total)[:, None]
                    pick = np.minimum(below.sum(axis=1), 8)
                    go = ~((total <= 0) | (pick == 8))
                    hist[t][rows[go]] = nbr[go, pick[go]]  # the chunks' rows are disjoint
                    return rows[go]

                active = np.concatenate(list(pool.map(step, range(0, active.size, WALK_ROWS))))
                lengths[active] += 1
        ids = np.empty(int(lengths.sum()), dtype=np.int64)
        first = np.cumsum(lengths) - lengths
        for t, column in enumerate(hist):  # row by row: trip i's anchors at first[i] + t
            reached = np.flatnonzero(lengths > t)
            ids[first[reached] + t] = column[reached]
        return ids, lengths
