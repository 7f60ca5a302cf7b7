"""Input validation shared by dpcore's estimators: scikit-learn's ``validate_data`` and ``check_is_fitted``,
raising dpcore errors.

scikit-learn's own message is kept (its estimator checks and users' searches rely on it) and followed by
the fix. ``validate_data`` also records ``n_features_in_`` (and ``feature_names_in_`` for tables) in fit
and checks them in predict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted, validate_data

from dpcore.errors import ParameterError


class NotFittedYet(ParameterError, NotFittedError):
    """A fitted-only method (predict, ...) was called before fit."""


class WrongInputType(ParameterError, TypeError):
    """X is of the wrong type (values that are not numbers, a sparse matrix): a TypeError too, as in
    Python and scikit-learn."""


def _fix(message: str, estimator: Any) -> str:
    if "NaN" in message or "infinity" in message:
        return (
            "X contains missing or infinite values: drop or impute NaN/inf first "
            "(dpcore.data.handle_missing)."
        )
    if "sparse" in message.lower():
        return "Pass a dense array (X.toarray())."
    if "convert" in message or "dtype" in message or "argument must be" in message:
        return "X must hold numbers only; encode categorical and date columns first (dpcore.data.prepare)."
    if "features" in message and hasattr(estimator, "n_features_in_"):
        return f"Pass X with the {estimator.n_features_in_} columns used in fit."
    return "X must be a 2-D table of numbers, one row per record and at least one column."


def check_rows(estimator: Any, X: Any, *, reset: bool) -> NDArray[np.float64]:
    """X as a finite float64 array of shape (n >= 1, d >= 1); ``reset``: in fit (records d), else checks d."""
    try:
        return validate_data(estimator, X, reset=reset, dtype=np.float64)
    except (TypeError, ValueError) as err:
        kind = WrongInputType if isinstance(err, TypeError) else ParameterError
        raise kind(f"{err} {_fix(str(err), estimator)}") from err


def check_fitted(estimator: Any, attribute: str = "cluster_centers_") -> None:
    """Raise ``NotFittedYet`` (a ParameterError and scikit-learn's NotFittedError) before fit."""
    try:
        check_is_fitted(estimator, attribute)
    except NotFittedError as err:
        raise NotFittedYet(f"this {type(estimator).__name__} is not fitted yet: call fit(X) first.") from err
