"""Explicit, reversible encodings of categorical and date columns into numbers.

* Categorical: category ``i`` of the sorted category list maps to code ``i`` (0 .. n-1). The category
  list is public when the curator declares it (``Schema.with_categories``); otherwise it is read from the
  data, which reveals which categories occur (a rare category can single out a person), and ``prepare``
  records that as a leak.
* Date: days since 1970-01-01 (float, fractional for times of day). Text dates are parsed with an explicit
  ``strptime`` format (never by guessing); decoding returns timestamps rounded to the second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpcore.errors import DataError

__all__ = ["EPOCH", "CategoricalEncoding", "DateEncoding"]

EPOCH = pd.Timestamp("1970-01-01")
_DAY = pd.Timedelta(days=1)


def _examples(values: Sequence[Any], limit: int = 3) -> str:
    return ", ".join(repr(v) for v in list(values)[:limit])


@dataclass(frozen=True)
class CategoricalEncoding:
    """Category ``categories[i]`` <-> code ``i``; ``public`` is True when the curator declared the list."""

    column: str
    categories: tuple[Any, ...]
    public: bool = False

    @classmethod
    def from_series(cls, series: pd.Series, categories: Sequence[Any] | None = None) -> CategoricalEncoding:
        """Build from a column: the declared ``categories`` (public) or the sorted distinct values (leaks)."""
        column = str(series.name)
        if categories is not None:
            return cls(column, tuple(categories), public=True)
        values = series.dropna()
        if not _is_number_like(series):
            values = values.astype(str)
        if values.empty:
            raise DataError(f"Column '{column}' has no values to build categories from; drop it or fill it.")
        return cls(column, tuple(sorted(values.unique().tolist())))

    @property
    def n_categories(self) -> int:
        return len(self.categories)

    def encode(self, values: Sequence[Any] | pd.Series) -> np.ndarray:
        """Integer codes as float64 (NaN for missing values); unknown categories raise ``DataError``."""
        series = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values
        missing = series.isna().to_numpy()
        if _is_number_like(series) and _is_number_like(pd.Series(list(self.categories))):
            keys, index = pd.Index(series), pd.Index(self.categories)
        else:
            keys, index = pd.Index(series.astype(str)), pd.Index([str(c) for c in self.categories])
        codes = index.get_indexer(keys).astype(np.float64)
        unknown = (codes < 0) & ~missing
        if unknown.any():
            bad = pd.unique(series[unknown].astype(str))
            raise DataError(
                f"Column '{self.column}' has values outside its category list: {_examples(bad, 5)}. "
                "Add them to the declared categories or treat the rows as missing."
            )
        codes[missing] = np.nan
        return codes

    def decode(self, codes: Sequence[float] | np.ndarray) -> np.ndarray:
        """Categories for codes; non-integer codes (e.g. noisy centroids) round to the nearest category."""
        idx = np.clip(np.rint(np.asarray(codes, dtype=np.float64)), 0, self.n_categories - 1).astype(np.int64)
        return np.asarray(self.categories, dtype=object)[idx]

    def table(self) -> pd.DataFrame:
        """The "category -> code" table for display."""
        return pd.DataFrame({"category": list(self.categories), "code": np.arange(self.n_categories)})


@dataclass(frozen=True)
class DateEncoding:
    """Dates <-> days since 1970-01-01; text is parsed with ``format`` (``None`` for datetime columns)."""

    column: str
    format: str | None = None

    def to_datetime(self, values: Sequence[Any] | pd.Series) -> pd.Series:
        """Parse to naive timestamps (UTC for aware input); unparseable text raises ``DataError``."""
        series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
        if isinstance(series.dtype, pd.DatetimeTZDtype):
            return series.dt.tz_convert("UTC").dt.tz_localize(None)
        if pd.api.types.is_datetime64_any_dtype(series):
            return series
        if self.format is None:
            raise DataError(
                f"Column '{self.column}' holds text but has no date format. Give one with "
                f"schema.with_date_format('{self.column}', '%d/%m/%Y') (or the format that matches)."
            )
        text = series.astype(object).where(series.notna(), None)
        text = text.map(lambda v: v.strip() if isinstance(v, str) else v)
        try:
            parsed = pd.to_datetime(text, format=self.format, errors="coerce")
        except (ValueError, TypeError) as err:  # a bad directive; pandas' text quotes the values
            raise DataError(
                f"Column '{self.column}' could not be parsed with format '{self.format}', which is not a "
                "date format pandas can use; give one made of strptime directives, such as %d/%m/%Y or "
                "%Y-%m-%d %H:%M."
            ) from err
        if isinstance(parsed.dtype, pd.DatetimeTZDtype):
            parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
        bad = parsed.isna() & series.notna()
        if bad.any():
            raise DataError(
                f"Column '{self.column}' has {int(bad.sum())} value(s) that are not dates in format "
                f"'{self.format}' (e.g. {_examples(series[bad].astype(str).unique())}). Fix them, treat the "
                "column as categorical, or give the right format with schema.with_date_format."
            )
        return parsed

    def encode(self, values: Sequence[Any] | pd.Series) -> np.ndarray:
        """Days since 1970-01-01 as float64 (NaN for missing)."""
        parsed = self.to_datetime(values)
        return ((parsed - EPOCH) / _DAY).to_numpy(dtype=np.float64, na_value=np.nan)

    def decode(self, days: Sequence[float] | np.ndarray) -> pd.DatetimeIndex:
        """Timestamps (rounded to the second) for day counts."""
        arr = np.asarray(days, dtype=np.float64)
        return pd.DatetimeIndex(EPOCH + pd.to_timedelta(arr, unit="D")).round("s")

    def to_days(self, value: Any) -> float:
        """One bound given as a number of days or as a date (text in this column's format or ISO 8601)."""
        if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
            return float(value)
        for fmt in (self.format, "ISO8601"):
            if fmt is None:
                continue
            try:
                stamp = pd.to_datetime(value, format=fmt) if isinstance(value, str) else pd.Timestamp(value)
            except (ValueError, TypeError):
                continue
            if stamp.tzinfo is not None:
                stamp = stamp.tz_convert("UTC").tz_localize(None)
            return float((stamp - EPOCH) / _DAY)
        raise DataError(
            f"Bound {value!r} for date column '{self.column}' is not a date; "
            f"use {'the format ' + repr(self.format) + ' or ' if self.format else ''}ISO 8601 (2012-09-04)."
        )


def _is_number_like(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)
