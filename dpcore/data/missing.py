"""Missing and infinite values: a per-column report and explicit handling strategies.

"drop" removes rows (a per-row transformation: no leak). "median", "mean" (numeric) and "mode" (any
column) fill cells with a statistic of the data; the filled value depends on every other row, so the
imputation is recorded as a leak (``attrs["dpcore_imputed"]``: column -> strategy here; a
:class:`dpcore.steps.ImputedFeature` in ``PreparedData.leaks`` in ``prepare``).
In numeric columns, +-inf counts as missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from dpcore.errors import DataError

__all__ = ["MISSING_STRATEGIES", "MissingStrategy", "handle_missing", "missing_report"]

MissingStrategy = Literal["drop", "median", "mean", "mode"]
MISSING_STRATEGIES: tuple[str, ...] = ("drop", "median", "mean", "mode")
IMPUTE_ATTR = "dpcore_imputed"


def missing_report(df: pd.DataFrame) -> pd.DataFrame:
    """Per column: number and share of missing values, and number of infinite values (numeric columns)."""
    n = max(len(df), 1)
    infinite = [
        int(np.isinf(df[c].to_numpy(dtype=np.float64, na_value=np.nan)).sum())
        if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        else 0
        for c in df.columns
    ]
    missing = df.isna().sum().to_numpy(dtype=np.int64)
    return pd.DataFrame(
        {"missing": missing, "share": missing / n, "infinite": infinite},
        index=pd.Index(df.columns, name="column"),
    )


def fill_value(values: np.ndarray, strategy: str) -> float:
    finite = values[np.isfinite(values)]
    if strategy == "median":
        return float(np.median(finite))
    if strategy == "mean":
        return float(np.mean(finite))
    uniq, counts = np.unique(finite, return_counts=True)
    return float(uniq[np.argmax(counts)])


def check_strategy(strategy: str) -> None:
    if strategy not in MISSING_STRATEGIES:
        raise DataError(
            f"Unknown missing-value strategy {strategy!r}; choose one of: {', '.join(MISSING_STRATEGIES)}."
        )


def handle_missing(df: pd.DataFrame, columns: Sequence[str], strategy: MissingStrategy) -> pd.DataFrame:
    """Return a copy with missing (and, in numeric columns, infinite) values in ``columns`` handled.

    "drop" removes the rows (no leak); "median"/"mean" (numeric columns) and "mode" (any column) fill them
    with a data-derived value, which is recorded in ``attrs["dpcore_imputed"]`` (column -> strategy) and
    reported by ``prepare`` as a leak when the column is a feature.
    """
    check_strategy(strategy)
    cols = list(columns)
    unknown = [c for c in cols if c not in df.columns]
    if unknown:
        raise DataError(
            f"Unknown column(s) {', '.join(map(repr, unknown))}; choose from: {', '.join(df.columns)}."
        )
    out = df.copy()
    numeric = {
        c for c in cols if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
    }
    bad = {
        c: out[c].isna().to_numpy()
        | (np.isinf(out[c].to_numpy(np.float64, na_value=0.0)) if c in numeric else False)
        for c in cols
    }
    if strategy == "drop":
        rows = np.zeros(len(out), dtype=bool)
        for mask in bad.values():
            rows |= mask
        return out.loc[~rows]
    leaks = dict(out.attrs.get(IMPUTE_ATTR, {}))
    for c in cols:
        if not bad[c].any():
            continue
        if strategy in ("median", "mean") and c not in numeric:
            raise DataError(
                f"Column '{c}' is not numeric, so it has no {strategy}; use 'mode' or 'drop' for it."
            )
        if bad[c].all():
            raise DataError(
                f"Column '{c}' has no valid values to compute a {strategy} from; drop the column."
            )
        if c in numeric:
            value: Any = fill_value(out[c].to_numpy(np.float64, na_value=np.nan), strategy)
            out[c] = out[c].astype(np.float64).mask(bad[c], value)
        else:
            value = out[c].mode(dropna=True).iloc[0]
            out[c] = out[c].mask(bad[c], value)
        leaks[c] = strategy
    out.attrs[IMPUTE_ATTR] = leaks
    return out
