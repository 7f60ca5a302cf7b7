"""PriLocation: private release of users' visited locations (Zhu et al. 2017, s.12.4, after Xiong et al.).

Budget split: eps/2 private location clustering, eps/4 Laplace on each user's per-cluster visit counts,
eps/4 exponential mechanism replacing each visit by a candidate of its cluster (score HS - d(t_i, t_j),
sensitivity HS). The split is exact (``split_budget``: the parts never add up to more than eps). HS
(metres) is the curator's hierarchy level: the largest distance between two locations of one unit of
that level, never taken from the data.

What we implement, and how it differs from the book (whose privacy analysis is informal):

* Clustering: a uniform private grid (Qardaji et al. 2013; ``grids.uniform_grid``, bounded neighbours,
  Laplace(2 / (eps/2)) per cell) over the public region, then weighted k-means on the noisy cell centres
  (post-processing). The grid clamps out-of-region visits onto the region's edge: a remap of each visit on
  its own, so moving one visit still changes at most two cell counts by one.
* Candidates are public: points of a square grid of step ``candidate_step_m`` within HS/2 of each released
  centre (so a cluster unit has diameter HS) and inside the region. The book selects among the users' own
  locations, which would release other people's exact visits.
* Cluster assignment and selection use each visit's own location, never a clamped one: the score changes
  by at most d(x, x') <= HS for a move of at most HS anywhere on the sphere (clamping latitude and
  longitude separately can stretch a 38 km move near the pole to 1,000 km).
* Selection in a release is sampled exactly (``exact_select``: integer scores on a public 2^-16 HS grid,
  exact Bernoulli acceptance, no correction needed); diagnostic runs keep a float32 inverse CDF.
* A negative noisy weight deletes uniformly random visits (the book deletes the farthest from the centre,
  a data-dependent choice that breaks the HS bound). A positive one adds visits; each added visit is an
  exponential-mechanism draw for a visit at the cluster's centre (a public point), so it has the
  distribution of a replaced visit that sat at the centre: added and replaced rows carry no mark, the
  released rows are shuffled, and which rows are added can be told only as well as the selection step
  allows (a factor e^(eps/4 d(x, c) / HS) for a visit x at distance d(x, c) from its centre c).

Neighbour relation (per visit): one visit's location x replaced by x' with d(x, x') <= HS (great-circle
metres) in the same released cluster. Guarantee: eps for that relation (eps/2 clustering, which even
protects any move; eps/4 weights, unchanged by such a move and calibrated like the book to adding or
removing one visit; eps/4 selection, |q(x, c) - q(x', c)| <= d(x, x') <= HS). Moves to another cluster,
or farther than HS, are not protected by the last step. Per user: with ``max_visits_per_user`` m
(public), at most m visits per user are kept (uniformly at random) and every step runs at eps' with
m eps' <= eps (``per_member_epsilon``), so moving all of one user's visits within HS in their clusters
changes any output's probability by at most e^eps (group privacy). Distance error
DE = mean over users of sum d(t, t_hat) / (HS |T|) (Zhu et al. eqs. 12.17-12.18), over replaced visits.
The baseline ``laplace_distance_error`` applies planar Laplace with eps / HS per metre to every visit
(eps for every move within HS, in or across clusters: a stronger guarantee at the same eps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError
from dpcore.exact import bernoulli_exp, dyadic_floor
from dpcore.location.budget import BudgetLog, per_member_epsilon, split_budget
from dpcore.location.contribution import cap_per_user, check_max_per_user, user_codes
from dpcore.location.geometry import (
    EARTH_RADIUS_M,
    FloatArray,
    Region,
    destination_point,
    haversine_m,
    unit_vectors,
    validate_latlon,
)
from dpcore.location.grids import DensityGrid, uniform_grid
from dpcore.location.laplace import planar_laplace
from dpcore.mechanisms import Sampler, _check_epsilon, check_random_state

LEVELS: dict[str, float] = {
    "street": 500.0,
    "district": 5_000.0,
    "city": 25_000.0,
    "region": 100_000.0,
    "state": 300_000.0,
}
BUDGET_SPLIT = (("clustering", Fraction(1, 2)), ("weights", Fraction(1, 4)), ("selection", Fraction(1, 4)))


def prilocation_budget(epsilon: float) -> BudgetLog:
    """[(clustering, ~eps/2), (weights, ~eps/4), (selection, ~eps/4)], never adding up to more than eps."""
    return split_budget(epsilon, BUDGET_SPLIT)


def hierarchical_sensitivity(level: str | float) -> float:
    """HS in metres for a named level (street 500 m, district 5 km, city 25 km, region 100 km, state 300 km)
    or a number of metres given by the curator."""
    if isinstance(level, str):
        if level not in LEVELS:
            raise ParameterError(f"unknown level {level!r}; use one of {sorted(LEVELS)} or give metres.")
        return LEVELS[level]
    hs = float(level)
    if not np.isfinite(hs) or hs <= 0:
        raise ParameterError(
            f"the hierarchical sensitivity must be a positive number of metres (got {level!r})."
        )
    return hs


def candidate_offsets(hs_m: float, step_m: float) -> tuple[FloatArray, FloatArray]:
    """(distance m, bearing deg) of square-grid points of step ``step_m`` within hs_m / 2 of the origin."""
    k = int(np.floor(hs_m / 2 / step_m))
    gx, gy = np.meshgrid(np.arange(-k, k + 1) * step_m, np.arange(-k, k + 1) * step_m)
    keep = np.hypot(gx, gy) <= hs_m / 2
    gx, gy = gx[keep], gy[keep]
    return np.hypot(gx, gy), np.degrees(np.arctan2(gx, gy)) % 360.0


def exponential_select(
    scores: FloatArray, epsilon: float, sensitivity: float, random_state: Sampler
) -> np.ndarray:
    """One exponential-mechanism draw per row: Pr[j] proportional to exp(eps q_j / (2 Delta)) (McSherry and
    Talwar 2007).

    Rows of ``scores`` may hold -inf for candidates that are not allowed (public exclusions).
    """
    log_w = np.array(np.asarray(scores, dtype=float).T * (epsilon / (2.0 * sensitivity)), order="C")
    return sample_log_weights(log_w, random_state)


def sample_log_weights(log_w: np.ndarray, random_state: Sampler) -> np.ndarray:
    """One index per COLUMN of ``log_w`` (m, n), Pr[i] proportional to exp(log_w[i]) (inverse CDF).

    ``log_w`` is overwritten. Rows of -inf get probability 0 (u is drawn in (0, total], so the first
    index whose running sum reaches u always has positive weight). Works in ``log_w``'s dtype.
    """
    log_w -= log_w.max(axis=0)
    np.exp(log_w, out=log_w)
    for i in range(1, log_w.shape[0]):  # running sum down the columns, one vector add per candidate
        np.add(log_w[i - 1], log_w[i], out=log_w[i])
    u = (1.0 - random_state.rng.random(log_w.shape[1], dtype=log_w.dtype)) * log_w[-1]
    return np.minimum(np.count_nonzero(log_w < u, axis=0), log_w.shape[0] - 1)


def exact_select(dist_m: np.ndarray, hs_m: float, epsilon: float, random_state: Sampler) -> np.ndarray:
    """One exponential-mechanism draw per COLUMN of ``dist_m`` (m, n) (score -d, sensitivity HS; inf: not
    allowed), sampled exactly: Pr[j] proportional to exp(-c Q_j), Q_j = ceil(d_j / delta) on the public grid
    delta = 2^(floor(log2 HS) - 16) metres and c = eps / (2 (ceil(HS / delta) + 2)) rounded down to a
    dyadic, the sensitivity of Q (a move of <= HS changes ceil(d / delta) by < HS / delta + 2).

    A uniform candidate is accepted with an exact Bernoulli(exp(-c (Q_j - min Q))) (``dpcore.exact``):
    integer draws from ``random_state.rng`` only, so the float inverse CDF's low-order bits (Mironov 2012) are
    gone; eps-DP (McSherry and Talwar 2007) with no correction."""
    step = 2.0 ** (math.floor(math.log2(hs_m)) - 16)
    q = np.ceil(dist_m / step)
    allowed = np.isfinite(q)
    q_int = np.where(allowed, q, 0.0).astype(np.int64)
    q_min = np.where(allowed, q_int, np.iinfo(np.int64).max).min(axis=0)
    num, bits = dyadic_floor(Fraction(epsilon) / (2 * (math.ceil(hs_m / step) + 2)), 20)
    if bits > 52:
        raise ParameterError(f"epsilon {epsilon:g} is too small for the exact selection; raise it.")
    out = np.empty(dist_m.shape[1], dtype=np.intp)
    live = np.arange(dist_m.shape[1])
    while live.size:
        j = random_state.rng.integers(0, dist_m.shape[0], live.size)
        ok = allowed[j, live]
        ok[ok] = bernoulli_exp(num * (q_int[j[ok], live[ok]] - q_min[live[ok]]), bits, random_state.rng)
        out[live[ok]] = j[ok]
        live = live[~ok]
    return out


def distance_error(users: ArrayLike, d_m: ArrayLike, hs_m: float) -> float:
    """DE = mean over users of mean_t d(t, t_hat) / HS (Zhu et al. 2017, eqs. 12.17-12.18)."""
    codes = pd.factorize(np.asarray(users))[0]
    d = np.asarray(d_m, dtype=float)
    n_visits = np.bincount(codes)
    seen = n_visits > 0
    return float(np.mean(np.bincount(codes, weights=d)[seen] / n_visits[seen]) / hs_m)


def laplace_distance_error(
    users: ArrayLike,
    lat: ArrayLike,
    lon: ArrayLike,
    epsilon: float,
    hs_m: float,
    random_state: int | Sampler | None = None,
) -> float:
    """DE of per-location planar Laplace with eps / HS per metre on every visit (expected value 2 / eps)."""
    la, lo = validate_latlon(lat, lon, table=True)
    z_lat, z_lon = planar_laplace(la, lo, _check_epsilon(epsilon) / hs_m, random_state)
    return distance_error(users, haversine_m(la, lo, z_lat, z_lon), hs_m)


def synthetic_visits(
    lat: ArrayLike,
    lon: ArrayLike,
    n_users: int = 300,
    visits: tuple[int, int] = (3, 12),
    nearby: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Demo visits: each user gets a uniformly random home place, then between ``visits[0]`` and ``visits[1]``
    visits drawn uniformly (with repetition) from the home's ``nearby`` nearest places (seeded numpy)."""
    la, lo = validate_latlon(lat, lon, table=True)
    rng = np.random.default_rng(seed)
    homes = rng.integers(0, la.size, n_users)
    d = haversine_m(la[homes][:, None], lo[homes][:, None], la[None, :], lo[None, :])
    near = np.argsort(d, axis=1)[:, : min(nearby, la.size)]
    counts = rng.integers(visits[0], visits[1] + 1, n_users)
    user = np.repeat(np.arange(n_users), counts)
    place = near[user, rng.integers(0, near.shape[1], user.size)]
    return pd.DataFrame({"user": user, "lat": la[place], "lon": lo[place], "place": place})


