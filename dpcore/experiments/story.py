"""Write the shipped samples' stories (``dpcore/samples/story/<sample>.csv``) read by the Present page.

``python -m dpcore.experiments.story [--out DIR] [--trials N] [--seed S]``

Reproducible: diagnostic noise with a fixed seed (``dpcore.story.story_trials``), so the same arguments
write the same files. Nothing here is a release.

- Marketing Campaign: the colored-noise paper's preprocessing (``dpcore.experiments.marketing``: 2,216
  customers, 28 standardised columns, K = 4), each column mapped to [0, 1] by its min and max. The
  bounds are the sample's own range: acceptable for a public sample, not for a release.
- US airports: the airports inside the public box of the contiguous United States (latitude 24 to 50,
  longitude −125 to −66), projected to kilometres (azimuthal equidistant, ``PlaneMap``), K = 5 hubs; the
  bounds are the box's projection (public).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dpcore.story import STORY_EPS, story_trials

OUT = Path(__file__).resolve().parents[1] / "samples" / "story"
SEED = 0
TRIALS = 20
REGION = (24.0, 50.0, -125.0, -66.0)
HUBS = 5


def marketing() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], bool]:
    """Features in [0, 1] (by the sample's own range), K = 4 true labels, the unit box, mixed units."""
    from dpcore.experiments.marketing import load_marketing

    data = load_marketing()
    lo, hi = data.bounds
    X = (data.X - lo) / (hi - lo)
    return X, data.labels, (np.zeros(X.shape[1]), np.ones(X.shape[1])), False


def airports() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], bool]:
    """Airports of the contiguous US in km (east, north of the box centre), K = 5 hubs, the box in km."""
    from dpcore.data import load_sample
    from dpcore.kmeans.sweep import true_clustering
    from dpcore.location.geometry import PlaneMap, Region

    table = load_sample("us_airports")
    region = Region(*REGION)
    inside = region.contains(table["latitude"], table["longitude"])
    plane = PlaneMap.of(region)
    x, y = plane.forward(table.loc[inside, "latitude"], table.loc[inside, "longitude"])
    X = np.column_stack([x, y]) / 1000.0
    labels = true_clustering(X, HUBS, random_state=SEED)[0]
    return X, labels, (plane.lower / 1000.0, plane.upper / 1000.0), True


SOURCES = {"marketing_campaign": marketing, "us_airports": airports}
NOTES = {
    "marketing_campaign": "Marketing Campaign sample, 4 segments; bounds: the public sample's own range",
    "us_airports": "US airports sample inside latitude 24..50, longitude -125..-66 (public box), 5 hubs",
}


def write(out: Path = OUT, trials: int = TRIALS, seed: int = SEED) -> list[Path]:
    """Write one CSV per sample into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, source in SOURCES.items():
        X, labels, bounds, same_unit = source()
        frame = story_trials(X, labels, bounds, STORY_EPS, trials, random_state=seed, same_unit=same_unit)
        head = (
            f"# {NOTES[key]}. DP-Lloyd, {trials} trials per ε, diagnostic noise with seed {seed} "
            "(python -m dpcore.experiments.story); not a release.\n"
        )
        path = out / f"{key}.csv"
        path.write_text(head + _csv(frame), encoding="utf-8")
        written.append(path)
    return written


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format="%.5g", lineterminator="\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for path in write(args.out, args.trials, args.seed):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
