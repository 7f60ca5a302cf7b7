"""The preparation table (a data dictionary): per column its kind, whether it is a feature, its public
bounds, its unit and its missing-value step, checked row by row before anything is applied.

A curator edits it in one table or imports it as CSV (columns ``column, kind, feature, lower, upper, unit,
missing``; only ``column`` is required, absent ones keep their current values). :func:`check_dictionary`
validates every row against the table (an unknown or repeated column, a kind that does not fit the column's
values, a non-numeric bound, lower >= upper, a bound on a categorical column, an identifier as a feature, an
unknown missing-value step) and raises :class:`DictionaryError` listing each refused row and why: a table is
applied whole or not at all. Bounds stay text here; :func:`dpcore.data.prepare` parses them (dates as text).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpcore.data.missing import MISSING_STRATEGIES
from dpcore.data.schema import KINDS, Schema, infer_date_format
from dpcore.errors import DataError

__all__ = [
    "DICTIONARY_COLUMNS",
    "Dictionary",
    "DictionaryError",
    "check_dictionary",
    "dictionary_frame",
    "merge_dictionary",
    "read_dictionary_csv",
]

DICTIONARY_COLUMNS = ("column", "kind", "feature", "lower", "upper", "unit", "missing")
MAX_UNIT_CHARS = 40
MAX_DICTIONARY_BYTES = 2**20
_DOMAIN = {"latitude": (-90.0, 90.0), "longitude": (-180.0, 180.0)}
_TRUE, _FALSE = {"true", "yes", "y", "1", "x"}, {"false", "no", "n", "0", ""}
_NO_STEP = {"", "none", "-"}


class DictionaryError(DataError):
    """A preparation table with refused rows; ``problems`` holds one sentence per refused row."""

    def __init__(self, problems: Sequence[str], n_rows: int) -> None:
        self.problems = tuple(problems)
        listed = "; ".join(self.problems)
        super().__init__(
            f"{len(self.problems)} of {n_rows} rows of the preparation table were refused, so nothing was "
            f"applied. Fix these rows and apply (or import) the table again. {listed}."
        )


@dataclass(frozen=True)
class Dictionary:
    """A checked preparation table: kinds of every column; the features in table order; public bounds as
    text (lower, upper) per bounded feature; units; the missing-value step per column (none if absent)."""

    kinds: Mapping[str, str]
    features: tuple[str, ...] = ()
    bounds: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = {k for k in self.kinds.values() if k not in KINDS}
        if bad:
            raise DataError(
                f"Unknown column kind(s) {', '.join(sorted(bad))}; choose from {', '.join(KINDS)}."
            )
        stray = (set(self.features) | set(self.bounds) | set(self.units) | set(self.missing)) - set(
            self.kinds
        )
        if stray:
            raise DataError(f"The preparation names unknown column(s) {', '.join(sorted(stray))}.")
        if any(s not in MISSING_STRATEGIES for s in self.missing.values()):
            raise DataError(f"A missing-value step must be one of {', '.join(MISSING_STRATEGIES)}.")

    def schema(self, base: Schema) -> Schema:
        """``base`` with this table's kinds (date formats and declared categories kept)."""
        schema = base
        for column, kind in self.kinds.items():
            if schema.kinds.get(column) != kind:
                schema = schema.with_kind(column, kind)
        return schema

    def steps(self) -> list[tuple[str, tuple[str, ...]]]:
        """Missing-value steps as (strategy, columns): rows are dropped first, so fills use the kept rows."""
        out = []
        for strategy in MISSING_STRATEGIES:
            columns = tuple(c for c in self.kinds if self.missing.get(c) == strategy)
            if columns:
                out.append((strategy, columns))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kinds": dict(self.kinds),
            "features": list(self.features),
            "bounds": {k: list(v) for k, v in self.bounds.items()},
            "units": dict(self.units),
            "missing": dict(self.missing),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dictionary:
        return cls(
            kinds=dict(data["kinds"]),
            features=tuple(data.get("features", ())),
            bounds={k: (str(v[0]), str(v[1])) for k, v in data.get("bounds", {}).items()},
            units=dict(data.get("units", {})),
            missing=dict(data.get("missing", {})),
        )

    def to_frame(self) -> pd.DataFrame:
        """The editable table: one row per column of the dataset."""
        cols = list(self.kinds)
        return pd.DataFrame(
            {
                "column": cols,
                "kind": [self.kinds[c] for c in cols],
                "feature": [c in self.features for c in cols],
                "lower": [self.bounds.get(c, ("", ""))[0] for c in cols],
                "upper": [self.bounds.get(c, ("", ""))[1] for c in cols],
                "unit": [self.units.get(c, "") for c in cols],
                "missing": [self.missing.get(c, "none") for c in cols],
            },
            columns=list(DICTIONARY_COLUMNS),
        )

    def to_csv(self) -> bytes:
        """The table as CSV (UTF-8), the format :func:`read_dictionary_csv` imports."""
        return self.to_frame().to_csv(index=False).encode()