def weighted_kmeans_on_grid(
    grid: DensityGrid, k: int, random_state: Sampler, n_iter: int = 30
) -> tuple[FloatArray, FloatArray]:
    """Post-processing of a released grid: Lloyd's k-means on the cell centres (projected metres) weighted by
    max(noisy count, 0); initial centres drawn without replacement with probability proportional to weight."""
    proj = grid.region.projection()
    lv = grid.leaves
    x, y = proj.forward((lv[:, 0] + lv[:, 1]) / 2, (lv[:, 2] + lv[:, 3]) / 2)
    pts = np.column_stack([x, y])
    w = np.maximum(lv[:, 4], 0.0) + 1e-9
    centres = pts[random_state.rng.choice(len(pts), size=k, replace=False, p=w / w.sum())]
    for _ in range(n_iter):
        # argmin_j ||p - c_j||^2 = argmin_j (||c_j||^2 - 2 p.c_j): one matrix product per iteration.
        lab = np.argmin((centres**2).sum(axis=1) - 2.0 * pts @ centres.T, axis=1)
        mass = np.bincount(lab, weights=w, minlength=k)
        sums = np.stack([np.bincount(lab, weights=w * pts[:, j], minlength=k) for j in range(2)], axis=1)
        moved = mass > 0
        centres[moved] = sums[moved] / mass[moved, None]
    return proj.inverse(centres[:, 0], centres[:, 1])


