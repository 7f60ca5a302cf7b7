"""Compare k-means release mechanisms over an eps grid and many trials (a curator diagnostic).

``sweep`` reads the true data and draws ``Sampler.diagnostic`` noise (never secure sampling, never
released): every mechanism's ``trial`` from the registry (``dpcore.kmeans.registry.KMEANS``) gives its noisy
centres for all (eps, trial) pairs, matched to the true centroids of the reference clustering; WCSS,
labels and ARI come from batched distance computations (:mod:`dpcore.metrics`) over chunks of centre sets,
so memory stays bounded whatever the rows, trials (at most ``MAX_TRIALS``) and eps (``MAX_EPS_VALUES``).
``diagnostic_rows`` picks the rows a comparison reads: every row, or beyond ``DIAGNOSTIC_ROWS`` a uniform
sample of that many, the same for the same table (:func:`dpcore.diagnostic_sample.diagnostic_sample`).
``diagnostic_draw`` is one such draw for the detailed view; ``true_clustering`` the reference clustering.
Releases go through the registry (:func:`dpcore.kmeans.registry.release_centroids`), not through here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from dpcore.diagnostic_sample import DIAGNOSTIC_ROWS, diagnostic_sample
from dpcore.errors import ParameterError
from dpcore.kmeans.lloyd import Neighbours
from dpcore.kmeans.registry import KMEANS, N_CLUSTERS, KMeansInputs, declared_metrics
from dpcore.mechanisms import Calibration, Sampler, gaussian_ratio
from dpcore.metrics import ari_many, nearest_sets, scale_to_unit
from dpcore.registry import Covariance, MechanismSpec

__all__ = [
    "DIAGNOSTIC_ROWS",
    "MAX_EPS_VALUES",
    "MAX_TRIALS",
    "check_comparison",
    "diagnostic_draw",
    "diagnostic_rows",
    "noise_covariance",
    "sweep",
    "true_clustering",
]

Progress = Callable[[float, str], None]
MAX_TRIALS = 500  # trials per eps of one comparison (DP-Lloyd + MCMC: its own chain cap)
MAX_EPS_VALUES = 25  # eps values of one comparison's grid
SCORE_ENTRIES = 2_000_000  # rows x centre sets scored at once: labels and distances of ~16 MB each
SCORING = "scoring all centre sets"
SCORES = ("wcss", "fractional_loss", "centroid_mse", "nicv", "ari")  # what _score computes


def _quiet(_fraction: float, _message: str) -> None:
    """A progress callback that reports nothing."""


def _specs(mechanisms: Sequence[str]) -> dict[str, MechanismSpec]:
    keys = list(dict.fromkeys(mechanisms))
    if not keys:
        raise ParameterError(f"choose at least one mechanism to compare: {', '.join(KMEANS)}.")
    return {k: KMEANS[k] for k in keys}


def _check_eps_grid(eps_grid: Sequence[float]) -> np.ndarray:
    grid = np.asarray(eps_grid, dtype=float).ravel()
    if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise ParameterError("the eps grid must be a non-empty list of finite numbers > 0, e.g. 0.1 ... 10.")
    if grid.size > MAX_EPS_VALUES:
        raise ParameterError(
            f"the eps grid has {grid.size} values; a comparison takes at most {MAX_EPS_VALUES}: "
            "use a coarser grid (e.g. 0.1, 0.2, 0.5, 1, 2, 5, 10)."
        )
    return grid


def _check_trials(trials: object) -> int:
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or not 1 <= trials <= MAX_TRIALS:
        raise ParameterError(
            f"trials must be a whole number from 1 to {MAX_TRIALS} (got {trials!r}); 20 is a good default."
        )
    return int(trials)


def _score(
    inputs: KMeansInputs, centers: np.ndarray, true_centers: np.ndarray, progress: Callable[[float], None]
) -> dict[str, np.ndarray]:
    """WCSS, fractional loss, centroid MSE, NICV (with bounds) and ARI of centre sets (S, K, d).

    The sets are scored in chunks of at most ``SCORE_ENTRIES`` / n (at least one), so labels and distances
    take bounded memory whatever the rows, trials and eps values; each set's scores are those of one
    nearest-centre search on all rows (:func:`dpcore.metrics.nearest_sets`), as unchunked.
    """
    data, lab = inputs.X, inputs.labels
    n, size, k = data.shape[0], centers.shape[0], true_centers.shape[0]
    unit = None if inputs.bounds is None else scale_to_unit(data, inputs.bounds)
    wcss_true = float(nearest_sets(data, true_centers[None])[1].sum())
    wcss, ari, nicv = np.empty(size), np.empty(size), np.empty(size)
    step = max(1, SCORE_ENTRIES // n)
    for start in range(0, size, step):
        part = slice(start, start + step)
        assigned, dist = nearest_sets(data, centers[part])
        wcss[part] = dist.sum(axis=1)
        ari[part] = ari_many(lab, assigned, k)
        del assigned, dist
        if unit is not None:
            nicv[part] = nearest_sets(unit, scale_to_unit(centers[part], inputs.bounds))[1].sum(axis=1) / n
        progress(min(start + step, size) / size)
    scores = {
        "wcss": wcss,
        "fractional_loss": (wcss - wcss_true) / wcss_true if wcss_true > 0 else np.full(size, np.nan),
        "centroid_mse": ((centers - true_centers) ** 2).sum(axis=(1, 2)),
    }
    if unit is not None:
        scores["nicv"] = nicv
    return {**scores, "ari": ari}


def _declared(
    scores: dict[str, np.ndarray], specs: Sequence[MechanismSpec], rows: int
) -> dict[str, np.ndarray]:
    """The scores the mechanisms declare (``MechanismSpec.metrics``): NaN in the
    ``rows`` of a mechanism that does not declare one; a declared metric this sweep cannot score is
    refused by name, never dropped."""
    wanted = declared_metrics(spec.key for spec in specs)
    unknown = [m.name for m in wanted if m.name not in SCORES]
    if unknown:
        raise ParameterError(
            f"the comparison cannot score metric(s) {', '.join(unknown)}; k-means mechanisms declare metrics "
            f"among {', '.join(SCORES)}."
        )
    names = {m.name for m in wanted}
    out = {}
    for name, values in scores.items():  # NICV is scored with public bounds only
        if name not in names:
            continue
        column = values.copy()
        for i, spec in enumerate(specs):
            if all(m.name != name for m in spec.metrics):
                column[i * rows : (i + 1) * rows] = np.nan
        out[name] = column
    return out


def _params(spec: MechanismSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """``spec``'s validated parameters, taken from ``values`` by name."""
    return spec.validate_params({p.name: values[p.name] for p in spec.params if p.name in values})


