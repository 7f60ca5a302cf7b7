"""Estimators releasing noisy k-means centroids under local (eps, delta)-PDP (Ravi, Scaglione & Peisert
2021, s.3).

The partition comes from non-private k-means (scikit-learn) or from ``labels`` passed to ``fit``; the
true centroids get Gaussian noise with the covariance of ``dpcore.kmeans.covariance``. Nothing but
``cluster_centers_`` is a release: true centres and labels are diagnostics for the curator;
``caveats_`` lists the clusters released exactly in some direction (no noise there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    GUARANTEE,
    NoiseCovariance,
    colored_noise_covariance,
    singleton_message,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.mechanisms import Calibration, Sampler, check_random_state, gaussian_ratio
from dpcore.metrics import assign
from dpcore.validation import check_fitted, check_rows


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
        random_state: int | Sampler | None = None,
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
        x = check_rows(self, X, reset=True)
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ParameterError(f"n_clusters must be an integer >= 1 (got {k!r}).")
        if k > x.shape[0]:
            raise ParameterError(
                f"n_clusters = {k} exceeds the number of rows ({x.shape[0]}); choose a smaller K."
            )
        if x.shape[0] == 1:
            raise ParameterError(f"X has one sample (n_samples = 1): {singleton_message(0)}")
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
        random_state = check_random_state(self.random_state)
        self.noise_covariance_ = cov
        self.diagnostic_true_centers_ = cov.centers
        self.labels_ = np.asarray(lab, dtype=np.int64)
        self.cluster_centers_ = cov.release(random_state)
        self.caveats_ = list(cov.caveats)
        self.sampling_mode_ = random_state.mode
        self.budget_spent_ = (float(self.epsilon), float(self.delta))
        self.guarantee_ = (
            f"{self.guarantee} Budget: eps = {float(self.epsilon):g}, delta = {float(self.delta):g} "
            f"({self.calibration} calibration; sampling: {random_state.mode})."
        )
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Index of the nearest RELEASED centre for each row."""
        check_fitted(self)
        return assign(check_rows(self, X, reset=False), self.cluster_centers_)


class ColoredNoiseKMeans(_LocalPDPKMeans):
    """Centroids + trace-optimal colored Gaussian noise (Ravi, Scaglione & Peisert 2021, s.3.2, solved
    exactly with a certificate).

    (eps, delta)-PDP for THIS dataset (local; not differential privacy): neighbours are X and X minus
    one of its own rows, with the partition held fixed; the noise is calibrated on this dataset.
    """

    _covariance = staticmethod(colored_noise_covariance)


class WhiteNoiseKMeans(_LocalPDPKMeans):
    """Centroids + white Gaussian noise, Sigma = (max_p ||u_p||^2 / gamma) I (Ravi et al. 2021, Thm. 3).

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