@dataclass(frozen=True)
class Visits:
    """Checked visits with the parts every run reuses (eps-free); locations as given (never clamped).

    ``codes``: user code of each visit; ``labels``: user id of each code; ``index``: input row of each
    visit (after the per-user cap, input order kept); ``uv``: Earth-centred unit vectors (n, 3).
    """

    codes: np.ndarray
    labels: np.ndarray
    index: np.ndarray
    lat: FloatArray
    lon: FloatArray
    uv: FloatArray

    @property
    def n_users(self) -> int:
        return len(self.labels)


def prepare_visits(
    users: ArrayLike,
    lat: ArrayLike,
    lon: ArrayLike,
    region: Region,
    max_visits_per_user: int | None = None,
    random_state: Sampler | None = None,
) -> Visits:
    """Check (user, lat, lon) visits; with ``max_visits_per_user`` m keep min(count, m) random visits per
    user (drawn with ``random_state``, required then)."""
    if not isinstance(region, Region):
        raise ParameterError("PriLocation needs a public region: pass region=Region(lat_min, ...).")
    la, lo = validate_latlon(lat, lon, table=True)
    codes, labels = user_codes(users, la.size)
    keep = np.arange(la.size)
    if max_visits_per_user is not None:
        if random_state is None:
            raise ParameterError("capping visits per user needs the release's sampler.")
        keep = cap_per_user(codes, labels, la, lo, max_visits_per_user, random_state)
    return Visits(codes[keep], labels, keep, la[keep], lo[keep], unit_vectors(la[keep], lo[keep]))


