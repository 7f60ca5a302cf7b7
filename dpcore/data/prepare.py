"""From a typed table to the numeric matrix the mechanisms consume, with public bounds and a leak record.

Pipeline of :func:`prepare`: encode each feature (numbers as is, categorical -> codes, date -> days since
1970-01-01), handle missing/infinite values (an explicit strategy is required), resolve public bounds per
feature, clip to them, then scale. Scaling is one affine map per feature, ``x' = (x - center) / scale``:
"none" (0, 1), "minmax" (center and half-width of the public bounds, so the bounds map to [-1, 1] and
nothing leaks) or "standardize" (mean and population std of the clipped data: data-derived, recorded in
``leaks``). Anything derived from the data that a DP analysis would treat as public is listed in ``leaks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from dpcore.data.encoding import CategoricalEncoding, DateEncoding
from dpcore.data.fingerprint import fingerprint
from dpcore.data.missing import IMPUTE_ATTR, MissingStrategy, check_strategy, fill_value
from dpcore.data.schema import Schema, column_encoding
from dpcore.errors import DataError
from dpcore.steps import BoundsFromData, CategoriesFromData, ImputedFeature, PrepStep, Standardize

__all__ = ["SCALINGS", "PreparedData", "prepare"]

Scaling = Literal["none", "standardize", "minmax"]
SCALINGS: tuple[str, ...] = ("none", "standardize", "minmax")
_DOMAIN = {"latitude": (-90.0, 90.0), "longitude": (-180.0, 180.0)}
PRIVATE_SOURCE = "estimated privately at release (until then the data range, for comparisons only: leaks)"


@dataclass(frozen=True, eq=False)
class PreparedData:
    """The feature matrix and everything a release manifest needs to describe it.

    ``X`` is (n, d) float64, C-contiguous, finite, in the scaled space; ``lower``/``upper`` are the public
    bounds in that space (``raw_lower``/``raw_upper`` before scaling, in encoded units). Row ``i`` of ``X`` is
    ``frame.iloc[i]`` (original values, all columns; imputed cells stay missing in ``frame``).
    ``private_bounds`` (``features``, ``epsilon``, ``scaling``) names the features whose bounds a release
    estimates privately (:mod:`dpcore.private_bounds`); until then they hold their data range, unscaled,
    labelled as leaking (for comparisons only).
    """

    X: np.ndarray
    feature_names: tuple[str, ...]
    kinds: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    raw_lower: np.ndarray
    raw_upper: np.ndarray
    bounds_source: Literal["curator", "data (leaks)"]
    bound_sources: dict[str, str]
    scaling: Scaling
    center: np.ndarray
    scale: np.ndarray
    fingerprint: str
    leaks: list[PrepStep]
    warnings: list[str]
    clipped: dict[str, int]
    n_dropped: int
    frame: pd.DataFrame
    encodings: dict[str, CategoricalEncoding | DateEncoding] = field(default_factory=dict)
    private_bounds: dict[str, Any] | None = None

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    def inverse_transform(self, X: np.ndarray) -> np.ndarray:
        """Undo the scaling: points (e.g. released centroids) back to encoded units."""
        return np.asarray(X, dtype=np.float64) * self.scale + self.center

    def decode(self, X: np.ndarray) -> pd.DataFrame:
        """Points in the scaled space as a table in original units: categories (nearest code) and dates."""
        raw = np.atleast_2d(self.inverse_transform(X))
        out: dict[str, Any] = {}
        for j, name in enumerate(self.feature_names):
            enc = self.encodings.get(name)
            out[name] = raw[:, j] if enc is None else enc.decode(raw[:, j])
        return pd.DataFrame(out)


def _encode_feature(
    df: pd.DataFrame, schema: Schema, name: str
) -> tuple[np.ndarray, CategoricalEncoding | DateEncoding | None]:
    kind = schema.kinds[name]
    s = df[name]
    if kind == "identifier":
        raise DataError(
            f"Column '{name}' is an identifier and cannot be a feature; remove it from the features "
            f"(or change its kind with schema.with_kind('{name}', ...) if it is not an identifier)."
        )
    if kind in ("categorical", "date"):
        enc = column_encoding(df, schema, name)
        return enc.encode(s), enc
    if pd.api.types.is_bool_dtype(s):
        values = s.astype("float64").to_numpy(np.float64, na_value=np.nan)
    else:
        coerced = pd.to_numeric(s, errors="coerce") if not pd.api.types.is_numeric_dtype(s) else s
        text = s[coerced.isna() & s.notna()]
        if len(text):
            raise DataError(
                f"Column '{name}' is marked {kind} but holds text "
                f"(e.g. {', '.join(map(repr, text.unique()[:3]))}). "
                f"Mark it categorical with schema.with_kind('{name}', 'categorical'), or fix those values."
            )
        values = coerced.to_numpy(np.float64, na_value=np.nan)
    if kind in _DOMAIN:
        lo, hi = _DOMAIN[kind]
        out = (values < lo) | (values > hi)
        if out.any():
            raise DataError(
                f"Column '{name}' is marked {kind} but {int(out.sum())} value(s) are "
                f"outside [{lo:g}, {hi:g}] degrees. "
                "Fix the coordinates (are latitude and longitude swapped?) or mark the column numeric."
            )
    return values, None


def _parse_bound(name: str, pair: Any, enc: CategoricalEncoding | DateEncoding | None) -> tuple[float, float]:
    try:
        lo, hi = pair
    except (TypeError, ValueError) as err:
        raise DataError(f"Bounds for '{name}' must be a pair (lower, upper); got {pair!r}.") from err
    if isinstance(enc, DateEncoding):
        lo, hi = enc.to_days(lo), enc.to_days(hi)
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError) as err:
        raise DataError(f"Bounds for '{name}' must be numbers; got {pair!r}.") from err
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise DataError(f"Bounds for '{name}' must be finite numbers; got ({lo}, {hi}).")
    if not lo < hi:
        raise DataError(
            f"Lower bound for '{name}' must be smaller than the upper bound; got ({lo:g}, {hi:g})."
        )
    return lo, hi


def _resolve_bounds(
    names: Sequence[str],
    kinds: Sequence[str],
    columns: list[np.ndarray],
    encodings: Mapping[str, CategoricalEncoding | DateEncoding],
    bounds: Mapping[str, Any],
    data_bounds_ok: bool,
    leaks: list[PrepStep],
    warnings: list[str],
    private: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, str]]:
    lower, upper, sources, unbounded = [], [], {}, []
    for name, kind, values in zip(names, kinds, columns, strict=True):
        enc = encodings.get(name)
        if isinstance(enc, CategoricalEncoding):
            lo, hi = 0.0, float(enc.n_categories - 1)
            if name in bounds and tuple(map(float, bounds[name])) != (lo, hi):
                raise DataError(
                    f"Bounds for categorical column '{name}' are fixed by its encoding to (0, {hi:g}); "
                    "remove it from the bounds."
                )
            if enc.public:
                sources[name] = "encoding (public categories)"
            else:
                sources[name] = "encoding (categories from data: leaks)"
                leaks.append(CategoriesFromData(name, enc.n_categories))
        elif name in bounds:
            lo, hi = _parse_bound(name, bounds[name], enc)
            if kind in _DOMAIN and (lo < _DOMAIN[kind][0] or hi > _DOMAIN[kind][1]):
                raise DataError(f"Bounds for {kind} column '{name}' must lie within {_DOMAIN[kind]} degrees.")
            sources[name] = "curator"
        elif kind in _DOMAIN:
            lo, hi = _DOMAIN[kind]
            sources[name] = "domain (public)"
            warnings.append(
                f"{name}: no bounds given; using the whole {kind} range {lo:g}..{hi:g} (public, loose)."
            )
        elif private:
            lo, hi = float(values.min()), float(values.max())
            sources[name] = PRIVATE_SOURCE
        elif data_bounds_ok:
            lo, hi = float(values.min()), float(values.max())
            sources[name] = "data (leaks)"
            leaks.append(BoundsFromData(name))
        else:
            unbounded.append(name)
            continue
        lower.append(lo)
        upper.append(hi)
    if unbounded:
        listed = ", ".join(f"'{c}'" for c in unbounded)
        raise DataError(
            f"No public bounds for {listed}. Enter bounds (lower, upper) for each, known without looking at "
            "the data, or allow data-derived bounds (data_bounds_ok=True), which leaks the extreme values."
        )
    return np.array(lower), np.array(upper), sources


def prepare(
    df: pd.DataFrame,
    schema: Schema,
    features: Sequence[str],
    *,
    scaling: Scaling = "none",
    bounds: Mapping[str, Any] | None = None,
    data_bounds_ok: bool = False,
    missing: MissingStrategy | None = None,
    private_epsilon: float | None = None,
) -> PreparedData:
    """Encode, clean, bound, clip and scale ``features`` of ``df`` (pipeline in the module docstring).

    ``bounds`` maps a column to (lower, upper) in its units (dates: date text or days since 1970-01-01).
    Raises ``DataError`` for: no/unknown/duplicate features, identifier features, text marked numeric,
    missing or infinite values without a ``missing`` strategy, features with no public bounds (unless
    ``data_bounds_ok``), invalid bounds, fewer than 2 rows, and standardising a constant column.
    With ``private_epsilon`` (epsilon_b), features without public bounds get theirs estimated privately by
    the release (:mod:`dpcore.private_bounds`), which debits epsilon_b with it.
    """
    if private_epsilon is not None:
        if data_bounds_ok:
            raise DataError(
                "Choose one way to bound the features without public bounds: from the data (leaks) or "
                "estimated privately (spends ε_b), not both."
            )
        if scaling == "standardize":
            raise DataError(
                "Standardising reads the data's mean and standard deviation, so it cannot go with privately "
                "estimated bounds; choose min-max or no scaling."
            )
        if not (isinstance(private_epsilon, int | float) and 0 < private_epsilon < np.inf):
            raise DataError(f"ε_b for the private bounds must be a positive number, got {private_epsilon!r}.")
    if scaling not in SCALINGS:
        raise DataError(f"Unknown scaling {scaling!r}; choose one of: {', '.join(SCALINGS)}.")
    if missing is not None:
        check_strategy(missing)
    names = [str(f) for f in features]
    if not names:
        raise DataError("No features selected; choose at least one column to cluster on.")
    if len(set(names)) != len(names):
        raise DataError("A feature is selected twice; select each column once.")
    unknown = [f for f in names if f not in df.columns]
    if unknown:
        raise DataError(
            f"Unknown feature(s) {', '.join(map(repr, unknown))}; choose from: {', '.join(df.columns)}."
        )
    untyped = [f for f in names if f not in schema.kinds]
    if untyped:
        raise DataError(
            f"The schema has no kind for {', '.join(map(repr, untyped))}; run infer_schema(df) again."
        )
    bounds = dict(bounds or {})
    stray = [c for c in bounds if c not in df.columns]
    if stray:
        raise DataError(f"Bounds given for unknown column(s) {', '.join(map(repr, stray))}; check the names.")

    imputed = df.attrs.get(IMPUTE_ATTR, {})
    # other columns do not reach X
    leaks: list[PrepStep] = [ImputedFeature(name, imputed[name]) for name in names if name in imputed]
    warnings: list[str] = []
    kinds = [schema.kinds[f] for f in names]
    encodings: dict[str, CategoricalEncoding | DateEncoding] = {}
    columns = []
    for name in names:
        if name in schema.notes:
            warnings.append(f"{name}: {schema.notes[name]}")
        values, enc = _encode_feature(df, schema, name)
        columns.append(values)
        if enc is not None:
            encodings[name] = enc

    invalid = [~np.isfinite(v) for v in columns]
    rows_bad = np.logical_or.reduce(invalid)
    n_dropped = 0
    keep = np.ones(len(df), dtype=bool)
    if rows_bad.any():
        counts = {
            n: (int(np.isnan(v).sum()), int(np.isinf(v).sum())) for n, v in zip(names, columns, strict=True)
        }
        described = ", ".join(
            f"'{n}' ({m} missing{f', {i} infinite' if i else ''})" for n, (m, i) in counts.items() if m + i
        )
        if missing is None:
            raise DataError(
                f"Selected features have missing or infinite values: {described}. Choose a missing-value "
                "strategy: 'drop' the rows (no leak), or fill with 'median'/'mean'/'mode' (data-derived, "
                "recorded as a leak); or fix the file."
            )
        if missing == "drop":
            keep = ~rows_bad
            n_dropped = int(rows_bad.sum())
            columns = [v[keep] for v in columns]
            warnings.append(
                f"{n_dropped} row(s) with missing or infinite values in {described} were dropped."
            )
        else:
            for j, (name, mask) in enumerate(zip(names, invalid, strict=True)):
                if not mask.any():
                    continue
                if mask.all():
                    raise DataError(f"Column '{name}' has no valid values; remove it from the features.")
                if missing != "mode" and isinstance(encodings.get(name), CategoricalEncoding):
                    raise DataError(
                        f"Column '{name}' is categorical: use missing='mode' or 'drop', not {missing!r}."
                    )
                columns[j] = np.where(mask, fill_value(columns[j], missing), columns[j])
                leaks.append(ImputedFeature(name, missing))
    n = int(keep.sum())
    if n < 2:
        raise DataError(f"Only {n} row(s) left after handling missing values; at least 2 are needed.")

    lower, upper, sources = _resolve_bounds(
        names, kinds, columns, encodings, bounds, data_bounds_ok, leaks, warnings, private_epsilon is not None
    )
    pending = [n for n in names if sources[n] == PRIVATE_SOURCE]
    X = np.column_stack(columns).astype(np.float64)
    outside = (X < lower) | (X > upper)
    clipped = {name: int(outside[:, j].sum()) for j, name in enumerate(names)}
    for name, count in clipped.items():
        if count:
            warnings.append(f"{name}: {count} value(s) outside the public bounds were clipped to them.")
    X = np.clip(X, lower, upper)

    with np.errstate(over="ignore"):
        too_wide = [n for n, w in zip(names, upper - lower, strict=True) if not np.isfinite(w)]
    if too_wide:
        raise DataError(
            f"The bounds of {', '.join(map(repr, too_wide))} span more than the largest float "
            "(values near ±1e308). Enter narrower public bounds or rescale the column (e.g. to thousands)."
        )
    spread = X.max(axis=0) - X.min(axis=0)
    constant = [name for name, s in zip(names, spread, strict=True) if s == 0]
    for name in constant:
        warnings.append(f"{name}: constant column (one value); it adds nothing to the clustering.")

    if scaling == "minmax":
        center, scale = (lower + upper) / 2, (upper - lower) / 2
        scale = np.where(scale > 0, scale, 1.0)
    elif scaling == "standardize":
        if constant:
            raise DataError(
                f"Cannot standardise constant column(s) {', '.join(map(repr, constant))} "
                "(standard deviation 0); remove them from the features or use minmax scaling."
            )
        center, scale = X.mean(axis=0), X.std(axis=0)
        leaks.append(Standardize())
    else:
        center, scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
    for j, name in enumerate(names):  # their own units until the release estimates their bounds
        if name in pending:
            center[j], scale[j] = 0.0, 1.0
    Xs = np.ascontiguousarray((X - center) / scale, dtype=np.float64)
    if not np.isfinite(Xs).all():
        raise DataError(
            "The prepared features contain non-finite values; check the bounds for extreme magnitudes."
        )

    return PreparedData(
        X=Xs,
        feature_names=tuple(names),
        kinds=tuple(kinds),
        lower=(lower - center) / scale,
        upper=(upper - center) / scale,
        raw_lower=lower,
        raw_upper=upper,
        # Standardised bounds (lo - mean) / std depend on the data even when lo is public.
        bounds_source=(
            "data (leaks)"
            if scaling == "standardize" or any("leaks" in s for s in sources.values())
            else "curator"
        ),
        bound_sources=sources,
        scaling=scaling,
        center=center,
        scale=scale,
        fingerprint=fingerprint(df),
        leaks=leaks,
        warnings=warnings,
        clipped=clipped,
        n_dropped=n_dropped,
        frame=df.loc[keep],
        encodings=encodings,
        private_bounds=(
            {"features": pending, "epsilon": float(private_epsilon), "scaling": scaling}  # type: ignore[arg-type]
            if pending
            else None
        ),
    )
