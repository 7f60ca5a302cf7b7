"""Compare k-means release mechanisms over an eps grid and many trials; release one result.

``sweep`` is a curator diagnostic: it reads the true data and draws ``Sampler.diagnostic`` noise (never
secure sampling, never released). ``release`` runs one mechanism once with the sampler it is given (secure
for a release, a labelled demo seed otherwise) and returns a :class:`CentroidRelease`.

Speed (seed 000's local mechanisms): the optimal covariance only rescales with gamma = s*(eps, delta)^2,
so its shape is solved once per clustering (and cached), then ``.rescaled`` per eps; all trials' noise
is drawn at once; WCSS, labels and ARI of every (eps, trial) centre set come from one batched distance
computation (:mod:`dpcore.metrics`). DP-Lloyd and Blowfish run all (eps, trial) fits as one batch
(:func:`dpcore.kmeans.lloyd.noisy_lloyd_trials`); DP-Lloyd + MCMC fits one chain at a time.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    NoiseCovariance,
    colored_noise_covariance,
    singleton_message,
    white_noise_covariance,
    white_per_cluster_noise_covariance,
)
from dpcore.kmeans.lloyd import Neighbours, noisy_lloyd_trials
from dpcore.mechanisms import Calibration, Sampler, gaussian_ratio
from dpcore.metrics import ari_many, match_centers, nearest, scale_to_unit

Progress = Callable[[float, str], None]
_UNBOUNDED = "unbounded neighbours (one row added or removed)"
_BOUNDED = "bounded neighbours (one row's value replaced)"
_LOCAL = (
    "(eps, delta)-PDP for THIS dataset only (local, not differential privacy): neighbours are X and X minus "
    "one of its own rows, with the clustering held fixed; the noise scale is computed from this dataset."
)


@dataclass(frozen=True)
class MechanismInfo:
    """What the UI needs to offer a mechanism: label, guarantee sentence and required inputs."""

    key: str
    label: str
    guarantee: str
    is_local: bool
    needs_bounds: bool
    needs_delta: bool
    uses_graph: bool
    seed: str


def _info(
    key: str, label: str, guarantee: str, seed: str, *, local: bool, graph: bool = False
) -> MechanismInfo:
    return MechanismInfo(key, label, guarantee, local, not local, local, graph, seed)


MECHANISMS: dict[str, MechanismInfo] = {
    m.key: m
    for m in (
        _info(
            "white",
            "White Gaussian",
            f"{_LOCAL} Sigma = (max_p ||u_p||^2 / gamma) I.",
            "000 Thm. 3",
            local=True,
        ),
        _info(
            "white_per_cluster",
            "White Gaussian per cluster",
            f"{_LOCAL} Sigma_k = (max over cluster k of ||u_p||^2 / gamma) I.",
            "MECHANISMS 3.2 (ablation)",
            local=True,
        ),
        _info(
            "colored",
            "Colored Gaussian (optimal)",
            f"{_LOCAL} Sigma = the trace-optimal covariance.",
            "000 s.3.2",
            local=True,
        ),
        _info(
            "dp_lloyd",
            "DP-Lloyd (SuLQ)",
            f"eps-DP, {_UNBOUNDED}: Laplace-noised counts and sums of T Lloyd rounds in public bounds.",
            "001, 003 Alg. 1",
            local=False,
        ),
        _info(
            "blowfish",
            "Blowfish k-means",
            "(eps, G)-Blowfish: neighbours replace one row's value x by y for an edge (x, y) of the policy "
            "graph G; DP-Lloyd rounds with policy-specific sensitivities in public bounds.",
            "004",
            local=False,
            graph=True,
        ),
        _info(
            "dp_lloyd_mcmc",
            "DP-Lloyd + MCMC",
            f"eps-DP, {_UNBOUNDED}, as DP-Lloyd: MCMC post-processing of its released counts and sums "
            "costs no extra budget.",
            "003 s.3",
            local=False,
        ),
    )
}
_COVARIANCE = {
    "white": white_noise_covariance,
    "white_per_cluster": white_per_cluster_noise_covariance,
    "colored": colored_noise_covariance,
}
_SHAPES: OrderedDict[tuple[str, str], NoiseCovariance] = OrderedDict()
_SHAPE_CACHE_SIZE = 12


@dataclass(frozen=True)
class CentroidRelease:
    """Run once: ``centers`` is the release; ``diagnostics`` are data-dependent, never published."""

    centers: np.ndarray
    mechanism: str
    epsilon: float
    delta: float
    calibration: str | None
    sampling_mode: str
    guarantee: str
    is_local: bool
    details: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)


def _check_neighbours(neighbours: str) -> Neighbours:
    if neighbours not in ("unbounded", "bounded"):
        raise ParameterError(
            f"neighbours must be 'unbounded' (one row added or removed) or 'bounded' (one row's value "
            f"replaced), got {neighbours!r}; take it from the privacy policy."
        )
    return neighbours  # type: ignore[return-value]


def mechanism_guarantee(key: str, neighbours: str = "unbounded") -> str:
    """The guarantee sentence of ``key`` when DP-Lloyd-type noise is calibrated for ``neighbours``.

    Only DP-Lloyd and DP-Lloyd + MCMC depend on it (bounded: Delta_N = 2, Delta_S = 2 sum h); the local
    mechanisms and Blowfish have their own neighbour relations.
    """
    (key,) = _check_keys([key])
    text = MECHANISMS[key].guarantee
    if _check_neighbours(neighbours) == "bounded" and _UNBOUNDED in text:
        return text.replace(_UNBOUNDED, _BOUNDED)
    return text


# ---------------------------------------------------------------- validation


def _check_keys(mechanisms: Sequence[str]) -> list[str]:
    keys = list(dict.fromkeys(mechanisms))
    unknown = [m for m in keys if m not in MECHANISMS]
    if unknown or not keys:
        raise ParameterError(f"unknown mechanism(s) {unknown or '(none)'}; choose from {sorted(MECHANISMS)}.")
    return keys


def _check_labels(X: np.ndarray, labels: Any) -> tuple[np.ndarray, np.ndarray, int]:
    data = np.asarray(X, dtype=float)
    if data.ndim != 2 or data.shape[0] == 0 or not np.isfinite(data).all():
        raise ParameterError(
            "X must be a non-empty 2-D array of finite numbers; handle missing values first."
        )
    lab = np.asarray(labels)
    if lab.shape != (data.shape[0],) or not np.issubdtype(lab.dtype, np.integer) or lab.min() < 0:
        raise ParameterError("labels must give one integer cluster index 0..K-1 per row of X.")
    return data, lab.astype(np.intp), int(lab.max()) + 1


def _check_eps_grid(eps_grid: Sequence[float]) -> np.ndarray:
    grid = np.asarray(eps_grid, dtype=float).ravel()
    if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise ParameterError("the eps grid must be a non-empty list of finite numbers > 0, e.g. 0.1 ... 10.")
    return grid


def _needs(keys: list[str], bounds: Any, graph: Any) -> None:
    if bounds is None and any(MECHANISMS[k].needs_bounds for k in keys):
        raise ParameterError(
            "DP-Lloyd, Blowfish and DP-Lloyd + MCMC need public bounds (lower, upper) per feature: enter "
            "them on the Data page (bounds computed from the data leak the extreme rows)."
        )
    if graph is None and "blowfish" in keys:
        raise ParameterError("Blowfish k-means needs a policy graph: choose one on the Privacy policy page.")


def _seeds(seed: int | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


# ---------------------------------------------------------------- local mechanisms


def _fingerprint(X: np.ndarray, labels: np.ndarray) -> str:
    h = hashlib.sha256(np.ascontiguousarray(X).tobytes())
    h.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    h.update(str(X.shape).encode())
    return h.hexdigest()


def noise_shape(
    key: str,
    X: np.ndarray,
    labels: np.ndarray,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
) -> NoiseCovariance:
    """A local mechanism's covariance at (eps, delta); its shape is solved once per (X, labels), cached."""
    if key not in _COVARIANCE:
        raise ParameterError(f"{key!r} has no Gaussian covariance; use one of {sorted(_COVARIANCE)}.")
    data, lab, _ = _check_labels(X, labels)
    cache_key = (key, _fingerprint(data, lab))
    base = _SHAPES.get(cache_key)
    if base is None:
        base = _COVARIANCE[key](data, lab, epsilon, delta, calibration)
        _SHAPES[cache_key] = base
        while len(_SHAPES) > _SHAPE_CACHE_SIZE:
            _SHAPES.popitem(last=False)
    else:
        _SHAPES.move_to_end(cache_key)
    return base.rescaled(epsilon, delta, calibration)