def _values(
    k: int, calibration: str, graph: Any, n_iter: int | None, mcmc_steps: int, neighbours: str
) -> dict:
    """The comparison's settings under the registry's parameter names (graphs as their dict); each
    mechanism validates the ones it declares (:func:`_params`)."""
    return {
        "n_clusters": k,
        "calibration": calibration,
        "graph": graph if graph is None or isinstance(graph, Mapping) else graph.to_dict(),
        "n_iter": 0 if n_iter is None else n_iter,
        "mcmc_steps": mcmc_steps,
        "neighbours": neighbours,
    }


def _prepare(
    specs: Mapping[str, MechanismSpec],
    inputs: KMeansInputs | None,
    values: Mapping[str, Any],
    grid: np.ndarray,
    delta: float,
) -> dict[str, dict[str, Any]]:
    """Every mechanism's parameters, bounds (unless ``inputs`` is None) and (eps, delta) checked before
    any work; a Gaussian mechanism's δ by its calibration parameter, if it declares one."""
    params = {key: _params(spec, values) for key, spec in specs.items()}
    for key, spec in specs.items():
        if spec.is_dp and inputs is not None:  # every DP k-means mechanism clips to public bounds
            inputs.require_bounds(spec.label)
        if spec.needs_delta:
            for eps in grid:
                gaussian_ratio(float(eps), delta, params[key].get("calibration", "analytic"))
    return params


def check_comparison(
    mechanisms: Sequence[str], eps_grid: Sequence[float], delta: float, values: Mapping[str, Any]
) -> None:
    """Refuse a comparison's settings before it runs: the mechanisms, the ε grid, each mechanism's
    declared parameters taken from ``values`` by name, and δ for the Gaussian ones (a ParameterError
    naming the fix)."""
    _prepare(_specs(mechanisms), None, values, _check_eps_grid(eps_grid), delta)


def _seeds(random_state: int | None, n: int) -> list[int | None]:
    if random_state is None:
        return [None] * n
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(random_state).spawn(n)]


