"""Column kinds of a table, inferred from names and values, overridable by the curator.

Rules (first match wins):
* datetime dtype -> ``date``; bool -> ``categorical``.
* numbers: ``latitude``/``longitude`` when the name has a token lat/latitude (lon/lng/longitude, or is
  "long") and every value is in [-90, 90] ([-180, 180]); ``identifier`` when a name token is
  id/iata/icao/code/key/uuid/guid and all values are distinct; otherwise ``numeric``.
* text: ``numeric`` when every value is a number; ``date`` when every value parses with one explicit
  format (ISO 8601, then m/d/Y, d/m/Y, ...): day-first is chosen when some first field exceeds 12
  (so only d/m/Y parses), and a column where both orders parse is noted as ambiguous (month-first assumed,
  except for dotted dates); ``identifier`` when the name says so and values are distinct, or when every
  value is a distinct string; otherwise ``categorical``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

import pandas as pd

from dpcore.data.encoding import CategoricalEncoding, DateEncoding
from dpcore.errors import DataError

__all__ = ["KINDS", "ColumnKind", "Schema", "column_encoding", "infer_date_format", "infer_schema"]

ColumnKind = Literal["numeric", "categorical", "date", "latitude", "longitude", "identifier"]
KINDS: tuple[str, ...] = get_args(ColumnKind)

_ID_TOKENS = {"id", "iata", "icao", "code", "key", "uuid", "guid"}
_LAT_TOKENS = {"lat", "latitude"}
_LON_TOKENS = {"lon", "lng", "longitude"}
_DATE_LIKE = re.compile(
    r"^\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?)?$"
)
_DATE_FORMATS = (
    "ISO8601",
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M:%S",
    "%m/%d/%Y",
    "%d/%m/%Y",
    "%m/%d/%Y %H:%M",
    "%d/%m/%Y %H:%M",
    "%m/%d/%Y %H:%M:%S",
    "%d/%m/%Y %H:%M:%S",
    "%m-%d-%Y",
    "%d-%m-%Y",
    "%d.%m.%Y",
    "%d.%m.%Y %H:%M",
    "%d.%m.%Y %H:%M:%S",
    "%m/%d/%y",
    "%d/%m/%y",
    "%d.%m.%y",
)


@dataclass(frozen=True)
class Schema:
    """Kind per column, explicit date formats, curator-declared (public) category lists, and notes."""

    kinds: dict[str, ColumnKind]
    date_formats: dict[str, str] = field(default_factory=dict)
    categories: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def _check_column(self, column: str) -> None:
        if column not in self.kinds:
            raise DataError(f"Column '{column}' is not in the table; choose one of: {', '.join(self.kinds)}.")

    def with_kind(self, column: str, kind: str) -> Schema:
        """A new Schema with ``column`` marked as ``kind`` (validated against the data in ``prepare``)."""
        self._check_column(column)
        if kind not in KINDS:
            raise DataError(f"Unknown column kind '{kind}'; choose one of: {', '.join(KINDS)}.")
        return replace(self, kinds={**self.kinds, column: kind})  # type: ignore[dict-item]

    def with_date_format(self, column: str, fmt: str) -> Schema:
        """A new Schema parsing ``column`` as dates with the strptime format ``fmt`` (e.g. '%d/%m/%Y')."""
        self._check_column(column)
        if not isinstance(fmt, str) or "%" not in fmt:
            raise DataError(
                f"Date format {fmt!r} for '{column}' is not a strptime format; use e.g. '%d/%m/%Y'."
            )
        notes = {k: v for k, v in self.notes.items() if k != column}
        return replace(
            self,
            kinds={**self.kinds, column: "date"},
            date_formats={**self.date_formats, column: fmt},
            notes=notes,
        )

    def with_categories(self, column: str, categories: Sequence[Any]) -> Schema:
        """A new Schema declaring the public category list of ``column`` (codes follow the given order)."""
        self._check_column(column)
        cats = tuple(categories)
        if not cats:
            raise DataError(f"The category list for '{column}' is empty; give at least one category.")
        if len(set(cats)) != len(cats):
            raise DataError(f"The category list for '{column}' repeats a category; give each category once.")
        return replace(
            self, kinds={**self.kinds, column: "categorical"}, categories={**self.categories, column: cats}
        )

    def columns(self, *kinds: str) -> list[str]:
        """Columns of the given kinds, in table order."""
        return [c for c, k in self.kinds.items() if k in kinds]

    def to_frame(self) -> pd.DataFrame:
        """One row per column: kind, date format, declared categories, note (for display)."""
        return pd.DataFrame(
            {
                "column": list(self.kinds),
                "kind": list(self.kinds.values()),
                "date format": [self.date_formats.get(c, "") for c in self.kinds],
                "public categories": [", ".join(map(str, self.categories.get(c, ()))) for c in self.kinds],
                "note": [self.notes.get(c, "") for c in self.kinds],
            }
        )


def _tokens(name: str) -> set[str]:
    return {t.lower() for t in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)}


def infer_date_format(series: pd.Series) -> tuple[str | None, str]:
    """The first preferred format that parses every value, and a note when day/month is ambiguous."""
    values = pd.Series(series.dropna().astype(str).str.strip().unique())
    if values.empty or not values.str.match(_DATE_LIKE).all():
        return None, ""
    parsed: dict[str, pd.Series] = {}
    for fmt in _DATE_FORMATS:
        try:
            out = pd.to_datetime(values, format=fmt, errors="coerce")
        except (ValueError, TypeError):
            continue
        if out.notna().all():
            parsed[fmt] = out
    if not parsed:
        return None, ""
    chosen, *others = parsed
    rivals = [f for f in others if not parsed[f].equals(parsed[chosen])]
    note = ""
    if rivals:
        note = (
            f"Day and month are ambiguous (no value has a field above 12); assumed '{chosen}'. "
            f"If the file uses '{rivals[0]}', set it with schema.with_date_format."
        )
    return chosen, note


def _infer_column(name: str, s: pd.Series) -> tuple[ColumnKind, str | None, str]:
    tokens = _tokens(name)
    non_null = s.dropna()
    distinct = len(non_null) == len(s) and non_null.is_unique
    if pd.api.types.is_datetime64_any_dtype(s):
        return "date", None, ""
    if pd.api.types.is_bool_dtype(s):
        return "categorical", None, ""
    if pd.api.types.is_numeric_dtype(s):
        is_lat, is_lon = bool(tokens & _LAT_TOKENS), bool(tokens & _LON_TOKENS) or name.lower() == "long"
        if is_lat != is_lon and not non_null.empty:
            limit = 90.0 if is_lat else 180.0
            if bool(non_null.abs().le(limit).all()):
                return ("latitude" if is_lat else "longitude"), None, ""
        if tokens & _ID_TOKENS and distinct:
            return "identifier", None, ""
        return "numeric", None, ""
    if not non_null.empty and pd.to_numeric(non_null, errors="coerce").notna().all():
        return "numeric", None, "Text column whose values are all numbers."
    fmt, note = infer_date_format(s)
    if fmt is not None:
        return "date", fmt, note
    if distinct and (tokens & _ID_TOKENS or len(s) > 1):
        return "identifier", None, ""
    return "categorical", None, ""


def infer_schema(df: pd.DataFrame) -> Schema:
    """Infer each column's kind (rules in the module docstring); the curator can override any of them."""
    kinds: dict[str, ColumnKind] = {}
    formats: dict[str, str] = {}
    notes: dict[str, str] = {}
    for col in df.columns:
        kind, fmt, note = _infer_column(str(col), df[col])
        kinds[str(col)] = kind
        if fmt is not None:
            formats[str(col)] = fmt
        if note:
            notes[str(col)] = note
    return Schema(kinds=kinds, date_formats=formats, notes=notes)


def column_encoding(df: pd.DataFrame, schema: Schema, column: str) -> CategoricalEncoding | DateEncoding:
    """The encoding ``prepare`` uses for a categorical or date column (e.g. a "category -> code" table)."""
    schema._check_column(column)
    kind = schema.kinds[column]
    if kind == "categorical":
        return CategoricalEncoding.from_series(df[column], schema.categories.get(column))
    if kind == "date":
        fmt = schema.date_formats.get(column)
        if fmt is None and not pd.api.types.is_datetime64_any_dtype(df[column]):
            fmt, _ = infer_date_format(df[column])
        return DateEncoding(column, fmt)
    raise DataError(f"Column '{column}' is {kind}, not categorical or date; it has no encoding.")
