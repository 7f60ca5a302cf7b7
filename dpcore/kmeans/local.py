"""Estimators releasing noisy k-means centroids under local (eps, delta)-PDP (seed 000, s.3).

The partition comes from non-private k-means (scikit-learn) or from ``labels`` passed to ``fit``; the
true centroids get Gaussian noise with the covariance of ``dpcore.kmeans.covariance``. Nothing but
``cluster_centers_`` is a release: true centres and labels are diagnostics for the curator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans
from sklearn.utils.validation import check_is_fitted

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    GUARANTEE,
    NoiseCovariance,
    colored_noise_covariance,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.mechanisms import Calibration, Sampler, gaussian_ratio

GUARANTEES: dict[str, str] = {
    "colored": GUARANTEE,
    "white": GUARANTEE,
    "white_per_cluster": GUARANTEE,
}


class _LocalPDPKMeans(ClusterMixin, BaseEstimator):
    """Shared fit/predict; subclasses choose the covariance."""

    guarantee: ClassVar[str] = GUARANTEE
    _covariance: ClassVar[Callable[..., NoiseCovariance]]

    def __init__(
        self,
        n_clusters: int = 4,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        calibration: Calibration = "analytic",
        random_state: int | None = None,
        n_init: int = 1,
        kmeans_random_state: int | None = 0,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.random_state = random_state
        self.n_init = n_init
        self.kmeans_random_state = kmeans_random_state

    def fit(self, X: np.ndarray, y: object = None, *, labels: np.ndarray | None = None) -> _LocalPDPKMeans:
        """Cluster (or take ``labels``), then release centroids + N(0, Sigma) noise."""
        gaussian_ratio(self.epsilon, self.delta, self.calibration)  # validate before any work
        try:
            x = np.asarray(X, dtype=float)
        except (TypeError, ValueError) as err:
            raise ParameterError(
                "X must hold numbers only; encode categorical and date columns first (dpcore.data.prepare)."
            ) from err
        if x.ndim != 2 or not np.isfinite(x).all():
            raise ParameterError("X must be a 2-D array of finite numbers; drop or impute NaN/inf first.")
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ParameterError(f"n_clusters must be an integer >= 1 (got {k!r}).")
        if k > x.shape[0]:
            raise ParameterError(
                f"n_clusters = {k} exceeds the number of rows ({x.shape[0]}); choose a smaller K."
            )
        if labels is None:
            km = KMeans(n_clusters=k, n_init=self.n_init, random_state=self.kmeans_random_state).fit(x)
            lab = km.labels_
        else:
            lab = np.asarray(labels)
            if not np.issubdtype(lab.dtype, np.integer):
                raise ParameterError("labels must be integer cluster indices 0..K-1, one per row.")
            if lab.shape != (x.shape[0],) or (lab.size and int(np.max(lab)) + 1 != k):
                raise ParameterError(
                    f"labels must give one cluster index 0..{k - 1} per row, using all {k} clusters."
                )
        cov = type(self)._covariance(x, lab, self.epsilon, self.delta, self.calibration)
        sampler = Sampler() if self.random_state is None else Sampler(seed=self.random_state)
        self.noise_covariance_ = cov
        self.diagnostic_true_centers_ = cov.centers
        self.labels_ = np.asarray(lab, dtype=np.int64)
        self.cluster_centers_ = cov.release(sampler)
        self.sampling_mode_ = sampler.mode
        self.budget_spent_ = (float(self.epsilon), float(self.delta))
        self.guarantee_ = (
            f"{self.guarantee} Budget: eps = {float(self.epsilon):g}, delta = {float(self.delta):g} "
            f"({self.calibration} calibration; sampling: {sampler.mode})."
        )
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Index of the nearest RELEASED centre for each row."""
        check_is_fitted(self, "cluster_centers_")
        x = np.asarray(X, dtype=float)
        if x.ndim != 2 or x.shape[1] != self.cluster_centers_.shape[1]:
            width = self.cluster_centers_.shape[1]
            raise ParameterError(f"X must have {width} columns like the fitted data.")
        d2 = (
            np.einsum("ij,ij->i", x, x)[:, None]
            - 2.0 * x @ self.cluster_centers_.T
            + np.einsum("ij,ij->i", self.cluster_centers_, self.cluster_centers_)[None, :]
        )
        return d2.argmin(axis=1)


class ColoredNoiseKMeans(_LocalPDPKMeans):
    """Centroids + trace-optimal colored Gaussian noise (seed 000 s.3.2, solved exactly).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.
    """

    _covariance = staticmethod(colored_noise_covariance)


class WhiteNoiseKMeans(_LocalPDPKMeans):
    """Centroids + white Gaussian noise, Sigma = (max_p ||u_p||^2 / gamma) I (seed 000 Thm. 3).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.
    """

    _covariance = staticmethod(white_noise_covariance)


class WhitePerClusterKMeans(_LocalPDPKMeans):
    """Centroids + white Gaussian noise scaled per cluster, Sigma_k = (Delta_k^2 / gamma) I (ablation).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.
    """

    _covariance = staticmethod(white_per_cluster_noise_covariance)