@dataclass(frozen=True)
class PriLocationRun:
    """One run of the three steps. ``kept``: visits kept (positions in ``Visits``, grouped by cluster);
    ``choice``: candidate picked for each kept visit; ``w_true``/``w_noisy``: per (user, cluster) counts;
    ``added_user``/``added_cluster``/``added_choice``: user code, cluster and candidate of each added visit
    (all None in diagnostic runs, which only need the kept visits)."""

    grid: DensityGrid
    c_lat: FloatArray
    c_lon: FloatArray
    cand_lat: FloatArray
    cand_lon: FloatArray
    allowed: np.ndarray
    cluster: np.ndarray
    kept: np.ndarray
    choice: np.ndarray
    w_true: np.ndarray | None
    w_noisy: np.ndarray | None
    added_user: np.ndarray | None = None
    added_cluster: np.ndarray | None = None
    added_choice: np.ndarray | None = None

    def added(self) -> tuple[FloatArray, FloatArray]:
        """Released (lat, lon) of each added visit (full runs only)."""
        assert self.added_cluster is not None and self.added_choice is not None
        return self.cand_lat[self.added_cluster, self.added_choice], self.cand_lon[
            self.added_cluster, self.added_choice
        ]

    def replacements(self) -> tuple[FloatArray, FloatArray]:
        """Released (lat, lon) of each kept visit."""
        cl = self.cluster[self.kept]
        return self.cand_lat[cl, self.choice], self.cand_lon[cl, self.choice]

    def displacement_m(self, visits: Visits) -> FloatArray:
        """Great-circle metres between each kept visit and its replacement (diagnostic)."""
        r_lat, r_lon = self.replacements()
        return haversine_m(visits.lat[self.kept], visits.lon[self.kept], r_lat, r_lon)


def _nearest_centre(uv: FloatArray, centre_uv: FloatArray, chunk: int = 4096) -> np.ndarray:
    """Index of the nearest centre (largest dot product of unit vectors), in cache-sized chunks."""
    out = np.empty(len(uv), dtype=np.intp)
    for s in range(0, len(uv), chunk):
        out[s : s + chunk] = np.argmax(uv[s : s + chunk] @ centre_uv.T, axis=1)
    return out


