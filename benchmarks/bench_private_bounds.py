"""Coverage of the true range by bounds estimated privately (dpcore.private_bounds, OpenDP's DP quantile at
1% and 99% on the fixed grid) at ε_b = 0.1 for the whole table, on wine (13 features, 178 rows), breast
cancer (30, 569) and the Marketing sample (4 features the walks use, and all 26 numeric ones, 2,216 rows).

Per data set, over ``--runs`` estimates: the median over features of the share of the true range [min, max]
the estimate covers, the share of values inside the estimate, and the estimate's width over the true
range's; the baseline in the same run is the data's own min and max (non-private: coverage 1, width 1).
More features split ε_b further (ε_b / 2d per quantile), so fewer rows per feature mean worse bounds. Each
data set's row count is printed next to the rank error R the Data page states before spending
(``BoundsStep.rank_error``): where R exceeds the rows, the quantiles are near-uniform picks from the grid.

Then the region a location release estimates privately (``dpcore.location.private_region.RegionStep``:
the same quantiles of the latitudes and longitudes on 0.01-degree grids, ε_b / 4 each, one location added
or removed) on the US airports sample (3,376 airports) and on it repeated 10 and 100 times (the same
shape with more rows): per coordinate, the share of the true range [min, max] covered and the width over
the true range's, and the share of airports inside the box; baseline the data's own box (not private).

    .venv/bin/python benchmarks/bench_private_bounds.py [--runs 20] [--epsilon 0.1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpcore.data import load_sample  # noqa: E402
from dpcore.location.private_region import RegionStep  # noqa: E402
from dpcore.private_bounds import BoundsStep  # noqa: E402

WALK_FEATURES = ["Recency", "MntWines", "MntMeatProducts", "NumWebPurchases"]


def tables() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_breast_cancer, load_wine

    market = load_sample("marketing_campaign").dropna(subset=["Income"])
    numeric = market.select_dtypes("number").drop(columns=["ID"])
    numeric = numeric.loc[:, numeric.nunique() > 1]
    return {
        "wine (d=13)": load_wine().data,
        "breast cancer (d=30)": load_breast_cancer().data,
        "marketing (d=4)": market[WALK_FEATURES].to_numpy(float),
        f"marketing (d={numeric.shape[1]})": numeric.to_numpy(float),
    }


def measure(X: np.ndarray, epsilon: float, runs: int, alpha: float) -> dict[str, float]:
    step = BoundsStep(tuple(f"f{j}" for j in range(X.shape[1])), epsilon, alpha=alpha)
    tmin, tmax = X.min(axis=0), X.max(axis=0)
    span = np.where(tmax > tmin, tmax - tmin, 1.0)
    cover, inside, width = [], [], []
    for _ in range(runs):
        lo, hi = step.estimate(X)
        cover.append(np.clip(np.minimum(hi, tmax) - np.maximum(lo, tmin), 0, None) / span)
        inside.append(((X >= lo) & (X <= hi)).mean(axis=0))
        width.append((hi - lo) / span)
    return {
        "rows": X.shape[0],
        "stated rank error R (95%)": step.rank_error(),  # what the Data page says before spending
        "coverage": float(np.median(cover)),
        "rows inside": float(np.median(inside)),
        "width / true range": float(np.median(width)),
    }


def measure_region(lat: np.ndarray, lon: np.ndarray, epsilon: float, runs: int) -> dict[str, float]:
    step = RegionStep(epsilon, "unbounded")
    true = ((lat.min(), lat.max()), (lon.min(), lon.max()))
    cover, width, inside = [], [], []
    for _ in range(runs):
        r = step.estimate(lat, lon)
        box = ((r.lat_min, r.lat_max), (r.lon_min, r.lon_max))
        pairs = list(zip(box, true, strict=True))
        cover.append([max(min(b[1], t[1]) - max(b[0], t[0]), 0) / (t[1] - t[0]) for b, t in pairs])
        width.append([(b[1] - b[0]) / (t[1] - t[0]) for b, t in pairs])
        inside.append(r.contains(lat, lon).mean())
    cover_, width_ = np.median(cover, axis=0), np.median(width, axis=0)
    return {
        "rows": lat.size,
        "stated rank error R (95%)": step.rank_error(),
        "lat coverage": cover_[0],
        "lon coverage": cover_[1],
        "rows inside": float(np.median(inside)),
        "lat width / true": width_[0],
        "lon width / true": width_[1],
    }


def run_region(epsilon: float, runs: int) -> None:
    airports = load_sample("us_airports")
    lat, lon = airports["latitude"].to_numpy(float), airports["longitude"].to_numpy(float)
    rows = {
        f"US airports x{k}": measure_region(np.tile(lat, k), np.tile(lon, k), epsilon, runs)
        for k in (1, 10, 100)
    }
    frame = pd.DataFrame(rows).T
    frame["baseline (data's own box: not private)"] = "1 / 1 / 1"
    print(
        f"\nprivate region at ε_b = {epsilon:g} (OpenDP quantiles 0.01 and 0.99 of lat and lon, 0.01° grids; "
        f"{runs} runs, medians)"
    )
    print(frame.to_string(float_format=lambda v: f"{v:.3g}"))
    for name, r in rows.items():
        print(
            f"region {name}: lat {r['lat coverage']:.2f} / lon {r['lon coverage']:.2f} of the true range "
            f"covered, {r['rows inside']:.2f} of the airports inside, width {r['lat width / true']:.2f} / "
            f"{r['lon width / true']:.2f} of the true range's"
        )


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--alpha", type=float, default=0.01, help="the quantiles alpha and 1 - alpha")
    args = parser.parse_args()
    rows = {name: measure(X, args.epsilon, args.runs, args.alpha) for name, X in tables().items()}
    frame = pd.DataFrame(rows).T
    frame["baseline (data min/max: not private)"] = "1 / 1 / 1"
    print(
        f"private bounds at ε_b = {args.epsilon:g}, quantiles {args.alpha:g} and {1 - args.alpha:g} "
        f"({args.runs} runs; medians over runs and features)"
    )
    print(frame.to_string(float_format=lambda v: f"{v:.3g}"))
    for name, r in rows.items():
        print(f"coverage {name}: {r['coverage']:.2f} of the true range, {r['rows inside']:.2f} rows inside")
    run_region(args.epsilon, args.runs)


if __name__ == "__main__":
    run()
