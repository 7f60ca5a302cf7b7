"""Time opening the K-means page with its defaults on a 607,000 x 10 table (the size of a 50 MB upload),
prepared with public bounds (target: < 5 s).

The page's work on opening: the elbow chart (10 K x 4 k-means++ fits, on a uniform sample of
``ui.kmeans_view.ELBOW_ROWS`` rows) and the non-private clustering the local mechanisms need (k-means++
starts on ``dpcore.kmeans.sweep.SEED_ROWS`` rows, then one Lloyd run on every row). Baseline, in the same
process: one scikit-learn KMeans fit (K = 4, n_init = 10) on the whole table, what the clustering alone cost
before (the elbow's 40 full-table fits came on top).

    .venv/bin/python benchmarks/bench_kmeans_page.py [--rows 607000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the app's ui package, as the app's own folder
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DPCORE_DATA_DIR", tempfile.mkdtemp(prefix="bench-kmeans-page-"))

import numpy as np  # noqa: E402 (after the environment above)
import pandas as pd  # noqa: E402 (after the environment above)
from sklearn.cluster import KMeans  # noqa: E402 (after the environment above)
from streamlit.testing.v1 import AppTest  # noqa: E402 (after the environment above)

from dpcore.data import fingerprint, infer_schema, prepare  # noqa: E402 (after the environment above)
from ui.state import Dataset  # noqa: E402 (after the environment above)

APP = str(ROOT / "app.py")
TARGET_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=607_000)
    rows = parser.parse_args().rows
    rng = np.random.default_rng(0)
    values = rng.normal(0, 100, (rows, 10))  # no cluster structure: Lloyd's slowest case
    raw = pd.DataFrame(values, columns=[f"c{i}" for i in range(10)])
    schema = infer_schema(raw)
    bounds = {c: (-500.0, 500.0) for c in raw.columns}
    prep = prepare(raw, schema, list(raw.columns), scaling="minmax", bounds=bounds)
    ds = Dataset(
        name="big.csv", raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw), prepared=prep
    )
    at = AppTest.from_file(APP, default_timeout=900)
    at.session_state["dp_dataset"] = ds
    at.run()
    start = time.perf_counter()
    at.switch_page("pages/kmeans.py").run()
    page = time.perf_counter() - start
    if at.exception:
        raise SystemExit(f"the page failed: {at.exception[0].value}")
    start = time.perf_counter()
    KMeans(n_clusters=4, n_init=10, random_state=0).fit(prep.X)
    baseline = time.perf_counter() - start
    verdict = "meets" if page < TARGET_S else "misses"
    print(f"baseline: one full-table KMeans (K = 4, n_init = 10) {baseline:.2f} s")
    print(
        f"kmeans page {rows:,} x 10 opens in {page:.2f} s ({page / baseline:.2f} x the baseline; {verdict} "
        f"< {TARGET_S:g} s; load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