def _selection_log_weights(
    uv: FloatArray,
    bounds: np.ndarray,
    centre_uv: FloatArray,
    cand_uv: FloatArray,
    allowed: np.ndarray,
    scale: float,
    dtype: type[np.floating],
) -> np.ndarray:
    """(m, n) log-weights -scale ||u - c_j|| of the exponential mechanism (constant eps HS/(2HS) dropped).

    ``uv`` are the kept visits grouped by cluster (cluster j at rows bounds[j]:bounds[j+1]); differences are
    taken relative to the cluster's centre so that float32 keeps sub-metre precision.
    """
    m = cand_uv.shape[1]
    out = np.empty((m, len(uv)), dtype=dtype)
    for j in range(len(centre_uv)):
        s = slice(bounds[j], bounds[j + 1])
        if s.start == s.stop:
            continue
        rel_v = np.ascontiguousarray((uv[s] - centre_uv[j]).T, dtype=dtype)
        rel_c = (cand_uv[j] - centre_uv[j]).astype(dtype)
        blk = out[:, s]
        np.subtract(rel_c[:, :1], rel_v[0], out=blk)
        np.square(blk, out=blk)
        tmp = np.empty_like(blk)
        for axis in (1, 2):
            np.subtract(rel_c[:, axis : axis + 1], rel_v[axis], out=tmp)
            np.square(tmp, out=tmp)
            blk += tmp
        blk[~allowed[j]] = np.inf
    np.sqrt(out, out=out)
    out *= -scale
    return out


