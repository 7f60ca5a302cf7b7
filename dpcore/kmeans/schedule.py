"""DP-Lloyd's budget and round schedule: Su et al. 2016's count/sum split and number of rounds, and an
exact budget log (math.fsum of the parts is eps exactly).

Su et al.'s split gives the counts eps_N = eps / (1 + d / cbrt(4 d rho^2)) of each round's eps (rho =
0.225); their rule picks T in [2, 7] from eps, K, n and d; :func:`auto_iterations` adds a noise target (the
sums' noise sd at most 4% of the mean box half-width). See docs/mathematics.md.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

SU_RHO = 0.225
SIZE_SHARE = 0.02
MIN_ITER, MAX_ITER = 2, 7
NOISE_TARGET = 0.04


def su_count_share(n_features: int, rho: float = SU_RHO) -> float:
    """Share of each round's eps spent on the counts: cbrt(4 d rho^2) / (cbrt(4 d rho^2) + d) (Su et al.)."""
    c = float(np.cbrt(4.0 * n_features * rho**2))
    return c / (c + n_features)


def su_iterations(
    epsilon: float, n_rows: float, n_clusters: int, n_features: int, rho: float = SU_RHO
) -> int:
    """Su et al.'s rounds: clip(eps / eps_m, 2, 7), eps_m = sqrt(500 K^3 / n^2 (d + cbrt(4 d rho^2))^3)."""
    c = float(np.cbrt(4.0 * n_features * rho**2))
    eps_m = math.sqrt(500.0 * n_clusters**3 / max(n_rows, 1.0) ** 2 * (n_features + c) ** 3)
    return int(min(max(epsilon / eps_m, MIN_ITER), MAX_ITER))


def auto_iterations(
    epsilon: float, n_rows: float, n_clusters: int, n_features: int, count_share: float
) -> int:
    """T = clip(max(Su et al.'s eps / eps_m, eps / eps_r), 2, 7), eps_r = sqrt(2) d K / (tau (1 - share) n).

    eps_r is the per-round eps at which a cluster of n / K rows gets a noisy centre whose per-coordinate
    noise sd is tau = NOISE_TARGET of the mean box half-width (Laplace(sum h / eps_S) on each sum
    coordinate, eps_S = (1 - share) eps_r). Su et al.'s eps_m grows as d^1.5 K^1.5 and keeps T = 2 up to
    eps ~ 26 on the 28-feature Marketing table, where 5 rounds at eps = 10 still carry 4% noise; the max
    only adds rounds where that noise criterion allows them. Public inputs only (eps, n or a noisy n, K, d).
    """
    eps_r = math.sqrt(2.0) * n_features * n_clusters / (NOISE_TARGET * (1.0 - count_share) * max(n_rows, 1.0))
    su = su_iterations(epsilon, n_rows, n_clusters, n_features)
    return int(min(max(su, epsilon / eps_r), MAX_ITER))


def budget_schedule(epsilon: float, names: list[str], shares: list[float]) -> list[tuple[str, float]]:
    """(name, eps * share) entries whose math.fsum is exactly eps.

    All but the last entry are rounded to multiples of q = ulp(eps), so every partial sum is an exact
    multiple of q below eps and the last entry eps - fsum(others) is exact too.
    """
    q = math.ulp(epsilon)
    head = [(n, round(epsilon * s / q) * q) for n, s in zip(names[:-1], shares[:-1], strict=True)]
    return [*head, (names[-1], epsilon - math.fsum(e for _, e in head))]


def plan_rounds(
    epsilon: float,
    n_iter: int | None,
    n_rows: float,
    n_clusters: int,
    n_features: int,
    share: float,
    size_query: bool,
) -> tuple[int, list[tuple[str, float]], NDArray]:
    """(T, budget log, per-round eps (T, 2) of counts and sums); math.fsum of the log is exactly eps.

    T = n_iter, else :func:`auto_iterations` on ``n_rows`` (the public n, or a noisy n when ``size_query``:
    then SIZE_SHARE of eps was spent on it and is logged first).
    """
    T = (
        int(n_iter)
        if n_iter is not None
        else auto_iterations(epsilon, max(n_rows, 1.0), n_clusters, n_features, share)
    )
    names = ["row count (sets the number of rounds)"] if size_query else []
    shares = [SIZE_SHARE] if size_query else []
    loop_share = 1.0 - (SIZE_SHARE if size_query else 0.0)
    for t in range(1, T + 1):
        names += [f"iteration {t} counts", f"iteration {t} sums"]
        shares += [loop_share / T * share, loop_share / T * (1.0 - share)]
    log = budget_schedule(epsilon, names, shares)
    return T, log, np.array([e for _, e in log[len(log) - 2 * T :]]).reshape(T, 2)