def dictionary_frame(
    schema: Schema, steps: Sequence[tuple[str, Sequence[str]]] = (), **rest: Any
) -> pd.DataFrame:
    """The editable table of a dataset: ``schema``'s kinds, the missing-value ``steps`` applied so far (the
    last per column) and ``rest`` (``features``, ``bounds``, ``units`` as in :class:`Dictionary`)."""
    missing = {c: strategy for strategy, cols in steps for c in cols}
    return Dictionary(kinds=dict(schema.kinds), missing=missing, **rest).to_frame()


def read_dictionary_csv(data: bytes) -> pd.DataFrame:
    """A data dictionary file as text cells (every column optional but ``column``); ``DataError`` when it
    is not a CSV with a ``column`` header or names a header this table does not have."""
    if len(data) > MAX_DICTIONARY_BYTES:
        raise DataError(f"The data dictionary is {len(data):,} bytes; at most {MAX_DICTIONARY_BYTES:,}.")
    try:
        text = data.decode("utf-8-sig")
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DataError(
            f"The data dictionary could not be read as CSV ({type(err).__name__}); save it as UTF-8 CSV with "
            f"a header row: {', '.join(DICTIONARY_COLUMNS)}."
        ) from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    unknown = [c for c in frame.columns if c not in DICTIONARY_COLUMNS]
    if "column" not in frame.columns or unknown:
        what = (
            "no 'column' header"
            if "column" not in frame.columns
            else f"unknown header(s) {', '.join(map(repr, unknown))}"
        )
        raise DataError(
            f"The data dictionary has {what}; its header row uses {', '.join(DICTIONARY_COLUMNS)} (only "
            "'column' is required)."
        )
    return frame.map(lambda v: str(v).strip())