def run_prilocation(
    visits: Visits,
    epsilon: float,
    hs_m: float,
    region: Region,
    n_clusters: int,
    grid_size: int | None,
    candidate_step_m: float,
    random_state: Sampler,
    *,
    diagnostic: bool = False,
) -> PriLocationRun:
    """The three PriLocation steps on prepared visits at ``epsilon`` per visit (parameters already checked
    by ``PriLocation``).

    ``diagnostic=True`` (sweeps, never a release) computes the selection in float32 and draws the weight
    noise only for the (user, cluster) pairs with visits: the kept visits, their replacements and so the
    distance error have the same distribution, but the added visits are not produced.
    """
    (_, e_clu), (_, e_w), (_, e_sel) = prilocation_budget(epsilon)
    k = n_clusters
    # 1. Private location clustering: noisy grid, then weighted k-means on it (post-processing).
    grid = uniform_grid(
        visits.lat,
        visits.lon,
        e_clu,
        region,
        neighbours="bounded",
        grid_size=grid_size,
        random_state=random_state,
    )
    if not 1 <= k <= len(grid.leaves):
        raise ParameterError(
            f"n_clusters = {k} must be between 1 and the {len(grid.leaves)} grid cells; lower it or set "
            "grid_size."
        )
    c_lat, c_lon = weighted_kmeans_on_grid(grid, k, random_state)
    # Candidates: public grid points within HS/2 of each centre, inside the region.
    dist, bearing = candidate_offsets(hs_m, candidate_step_m)
    cand_lat, cand_lon = destination_point(c_lat[:, None], c_lon[:, None], bearing[None, :], dist[None, :])
    allowed = region.contains(cand_lat, cand_lon) | (dist == 0)[None, :]
    centre_uv = unit_vectors(c_lat, c_lon)
    cluster = _nearest_centre(visits.uv, centre_uv)

    # 2. Cluster weight perturbation: Laplace(1 / (eps/4)) on every user's count in every cluster.
    pair = visits.codes * k + cluster
    w_true = np.bincount(pair, minlength=visits.n_users * k)
    w_rel = np.zeros(w_true.size, dtype=np.int64)
    if diagnostic:
        occupied = np.flatnonzero(w_true)
        w_noisy = None
        w_rel[occupied] = np.maximum(
            np.rint(w_true[occupied] + random_state.laplace(occupied.size, 1 / e_w)), 0
        )
    else:
        w_noisy = w_true + random_state.laplace(w_true.size, 1.0 / e_w)
        w_rel[:] = np.maximum(np.rint(w_noisy), 0)
    # Keep a uniformly random subset of min(w_rel, w_true) visits per (user, cluster), grouped by cluster.
    group = cluster * visits.n_users + visits.codes
    order = np.argsort(group + random_state.rng.random(group.size))
    grp = group[order]
    first = np.r_[0, np.flatnonzero(np.diff(grp)) + 1]
    rank = np.arange(grp.size) - np.repeat(first, np.diff(np.r_[first, grp.size]))
    kept = order[rank < w_rel[pair[order]]]

    # 3. Private location selection: exponential mechanism over the cluster's candidates.
    # Score HS - d with d the chord R ||u - v||, a metric no larger than the great-circle distance, so a move
    # of at most HS changes every score by at most HS (cheaper than haversine, same sensitivity).
    bounds = np.searchsorted(cluster[kept], np.arange(k + 1))
    cand_uv = unit_vectors(cand_lat, cand_lon)
    if diagnostic:  # float32 inverse CDF: fast, never released
        scale = e_sel * EARTH_RADIUS_M / (2.0 * hs_m)
        uv = visits.uv[kept]
        log_w = _selection_log_weights(uv, bounds, centre_uv, cand_uv, allowed, scale, np.float32)
        choice = sample_log_weights(log_w, random_state)
        return PriLocationRun(
            grid, c_lat, c_lon, cand_lat, cand_lon, allowed, cluster, kept, choice, None, None
        )
    chord_m = -_selection_log_weights(
        visits.uv[kept], bounds, centre_uv, cand_uv, allowed, EARTH_RADIUS_M, np.float64
    )
    choice = exact_select(chord_m, hs_m, e_sel, random_state)
    # Added visits: (w_rel - w_true)+ per (user, cluster), each the selection for a visit at the centre.
    extra = np.maximum(w_rel - w_true, 0)
    pairs = np.flatnonzero(extra)
    added_user = np.repeat(pairs // k, extra[pairs])
    added_cluster = np.repeat(pairs % k, extra[pairs])
    at_centre = -_selection_log_weights(
        centre_uv, np.arange(k + 1), centre_uv, cand_uv, allowed, EARTH_RADIUS_M, np.float64
    )
    added_choice = exact_select(at_centre[:, added_cluster], hs_m, e_sel, random_state)
    return PriLocationRun(
        grid,
        c_lat,
        c_lon,
        cand_lat,
        cand_lon,
        allowed,
        cluster,
        kept,
        choice,
        w_true.reshape(visits.n_users, k),
        w_noisy.reshape(visits.n_users, k),
        added_user,
        added_cluster,
        added_choice,
    )


class PriLocation:
    """PriLocation (Zhu et al. 2017, s.12.4) with a stated neighbour relation (see module docstring).

    (eps, G)-Blowfish-style guarantee: moving one visit by at most HS metres within its released cluster
    changes the probability of any release by at most a factor e^eps; with ``max_visits_per_user`` m, the
    same holds for moving all of one user's (at most m) visits.
    """

    def __init__(
        self,
        epsilon: float,
        region: Region,
        *,
        hs_m: float | None = None,
        level: str | None = None,
        n_clusters: int = 40,
        candidate_step_m: float | None = None,
        max_visits_per_user: int | None = None,
        grid_size: int | None = None,
        random_state: int | Sampler | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.region = region
        self.hs_m = hs_m
        self.level = level
        self.n_clusters = n_clusters
        self.candidate_step_m = candidate_step_m
        self.max_visits_per_user = max_visits_per_user
        self.grid_size = grid_size
        self.random_state = random_state

    def _hs(self) -> float:
        if (self.hs_m is None) == (self.level is None):
            raise ParameterError(
                "give exactly one of hs_m (metres) or level ('street', 'district', 'city', 'region', 'state')"
            )
        return hierarchical_sensitivity(self.hs_m if self.hs_m is not None else self.level)  # type: ignore[arg-type]

    def checked_params(self) -> tuple[float, float, int, float]:
        """(eps, HS metres, number of clusters, candidate step metres), validated."""
        eps = _check_epsilon(self.epsilon)
        hs = self._hs()
        if not isinstance(self.region, Region):
            raise ParameterError("PriLocation needs a public region: pass region=Region(lat_min, ...).")
        if isinstance(self.n_clusters, bool) or not isinstance(self.n_clusters, (int, np.integer)):
            raise ParameterError(f"n_clusters must be a whole number >= 1 (got {self.n_clusters!r}).")
        step = hs / 8 if self.candidate_step_m is None else float(self.candidate_step_m)
        if not (np.isfinite(step) and 0 < step <= hs / 2):
            raise ParameterError(
                f"candidate_step_m must be in (0, HS/2] metres (got {self.candidate_step_m!r})."
            )
        if self.max_visits_per_user is not None:
            check_max_per_user(self.max_visits_per_user)
        return eps, hs, int(self.n_clusters), step

    def fit(self, users: ArrayLike, lat: ArrayLike, lon: ArrayLike) -> PriLocation:
        """Run once; the release is ``released()``, everything ``diagnostic_*`` stays with the curator."""
        eps, hs, k, step = self.checked_params()
        random_state = check_random_state(self.random_state)
        cap = self.max_visits_per_user
        visits = prepare_visits(users, lat, lon, self.region, cap, random_state)
        group = 1 if cap is None else int(cap)
        eps_visit = per_member_epsilon(eps, group)
        run = run_prilocation(visits, eps_visit, hs, self.region, k, self.grid_size, step, random_state)
        assert run.added_user is not None and run.w_noisy is not None  # a full (non-diagnostic) run
        in_order = np.argsort(run.kept, kind="stable")
        kept = run.kept[in_order]
        r_lat, r_lon = (a[in_order] for a in run.replacements())
        a_lat, a_lon = run.added()
        # Released user ids are random pseudonyms (drawn with the release's sampler), never the curator's
        # ids; replaced and added rows are shuffled together and carry no mark.
        pseudonyms = np.array(
            [f"user-{i:05d}" for i in random_state.rng.permutation(visits.n_users)], dtype=object
        )
        users_all = np.r_[visits.codes[kept], run.added_user].astype(np.int64)
        order = random_state.rng.permutation(users_all.size)
        self.table_ = pd.DataFrame(
            {
                "user": pseudonyms[users_all[order]],
                "lat": np.r_[r_lat, a_lat][order],
                "lon": np.r_[r_lon, a_lon][order],
            }
        )
        self.hs_m_ = hs
        self.grid_: DensityGrid = run.grid
        self.epsilon_per_visit_ = eps_visit
        self.group_size_ = group
        self.budget_log_ = prilocation_budget(eps_visit)
        self.budget_spent_ = group * math.fsum(e for _, e in self.budget_log_)
        self.sampling_mode_ = random_state.mode
        self.n_candidates_ = int(run.allowed.sum(axis=1).min()), int(run.allowed.sum(axis=1).max())
        # Diagnostics (true data, never released).
        self.centers_ = np.column_stack([run.c_lat, run.c_lon])
        self.replaced_ = pd.DataFrame({"user": visits.labels[visits.codes[kept]], "lat": r_lat, "lon": r_lon})
        self.diagnostic_weights_ = run.w_true, run.w_noisy
        self.diagnostic_pseudonyms_ = pseudonyms
        self.diagnostic_added_ = np.r_[np.zeros(kept.size, bool), np.ones(run.added_user.size, bool)][order]
        self.diagnostic_kept_index_ = visits.index[kept]
        self.diagnostic_displacement_m_ = haversine_m(visits.lat[kept], visits.lon[kept], r_lat, r_lon)
        self.diagnostic_distance_error_ = (
            distance_error(visits.codes[kept], self.diagnostic_displacement_m_, hs)
            if kept.size
            else float("nan")
        )
        return self

    def released(self) -> pd.DataFrame:
        """The release: one row (user pseudonym, lat, lon) per replaced or added visit, in random order."""
        return self.table_.copy()
