"""Bundled sample tables (``dpcore/samples``) and synthetic blobs for demos and tests."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd

from dpcore.data.io import load_table
from dpcore.errors import DataError

__all__ = ["SAMPLES", "load_sample", "make_blobs"]

SAMPLES: dict[str, tuple[str, str, str]] = {
    "marketing_campaign": (
        "marketing_campaign.csv",
        "2,240 customers of a retailer: demographics, spending and campaign responses (29 columns).",
        "Kaggle 'Marketing Campaign' data set (Rodolfo Saldanha, May 2020), used in the colored-noise paper "
        "(Ravi, Scaglione, Peisert, Section 4).",
    ),
    "us_airports": (
        "us_airports.csv",
        "3,376 US airports with IATA code, name, city, state and WGS84 latitude/longitude.",
        "The 'airports' table bundled with the vega_datasets package (BSD-3-Clause).",
    ),
}


def load_sample(name: str) -> pd.DataFrame:
    """Load a bundled sample by key of ``SAMPLES`` through :func:`load_table`."""
    if name not in SAMPLES:
        raise DataError(f"Unknown sample {name!r}; choose one of: {', '.join(SAMPLES)}.")
    filename = SAMPLES[name][0]
    data = resources.files("dpcore").joinpath("samples", filename).read_bytes()
    return load_table(data, filename=filename)


def make_blobs(
    n_samples: int = 1000,
    n_features: int = 2,
    centers: int = 4,
    cluster_std: float = 1.0,
    seed: int | None = None,
) -> pd.DataFrame:
    """Isotropic Gaussian blobs as a table with columns x1..xd (synthetic demo data, not a release).

    As scikit-learn's ``make_blobs``: centres uniform in [-10, 10]^d, rows split as evenly as possible
    between the centres in random order, N(0, cluster_std^2) noise per coordinate.
    """
    if n_samples < 2 or n_features < 1 or centers < 1 or not cluster_std > 0:
        raise DataError(
            "make_blobs needs n_samples >= 2, n_features >= 1, centers >= 1 and cluster_std > 0; "
            f"got {n_samples}, {n_features}, {centers}, {cluster_std}."
        )
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10.0, 10.0, size=(centers, n_features))
    labels = rng.permutation(np.arange(n_samples) % centers)
    X = centres[labels] + rng.normal(scale=cluster_std, size=(n_samples, n_features))
    return pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(n_features)])
