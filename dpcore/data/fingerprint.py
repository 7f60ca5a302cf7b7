"""A content fingerprint of a table: SHA-256 over a canonical, dtype-family-independent serialisation.

Canonical form (version tag ``dpcore-fingerprint-v1``): the shape, then per column its name, its family and
its values. Families: for any int/float dtype, nullable or not, "integer" (all values finite and whole,
hashed as int64) or "float" (float64 with one NaN pattern and -0.0 == 0.0); "bool" (no missing values),
"datetime" (int64 nanoseconds since 1970, UTC for time-zone aware columns) and "text" (everything else,
values as strings, JSON-encoded). So the same values read from CSV or Parquet (int64 vs float64 vs Int64)
give the same fingerprint. Row order and column order matter; the index and ``attrs`` do not.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd

__all__ = ["fingerprint"]


def _column_bytes(s: pd.Series) -> tuple[str, bytes]:
    if pd.api.types.is_bool_dtype(s) and not s.isna().any():
        return "bool", s.to_numpy(dtype=np.int8).tobytes()
    if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
        values = s.to_numpy(dtype=np.float64, na_value=np.nan)
        finite = np.isfinite(values)
        if finite.all() and np.all(values == np.round(values)) and np.all(np.abs(values) < 2.0**63):
            ints = s.to_numpy(dtype=np.int64) if pd.api.types.is_integer_dtype(s) else values.astype(np.int64)
            return "integer", ints.astype("<i8").tobytes()
        values = np.where(np.isnan(values), np.nan, values + 0.0)
        return "float", values.astype("<f8").tobytes()
    if pd.api.types.is_datetime64_any_dtype(s):
        stamps = s.dt.tz_convert("UTC").dt.tz_localize(None) if isinstance(s.dtype, pd.DatetimeTZDtype) else s
        ns = stamps.astype("datetime64[ns]").to_numpy().view(np.int64)
        return "datetime", ns.astype("<i8").tobytes()
    values = [
        None if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v) for v in s.astype(object)
    ]
    return "text", json.dumps(values, ensure_ascii=False).encode("utf-8")


def fingerprint(df: pd.DataFrame) -> str:
    """SHA-256 hex digest of the table's canonical serialisation (deterministic across processes)."""
    h = hashlib.sha256(b"dpcore-fingerprint-v1\n")
    h.update(json.dumps([int(df.shape[0]), int(df.shape[1])]).encode())
    for name in df.columns:
        family, payload = _column_bytes(df[name])
        h.update(json.dumps([str(name), family, len(payload)], ensure_ascii=False).encode("utf-8"))
        h.update(payload)
    return h.hexdigest()
