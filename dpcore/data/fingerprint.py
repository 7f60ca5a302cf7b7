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
import io
import json
import os
import tempfile
from collections.abc import Iterator

import numpy as np
import pandas as pd

from dpcore.errors import DataError

__all__ = ["FingerprintStream", "fingerprint"]


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


class FingerprintStream:
    """:func:`fingerprint` of a table read in row chunks, in one pass with memory bounded by a chunk.

    The canonical form is column-major and a column's family (integer or float, bool or text) depends on
    all of its values, so each column's canonical bytes are spilled to a temporary file as the chunks
    arrive and hashed in column order by :meth:`hexdigest`. The chunks' dtypes may differ the way chunked
    readers make them differ from the whole table's: integers in a chunk without missing values and floats
    in one with (any missing value makes the column float), bools without and objects with missing values
    (text), or a chunk whose values are all missing. ``fingerprint(pd.concat(chunks))`` equals the digest.
    Use as a context manager (or call :meth:`close`) so the spill files are removed.
    """

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dpcore-fingerprint-")
        self._columns: list[str] | None = None
        self._records: list[list[tuple[str, int, int, int]]] = []  # per column: (kind, bytes, rows, trues)
        self._whole: list[bool] = []  # per column: every numeric value finite, whole and below 2**63
        self.n_rows = 0

    def __enter__(self) -> FingerprintStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the spill files."""
        self._dir.cleanup()

    def _path(self, j: int) -> str:
        return os.path.join(self._dir.name, f"{j}.bin")

    def update(self, chunk: pd.DataFrame) -> None:
        """Add the next rows (same column names, in the same order, as the first chunk)."""
        names = [str(c) for c in chunk.columns]
        if self._columns is None:
            self._columns = names
            self._records = [[] for _ in names]
            self._whole = [True] * len(names)
        elif names != self._columns:
            raise DataError("The chunks of a table must have the same columns in the same order.")
        if len(chunk) == 0:
            return
        for j, name in enumerate(chunk.columns):
            kind, payload, trues = self._chunk_bytes(j, chunk[name])
            with open(self._path(j), "ab") as out:
                out.write(payload)
            self._records[j].append((kind, len(payload), len(chunk), trues))
        self.n_rows += len(chunk)

    def _chunk_bytes(self, j: int, s: pd.Series) -> tuple[str, bytes, int]:
        if pd.api.types.is_bool_dtype(s) and not s.isna().any():
            values = s.to_numpy(dtype=np.int8)
            return "bool", values.tobytes(), int(values.sum())
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            values = s.to_numpy(dtype=np.float64, na_value=np.nan)
            finite = np.isfinite(values)
            whole = finite.all() and np.all(values == np.round(values)) and np.all(np.abs(values) < 2.0**63)
            self._whole[j] &= bool(whole)
            if pd.api.types.is_integer_dtype(s) and whole:  # uint64 beyond int64 goes as a float, as whole
                return "int", s.to_numpy(dtype=np.int64).astype("<i8").tobytes(), 0
            return "float", np.where(np.isnan(values), np.nan, values + 0.0).astype("<f8").tobytes(), 0
        if pd.api.types.is_datetime64_any_dtype(s):
            return "datetime", _column_bytes(s)[1], 0
        if s.isna().all():
            return "null", b"", 0
        return "text", _column_bytes(s)[1][1:-1], 0  # the JSON list's items, without the brackets

    def _family(self, j: int) -> str:
        kinds = {r[0] for r in self._records[j]} - {"null"}
        if kinds <= {"int", "float"} and kinds:
            nulls = any(r[0] == "null" for r in self._records[j])
            return "integer" if self._whole[j] and not nulls else "float"
        if kinds == {"bool"} and all(r[0] == "bool" for r in self._records[j]):
            return "bool"
        if kinds == {"datetime"}:
            return "datetime"
        if kinds <= {"bool", "text"}:
            return "text"
        name = self._columns[j] if self._columns else j
        raise DataError(
            f"Column '{name}' holds numbers in some rows and text or dates in others; cast it to one type "
            "(e.g. CAST(... AS TEXT) in the SELECT) and load it again."
        )

    def _pieces(self, j: int, family: str) -> tuple[int, Iterator[bytes]]:
        """Length and bytes of column ``j``'s canonical payload, read back from its spill file."""
        records = self._records[j]
        if family == "bool":
            return sum(r[2] for r in records), self._read(j, records, family)
        if family != "text":
            return 8 * sum(r[2] for r in records), self._read(j, records, family)
        items = {
            "text": lambda r: r[1],
            "null": lambda r: 4 * r[2] + 2 * (r[2] - 1),
            "bool": lambda r: 6 * r[3] + 7 * (r[2] - r[3]) + 2 * (r[2] - 1),
        }
        length = 2 + sum(items[r[0]](r) for r in records) + 2 * (len(records) - 1 if records else 0)
        return length, self._read(j, records, family)

    def _read(self, j: int, records: list[tuple[str, int, int, int]], family: str) -> Iterator[bytes]:
        """The spilled chunks of column ``j`` rendered in ``family`` (a text list gets its brackets)."""
        if family == "text":
            yield b"["
        path = self._path(j)
        with open(path, "rb") if os.path.exists(path) else io.BytesIO() as src:
            for i, (kind, size, rows, _) in enumerate(records):
                raw = src.read(size)
                if family == "text" and i:
                    yield b", "
                yield _render(kind, raw, rows, family)
        if family == "text":
            yield b"]"

    def hexdigest(self) -> str:
        """:func:`fingerprint` of all the rows added so far, in order."""
        columns = self._columns or []
        h = hashlib.sha256(b"dpcore-fingerprint-v1\n")
        h.update(json.dumps([self.n_rows, len(columns)]).encode())
        for j, name in enumerate(columns):
            family = self._family(j)
            length, pieces = self._pieces(j, family)
            h.update(json.dumps([name, family, length], ensure_ascii=False).encode("utf-8"))
            for piece in pieces:
                h.update(piece)
        return h.hexdigest()


def _render(kind: str, raw: bytes, rows: int, family: str) -> bytes:
    """A spilled chunk's bytes in its column's final family."""
    if kind == "null":  # missing in every row: null items, NaN or NaT
        if family == "text":
            return ", ".join(["null"] * rows).encode()
        if family == "datetime":
            return np.full(rows, np.iinfo(np.int64).min, dtype="<i8").tobytes()
        return np.full(rows, np.nan, dtype="<f8").tobytes()
    if family == "text":  # bool chunk in a column with missing values: "True" / "False" items
        if kind == "text":
            return raw
        flags = np.frombuffer(raw, dtype=np.int8)
        return ", ".join('"True"' if f else '"False"' for f in flags).encode()
    if kind == "int" and family == "float":
        return np.frombuffer(raw, dtype="<i8").astype("<f8").tobytes()
    if kind == "float" and family == "integer":
        return np.frombuffer(raw, dtype="<f8").astype("<i8").tobytes()
    return raw
