"""PriLocation release (Zhu et al. 2017, s.12.4): users' visits replaced by public points of their cluster.

Guarantee (Blowfish-style, per visit): moving one visit by at most HS metres within its released cluster
changes any output's probability by at most e^eps; with a user column and the public ``max_per_user`` m,
every step runs at eps / m per visit, so the same holds for all of one user's (at most m) visits. The
table holds a random pseudonym and a location per released visit, replaced and added visits alike, in
random order (see ``dpcore.location.prilocation``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.location.geometry import FloatArray
from dpcore.location.prilocation import LEVELS, PriLocation, distance_error, run_prilocation
from dpcore.location.registry import (
    ERROR_M,
    LOCATIONS,
    MAX_PER_USER,
    LocationInputs,
    keep_per_user,
    kept_details,
    kept_diagnostics,
    no_delta,
    per_user_contribution,
    threshold_relation,
)
from dpcore.location.trial_data import TrialData
from dpcore.mechanisms import Sampler
from dpcore.plots.location import released_map, true_vs_released
from dpcore.registry import MechanismOutput, MechanismSpec, Param

LABEL = "PriLocation (users' visits)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """One PriLocation run; without a user column every row is its own user (one visit each)."""
    no_delta(delta)
    kept = keep_per_user(inputs, params["max_per_user"], random_state)
    users = np.arange(kept.n) if kept.codes is None else kept.codes
    model = PriLocation(
        epsilon,
        inputs.region,
        hs_m=params["hs_m"],
        n_clusters=params["n_clusters"],
        grid_size=params["grid_size"],
        # the cap is already applied: rows per user <= group, so the group-privacy split is all that remains
        max_visits_per_user=kept.group,
        random_state=random_state,
    ).fit(users, kept.lat, kept.lon)
    table = model.released()
    figure = released_map(table["lat"], table["lon"], title=f"{LABEL}: released locations")
    details = {
        **kept_details(kept, inputs),
        "hs_m": model.hs_m_,
        "n_clusters": params["n_clusters"],
        "grid_size": params["grid_size"],
        "epsilon_per_visit": model.epsilon_per_visit_,
        "budget_log_per_visit": [[name, e] for name, e in model.budget_log_],
        "n_candidates": list(model.n_candidates_),
    }
    diagnostics = {
        **kept_diagnostics(kept, inputs),
        "distance_error": model.diagnostic_distance_error_,
    }
    return MechanismOutput(table, (figure,), details, diagnostics, kept.scope)


def diagnostic_figures(
    inputs: LocationInputs,
    *,
    epsilon: float,
    params: dict[str, Any],
    random_state: Sampler,
    tiles: bool,
    nonnegative: bool,
) -> dict[str, Any]:
    """True locations vs the visits of one diagnostic release. ``nonnegative`` is not used (no counts)."""
    out = release(inputs, epsilon=epsilon, delta=0.0, params=params, random_state=random_state)
    title = f"{LABEL}, ε = {epsilon:g}, HS = {params['hs_m']:,.0f} m: true vs released visits"
    return {
        "map_pri": true_vs_released(
            inputs.lat, inputs.lon, out.table["lat"], out.table["lon"], tiles=tiles, title=title
        )
    }


def trial(
    data: TrialData, eps: FloatArray, trials: int, random_state: Sampler, params: dict[str, Any]
) -> dict[str, FloatArray]:
    """DE x HS in metres (DE: Zhu et al. 2017, eqs. 12.17-12.18, a fraction of HS) of ``trials`` runs per
    eps, every row its own visit of its user: float32 selection scores (relative to each cluster centre,
    sub-metre precision) and weight noise drawn only for the (user, cluster) pairs with visits, the only
    ones the DE depends on (``run_prilocation(..., diagnostic=True)``); NaN where nothing is released."""
    out = np.full((trials, eps.size), np.nan)
    for i, e in enumerate(eps):
        model = PriLocation(
            float(e),
            data.region,
            hs_m=params["hs_m"],
            n_clusters=params["n_clusters"],
            grid_size=params["grid_size"],
        )
        e_visit, hs, k, step = model.checked_params()
        for t in range(trials):
            grid = params["grid_size"]
            run = run_prilocation(
                data.visits, e_visit, hs, data.region, k, grid, step, random_state, diagnostic=True
            )
            if run.kept.size:
                de = distance_error(data.visits.codes[run.kept], run.displacement_m(data.visits), hs)
                out[t, i] = de * hs
    return {ERROR_M.name: out}


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="prilocation",
        label=LABEL,
        definition="blowfish",
        summary=(
            "Each visit is replaced by a nearby public point of its area and each user's number of visits "
            "per area is blurred, so nobody can tell where a visit was within the protected distance (the "
            "hierarchy level, e.g. 300 km for a state)."
        ),
        formula=(
            "eps' = eps / m per visit; eps'/2: noisy grid (Laplace(2 / (eps'/2)) per cell) and weighted "
            "k-means centres; eps'/4: noisy visit counts w + Laplace(4 / eps') per (user, cluster); eps'/4: "
            "each visit t replaced by candidate c with Pr proportional to exp(eps' (HS - d(t, c)) / (8 HS)); "
            "added visits drawn the same way for t = the cluster centre."
        ),
        citation=(
            "Zhu et al. 2017, s.12.4 (after Xiong et al.); Qardaji et al. 2013; McSherry and Talwar 2007"
        ),
        release=release,
        trial=trial,
        diagnostic_figures=diagnostic_figures,
        metrics=(ERROR_M,),
        color="#d62728",
        relation=threshold_relation("hs_m"),
        contribution=per_user_contribution,
        params=(
            Param(
                "hs_m",
                "Hierarchy level to protect HS (metres)",
                float,
                300_000.0,
                low=1.0,
                high=2.0e7,
                help="The largest distance between two places of one unit of the level you protect, "
                "e.g. 25000 for a city.",
                presets=tuple(LEVELS.items()),
            ),
            Param("n_clusters", "Clusters", int, 20, low=1, high=10_000, help="e.g. 20."),
            Param("grid_size", "Clustering grid cells per side", int, 30, low=1, high=1024, help="e.g. 30."),
            MAX_PER_USER,
        ),
    )
)
