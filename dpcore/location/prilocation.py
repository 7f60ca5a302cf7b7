"""PriLocation: private release of users' visited locations (seed 002 s.12.4, Xiong et al.).

Budget split (Table 12.3): eps/2 private location clustering, eps/4 Laplace on each user's per-cluster
visit counts (eq. 12.12), eps/4 exponential mechanism replacing each visit by a candidate of its cluster
(score HS - d(t_i, t_j), sensitivity HS, eq. 12.16). HS (metres) is the curator's hierarchy level: the
largest distance between two locations of one unit of that level (Def. 12.3), never taken from the data.

What we implement, and how it differs from the book (whose privacy analysis is informal):

* Clustering: a uniform private grid (Qardaji et al. 2013; ``grids.uniform_grid``, bounded neighbours,
  Laplace(2 / (eps/2)) per cell) over the public region, then weighted k-means on the noisy cell centres
  (post-processing). The book's DP k-means is replaced by this private-grid clustering.
* Candidates are public: points of a square grid of step ``candidate_step_m`` within HS/2 of each released
  centre (so a cluster unit has diameter HS, Def. 12.3) and inside the region. The book selects among the
  users' own locations, which would release other people's exact visits.
* A negative noisy weight deletes uniformly random visits (the book deletes the farthest from the centre,
  a data-dependent choice that breaks the HS bound); a positive one adds the centre (a public point).

Neighbour relation (per visit): one visit's location x replaced by x' with d(x, x') <= HS (great-circle
metres) in the same released cluster. Guarantee: eps for that relation (eps/2 clustering, which even
protects any move; eps/4 weights, unchanged by such a move and calibrated like the book to adding or
removing one visit; eps/4 selection, |q(x, c) - q(x', c)| <= d(x, x') <= HS). Moves to another cluster,
or farther than HS, are not protected by the last step. A user with k visits is protected at k eps for
moving all of them; ``max_visits_per_user`` (public) keeps at most that many visits per user, in input
order. Distance error DE = mean over users of sum d(t, t_hat) / (HS |T|) (eqs. 12.17-12.18), over replaced
visits. The baseline ``laplace_distance_error`` applies planar Laplace with eps / HS per metre to every visit
(eps for every move within HS, in or across clusters: a stronger guarantee at the same eps).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.special import softmax

from dpcore.errors import DataError, ParameterError
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
from dpcore.location.laplace import as_sampler, planar_laplace
from dpcore.mechanisms import Sampler, _check_epsilon

LEVELS: dict[str, float] = {
    "street": 500.0,
    "district": 5_000.0,
    "city": 25_000.0,
    "region": 100_000.0,
    "state": 300_000.0,
}
BUDGET_SPLIT = (("clustering", 0.5), ("weights", 0.25), ("selection", 0.25))


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
    scores: FloatArray, epsilon: float, sensitivity: float, sampler: Sampler
) -> np.ndarray:
    """One exponential-mechanism draw per row: Pr[j] proportional to exp(eps q_j / (2 Delta)) (002 Def. 2.8).

    Rows of ``scores`` may hold -inf for candidates that are not allowed (public exclusions).
    """
    p = softmax(epsilon * scores / (2.0 * sensitivity), axis=1)
    cdf = np.cumsum(p, axis=1)
    u = sampler.rng.random(len(p))[:, None] * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=1), p.shape[1] - 1)


def distance_error(users: ArrayLike, d_m: ArrayLike, hs_m: float) -> float:
    """DE = mean over users of mean_t d(t, t_hat) / HS (seed 002 eqs. 12.17-12.18)."""
    per_user = pd.Series(np.asarray(d_m, dtype=float)).groupby(np.asarray(users)).mean()
    return float(per_user.mean() / hs_m)


def laplace_distance_error(
    users: ArrayLike,
    lat: ArrayLike,
    lon: ArrayLike,
    epsilon: float,
    hs_m: float,
    rng: Sampler | int | None = None,
) -> float:
    """DE of per-location planar Laplace with eps / HS per metre on every visit (expected value 2 / eps)."""
    la, lo = validate_latlon(lat, lon, table=True)
    z_lat, z_lon = planar_laplace(la, lo, _check_epsilon(epsilon) / hs_m, rng)
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
    grid: DensityGrid, k: int, sampler: Sampler, n_iter: int = 30
) -> tuple[FloatArray, FloatArray]:
    """Post-processing of a released grid: Lloyd's k-means on the cell centres (projected metres) weighted by
    max(noisy count, 0); initial centres drawn without replacement with probability proportional to weight."""
    proj = grid.region.projection()
    lv = grid.leaves
    x, y = proj.forward((lv[:, 0] + lv[:, 1]) / 2, (lv[:, 2] + lv[:, 3]) / 2)
    pts = np.column_stack([x, y])
    w = np.maximum(lv[:, 4], 0.0) + 1e-9
    centres = pts[sampler.rng.choice(len(pts), size=k, replace=False, p=w / w.sum())]
    for _ in range(n_iter):
        lab = np.argmin(((pts[:, None, :] - centres[None, :, :]) ** 2).sum(-1), axis=1)
        mass = np.bincount(lab, weights=w, minlength=k)
        sums = np.stack([np.bincount(lab, weights=w * pts[:, j], minlength=k) for j in range(2)], axis=1)
        moved = mass > 0
        centres[moved] = sums[moved] / mass[moved, None]
    return proj.inverse(centres[:, 0], centres[:, 1])


class PriLocation:
    """PriLocation (seed 002 s.12.4) with a stated per-visit neighbour relation (see module docstring).

    (eps, G)-Blowfish-style guarantee: moving one visit by at most HS metres within its released cluster
    changes the probability of any release by at most a factor e^eps.
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
        rng: Sampler | int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.region = region
        self.hs_m = hs_m
        self.level = level
        self.n_clusters = n_clusters
        self.candidate_step_m = candidate_step_m
        self.max_visits_per_user = max_visits_per_user
        self.grid_size = grid_size
        self.rng = rng

    def _hs(self) -> float:
        if (self.hs_m is None) == (self.level is None):
            raise ParameterError(
                "give exactly one of hs_m (metres) or level ('street', 'district', 'city', 'region', 'state')"
            )
        return hierarchical_sensitivity(self.hs_m if self.hs_m is not None else self.level)  # type: ignore[arg-type]

    def fit(self, users: ArrayLike, lat: ArrayLike, lon: ArrayLike) -> PriLocation:
        eps = _check_epsilon(self.epsilon)
        hs = self._hs()
        if not isinstance(self.region, Region):
            raise ParameterError("PriLocation needs a public region: pass region=Region(lat_min, ...).")
        if isinstance(self.n_clusters, bool) or not isinstance(self.n_clusters, (int, np.integer)):
            raise ParameterError(f"n_clusters must be a whole number >= 1 (got {self.n_clusters!r}).")
        la, lo = validate_latlon(lat, lon, table=True)
        user_arr = np.asarray(users)
        if user_arr.shape != la.shape:
            raise DataError("users, lat and lon must have the same length (one row per visit).")
        codes, labels = pd.factorize(user_arr)
        if (codes < 0).any():
            raise DataError("some visits have no user id; drop or fill those rows first.")
        keep = np.arange(la.size)
        if self.max_visits_per_user is not None:
            rank = pd.Series(codes).groupby(codes).cumcount().to_numpy()
            keep = np.flatnonzero(rank < int(self.max_visits_per_user))
        codes, la, lo = codes[keep], *self.region.clip(la[keep], lo[keep])
        sampler = as_sampler(self.rng)
        e_clu, e_w, e_sel = (eps * f for _, f in BUDGET_SPLIT)

        # 1. Private location clustering: noisy grid, then weighted k-means on it (post-processing).
        grid = uniform_grid(
            la, lo, e_clu, self.region, neighbours="bounded", grid_size=self.grid_size, rng=sampler
        )
        k = int(self.n_clusters)
        if not 1 <= k <= len(grid.leaves):
            raise ParameterError(
                f"n_clusters = {k} must be between 1 and the {len(grid.leaves)} grid cells; lower it or set "
                "grid_size."
            )
        c_lat, c_lon = weighted_kmeans_on_grid(grid, k, sampler)

        # Candidates: public grid points within HS/2 of each centre, inside the region.
        step = hs / 8 if self.candidate_step_m is None else float(self.candidate_step_m)
        if not (np.isfinite(step) and 0 < step <= hs / 2):
            raise ParameterError(
                f"candidate_step_m must be in (0, HS/2] metres (got {self.candidate_step_m!r})."
            )
        dist, bearing = candidate_offsets(hs, step)
        cand_lat, cand_lon = destination_point(
            c_lat[:, None], c_lon[:, None], bearing[None, :], dist[None, :]
        )
        allowed = self.region.contains(cand_lat, cand_lon) | (dist == 0)[None, :]

        # Assign visits to the nearest released centre (largest dot product of unit vectors).
        uv = unit_vectors(la, lo)
        cluster = np.argmax(uv @ unit_vectors(c_lat, c_lon).T, axis=1)

        # 2. Cluster weight perturbation: Laplace(1 / (eps/4)) on every user's count in every cluster.
        n_users = len(labels)
        w_true = np.bincount(codes * k + cluster, minlength=n_users * k).reshape(n_users, k)
        w_noisy = w_true + sampler.laplace((n_users, k), 1.0 / e_w)
        w_rel = np.maximum(np.rint(w_noisy), 0).astype(int)
        # Keep a uniformly random subset of min(w_rel, w_true) visits per (user, cluster).
        order = np.lexsort((sampler.rng.random(la.size), codes * k + cluster))
        grp = (codes * k + cluster)[order]
        first = np.r_[0, np.flatnonzero(np.diff(grp)) + 1]
        rank = np.arange(grp.size) - np.repeat(first, np.diff(np.r_[first, grp.size]))
        kept = np.sort(order[rank < w_rel.ravel()[grp]])

        # 3. Private location selection: exponential mechanism over the cluster's candidates.
        # Score metric: the chord R ||u - v||, a metric no larger than the great-circle distance, so a move
        # of at most HS changes every score by at most HS (cheaper than haversine, same sensitivity).
        cl = cluster[kept]
        cand_u = unit_vectors(cand_lat, cand_lon)
        dots = np.empty((kept.size, cand_lat.shape[1]))
        by_cluster = np.argsort(cl, kind="stable")
        bounds = np.searchsorted(cl[by_cluster], np.arange(k + 1))
        for j in range(k):
            rows = by_cluster[bounds[j] : bounds[j + 1]]
            dots[rows] = uv[kept[rows]] @ cand_u[j].T
        d = EARTH_RADIUS_M * np.sqrt(np.clip(2.0 - 2.0 * dots, 0.0, None))
        scores = np.where(allowed[cl], hs - d, -np.inf)
        choice = exponential_select(scores, e_sel, hs, sampler)
        r_lat, r_lon = cand_lat[cl, choice], cand_lon[cl, choice]

        self.replaced_ = pd.DataFrame({"user": labels[codes[kept]], "lat": r_lat, "lon": r_lon})
        self.added_counts_ = np.maximum(w_rel - w_true, 0)
        self.user_labels_ = labels
        self.hs_m_ = hs
        self.grid_: DensityGrid = grid
        self.centers_ = np.column_stack([c_lat, c_lon])
        self.noisy_weights_ = w_noisy
        self.budget_log_ = [(name, eps * f) for name, f in BUDGET_SPLIT]
        self.budget_spent_ = float(sum(e for _, e in self.budget_log_))
        self.sampling_mode_ = sampler.mode
        self.n_candidates_ = int(allowed.sum(axis=1).min()), int(allowed.sum(axis=1).max())
        # Diagnostics (true data, never released).
        self.diagnostic_kept_index_ = keep[kept]
        self.diagnostic_displacement_m_ = haversine_m(la[kept], lo[kept], r_lat, r_lon)
        self.diagnostic_distance_error_ = (
            distance_error(codes[kept], self.diagnostic_displacement_m_, hs) if kept.size else float("nan")
        )
        return self

    def released(self) -> pd.DataFrame:
        """The release: replaced visits, then each cluster centre repeated ``added_counts_`` times a user."""
        eu, ec = np.nonzero(self.added_counts_)
        reps = self.added_counts_[eu, ec]
        added = pd.DataFrame(
            {
                "user": self.user_labels_[np.repeat(eu, reps)],
                "lat": np.repeat(self.centers_[ec, 0], reps),
                "lon": np.repeat(self.centers_[ec, 1], reps),
                "kind": "added",
            }
        )
        return pd.concat([self.replaced_.assign(kind="replaced"), added], ignore_index=True)