def sweep(
    X: np.ndarray,
    labels: np.ndarray,
    mechanisms: Sequence[str],
    eps_grid: Sequence[float],
    trials: int = 20,
    delta: float = 1e-5,
    calibration: Calibration = "analytic",
    bounds: tuple[Any, Any] | None = None,
    graph: Any = None,
    random_state: int | None = None,
    progress: Progress | None = None,
    *,
    n_iter: int | None = None,
    mcmc_steps: int = 30000,
    neighbours: Neighbours = "unbounded",
    params: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Tidy table (mechanism, epsilon, trial, wcss, fractional_loss, centroid_mse[, nicv], ari).

    Diagnostic (reads the true data; ``Sampler.diagnostic`` noise, never released). ``labels`` is the
    true (non-private) clustering: its centroids are the reference for WCSS_true, centroid MSE (DP-Lloyd
    centres are first matched to them) and ARI. ``nicv`` (WCSS / n on data mapped to [-1, 1]^d by the
    public ``bounds``) appears when bounds are given. ``random_state`` (an int) makes the diagnostic
    reproducible. ``progress(fraction, message)`` is called as work completes. ``graph`` is Blowfish's
    policy graph, ``neighbours`` the relation DP-Lloyd and DP-Lloyd + MCMC are calibrated for.
    ``params`` gives any declared parameter by name (over the named ones); each mechanism takes those it
    declares.
    """
    specs = _specs(mechanisms)
    keys = list(specs)
    inputs = KMeansInputs(X, labels, *(bounds if bounds is not None else (None, None)))
    true_centers = inputs.true_centers()
    k, d = true_centers.shape
    grid = _check_eps_grid(eps_grid)
    trials = _check_trials(trials)
    values = {**_values(k, calibration, graph, n_iter, mcmc_steps, neighbours), **(params or {})}
    params = _prepare(specs, inputs, values, grid, delta)
    report = progress or _quiet
    share = 1.0 / (len(keys) + 1)  # equal shares of the bar per mechanism, one for the scoring
    blocks = []
    for i, (key, seed_i) in enumerate(zip(keys, _seeds(random_state, len(keys)), strict=True)):

        def part(fraction: float, message: str, i: int = i) -> None:
            report(share * (i + min(max(fraction, 0.0), 1.0)), message)

        trial = specs[key].trial
        if trial is None:
            raise ParameterError(f"{specs[key].label} has no diagnostic trial to compare.")
        blocks.append(
            trial(
                inputs,
                grid,
                trials,
                delta=delta,
                params=params[key],
                random_state=Sampler.diagnostic(seed_i),
                progress=part,
            )
        )

    centers = np.stack(blocks).reshape(-1, k, d)  # (M E T, K, d): small, whatever the rows
    scores = _score(inputs, centers, true_centers, lambda f: report(1.0 - share * (1.0 - f), SCORING))
    scores = _declared(scores, [specs[key] for key in keys], grid.size * trials)
    frame = pd.DataFrame(
        {
            "mechanism": np.repeat(keys, grid.size * trials),
            "epsilon": np.tile(np.repeat(grid, trials), len(keys)),
            "trial": np.tile(np.arange(trials), len(keys) * grid.size),
            **scores,
        }
    )
    report(1.0, "done")
    return frame


def diagnostic_rows(
    X: np.ndarray, labels: np.ndarray, fingerprint: str, limit: int = DIAGNOSTIC_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """The rows (X, labels) a comparison reads: all of them up to ``limit``, else a uniform sample of
    ``limit`` rows drawn once per (``fingerprint``, limit) (diagnostic only: a release reads every row).

    Raises ParameterError when the sample holds no row of some cluster of ``labels`` (a tiny cluster).
    """
    data, lab = np.asarray(X), np.asarray(labels)
    rows = diagnostic_sample(data.shape[0], fingerprint, limit)
    if rows.size == data.shape[0]:
        return data, lab
    kept = lab[rows]
    missing = np.flatnonzero(np.bincount(kept, minlength=int(lab.max()) + 1) == 0)
    if missing.size:
        sizes = ", ".join(f"{int(np.count_nonzero(lab == j)):,}" for j in missing[:3])
        raise ParameterError(
            f"the comparison's uniform sample of {rows.size:,} rows has no row of cluster(s) "
            f"{', '.join(str(j) for j in missing[:3])} ({sizes} rows in the table); choose a smaller K."
        )
    return data[rows], kept


def diagnostic_draw(
    mechanism: str,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    *,
    delta: float = 1e-5,
    calibration: Calibration = "analytic",
    bounds: tuple[Any, Any] | None = None,
    graph: Any = None,
    neighbours: Neighbours = "unbounded",
    n_iter: int | None = None,
    mcmc_steps: int = 30000,
    random_state: int | None = 0,
    params: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """One draw of ``mechanism`` at ``epsilon`` with diagnostic noise: centres (K, d), never released.

    The mechanism's sweep trial with one eps and one trial: local mechanisms give the true centroids of
    ``labels`` + N(0, Sigma); the DP-Lloyd family one fit, its centres matched to the true centroids (row
    k is the centre nearest true cluster k). ``random_state`` (an int) seeds ``Sampler.diagnostic``;
    ``params`` as in :func:`sweep`.
    """
    specs = _specs([mechanism])
    inputs = KMeansInputs(X, labels, *(bounds if bounds is not None else (None, None)))
    k = inputs.true_centers().shape[0]
    grid = _check_eps_grid([epsilon])
    values = {**_values(k, calibration, graph, n_iter, mcmc_steps, neighbours), **(params or {})}
    params = _prepare(specs, inputs, values, grid, delta)
    spec = specs[mechanism]
    if spec.trial is None:
        raise ParameterError(f"{spec.label} has no diagnostic trial to draw.")
    draws = spec.trial(
        inputs,
        grid,
        1,
        delta=delta,
        params=params[mechanism],
        random_state=Sampler.diagnostic(random_state),
        progress=_quiet,
    )
    return draws[0, 0]


def noise_covariance(
    mechanism: str,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
) -> Covariance:
    """The noise covariance of ``mechanism`` on the clustering ``labels`` at (eps, delta), from its spec's
    ``covariance`` capability (the ellipses of the detailed view); a ParameterError when it has none."""
    spec = KMEANS[mechanism]
    if spec.covariance is None:
        having = [s.label for s in KMEANS.values() if s.covariance is not None]
        raise ParameterError(f"{spec.label} declares no noise covariance; these do: {', '.join(having)}.")
    inputs = KMeansInputs(X, labels)
    k = inputs.true_centers().shape[0]
    params = _params(spec, {"n_clusters": k, "calibration": calibration})
    return spec.covariance(inputs, float(epsilon), float(delta), params)


SEED_ROWS = 50_000  # rows the k-means++ starts of the true clustering read at most (then one full run)


def true_clustering(
    X: np.ndarray, n_clusters: int, random_state: int = 0, n_init: int = 10, seed_rows: int = SEED_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """Non-private k-means (scikit-learn, k-means++): labels (n,) and true centroids (K, d), diagnostic.

    The centroids are the exact means of the returned labels (the reference of every loss). Singleton
    clusters are allowed here (only the local mechanisms refuse them: ``local_unavailable``). Above
    ``seed_rows`` rows the ``n_init`` k-means++ starts run on a uniform sample of that many rows (seeded by
    ``random_state``) and the best one is then run to convergence on every row (one Lloyd run, not
    ``n_init``: a 600k-row table opens the K-means page in seconds, not minutes).
    """
    data = KMeansInputs(X).X
    k = n_clusters
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ParameterError(f"n_clusters must be an integer >= 1 (got {k!r}); try K = 3.")
    k = N_CLUSTERS.validate(k)
    if k > data.shape[0]:
        raise ParameterError(
            f"n_clusters = {k} exceeds the number of rows ({data.shape[0]}); choose a smaller K."
        )
    with warnings.catch_warnings():  # fewer distinct points than K: reported below as a ParameterError
        warnings.simplefilter("ignore", ConvergenceWarning)
        if data.shape[0] > seed_rows:
            rows = np.random.default_rng(random_state).choice(data.shape[0], seed_rows, replace=False)
            seed = KMeans(n_clusters=int(k), n_init=n_init, random_state=random_state).fit(data[rows])
            km = KMeans(n_clusters=int(k), init=seed.cluster_centers_, n_init=1).fit(data)
        else:
            km = KMeans(n_clusters=int(k), n_init=n_init, random_state=random_state).fit(data)
    labels = np.asarray(km.labels_, dtype=np.intp)
    counts = np.bincount(labels, minlength=k)
    if np.any(counts == 0):
        raise ParameterError(
            f"the data has only {int(np.count_nonzero(counts))} distinct clusters for K = {k} "
            "(repeated rows); choose a smaller K."
        )
    return labels, KMeansInputs(data, labels).true_centers()
