"""Loading datasets into the session (samples, synthetic blobs, uploads) and reading the bounds editor.

Each loader reads first and only then replaces the current dataset, so a bad file raises ``DataError``
and leaves the previous dataset in place.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from dpcore.data import SAMPLES, Schema
from dpcore.errors import DataError
from dpcore.sessions import store_table
from ui import state

SAMPLE_CHOICES: dict[str, str] = {
    "Sample: Marketing Campaign": "marketing_campaign",
    "Sample: US airports": "us_airports",
}
BOUND_COLUMNS = ("feature", "kind", "lower", "upper")


def load_sample_dataset(label: str) -> state.Dataset:
    """Make a bundled sample (a key of ``SAMPLE_CHOICES``) the current dataset."""
    name = SAMPLE_CHOICES[label]
    return state.set_dataset(
        label, state.sample_table(name), source=SAMPLES[name][2], origin={"sample": name}
    )


def load_blobs_dataset(n_samples: int, n_features: int, centers: int, seed: int) -> state.Dataset:
    """Make synthetic Gaussian blobs the current dataset."""
    params = {"n_samples": int(n_samples), "n_features": int(n_features), "centers": int(centers)}
    table = state.blobs_table(**params, seed=int(seed))
    label = f"Synthetic blobs (n={n_samples}, d={n_features}, {centers} centres, seed {seed})"
    source = "scikit-learn make_blobs (synthetic, no real people)"
    return state.set_dataset(label, table, source=source, origin={"blobs": {**params, "seed": int(seed)}})


def load_upload(filename: str, data: bytes) -> state.Dataset:
    """Read an uploaded file and make it the current dataset; ``DataError`` keeps the previous one."""
    limit_mb = st.get_option("server.maxUploadSize")
    if len(data) > limit_mb * 1024 * 1024:
        raise DataError(
            f"'{filename}' is {len(data) / 2**20:.1f} MB, above the {limit_mb} MB upload limit. Upload a "
            "smaller file (a sample of rows, fewer columns), or raise server.maxUploadSize in "
            ".streamlit/config.toml."
        )
    table = state.upload_table(data, filename)
    detected = table.attrs.get("dpcore_source", "")
    source = f"upload: {filename}" + (f" ({detected})" if detected else "")
    ds = state.set_dataset(filename, table, source=source)
    store_table(table, ds.fingerprint)  # kept by fingerprint: a reload or a restart restores the session
    return ds


def bounds_frame(features: list[str], schema: Schema, stored: Mapping[str, tuple[str, str]]) -> pd.DataFrame:
    """Editor rows: one per feature with its kind and the stored public bounds as text (empty if none)."""
    return pd.DataFrame(
        {
            "feature": features,
            "kind": [schema.kinds[f] for f in features],
            "lower": [stored.get(f, ("", ""))[0] for f in features],
            "upper": [stored.get(f, ("", ""))[1] for f in features],
        },
        columns=list(BOUND_COLUMNS),
    )


def _value(text: object) -> float | str:
    value = str(text).strip()
    try:
        return float(value)
    except ValueError:
        return value  # a date bound such as 2012-01-01, parsed by dpcore.data.prepare


def parse_bounds(edited: pd.DataFrame) -> dict[str, tuple[float | str, float | str]]:
    """Bounds typed in the editor, by feature; rows with both cells empty are skipped.

    Categorical features are skipped (their bounds are fixed by the encoding); a row with only one of the
    two bounds raises ``DataError``.
    """
    out: dict[str, tuple[float | str, float | str]] = {}
    for row in edited.itertuples(index=False):
        lower = "" if pd.isna(row.lower) else str(row.lower).strip()
        upper = "" if pd.isna(row.upper) else str(row.upper).strip()
        if row.kind == "categorical" or (not lower and not upper):
            continue
        if not (lower and upper):
            raise DataError(f"Give both a lower and an upper bound for '{row.feature}', or leave both empty.")
        out[str(row.feature)] = (_value(lower), _value(upper))
    return out