def _local_trials(
    key: str,
    X: np.ndarray,
    labels: np.ndarray,
    grid: np.ndarray,
    trials: int,
    delta: float,
    calibration: Calibration,
    sampler: Sampler,
) -> np.ndarray:
    """Noisy centres (E, trials, K, d): true centres + all trials' noise drawn at once per eps."""
    base = noise_shape(key, X, labels, float(grid[0]), delta, calibration)
    out = np.empty((grid.size, trials, *base.centers.shape))
    for i, eps in enumerate(grid):
        cov = base.rescaled(float(eps), delta, calibration)
        out[i] = base.centers + cov.sample(sampler, n_draws=trials)
    return out


# ---------------------------------------------------------------- DP-Lloyd family


def _lloyd_estimator(
    key: str,
    k: int,
    epsilon: float,
    bounds: Any,
    graph: Any,
    n_iter: int | None,
    sampler: Sampler,
    mcmc_steps: int,
    neighbours: Neighbours = "unbounded",
) -> Any:
    """DP-Lloyd, Blowfish or DP-Lloyd + MCMC (Lee & Kifer, reads only the release), not yet fitted.

    ``neighbours`` sets DP-Lloyd's (and MCMC's) sensitivities; Blowfish's come from its graph.
    """
    if key == "blowfish":
        from dpcore.kmeans.blowfish import BlowfishKMeans

        return BlowfishKMeans(k, epsilon, bounds=bounds, graph=graph, n_iter=n_iter, random_state=sampler)
    if key == "dp_lloyd_mcmc":
        from dpcore.kmeans.mcmc import LeeKiferKMeans

        return LeeKiferKMeans(
            k,
            epsilon,
            bounds=bounds,
            n_iter=n_iter,
            n_steps=mcmc_steps,
            neighbours=neighbours,
            random_state=sampler,
        )
    from dpcore.kmeans.lloyd import DPLloydKMeans

    return DPLloydKMeans(
        k, epsilon, bounds=bounds, n_iter=n_iter, neighbours=neighbours, random_state=sampler
    )


