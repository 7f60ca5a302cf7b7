"""Uniform density grid (Qardaji et al. 2013): eps-DP noisy counts of an m x m grid over the public region.

Guarantee: eps-DP for one person's locations added or removed (``neighbours="unbounded"``: Laplace(g /
eps_grid) per cell, and a noisy count of n for the grid size) or replaced by any others (``"bounded"``:
Laplace(2 g / eps) per cell, n public for g = 1, else a noisy count), at most g of them (the public
``max_per_user``, 1 without a user column); the budget parts never add up to more than eps.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.grids import uniform_grid_of
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

LABEL = "Uniform density grid"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """One uniform grid over ``inputs.region``."""
    return grid_release(uniform_grid_of, LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="uniform_grid",
        label=LABEL,
        definition="pure_dp",
        summary=f"{GRID_SUMMARY}, so the map barely depends on any one person.",
        formula=(
            "n_hat = n + Laplace(g / (0.05 eps)); m = sqrt(n_hat eps_grid / 10) cells per side; count per "
            "cell + Laplace(g / eps_grid), eps_grid = 0.95 eps; g = most locations per user."
        ),
        citation="Qardaji, Yang and Li 2013",
        release=release,
        trial=partial(grid_trial, uniform_grid_of),
        diagnostic_figures=partial(grid_diagnostic, uniform_grid_of, "heat_ug"),
        metrics=(RANGE_ERROR,),
        color="#2ca02c",
        relation=chosen_neighbours,
        contribution=per_user_contribution,
        out_of_core=release,
        params=(neighbours_param("unbounded", "bounded"), MAX_PER_USER),
    )
)
