"""A deterministic synthetic road network and the GPS trips people make on it (test and demo data).

The network: a jittered lattice of intersections over a public region (about 20 x 20 km by default), with
every sixth street an arterial (25 m/s) and the rest local streets (10 m/s), a tenth of the local
segments removed. Each person has a home (drawn from a broad residential density) and a workplace (drawn
towards three centres), and makes 1 to 4 trips: home to work, work to home, and errands to a random
intersection (in the evening). Drivers (three in four) follow the fastest route, walkers and cyclists
(1.4 to 5 m/s) the shortest one. A trip is sampled every 30 s along its route (speed varying 70-100% of
the street's) with 8 m of GPS noise; morning trips start around 08:00, evening ones around 17:30 (UTC).

Everything follows from ``seed``: the same arguments give the same table on every machine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region

__all__ = ["DEFAULT_REGION", "road_trips"]

DEFAULT_REGION = Region(44.91, 45.09, 6.87, 7.13)
_SIDE = 25  # intersections per side
_STEP_S = 30.0
_GPS_M = 8.0
_DAY = np.datetime64("2026-03-02T00:00:00", "s")


def _network(region: Region, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node x, node y in metres, edges as rows (i, j, length m, speed m/s)) on the region's plane."""
    proj = region.projection()
    bx, by = proj.forward(*region.boundary(50))
    x0, x1, y0, y1 = bx.min(), bx.max(), by.min(), by.max()
    gx, gy = np.meshgrid(np.linspace(0.04, 0.96, _SIDE), np.linspace(0.04, 0.96, _SIDE))
    jitter = rng.uniform(-0.012, 0.012, (2, _SIDE, _SIDE))
    x = (x0 + (gx + jitter[0]) * (x1 - x0)).ravel()
    y = (y0 + (gy + jitter[1]) * (y1 - y0)).ravel()
    idx = np.arange(_SIDE * _SIDE).reshape(_SIDE, _SIDE)
    row, col = np.divmod(idx, _SIDE)
    edges = []
    for a, b, lane in ((idx[:, :-1], idx[:, 1:], row[:, :-1]), (idx[:-1, :], idx[1:, :], col[:-1, :])):
        arterial = lane.ravel() % 6 == 0
        keep = arterial | (rng.random(arterial.size) > 0.1)
        i, j = a.ravel()[keep], b.ravel()[keep]
        speed = np.where(arterial[keep], 25.0, 10.0)
        edges.append(np.c_[i, j, np.hypot(x[i] - x[j], y[i] - y[j]), speed])
    return x, y, np.concatenate(edges)


def _routes(n: int, edges: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """All-pairs predecessors of the undirected network weighted by ``weight``."""
    i, j = edges[:, 0].astype(int), edges[:, 1].astype(int)
    graph = coo_matrix((np.r_[weight, weight], (np.r_[i, j], np.r_[j, i])), shape=(n, n)).tocsr()
    return dijkstra(graph, return_predecessors=True)[1]


def _path(pred: np.ndarray, a: int, b: int) -> list[int]:
    out = [b]
    while out[-1] != a:
        out.append(int(pred[a, out[-1]]))
        if out[-1] < 0:
            return []
    return out[::-1]


def road_trips(
    n_people: int = 1000,
    *,
    seed: int = 0,
    region: Region = DEFAULT_REGION,
    step_s: float = _STEP_S,
    first_person: int = 0,
) -> pd.DataFrame:
    """Fixes of ``n_people`` people on the synthetic road network: columns ``person`` (text id), ``trip``
    (1, 2, ... per person), ``time`` (UTC, tz-aware), ``lat``, ``lon``, one row per fix. ``first_person``
    > 0 numbers the people from there and draws them from their own stream, on the same network: a large
    table is made in chunks."""
    if isinstance(n_people, bool) or not isinstance(n_people, int | np.integer) or n_people < 1:
        raise ParameterError(f"n_people must be a whole number >= 1 (got {n_people!r}).")
    rng = np.random.default_rng(seed)
    x, y, edges = _network(region, rng)
    if first_person:
        rng = np.random.default_rng([seed, first_person])
    n = x.size
    speed_of = {}
    for i, j, _, s in edges:
        speed_of[(int(i), int(j))] = speed_of[(int(j), int(i))] = s
    drive = _routes(n, edges, edges[:, 2] / edges[:, 3])
    walk = _routes(n, edges, edges[:, 2])
    cx, cy = x.mean(), y.mean()
    span = x.max() - x.min()
    centres = np.array([[cx, cy], [cx - 0.25 * span, cy + 0.2 * span], [cx + 0.3 * span, cy - 0.15 * span]])
    d_centre = np.hypot(x[:, None] - centres[:, 0], y[:, None] - centres[:, 1]).min(axis=1)
    p_work = np.exp(-((d_centre / (0.08 * span)) ** 2))
    p_work /= p_work.sum()
    p_home = np.exp(-((np.hypot(x - cx, y - cy) / (0.45 * span)) ** 2))
    p_home /= p_home.sum()
    homes = rng.choice(n, n_people, p=p_home)
    works = rng.choice(n, n_people, p=p_work)
    n_trips = rng.choice([1, 2, 3, 4], n_people, p=[0.15, 0.55, 0.2, 0.1])
    walker = rng.random(n_people) < 0.25
    frames = []
    for p in range(n_people):
        h, w = int(homes[p]), int(works[p])
        if w == h:
            w = int(rng.integers(n))
        legs = [(h, w, 8.0), (w, h, 17.5)]
        for _ in range(int(n_trips[p]) - 2):
            legs.append((h, int(rng.integers(n)), 19.0 + 2 * rng.random()))
        clock = -np.inf
        for k, (a, b, hour) in enumerate(legs[: int(n_trips[p])]):
            if a == b:
                continue
            path = _path(walk if walker[p] else drive, a, b)
            if len(path) < 2:
                continue
            seg = np.hypot(np.diff(x[path]), np.diff(y[path]))
            if walker[p]:
                v = np.full(seg.size, rng.uniform(1.4, 5.0))
            else:
                v = np.array([speed_of[(path[i], path[i + 1])] for i in range(seg.size)])
                v = v * rng.uniform(0.7, 1.0, seg.size)
            t_node = np.r_[0.0, np.cumsum(seg / v)]
            t = np.arange(0.0, t_node[-1] + step_s, step_s)
            t[-1] = min(t[-1], t_node[-1])
            px = np.interp(t, t_node, x[path]) + rng.normal(0, _GPS_M, t.size)
            py = np.interp(t, t_node, y[path]) + rng.normal(0, _GPS_M, t.size)
            start = max(hour * 3600 + rng.normal(0, 2400), clock + 1800)
            clock = start + t[-1]
            frames.append((p, k + 1, start + t, px, py))
    person = np.concatenate([np.full(f[2].size, f[0]) for f in frames]) + first_person
    lat, lon = region.projection().inverse(
        np.concatenate([f[3] for f in frames]), np.concatenate([f[4] for f in frames])
    )
    lat, lon = region.clip(lat, lon)
    seconds = np.concatenate([f[2] for f in frames])
    return pd.DataFrame(
        {
            "person": np.char.add("p", np.char.zfill(person.astype(str), 6)),
            "trip": np.concatenate([np.full(f[2].size, f[1]) for f in frames]),
            "time": pd.to_datetime(_DAY + np.round(seconds * 1000).astype("timedelta64[ms]"), utc=True),
            "lat": np.round(lat, 6),
            "lon": np.round(lon, 6),
        }
    )