# ---------------------------------------------------------------- sweep


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
    seed: int | None = None,
    progress: Progress | None = None,
    *,
    n_iter: int | None = None,
    mcmc_steps: int = 30000,
    neighbours: Neighbours = "unbounded",
) -> pd.DataFrame:
    """Tidy table (mechanism, epsilon, trial, wcss, fractional_loss, centroid_mse[, nicv], ari).

    Diagnostic (reads the true data; ``Sampler.diagnostic`` noise, never released). ``labels`` is the
    true (non-private) clustering: its centroids are the reference for WCSS_true, centroid MSE (DP-Lloyd
    centres are first matched to them) and ARI. ``nicv`` (WCSS / n on data mapped to [-1, 1]^d by the
    public ``bounds``) appears when bounds are given. ``seed`` makes the diagnostic reproducible.
    ``progress(fraction, message)`` is called as work completes. ``neighbours`` calibrates DP-Lloyd and
    DP-Lloyd + MCMC (see :func:`mechanism_guarantee`).
    """
    keys = _check_keys(mechanisms)
    nb = _check_neighbours(neighbours)
    data, lab, k = _check_labels(X, labels)
    grid = _check_eps_grid(eps_grid)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ParameterError(f"trials must be an integer >= 1 (got {trials!r}); 20 is a good default.")
    if any(MECHANISMS[m].needs_delta for m in keys):
        for eps in grid:  # validates delta and the calibration at every eps, before any work
            gaussian_ratio(float(eps), delta, calibration)
    _needs(keys, bounds, graph)
    report = progress or (lambda _f, _m: None)

    true_centers = np.stack([data[lab == j].mean(axis=0) for j in range(k)])
    blocks: list[np.ndarray] = []
    local = [m for m in keys if MECHANISMS[m].is_local]
    lloyd = [m for m in keys if not MECHANISMS[m].is_local]
    work = len(local) + len(lloyd) * grid.size * trials + 1
    done = 0
    seeds = _seeds(seed, len(keys))
    for m in local:
        report(done / work, f"{MECHANISMS[m].label}: noise for {grid.size} eps x {trials} trials")
        sampler = Sampler.diagnostic(seeds[keys.index(m)])
        blocks.append(_local_trials(m, data, lab, grid, trials, delta, calibration, sampler))
        done += 1
    for m in lloyd:
        sampler = Sampler.diagnostic(seeds[keys.index(m)])
        est = _lloyd_estimator(m, k, float(grid[0]), bounds, graph, n_iter, sampler, mcmc_steps, nb)
        if m == "dp_lloyd_mcmc":
            out = np.empty((grid.size, trials, k, data.shape[1]))
            for i, eps in enumerate(grid):
                report(done / work, f"{MECHANISMS[m].label}: eps = {eps:.3g}, {trials} trials")
                for t in range(trials):
                    out[i, t] = est.set_params(epsilon=float(eps)).fit(data).cluster_centers_
                    done += 1
        else:
            report(done / work, f"{MECHANISMS[m].label}: {grid.size} eps x {trials} trials, batched")
            out = noisy_lloyd_trials(est, data, grid, trials, sampler)
            done += grid.size * trials
        blocks.append(np.stack([[match_centers(c, true_centers) for c in row] for row in out]))

    report(done / work, "scoring all centre sets")
    centers = np.stack(blocks)  # (M, E, T, K, d)
    flat = centers.reshape(-1, k, data.shape[1])
    assigned, dist = nearest(data, flat)
    _, base_dist = nearest(data, true_centers[None])
    wcss_true = float(base_dist.sum())
    wcss = dist.sum(axis=1)
    frame = pd.DataFrame(
        {
            "mechanism": np.repeat(keys, grid.size * trials),
            "epsilon": np.tile(np.repeat(grid, trials), len(keys)),
            "trial": np.tile(np.arange(trials), len(keys) * grid.size),
            "wcss": wcss,
            "fractional_loss": (wcss - wcss_true) / wcss_true if wcss_true > 0 else np.nan,
            "centroid_mse": ((flat - true_centers) ** 2).sum(axis=(1, 2)),
        }
    )
    if bounds is not None:
        unit = scale_to_unit(data, bounds)
        _, unit_dist = nearest(unit, scale_to_unit(flat, bounds))
        frame["nicv"] = unit_dist.sum(axis=1) / data.shape[0]
    frame["ari"] = ari_many(lab, assigned, k)
    report(1.0, "done")
    return frame


