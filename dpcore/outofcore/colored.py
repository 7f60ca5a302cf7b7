"""The colored-noise release out of core: a clustering, then a few passes over the table.

Guarantee (as in memory): a local (eps, delta) bound for THIS dataset only, neighbours X and X minus one
of its own rows with the clustering held fixed (Ravi, Scaglione & Peisert 2021; probabilistic DP with
their calibration, the (eps, delta) inequality with the analytic one of Balle & Wang 2018); not DP.
Released: c_k + N(0, Sigma_k), Sigma_k trace-optimal subject to u_p' Sigma_k^+ u_p <= gamma for every row p
of cluster k, u_p = (x_p - c_k) / (n_k - 1).

Passes (DuckDB or Spark through Ibis; the rows never come to Python, only a few hundred candidates):

0. clustering: k-means on a uniform sample of at most ``sample_rows`` rows (public centres m_k);
1. assignment and moments: each row to its nearest m_k; per cluster n_k, sum x, sum (x - m_k)(x - m_k)',
   min and max per feature, giving the true centroids c_k and the cluster's Gram matrix of the u_p;
2. candidates: rows whose whitened norm ||W'(x - c_k)||^2 exceeds the cluster's sample quantile, the
   largest per cluster kept; the exact solver of ``dpcore.kmeans.covariance`` runs on them in memory;
3. certificate: every row's u_p' Sigma_k^+ u_p and its part outside the span of Sigma_k; rows above
   1 + tol / 2 join the candidates and the solver runs again (at most ``max_certificates`` passes). The
   final Sigma_k is scaled by the largest constraint value over ALL rows (times the solver's rounding
   margin), so every row's constraint holds whatever the candidates were; the dual weights of the
   candidates give the lower bound, hence the reported optimality gap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
from numpy.typing import NDArray
from sklearn.cluster import KMeans

from dpcore.errors import ParameterError
from dpcore.kmeans.covariance import (
    NoiseCovariance,
    _gamma,
    _rounding_margin,
    _solve_cluster,
    singleton_message,
)
from dpcore.kmeans.registry import centroid_output, check_release_sampler
from dpcore.mechanisms import Calibration, Sampler
from dpcore.outofcore.features import TableFeatures, const, nearest_label, total
from dpcore.registry import MechanismOutput

KEY = "colored"
SAMPLE_ROWS = 100_000
CANDIDATES = 512  # rows per cluster fetched by the candidate pass
ADDED = 256  # violating rows per cluster fetched by a certificate pass


@dataclass
class ColoredRun:
    """One out-of-core colored release: the output, its covariance, the clustering centres (public inputs
    of the assignment), the number of passes after the clustering and the seconds spent per stage."""

    output: MechanismOutput
    covariance: NoiseCovariance
    centres: NDArray
    passes: int
    timings: dict[str, float] = field(default_factory=dict)


def sample_centres(
    features: TableFeatures, k: int, sampler: Sampler, sample_rows: int = SAMPLE_ROWS
) -> tuple[NDArray, NDArray]:
    """k-means centres (K, d) of a uniform (Bernoulli) sample of about ``sample_rows`` scaled rows (seeded
    from the sampler), and the sample; the local guarantee holds with this clustering fixed."""
    n = features.n_rows()
    seed = int(sampler.rng.integers(2**31 - 1))
    rows = features.rows
    if n > sample_rows:
        rows = rows.sample(sample_rows / n, method="row", seed=seed)
    X = rows.select(**{f"x{j}": x for j, x in enumerate(features.scaled(rows))}).to_pandas().to_numpy()
    if X.shape[0] < 2 * k:
        raise ParameterError(f"The table has too few rows ({X.shape[0]}) for K = {k} clusters.")
    centres = KMeans(k, n_init=4, random_state=seed).fit(X).cluster_centers_
    return centres, X


def _labelled(features: TableFeatures, centres: NDArray) -> ir.Table:
    """Scaled rows x0..x{d-1} with ``label``, the nearest centre (ties to the lowest index)."""
    rows = features.rows
    return nearest_label(rows.select(**{f"x{j}": x for j, x in enumerate(features.scaled(rows))}), centres)


def _by_label(t: ir.Table, values: NDArray) -> ir.FloatingValue:
    """values[label] as an expression (one CASE over the K clusters)."""
    return ibis.cases(*[(t.label == c, const(v)) for c, v in enumerate(values)], else_=const(0.0))


def _moments(t: ir.Table, centres: NDArray) -> dict[str, NDArray]:
    """Pass 1: per cluster n, sums, scatter about the assigning centre, min and max per feature."""
    k, d = centres.shape
    t = t.mutate(**{f"v{j}": t[f"x{j}"] - _by_label(t, centres[:, j]) for j in range(d)})
    aggs: dict[str, Any] = {"n": t.count()}
    for i in range(d):
        aggs[f"s{i}"] = t[f"x{i}"].sum()
        aggs[f"lo{i}"] = t[f"x{i}"].min()
        aggs[f"hi{i}"] = t[f"x{i}"].max()
        for j in range(i, d):
            aggs[f"q{i}_{j}"] = (t[f"v{i}"] * t[f"v{j}"]).sum()
    out = t.group_by("label").aggregate(**aggs).to_pandas().sort_values("label")
    if len(out) < k:
        raise ParameterError(f"A cluster of the sample's clustering got no row of the table; choose K < {k}.")
    n = out["n"].to_numpy(dtype=float)
    if np.any(n < 2):
        raise ParameterError(singleton_message(int(np.flatnonzero(n < 2)[0])))
    scatter = np.zeros((k, d, d))
    for i in range(d):
        for j in range(i, d):
            scatter[:, i, j] = scatter[:, j, i] = out[f"q{i}_{j}"].to_numpy(dtype=float)
    col = lambda p: out[[f"{p}{j}" for j in range(d)]].to_numpy(dtype=float)  # noqa: E731
    return {"n": n, "sums": col("s"), "lo": col("lo"), "hi": col("hi"), "scatter": scatter}


def _centred(t: ir.Table, centers: NDArray, counts: NDArray) -> ir.Table:
    """``t`` with u0..u{d-1}: u_j = (x_j - c_label,j) / (n_label - 1)."""
    d = centers.shape[1]
    size = _by_label(t, counts - 1.0)
    return t.mutate(**{f"u{j}": (t[f"x{j}"] - _by_label(t, centers[:, j])) / size for j in range(d)})


def _top_rows(t: ir.Table, score: ir.FloatingValue, keep: ir.BooleanValue, per_cluster: int) -> ir.Table:
    """The rows with ``keep``, at most ``per_cluster`` of each cluster, largest ``score`` first."""
    s = t.mutate(score=score).filter(keep)
    rank = ibis.row_number().over(group_by=s.label, order_by=ibis.desc(s.score))
    return s.mutate(rank=rank).filter(ibis._.rank < per_cluster)


def _quadratic(t: ir.Table, factors: list[NDArray], name: str) -> ir.Table:
    """``t`` with column ``name`` = ||u' F_label||^2 for per-cluster factors F_k (d x r_k): the projections
    as columns first, then the sum of their squares."""
    k, d = len(factors), factors[0].shape[0]
    r_max = max(f.shape[1] for f in factors)
    proj = {}
    for col in range(r_max):
        per = [
            (t.label == c, total([t[f"u{j}"] * const(factors[c][j, col]) for j in range(d)]))
            for c in range(k)
            if col < factors[c].shape[1]
        ]
        proj[f"p{col}"] = ibis.cases(*per, else_=const(0.0))
    if not proj:
        return t.mutate(**{name: const(0.0)})
    t = t.mutate(**proj)
    return t.mutate(**{name: total([t[p] * t[p] for p in proj])}).drop(*proj)


def colored_release(
    features: TableFeatures,
    n_clusters: int,
    *,
    epsilon: float,
    delta: float,
    sampler: Sampler,
    calibration: Calibration = "analytic",
    tol: float = 1e-6,
    sample_rows: int = SAMPLE_ROWS,
    max_certificates: int = 3,
) -> ColoredRun:
    """The colored release on ``features`` (module docstring): one clustering, then 2 + up to
    ``max_certificates`` passes; noise drawn once by ``sampler`` (secure, or a labelled demo seed)."""
    check_release_sampler(sampler)
    if not delta > 0:
        raise ParameterError("The colored mechanism is an (ε, δ) mechanism: give δ > 0 (e.g. 1e-6).")
    gamma = _gamma(epsilon, delta, calibration)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    m_centres, sample = sample_centres(features, n_clusters, sampler, sample_rows)
    timings["clustering"] = time.perf_counter() - start
    k, d = m_centres.shape

    xs = [f"x{j}" for j in range(d)]
    t = _labelled(features, m_centres)
    mom = _moments(t, m_centres)
    n = mom["n"]
    centers = mom["sums"] / n[:, None]
    constant = mom["lo"] == mom["hi"]
    centers[constant] = mom["lo"][constant]  # exact, so those u_p are exactly 0
    offset = centers - m_centres
    outer = n[:, None, None] * offset[:, :, None] * offset[:, None, :]
    gram = (mom["scatter"] - outer) / ((n - 1) ** 2)[:, None, None]  # sum_p u_p u_p' per cluster
    t = _centred(t, centers, n)
    passes = 1

    # pass 2: rows far out in each cluster's whitened coordinates (its Gram matrix); the threshold is the
    # score the sample reaches about CANDIDATES * (sample share) times, so about CANDIDATES rows pass
    whiten = []
    for c in range(k):
        ev, vecs = np.linalg.eigh(gram[c])
        ok = ev > max(ev.max(), 0.0) * 1e-12
        whiten.append(vecs[:, ok] / np.sqrt(ev[ok]) if ok.any() else np.zeros((d, 0)))
    s_label = np.argmin(((sample[:, None, :] - m_centres[None]) ** 2).sum(axis=2), axis=1)
    threshold = np.zeros(k)
    for c in range(k):
        z = ((sample[s_label == c] - centers[c]) / (n[c] - 1)) @ whiten[c]
        scores = np.sort(np.einsum("ij,ij->i", z, z))
        take = int(CANDIDATES * scores.size / n[c])
        if scores.size and take < scores.size:
            threshold[c] = scores[-max(take, 1)]  # else 0: every row of the cluster qualifies
    scored = _quadratic(t, whiten, "score")
    above = scored.score >= _by_label(scored, threshold)
    rows = _top_rows(scored, scored.score, above, CANDIDATES).select("label", *xs).to_pandas()
    passes += 1
    pool = {c: rows.loc[rows.label == c, [f"x{j}" for j in range(d)]].to_numpy(dtype=float) for c in range(k)}

    bases: list[NDArray] = []
    eigs: list[NDArray] = []
    lowers: list[float] = []
    for _ in range(max_certificates):
        sols = [_solve_cluster((pool[c] - centers[c]) / (n[c] - 1), tol) for c in range(k)]
        factors = [s.basis / np.sqrt(s.eigenvalues) if s.eigenvalues.size else s.basis for s in sols]
        c_t = _quadratic(t, factors, "q")
        bad = c_t.q > 1.0 + tol / 2
        if any(s.basis.shape[1] < d for s in sols):  # a row outside span(Sigma_k) has no noise at all
            c_t = _quadratic(c_t, [s.basis for s in sols], "inside")
            c_t = c_t.mutate(norm2=total([c_t[f"u{j}"] * c_t[f"u{j}"] for j in range(d)]))
            bad = (c_t.q > 1.0 + tol / 2) | (c_t.norm2 - c_t.inside > 1e-9 * c_t.norm2)  # ||u||^2 - ||B'u||^2
        c_t = c_t.mutate(bad=bad)
        # the solver left every candidate at q <= 1 and the binding ones at ~1, so the rows with
        # q > 1 - 1e-3 hold each cluster's largest q; the others are feasible with room to spare
        score = ibis.cases((c_t.bad, const(np.inf)), else_=c_t.q)
        near = _top_rows(c_t, score, c_t.bad | (c_t.q > 1.0 - 1e-3), ADDED)
        found = near.select("label", "q", "bad", *xs).to_pandas()
        passes += 1
        worst = found.groupby("label").q.max().reindex(range(k), fill_value=0.0).to_numpy(dtype=float)
        added = found[found["bad"].astype(bool)]
        bases, lowers = [s.basis for s in sols], [s.lower for s in sols]
        eigs = [
            s.eigenvalues * max(1.0, float(w) * _rounding_margin(s.eigenvalues, d))
            for s, w in zip(sols, worst, strict=True)
        ]
        if added.empty:
            break
        for c in range(k):
            new = added.loc[added.label == c, [f"x{j}" for j in range(d)]].to_numpy(dtype=float)
            pool[c] = np.vstack([pool[c], new])
    else:
        if not added.empty:
            raise ParameterError(
                f"The colored solver still had rows outside its noise after {max_certificates} certificate "
                "passes; run it with more passes (max_certificates) or on fewer features."
            )
    upper = [float(e.sum()) for e in eigs]
    lower = sum(lowers)
    gaps = [up / lo - 1.0 if lo > 0 else 0.0 for up, lo in zip(upper, lowers, strict=True)]
    cov = NoiseCovariance(
        kind="colored",
        epsilon=float(epsilon),
        delta=float(delta),
        calibration=calibration,
        gamma=gamma,
        gap=sum(upper) / lower - 1.0 if lower > 0 else 0.0,
        centers=centers,
        counts=n.astype(int),
        bases=tuple(bases),
        unit_eigenvalues=tuple(eigs),
        cluster_gaps=np.array(gaps),
    )
    details: dict[str, Any] = {
        "n_clusters": k,
        "n_features": d,
        "calibration": calibration,
        "clustering": (
            f"k-means on a uniform sample of at most {sample_rows:,} rows, then every row assigned to the "
            "nearest of its centres (held fixed by the guarantee)"
        ),
    }
    if cov.caveats:
        details["caveats"] = list(cov.caveats)
    output = centroid_output(
        KEY,
        features,  # type: ignore[arg-type]
        cov.release(sampler),
        details,
        {"true_centers": centers, "noise_trace": cov.trace, "optimality_gap": cov.gap},
    )
    timings["total"] = time.perf_counter() - start
    return ColoredRun(output, cov, m_centres, passes, timings)
