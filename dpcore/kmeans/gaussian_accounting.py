"""Tight (eps, delta) accounting for a composition of Gaussian releases, checked by a PLD accountant.

A Gaussian release with L2 sensitivity Delta and noise N(0, sigma^2 I) is mu-GDP with mu = t = Delta / sigma
(Gaussian differential privacy); the adaptive composition of releases with ratios t_1, ..., t_m is exactly
mu-GDP with mu^2 = sum t_i^2 (Dong, Roth & Su 2022, Cor. 3.3), and mu-GDP is (eps, delta)-DP exactly for
delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (ibid. Cor. 2.13; Balle & Wang 2018, Thm. 8). So a
budget (eps, delta) fixes mu = s*(eps, delta) (:func:`dpcore.mechanisms.gaussian_ratio`, the analytic
calibration), and any split t_i = mu sqrt(share_i / releases_i) with shares summing to 1 spends it
exactly, whatever the number of rounds: no eps is added per round. The same composition is then given to
the privacy-loss-distribution (PLD) accountant of Google's ``dp-accounting`` (pessimistic discretisation),
and mu is lowered until the accountant's eps at delta is within the budget too. zCDP: rho = mu^2 / 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dpcore.errors import ParameterError
from dpcore.mechanisms import analytic_delta, gaussian_ratio

__all__ = ["ACCOUNTANT", "GaussianSpend", "accountant_epsilon", "gaussian_spend"]

ACCOUNTANT = "privacy loss distribution (PLD) accountant of dp-accounting 0.6.0"
_SHRINK_STEPS = 20


@dataclass(frozen=True)
class GaussianSpend:
    """How a budget (eps, delta) is spent by named Gaussian queries: query -> (releases, ratio t).

    Each release of query q adds N(0, (Delta_q / t_q)^2) to a statistic of L2 sensitivity Delta_q;
    ``mu`` = sqrt(sum releases t^2) is the composed GDP parameter and ``epsilon_accounted`` the PLD
    accountant's eps at ``delta`` for the same composition (both within the budget).
    """

    epsilon: float
    delta: float
    mu: float
    queries: Mapping[str, tuple[int, float]]
    epsilon_accounted: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.mu) or self.mu <= 0:
            raise ParameterError(f"mu must be a positive finite number, got {self.mu!r}.")
        if any(r < 1 or not (math.isfinite(t) and t > 0) for r, t in self.queries.values()):
            raise ParameterError("every Gaussian query needs at least one release and a ratio t > 0.")

    def ratio(self, query: str) -> float:
        """t = Delta / sigma of each release of ``query``."""
        return self.queries[query][1]

    def sigma(self, query: str, sensitivity: float) -> float:
        """The noise standard deviation of ``query`` for its L2 ``sensitivity``."""
        return sensitivity / self.ratio(query)

    @property
    def composed_mu(self) -> float:
        """sqrt(sum over releases of t^2): the GDP parameter of the whole composition."""
        return math.sqrt(math.fsum(r * t * t for r, t in self.queries.values()))

    def details(self) -> dict[str, Any]:
        """Manifest facts: the definition, the composition and what each accountant says (JSON-able)."""
        mu = self.composed_mu
        return {
            "definition": "(ε, δ)-differential privacy from Gaussian noise, composed exactly",
            "epsilon": self.epsilon,
            "delta": self.delta,
            "gdp_mu": mu,
            "zcdp_rho": mu * mu / 2,
            "delta_at_epsilon_exact": analytic_delta(mu, self.epsilon),
            "accountant": ACCOUNTANT,
            "epsilon_accounted": self.epsilon_accounted,
            "queries": [
                {"query": q, "releases": r, "sensitivity_over_sigma": t} for q, (r, t) in self.queries.items()
            ],
        }


def accountant_epsilon(queries: Mapping[str, tuple[int, float]], delta: float) -> float:
    """eps at ``delta`` of the composed Gaussian releases by ``dp-accounting``'s PLD accountant."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant()
    for releases, t in queries.values():
        accountant.compose(dp_event.GaussianDpEvent(1.0 / t), releases)
    return float(accountant.get_epsilon(delta))


def gaussian_spend(epsilon: float, delta: float, shares: Mapping[str, tuple[float, int]]) -> GaussianSpend:
    """The split of (eps, delta) among queries: ``shares`` maps a query to (share of mu^2, releases).

    Shares must be positive and sum to 1 (the split spends mu^2 exactly); mu starts at the analytic
    calibration and is lowered (at most a few parts in 10^6 in practice) until the PLD accountant agrees.
    """
    key = tuple((q, float(s), int(r)) for q, (s, r) in shares.items())
    return _spend(float(epsilon), float(delta), key)


@lru_cache(maxsize=256)
def _spend(epsilon: float, delta: float, key: tuple[tuple[str, float, int], ...]) -> GaussianSpend:
    if not (math.isfinite(epsilon) and epsilon > 0) or not 0 < delta < 1:
        raise ParameterError(
            f"a Gaussian mechanism needs ε > 0 and 0 < δ < 1 (got ε = {epsilon!r}, δ = {delta!r}); "
            "e.g. δ = 1e-6, below 1/n."
        )
    total = math.fsum(s for _, s, _ in key)
    if not key or any(s <= 0 or r < 1 for _, s, r in key) or not math.isclose(total, 1.0):
        raise ParameterError("Gaussian query shares must be positive, sum to 1, and have >= 1 release each.")
    mu = gaussian_ratio(epsilon, delta, "analytic")
    for _ in range(_SHRINK_STEPS):
        queries = {q: (r, mu * math.sqrt(s / total / r)) for q, s, r in key}
        composed = math.sqrt(math.fsum(r * t * t for r, t in queries.values()))
        accounted = accountant_epsilon(queries, delta)
        if accounted <= epsilon and analytic_delta(composed, epsilon) <= delta:
            return GaussianSpend(epsilon, delta, mu, queries, accounted)
        mu *= min(epsilon / accounted, 1.0) * (1 - 1e-9)
    raise ParameterError(
        f"the Gaussian accounting did not settle within ε = {epsilon:g}, δ = {delta:g}; choose a larger ε."
    )