# ---------------------------------------------------------------- single diagnostics


def true_clustering(
    X: np.ndarray, n_clusters: int, random_state: int = 0, n_init: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Non-private k-means (scikit-learn, k-means++): labels (n,) and true centroids (K, d), diagnostic.

    The centroids are the exact means of the returned labels (the reference of every loss). Singleton
    clusters are allowed here (only the local mechanisms refuse them: :func:`local_unavailable`).
    """
    data = np.asarray(X, dtype=float)
    if data.ndim != 2 or data.shape[0] == 0 or not np.isfinite(data).all():
        raise ParameterError(
            "X must be a non-empty 2-D array of finite numbers; handle missing values first."
        )
    k = n_clusters
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"n_clusters must be an integer >= 1 (got {k!r}); try K = 3.")
    if k > data.shape[0]:
        raise ParameterError(
            f"n_clusters = {k} exceeds the number of rows ({data.shape[0]}); choose a smaller K."
        )
    with warnings.catch_warnings():  # fewer distinct points than K: reported below as a ParameterError
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=int(k), n_init=n_init, random_state=random_state).fit(data)
    labels = np.asarray(km.labels_, dtype=np.intp)
    counts = np.bincount(labels, minlength=k)
    if np.any(counts == 0):
        raise ParameterError(
            f"the data has only {int(np.count_nonzero(counts))} distinct clusters for K = {k} "
            "(repeated rows); choose a smaller K."
        )
    centers = np.stack([data[labels == j].mean(axis=0) for j in range(k)])
    return labels, centers


def local_unavailable(labels: np.ndarray) -> str | None:
    """Why the local mechanisms (white, white per cluster, colored) refuse this clustering, or None."""
    single = np.flatnonzero(np.bincount(np.asarray(labels, dtype=np.intp)) == 1)
    return singleton_message(int(single[0])) if single.size else None


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
    seed: int | None = 0,
) -> np.ndarray:
    """One draw of ``mechanism`` at ``epsilon`` with diagnostic noise: centres (K, d), never released.

    Local mechanisms: true centroids of ``labels`` + N(0, Sigma) (:func:`noise_shape`). DP-Lloyd family:
    one fit on X, its centres matched to the true centroids (row k is the centre nearest true cluster k).
    ``seed`` seeds ``Sampler.diagnostic``.
    """
    (key,) = _check_keys([mechanism])
    data, lab, k = _check_labels(X, labels)
    sampler = Sampler.diagnostic(seed)
    if MECHANISMS[key].is_local:
        cov = noise_shape(key, data, lab, float(epsilon), delta, calibration)
        return cov.centers + cov.sample(sampler)
    _needs([key], bounds, graph)
    nb = _check_neighbours(neighbours)
    est = _lloyd_estimator(key, k, float(epsilon), bounds, graph, n_iter, sampler, mcmc_steps, nb)
    true_centers = np.stack([data[lab == j].mean(axis=0) for j in range(k)])
    return match_centers(est.fit(data).cluster_centers_, true_centers)


def blowfish_gain(
    X: np.ndarray,
    n_clusters: int,
    epsilon: float,
    bounds: tuple[Any, Any],
    graph: Any,
    *,
    seed: int | None = 0,
) -> np.ndarray:
    """Per-round sum-sensitivity gain (T,) of Blowfish over bounded DP in one diagnostic fit at ``epsilon``.

    ``BlowfishKMeans.sensitivity_gain_`` (bounded-DP Delta_S / Blowfish Delta_S; 1 = no gain). It depends
    on the noisy centres of each round, so it is a diagnostic; the public ceiling is
    :func:`dpcore.kmeans.blowfish.sensitivity_gain_bound`.
    """
    _needs(["blowfish"], bounds, graph)
    sampler = Sampler.diagnostic(seed)
    est = _lloyd_estimator("blowfish", n_clusters, float(epsilon), bounds, graph, None, sampler, 0)
    return np.asarray(est.fit(np.asarray(X, dtype=float)).sensitivity_gain_, dtype=float)


# ---------------------------------------------------------------- release


def release(
    mechanism: str,
    X: np.ndarray,
    labels: np.ndarray | None = None,
    *,
    epsilon: float,
    delta: float | None = None,
    sampler: Sampler | None = None,
    calibration: Calibration = "analytic",
    n_clusters: int | None = None,
    bounds: tuple[Any, Any] | None = None,
    graph: Any = None,
    n_iter: int | None = None,
    mcmc_steps: int = 30000,
    neighbours: Neighbours = "unbounded",
) -> CentroidRelease:
    """Run ``mechanism`` ONCE with ``sampler`` (default: ``Sampler()``, secure) and return the release.

    Local mechanisms (white, white_per_cluster, colored) add noise to the centroids of ``labels`` (the
    curator's clustering) and need ``delta``; the DP-Lloyd family needs ``n_clusters`` (or labels to count
    K) and public ``bounds``; Blowfish also a ``graph``; DP-Lloyd's noise is calibrated for ``neighbours``
    (the policy's relation). Diagnostic sampling is refused: it is never released.
    """
    (key,) = _check_keys([mechanism])
    nb = _check_neighbours(neighbours)
    info = MECHANISMS[key]
    sampler = Sampler() if sampler is None else sampler
    if sampler.mode == "diagnostic":
        raise ParameterError(
            "a release needs secure sampling (Sampler()) or a labelled demo seed, not diagnostic."
        )
    _needs([key], bounds, graph)
    eps = float(epsilon)
    if info.is_local:
        if delta is None:
            raise ParameterError(
                f"{info.label} is an (eps, delta) mechanism: give delta (e.g. 1e-5, below 1/n)."
            )
        if labels is None:
            raise ParameterError(f"{info.label} adds noise to a clustering: pass its labels (one per row).")
        data, lab, _ = _check_labels(X, labels)
        cov = noise_shape(key, data, lab, eps, delta, calibration)
        centers = cov.release(sampler)
        details = {"n_clusters": int(cov.centers.shape[0]), "n_features": int(cov.centers.shape[1])}
        if cov.caveats:
            details["caveats"] = cov.caveats
        diagnostics = {"noise_trace": cov.trace, "optimality_gap": cov.gap, "true_centers": cov.centers}
        return CentroidRelease(
            centers,
            key,
            eps,
            float(delta),
            calibration,
            sampler.mode,
            info.guarantee,
            True,
            details,
            diagnostics,
        )
    data = np.asarray(X, dtype=float)
    k = n_clusters if n_clusters is not None else (None if labels is None else int(np.max(labels)) + 1)
    if k is None:
        raise ParameterError(f"{info.label} needs the number of clusters: pass n_clusters (K).")
    est = _lloyd_estimator(key, int(k), eps, bounds, graph, n_iter, sampler, mcmc_steps, nb).fit(data)
    centers = est.cluster_centers_
    details: dict[str, Any] = {
        "n_clusters": int(k),
        "n_features": int(data.shape[1]),
        "n_iter": int(est.n_iter_) if hasattr(est, "n_iter_") else None,
        "budget_log": [(q, float(e)) for q, e in getattr(est, "budget_log_", [])],
        "budget_spent": float(getattr(est, "budget_spent_", eps)),
    }
    if graph is not None and key == "blowfish":
        details["graph"] = getattr(graph, "label", str(graph))
    else:
        details["neighbours"] = nb
    guarantee = str(getattr(est, "guarantee_", info.guarantee))
    return CentroidRelease(
        np.asarray(centers, dtype=float), key, eps, 0.0, None, sampler.mode, guarantee, False, details, {}
    )


def mechanism_labels() -> Mapping[str, str]:
    """Mechanism key -> display label (for chart legends)."""
    return {k: v.label for k, v in MECHANISMS.items()}
