"""The k-means mechanism registry: ``KMEANS``, the inputs of a release and its released table.

Each module of :mod:`dpcore.kmeans.mechanisms` registers one :class:`dpcore.registry.MechanismSpec` here
(importing :mod:`dpcore.kmeans` registers them all). A spec's ``release(inputs, *, epsilon, delta, params,
random_state)`` runs it once on :class:`KMeansInputs` and returns a ``MechanismOutput`` whose table holds only
released centroids (:func:`centroid_table`); its ``trial(inputs, eps_grid, trials, *, delta, params,
random_state, progress)`` is the sweep's diagnostic: noisy centres (E, trials, K, d) drawn with
``Sampler.diagnostic``, row k matched to true cluster k of ``inputs.labels``, never released.

A release publishes each feature's centroids in one coordinate system, the one in which its clip box (the
bounds the DP mechanisms clip centres to) is public, so a clipped centre shows only public numbers:
original units when the curator gave the bounds; (x - lo) / (hi - lo), a fraction of the data range,
when they were read from the data (then neither the range nor, with standardising, the data's mean and
standard deviation can be recovered from the release).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.kmeans.cells import cluster_statistics
from dpcore.kmeans.lloyd import check_bounds
from dpcore.mechanisms import Sampler, check_random_state
from dpcore.registry import MechanismOutput, MechanismSpec, Metric, Param, Registry

if TYPE_CHECKING:
    from dpcore.data import PreparedData

__all__ = [
    "KMEANS",
    "METRICS",
    "N_CLUSTERS",
    "KMeansInputs",
    "box_position",
    "centroid_decimals",
    "centroid_output",
    "centroid_table",
    "check_release_sampler",
    "data_bounded",
    "declared_metrics",
    "release_centroids",
    "released_centers",
    "takes",
]

KMEANS = Registry("kmeans")
N_CLUSTERS = Param(
    "n_clusters",
    "Number of clusters K",
    int,
    4,
    low=1,
    high=100,
    help="Choose K with the elbow chart, e.g. K = 4.",
    hidden=True,  # chosen with the elbow chart, at the top of the page
)
#: The scores of a k-means comparison (:func:`dpcore.kmeans.sweep.sweep`); a spec declares those its
#: trial is scored by (NICV needs public bounds and appears only with them).
METRICS = (
    Metric("fractional_loss", "Fractional clustering loss (WCSS − WCSS_true) / WCSS_true"),
    Metric("wcss", "WCSS of the released centres"),
    Metric("centroid_mse", "Centroid MSE (sum of squared errors)"),
    Metric("nicv", "NICV (WCSS / n on [-1, 1]^d)"),
    Metric("ari", "Adjusted Rand index vs true labels", scale="unit"),
)
ORIGINAL, FRACTION, SCALED = " [original units]", " [fraction of data range]", " [scaled]"
REVEALS = {
    ORIGINAL: "centroid in original units (dates as YYYY-MM-DD, categories as the nearest category); the "
    "DP mechanisms clip it to the curator's public bounds",
    FRACTION: "(centroid - data minimum) / (data maximum - data minimum), a fraction of the data range (the "
    "DP mechanisms clip it to [0, 1]); the range itself is not published",
    SCALED: "centroid in the units of the input matrix (the DP mechanisms clip it to the public bounds given "
    "with it)",
}


@dataclass(frozen=True, eq=False)
class KMeansInputs:
    """What a k-means release needs from the prepared data.

    ``X`` (n, d) in the scaled feature space; ``labels`` the curator's clustering (one index 0..K-1 per
    row; used by the local mechanisms, which add noise to its centroids, and by the sweep as the
    reference); ``lower``/``upper`` the bounds in the scaled space (the DP mechanisms clip to them);
    ``inverse_transform(centres) -> DataFrame`` maps centres to original units; ``data_bounds`` names the
    features whose bounds were read from the data (released as fractions of their range, never in
    original or scaled units). Bounds of the other features are public.
    """

    X: np.ndarray
    labels: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    feature_names: tuple[str, ...] = ()
    inverse_transform: Callable[[np.ndarray], pd.DataFrame] | None = None
    data_bounds: tuple[str, ...] = ()

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
        hidden = tuple(self.data_bounds)
        if not set(hidden) <= set(names) or (hidden and self.lower is None):
            raise ParameterError(
                "data_bounds must name features of X that have bounds (lower, upper); "
                f"got {list(hidden)} for features {list(names)}."
            )
        object.__setattr__(self, "data_bounds", hidden)

    @classmethod
    def from_prepared(cls, prep: PreparedData, labels: np.ndarray | None = None) -> KMeansInputs:
        """Inputs from ``dpcore.data.prepare``'s result, with its bounds' sources (:func:`data_bounded`)."""
        return cls(
            prep.X,
            labels,
            prep.lower,
            prep.upper,
            tuple(prep.feature_names),
            prep.decode,
            data_bounded(prep),
        )

    @property
    def units(self) -> tuple[str, ...]:
        """The column suffix of each feature in a release: FRACTION for data-derived bounds, else
        ORIGINAL with an inverse transform, else SCALED (the input matrix's own units)."""
        public = ORIGINAL if self.inverse_transform is not None else SCALED
        return tuple(FRACTION if name in self.data_bounds else public for name in self.feature_names)

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


def declared_metrics(keys: Iterable[str]) -> tuple[Metric, ...]:
    """The metrics the mechanisms ``keys`` declare, each once, in the order first declared."""
    out: dict[str, Metric] = {}
    for key in keys:
        for metric in KMEANS[key].metrics:
            out.setdefault(metric.name, metric)
    return tuple(out.values())


def takes(spec: MechanismSpec, name: str) -> bool:
    """True if ``spec`` declares a parameter called ``name``."""
    return any(p.name == name for p in spec.params)


def check_release_sampler(random_state: int | Sampler | None) -> Sampler:
    """The Sampler of :func:`~dpcore.mechanisms.check_random_state`, refused when diagnostic: a release
    draws from secure sampling or a labelled demo seed only."""
    random_state = check_random_state(random_state)
    if random_state.mode == "diagnostic":
        raise ParameterError(
            "a release needs secure sampling (Sampler()) or a labelled demo seed, not diagnostic."
        )
    return random_state


def data_bounded(prep: PreparedData) -> tuple[str, ...]:
    """The features of ``prep`` whose bounds were read from the data (not the curator's, the latitude or
    longitude domain, or a public category list)."""
    return tuple(n for n in prep.feature_names if "leaks" in prep.bound_sources.get(n, "leaks"))


def box_position(inputs: KMeansInputs, centers: np.ndarray) -> np.ndarray | None:
    """(c - lower) / (upper - lower) per feature (None without bounds): each centre's place in its clip
    box, 0 at the lower bound and 1 at the upper. A function of a release's published values and public
    bounds, and for data-derived bounds the published fraction itself, so it reveals nothing more."""
    if inputs.bounds is None:
        return None
    lower, upper = inputs.bounds
    return (np.asarray(centers, dtype=float) - lower) / (upper - lower)


def centroid_table(inputs: KMeansInputs, centers: np.ndarray) -> pd.DataFrame:
    """Released centroids: one row per cluster, then one column '<f> [<units>]' per feature in the
    coordinates of :attr:`KMeansInputs.units` (``REVEALS`` says what each shows). Nothing else.

    Fractions are (c - lower) / (upper - lower) in the scaled space, which equals (x - lo) / (hi - lo)
    in original units for any affine scaling (standardising included)."""
    c = np.asarray(centers, dtype=float)
    units = inputs.units
    original = inputs.inverse_transform(c) if ORIGINAL in units and inputs.inverse_transform else None
    position = box_position(inputs, c)
    out: dict[str, Any] = {"cluster": np.arange(c.shape[0])}
    for j, (name, unit) in enumerate(zip(inputs.feature_names, units, strict=True)):
        if unit == FRACTION:
            column = position[:, j]
        elif original is not None:
            column = original[name]
            if pd.api.types.is_datetime64_any_dtype(column):
                column = column.dt.strftime("%Y-%m-%d")
            column = column.to_numpy()
        else:
            column = c[:, j]
        out[name + unit] = column
    return pd.DataFrame(out)


def centroid_output(
    key: str,
    inputs: KMeansInputs,
    centers: np.ndarray,
    details: dict[str, Any],
    diagnostics: dict[str, Any] | None = None,
) -> MechanismOutput:
    """A release of mechanism ``key``: the :func:`centroid_table` of ``centers``, its chart (released
    values only), the manifest ``details`` plus what each column reveals, and the curator's diagnostics
    (with the centres in the scaled space, for :func:`released_centers`)."""
    from dpcore.plots.kmeans import released_centers_figure

    c = np.asarray(centers, dtype=float)
    table = centroid_table(inputs, c)
    figure = released_centers_figure(table, inputs.feature_names, KMEANS[key].label, box_position(inputs, c))
    names = zip(inputs.feature_names, inputs.units, strict=True)
    columns = {f"{name}{unit}": REVEALS[unit] for name, unit in names}
    rounding = {"decimals": centroid_decimals(inputs, table)}
    return MechanismOutput(
        table,
        (figure,),
        {**details, "columns": columns, "rounding": rounding},
        {**(diagnostics or {}), "released_centers": c},
    )


def centroid_decimals(inputs: KMeansInputs, table: pd.DataFrame) -> dict[str, int]:
    """Decimal places of each numeric column of a centroid table (``dpcore.postprocess``, applied by the
    release): ``SIGNIFICANT`` significant digits of the feature's public range in the units the column
    publishes (1 for a fraction of the range), or of the column's largest released value without bounds.
    Public values and the release only: the rounding step says nothing about the rows."""
    from dpcore.postprocess import significant_decimals

    original = None
    if inputs.bounds is not None and ORIGINAL in inputs.units and inputs.inverse_transform is not None:
        original = inputs.inverse_transform(np.vstack(inputs.bounds))
    out = {}
    for j, (name, unit) in enumerate(zip(inputs.feature_names, inputs.units, strict=True)):
        column = table[name + unit]
        if not pd.api.types.is_float_dtype(column):
            continue
        if inputs.bounds is None:
            width = float(np.nanmax(np.abs(column.to_numpy(dtype=float)), initial=0.0))
        elif unit == FRACTION:
            width = 1.0
        elif original is not None and pd.api.types.is_numeric_dtype(original[name]):
            width = float(abs(original[name].iloc[1] - original[name].iloc[0]))
        else:
            width = float(inputs.bounds[1][j] - inputs.bounds[0][j])
        out[name + unit] = significant_decimals(width)
    return out


def released_centers(output: MechanismOutput) -> np.ndarray:
    """The released centres (K, d) of a k-means release in the scaled space, for the curator (its
    diagnostics; the table publishes them in :attr:`KMeansInputs.units`)."""
    return np.asarray(output.diagnostics["released_centers"], dtype=float)


def release_centroids(
    key: str,
    inputs: KMeansInputs,
    *,
    epsilon: float,
    delta: float = 0.0,
    random_state: int | Sampler | None = None,
    params: Mapping[str, Any] | None = None,
) -> MechanismOutput:
    """Run mechanism ``key`` once, its parameters validated; ``random_state`` as in
    :func:`~dpcore.mechanisms.check_random_state` (None: secure sampling)."""
    spec = KMEANS[key]
    return spec.run(
        inputs,
        epsilon=epsilon,
        delta=delta,
        params=spec.validate_params(params or {}),
        random_state=check_release_sampler(random_state),
    )
