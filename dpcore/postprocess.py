"""Post-processing of releases: functions of the release and public values alone, so they cost no privacy.

Any function of a differentially private output is as private as the output (Dwork & Roth 2014,
Prop. 2.1), so these may be applied to a release at will; they never read the true data.
:func:`nonnegative_counts` makes a released grid's counts non-negative; :func:`release_decimals`,
:func:`round_table` and :func:`round_figure` round every released number to a precision its noise
justifies (``ROUNDING_RULE``, recorded in the manifest), instead of 15 to 17 significant digits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError

__all__ = [
    "ROUNDING_RULE",
    "Nonnegative",
    "epsilon_decimals",
    "nonnegative_counts",
    "release_decimals",
    "round_figure",
    "round_table",
    "significant_decimals",
]

Nonnegative = Literal["project", "clamp"]


def nonnegative_counts(counts: ArrayLike, method: Nonnegative = "project") -> np.ndarray:
    """Noisy counts made non-negative, same shape; post-processing (no privacy cost).

    ``"project"``: the Euclidean projection onto {x >= 0, sum x = max(sum c, 0)}, x_i = max(c_i - tau, 0)
    with tau chosen so the total is kept (Duchi et al. 2008); it keeps the released total, which is an
    unbiased estimate, where clamping inflates it. ``"clamp"``: max(c_i, 0).
    """
    c = np.asarray(counts, dtype=float)
    if not np.isfinite(c).all():
        raise ParameterError("the counts must be finite numbers; pass a released grid's counts.")
    if method == "clamp":
        return np.maximum(c, 0.0)
    if method != "project":
        raise ParameterError(f"unknown method {method!r}; use 'project' (keeps the total) or 'clamp'.")
    total = float(c.sum())
    if total <= 0.0 or c.size == 0:
        return np.zeros_like(c)
    u = np.sort(c.ravel())[::-1]
    excess = np.cumsum(u) - total
    k = np.arange(1, u.size + 1)
    rho = int(np.flatnonzero(u - excess / k > 0)[-1])
    tau = excess[rho] / (rho + 1)
    return np.maximum(c - tau, 0.0)


# ---------------------------------------------------------------- rounding released numbers

SIGNIFICANT = 7  # digits kept of a public width (centroids), or of a column's largest value without one
COORDINATE_DECIMALS = 6  # 1e-6 degree: 0.11 m, below the 1 m output grid and the noise of every location
FIGURE_DECIMALS = 6  # numbers drawn in a released chart (places within bounds, degrees)
ROUNDING_RULE = (
    "Post-processing of the release alone (no privacy cost; Dwork & Roth 2014, Prop. 2.1): every released "
    "number is rounded to a step read from public values only, far below the noise it carries. Centroids: "
    f"the {SIGNIFICANT}th significant digit of the feature's public range (of the column's largest "
    "released value when it has no bounds); latitudes and longitudes: 6 decimals (0.11 m); other numbers "
    "(noisy counts): one decimal place below 1/ε, the smallest Laplace scale of a count at this ε; "
    f"numbers in the charts: {FIGURE_DECIMALS} decimals. 'decimals' gives each column's number of "
    "decimal places (negative: rounded to tens, hundreds...)."
)
_COORDINATES = ("lat", "lon", "latitude", "longitude")


def significant_decimals(magnitude: float, digits: int = SIGNIFICANT) -> int:
    """Decimal places that keep ``digits`` significant digits of ``magnitude``: digits − 1 − ⌊log10 m⌋
    (``digits`` decimals for 0 or a non-finite value)."""
    m = abs(float(magnitude))
    if not (np.isfinite(m) and m > 0):
        return digits
    return digits - 1 - int(np.floor(np.log10(m)))


def epsilon_decimals(epsilon: float) -> int:
    """One decimal place below 1/ε, the Laplace scale of a count of sensitivity 1 at ε (any count released
    at ε has at least this noise): 1 + ⌈log10 ε⌉."""
    eps = float(epsilon)
    if not (np.isfinite(eps) and eps > 0):
        raise ParameterError(f"ε must be a finite number > 0 to round a release; got {epsilon!r}.")
    return 1 + int(np.ceil(np.log10(eps) - 1e-12))


def _is_coordinate(column: object) -> bool:
    name = str(column).lower()
    return name in _COORDINATES or name.split("_")[0] in _COORDINATES


def release_decimals(
    table: pd.DataFrame, epsilon: float, given: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Decimal places per floating-point column of a released ``table``: ``given`` (the mechanism's own,
    from public values) first, then 6 for latitudes and longitudes, else :func:`epsilon_decimals`."""
    out: dict[str, int] = {}
    for column in table.columns:
        if not pd.api.types.is_float_dtype(table[column]):
            continue
        name = str(column)
        if given and name in given:
            out[name] = int(given[name])
        elif _is_coordinate(column):
            out[name] = COORDINATE_DECIMALS
        else:
            out[name] = epsilon_decimals(epsilon)
    return out


def round_table(table: pd.DataFrame, decimals: Mapping[str, int]) -> pd.DataFrame:
    """A copy of ``table`` with each column of ``decimals`` rounded to that many decimal places (half to
    even; NaN and infinities kept)."""
    out = table.copy()
    for name, places in decimals.items():
        out[name] = np.round(out[name].to_numpy(dtype=float), int(places)) + 0.0  # no "-0.0"
    return out


def round_figure(fig: Any, decimals: int = FIGURE_DECIMALS) -> Any:
    """A copy of a Plotly figure with every floating-point array of its traces rounded to ``decimals``."""
    out = fig.__class__(fig)
    for trace in out.data:
        for name in ("x", "y", "z", "lat", "lon", "customdata", "base"):
            values = getattr(trace, name, None) if name in trace else None
            if values is None or isinstance(values, str):
                continue
            try:
                arr = np.asarray(values, dtype=float)
            except (TypeError, ValueError):
                continue
            trace[name] = np.round(arr, decimals)
    return out
