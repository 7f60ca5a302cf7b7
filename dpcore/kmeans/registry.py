"""The k-means mechanism registry: ``KMEANS``, the inputs of a release and its released table.

Each module of :mod:`dpcore.kmeans.mechanisms` registers one :class:`dpcore.registry.MechanismSpec` here
(importing :mod:`dpcore.kmeans` registers them all). A spec's ``release(inputs, *, epsilon, delta, params,
sampler)`` runs it once on :class:`KMeansInputs` and returns a ``MechanismOutput`` whose table holds only
released centroids (:func:`centroid_table`); its ``trial(inputs, eps_grid, trials, *, delta, params,
sampler, progress)`` is the sweep's diagnostic: noisy centres (E, trials, K, d) drawn with
``Sampler.diagnostic``, row k matched to true cluster k of ``inputs.labels``, never released.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.kmeans.cells import cluster_statistics
from dpcore.kmeans.lloyd import check_bounds
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec, Param, Registry

if TYPE_CHECKING:
    from dpcore.data import PreparedData

__all__ = [
    "KMEANS",
    "N_CLUSTERS",
    "KMeansInputs",
    "centroid_output",
    "centroid_table",
    "check_release_sampler",
    "release_centroids",
    "released_centers",
    "takes",
]

KMEANS = Registry("kmeans")
N_CLUSTERS = Param(
    "n_clusters", "Number of clusters K", int, 4, low=1, help="Choose K with the elbow chart, e.g. K = 4."
)
SCALED, ORIGINAL = " [scaled]", " [original units]"
COLUMNS = (
    "'<feature> [scaled]': the prepared feature space; '<feature> [original units]': after undoing the "
    "scaling and decoding categories and dates (absent when the scaling was derived from the data)"
)


@dataclass(frozen=True, eq=False)
class KMeansInputs:
    """What a k-means release needs from the prepared data.

    ``X`` (n, d) in the scaled feature space; ``labels`` the curator's clustering (one index 0..K-1 per
    row; used by the local mechanisms, which add noise to its centroids, and by the sweep as the
    reference); ``lower``/``upper`` the public bounds in the scaled space (the DP mechanisms clip to them);
    ``inverse_transform(centres) -> DataFrame`` maps released centres to original units (None when that
    would reveal data-derived scaling, e.g. the data's mean and standard deviation).
    """

    X: np.ndarray
    labels: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    feature_names: tuple[str, ...] = ()
    inverse_transform: Callable[[np.ndarray], pd.DataFrame] | None = None

    def __post_init__(self) -> None:
        try:
            data = np.ascontiguousarray(self.X, dtype=float)
        except (TypeError, ValueError) as err:
            raise ParameterError(
                "X must hold numbers only; encode categorical and date columns first (dpcore.data.prepare)."
            ) from err
        if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] == 0 or not np.isfinite(data).all():
            raise ParameterError(
                "X must be a non-empty 2-D array of finite numbers; handle missing values first."
            )
        object.__setattr__(self, "X", data)
        if self.labels is not None:
            lab = np.asarray(self.labels)
            if lab.shape != (data.shape[0],) or not np.issubdtype(lab.dtype, np.integer) or lab.min() < 0:
                raise ParameterError("labels must give one integer cluster index 0..K-1 per row of X.")
            object.__setattr__(self, "labels", lab.astype(np.intp))
        if (self.lower is None) != (self.upper is None):
            raise ParameterError("give both public bounds (lower and upper) or neither.")
        if self.lower is not None:
            lower, upper = check_bounds((self.lower, self.upper), data.shape[1])
            object.__setattr__(self, "lower", lower)
            object.__setattr__(self, "upper", upper)
        names = tuple(self.feature_names) or tuple(f"x{j}" for j in range(data.shape[1]))
        if len(names) != data.shape[1] or len(set(names)) != len(names):
            raise ParameterError(f"feature_names must name the {data.shape[1]} columns of X once each.")
        object.__setattr__(self, "feature_names", names)

    @classmethod
    def from_prepared(cls, prep: PreparedData, labels: np.ndarray | None = None) -> KMeansInputs:
        """Inputs from ``dpcore.data.prepare``'s result; standardised data gets no original-units columns
        (the data's mean and standard deviation would be readable from the two coordinate systems)."""
        return cls(
            prep.X,
            labels,
            prep.lower,
            prep.upper,
            tuple(prep.feature_names),
            None if prep.scaling == "standardize" else prep.decode,
        )

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None if self.lower is None or self.upper is None else (self.lower, self.upper)

    def require_bounds(self, label: str) -> tuple[np.ndarray, np.ndarray]:
        """The public bounds, or a ParameterError naming ``label`` and the fix."""
        if self.bounds is None:
            raise ParameterError(
                f"{label} needs public bounds (lower, upper) per feature: enter them on the Data page "
                "(bounds computed from the data leak the extreme rows)."
            )
        return self.bounds

    def require_labels(self, label: str) -> np.ndarray:
        """The clustering, or a ParameterError naming ``label``."""
        if self.labels is None:
            raise ParameterError(f"{label} adds noise to a clustering: pass its labels (one per row).")
        return self.labels

    def true_centers(self) -> np.ndarray:
        """Centroids (K, d) of ``labels``: the sweep's reference, a diagnostic (never released)."""
        lab = self.require_labels("The comparison")
        counts, sums = cluster_statistics(self.X, lab[None], int(lab.max()) + 1)
        if np.any(counts[0] == 0):
            raise ParameterError(
                f"labels must use every cluster index 0..{counts.size - 1}; relabel them consecutively."
            )
        return sums[0] / counts[0][:, None]


def takes(spec: MechanismSpec, name: str) -> bool:
    """True if ``spec`` declares a parameter called ``name``."""
    return any(p.name == name for p in spec.params)


def check_release_sampler(sampler: Sampler) -> Sampler:
    """Refuse diagnostic sampling for a release (secure sampling or a labelled demo seed only)."""
    if not isinstance(sampler, Sampler) or sampler.mode == "diagnostic":
        raise ParameterError(
            "a release needs secure sampling (Sampler()) or a labelled demo seed, not diagnostic."
        )
    return sampler


def centroid_table(inputs: KMeansInputs, centers: np.ndarray) -> pd.DataFrame:
    """Released centroids: one row per cluster, '<f> [scaled]' columns, then '<f> [original units]' ones
    through ``inputs.inverse_transform`` (dates as YYYY-MM-DD) when it is given. Nothing else."""
    c = np.asarray(centers, dtype=float)
    out: dict[str, Any] = {"cluster": np.arange(c.shape[0])}
    for j, name in enumerate(inputs.feature_names):
        out[name + SCALED] = c[:, j]
    if inputs.inverse_transform is not None:
        original = inputs.inverse_transform(c)
        for name in inputs.feature_names:
            column = original[name]
            if pd.api.types.is_datetime64_any_dtype(column):
                column = column.dt.strftime("%Y-%m-%d")
            out[name + ORIGINAL] = column.to_numpy()
    return pd.DataFrame(out)


def centroid_output(
    key: str,
    inputs: KMeansInputs,
    centers: np.ndarray,
    details: dict[str, Any],
    diagnostics: dict[str, Any] | None = None,
) -> MechanismOutput:
    """A release of mechanism ``key``: the :func:`centroid_table` of ``centers``, its bar chart (released
    values only), the manifest ``details`` (plus what the columns mean) and the curator's diagnostics."""
    from dpcore.plots.kmeans import released_centers_figure

    table = centroid_table(inputs, centers)
    figure = released_centers_figure(table, inputs.feature_names, KMEANS[key].label)
    return MechanismOutput(table, (figure,), {**details, "columns": COLUMNS}, diagnostics or {})


def released_centers(table: pd.DataFrame) -> np.ndarray:
    """The scaled centres (K, d) of a :func:`centroid_table`, in column order."""
    return table[[c for c in table.columns if c.endswith(SCALED)]].to_numpy(dtype=float)


def release_centroids(
    key: str,
    inputs: KMeansInputs,
    *,
    epsilon: float,
    delta: float = 0.0,
    sampler: Sampler | None = None,
    params: Mapping[str, Any] | None = None,
) -> MechanismOutput:
    """Run mechanism ``key`` once: its parameters validated, secure sampling unless ``sampler`` is given."""
    spec = KMEANS[key]
    return spec.release(
        inputs,
        epsilon=epsilon,
        delta=delta,
        params=spec.validate_params(params or {}),
        sampler=check_release_sampler(Sampler() if sampler is None else sampler),
    )
