"""scikit-learn's estimator checks on every estimator dpcore.kmeans exports.

Instances, not defaults, where the defaults cannot run on the checks' small random tables by design:
the DP-Lloyd family needs public bounds (never derived from the data) and Blowfish a policy graph; the
local mechanisms use K = 2, since with K = 4 on 30 rows a cluster of one row can occur, whose
leave-one-out centroid is undefined (refused with a ParameterError). ``random_state`` is set to a demo
seed by the checks that need reproducible fits; releases default to OS entropy. No check is expected to
fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpcore.errors import ParameterError
from dpcore.kmeans import (
    BlowfishKMeans,
    ColoredNoiseKMeans,
    DPLloydKMeans,
    LeeKiferKMeans,
    WhiteNoiseKMeans,
    WhitePerClusterKMeans,
)
from dpcore.policy import FullDomainGraph
from dpcore.validation import NotFittedYet, WrongInputType

BOUNDS = (-100.0, 100.0)  # public bounds wider than the checks' data
ESTIMATORS = [
    DPLloydKMeans(bounds=BOUNDS),
    BlowfishKMeans(bounds=BOUNDS, graph=FullDomainGraph()),
    LeeKiferKMeans(bounds=BOUNDS),  # MCMCKMeans is the same class
    ColoredNoiseKMeans(n_clusters=2),
    WhiteNoiseKMeans(n_clusters=2),
    WhitePerClusterKMeans(n_clusters=2),
]


@parametrize_with_checks(ESTIMATORS)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    """scikit-learn's own check: it raises (an AssertionError, or the error it expects not to see) when the
    estimator breaks a convention (parameters in __init__, fit returns self, validation, fitted attrs)."""
    check(estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_errors_are_dpcore_errors_and_scikit_learn_ones(estimator) -> None:
    """The same failures raise dpcore's ParameterError (the app shows its message) and the exception
    scikit-learn users expect."""
    X = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.raises(NotFittedYet, match="not fitted yet: call fit") as unfitted:
        estimator.predict(X)
    assert isinstance(unfitted.value, NotFittedError) and isinstance(unfitted.value, ParameterError)
    with pytest.raises(ParameterError, match="numbers only"):
        estimator.fit(np.array([["a", "b"]] * 5, dtype=object))
    with pytest.raises(WrongInputType, match="numbers only") as wrong:
        estimator.fit(np.array([[{"a": 1}, 2.0]] * 5, dtype=object))
    assert isinstance(wrong.value, TypeError) and isinstance(wrong.value, ParameterError)
    with pytest.raises(ParameterError, match="drop or impute NaN/inf"):
        estimator.fit(np.vstack([X, [np.nan, 0.0, 0.0]]))
    fitted = estimator.set_params(random_state=1).fit(X)
    with pytest.raises(ParameterError, match=r"expecting 3 features.*the 3 columns used in fit"):
        fitted.predict(X[:, :2])