def merge_dictionary(current: pd.DataFrame, imported: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``current`` with the cells of ``imported`` for the columns it names (its absent headers keep their
    values), and the problems of rows naming unknown or repeated columns. Without a ``feature`` header, a
    row with both bounds makes its column a feature."""
    out = current.astype(object)
    where = {str(c): i for i, c in enumerate(out["column"])}
    problems, seen = [], set()
    for i, row in enumerate(imported.to_dict("records"), start=1):
        name = row["column"]
        if name not in where:
            problems.append(f"row {i} ({name!r}): no such column in the table")
            continue
        if name in seen:
            problems.append(f"row {i} ({name!r}): the column is listed twice")
            continue
        seen.add(name)
        j = where[name]
        for key, value in row.items():
            if key != "column":
                out.at[j, key] = _flag(value) if key == "feature" and _flag(value) is not None else value
        if "feature" not in imported.columns and row.get("lower") and row.get("upper"):
            out.at[j, "feature"] = True
    return out, problems


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = (
        ""
        if value is None or (isinstance(value, float) and math.isnan(value))
        else str(value).strip().lower()
    )
    return True if text in _TRUE else False if text in _FALSE else None


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def kind_problem(values: pd.Series, kind: str) -> str | None:
    """Why ``kind`` does not fit the column ``values``, or None."""
    present = values.dropna()
    if kind in ("numeric", "latitude", "longitude"):
        if pd.api.types.is_bool_dtype(values):
            numbers = present.astype(float)
        else:
            numbers = pd.to_numeric(present, errors="coerce")
            text = present[numbers.isna()]
            if len(text):
                return (
                    f"it holds text (e.g. {', '.join(map(repr, text.astype(str).unique()[:2]))}), not numbers"
                )
        if kind in _DOMAIN:
            lo, hi = _DOMAIN[kind]
            if bool(((numbers < lo) | (numbers > hi)).any()):
                return f"it has values outside [{lo:g}, {hi:g}] degrees"
    elif kind == "date" and not pd.api.types.is_datetime64_any_dtype(values):
        if present.empty or infer_date_format(present)[0] is None:
            return "its values do not all parse as dates in one format"
    return None


def _bound(text: str, kind: str) -> float | None:
    """A bound's value for comparison (days for dates), or None when it is not one."""
    if kind == "date":
        try:
            return float(pd.Timestamp(text).value) / 86_400e9
        except (ValueError, TypeError):
            return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _row_problem(row: Mapping[str, Any], table: pd.DataFrame) -> str | None:
    name, kind = row["column"], _text(row.get("kind"))
    if kind not in KINDS:
        return f"unknown kind {kind!r} (choose {', '.join(KINDS)})"
    wrong = kind_problem(table[name], kind)
    if wrong:
        return f"kind {kind} does not fit: {wrong}"
    feature = _flag(row.get("feature"))
    if feature is None:
        return f"feature must be true or false, not {row.get('feature')!r}"
    if feature and kind == "identifier":
        return "an identifier cannot be a feature (mark it another kind, or not a feature)"
    lower, upper = _text(row.get("lower")), _text(row.get("upper"))
    if lower or upper:
        if kind in ("categorical", "identifier"):
            return (
                f"a {kind} column takes no bounds (categories are bounded by their codes); leave them empty"
            )
        if not (lower and upper):
            return "give both a lower and an upper bound, or neither"
        lo, hi = _bound(lower, kind), _bound(upper, kind)
        what = "a date such as 2012-01-01" if kind == "date" else "a finite number"
        for text, value in ((lower, lo), (upper, hi)):
            if value is None:
                return f"bound {text!r} is not {what}"
        if not lo < hi:
            return f"lower {lower} is not below upper {upper}"
        if kind in _DOMAIN and (lo < _DOMAIN[kind][0] or hi > _DOMAIN[kind][1]):
            return f"{kind} bounds must lie within {_DOMAIN[kind][0]:g}..{_DOMAIN[kind][1]:g} degrees"
    unit = _text(row.get("unit"))
    if len(unit) > MAX_UNIT_CHARS or not unit.isprintable():
        return f"the unit must be at most {MAX_UNIT_CHARS} printable characters"
    step = _text(row.get("missing")).lower()
    if step not in _NO_STEP and step not in MISSING_STRATEGIES:
        return f"missing-value step {step!r} is not one of: none, {', '.join(MISSING_STRATEGIES)}"
    if step in ("mean", "median") and kind in ("categorical", "identifier"):
        return f"a {kind} column cannot be filled with the {step}; use mode or drop"
    return None


def check_dictionary(frame: pd.DataFrame, table: pd.DataFrame, *, problems: Sequence[str] = ()) -> Dictionary:
    """Every row of ``frame`` (:data:`DICTIONARY_COLUMNS`) checked against ``table``; the
    :class:`Dictionary` when all pass, else :class:`DictionaryError` with each refused row (and the earlier
    ``problems``, e.g. :func:`merge_dictionary`'s)."""
    refused = list(problems)
    names = [str(c) for c in table.columns]
    rows = frame.to_dict("records")
    listed = [str(r.get("column")) for r in rows]
    for i, row in enumerate(rows, start=1):
        name = str(row.get("column"))
        if name not in names:
            refused.append(f"row {i} ({name!r}): no such column in the table")
        elif listed.count(name) > 1:
            refused.append(f"row {i} ({name!r}): the column is listed twice")
        elif (why := _row_problem(row, table)) is not None:
            refused.append(f"row {i} ({name!r}): {why}")
    absent = [n for n in names if n not in listed]
    if absent:
        refused.append(f"the table has no row for {', '.join(map(repr, absent))}")
    if refused:
        raise DictionaryError(refused, len(rows))
    by = {str(r["column"]): r for r in rows}
    return Dictionary(
        kinds={n: _text(by[n]["kind"]) for n in names},
        features=tuple(n for n in names if _flag(by[n].get("feature"))),
        bounds={
            n: (_text(by[n].get("lower")), _text(by[n].get("upper")))
            for n in names
            if _text(by[n].get("lower"))
        },
        units={n: _text(by[n].get("unit")) for n in names if _text(by[n].get("unit"))},
        missing={
            n: _text(by[n].get("missing")).lower()
            for n in names
            if _text(by[n].get("missing")).lower() not in _NO_STEP
        },
    )
