"""Adaptive density grid (Qardaji et al. 2013): a coarse noisy grid, dense cells split finer, made consistent.

Guarantee: eps-DP for one person's locations added or removed (``neighbours="unbounded"``, with a noisy count
of n for the grid size) or replaced by any others (``"bounded"``, n public for g = 1, else a noisy count), at
most g of them (the public ``max_per_user``, 1 without a user column): Laplace(s g / eps_level) per cell at
each level, s = 1 or 2 (cells of a level are disjoint); the budget parts never add up to more than eps.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.grids import adaptive_grid_of
from dpcore.location.mechanisms._shared import (
    GRID_SUMMARY,
    grid_diagnostic,
    grid_release,
    grid_trial,
    neighbours_param,
)
from dpcore.location.registry import (
    LOCATIONS,
    MAX_PER_USER,
    RANGE_ERROR,
    LocationInputs,
    chosen_neighbours,
    per_user_contribution,
)
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "Adaptive density grid"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """One adaptive grid over ``inputs.region``."""
    return grid_release(adaptive_grid_of, LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="adaptive_grid",
        label=LABEL,
        definition="pure_dp",
        summary=f"{GRID_SUMMARY}, with finer cells where there are many locations.",
        formula=(
            "level 1: m1 = max(10, ceil(sqrt(n_hat eps / 10) / 4)) cells per side, Laplace(g / (a eps')); a "
            "cell with noisy count v is cut into m2 = ceil(sqrt(v (1 - a) eps' / 5)) per side, Laplace(g / "
            "((1 - a) eps')); constrained inference makes parents equal the sum of their children; a = 0.5, "
            "eps' = 0.95 eps, g = most locations per user."
        ),
        citation="Qardaji, Yang and Li 2013",
        release=release,
        trial=partial(grid_trial, adaptive_grid_of),
        diagnostic_figures=partial(grid_diagnostic, adaptive_grid_of, "heat_ag"),
        metrics=(RANGE_ERROR,),
        color="#17becf",
        relation=chosen_neighbours,
        contribution=per_user_contribution,
        out_of_core=release,
        params=(neighbours_param("unbounded", "bounded"), MAX_PER_USER),
    )
)
