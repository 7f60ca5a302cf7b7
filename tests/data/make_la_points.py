"""Write ``la_points.csv``: 66 synthetic visits of 10 users around Los Angeles (numpy seed 20240610).

Each user has a home point drawn uniformly in lat [33.80, 34.20], lon [-118.60, -118.20] and 3 to 10 visits
scattered about 2 km (Gaussian, clipped to lat [33.7, 34.3], lon [-118.7, -118.1]). Run from the repository
root: ``python tests/data/make_la_points.py``.
"""

from pathlib import Path

import numpy as np
import pandas as pd

SEED = 20240610
VISITS = (3, 4, 5, 6, 7, 8, 9, 10, 8, 6)  # per user: 66 rows


def make() -> pd.DataFrame:
    rng = np.random.default_rng(SEED)
    rows = []
    for i, n in enumerate(VISITS):
        home_lat, home_lon = rng.uniform(33.80, 34.20), rng.uniform(-118.60, -118.20)
        lat = np.clip(home_lat + rng.normal(0.0, 0.018, n), 33.7, 34.3)  # 0.018 deg lat ~ 2 km
        lon = np.clip(home_lon + rng.normal(0.0, 0.022, n), -118.7, -118.1)
        rows += [(f"u{i + 1:02d}", round(a, 5), round(b, 5)) for a, b in zip(lat, lon, strict=True)]
    return pd.DataFrame(rows, columns=["user", "latitude", "longitude"])


if __name__ == "__main__":
    make().to_csv(Path(__file__).with_name("la_points.csv"), index=False)
