"""Mean position under bounded eps-DP (the full-domain policy of Machanavajjhala and Kifer 2015).

Guarantee: bounded eps-DP: replacing one person's locations (at most g: the public ``max_per_user``, 1
without a user column) by any others, as many or not, changes any output's probability by at most e^eps.
With g = 1 the group size n (one location per person) is public and Delta_1 = (W + H) / n, W + H the L1
diameter of the box the region's ``PlaneMap`` maps into; with g > 1 the number of kept locations depends on
a person's own count, so it is noised (``blowfish.noisy_mean``: eps / 10 on the count, sensitivity g; the
rest on the centred sum, Delta_1 = g (W + H)) and only the noisy count is published.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.mechanisms._shared import mean_release, mean_trial, neighbours_param
from dpcore.location.registry import (
    ERROR_M,
    LOCATIONS,
    MAX_PER_USER,
    LocationInputs,
    chosen_neighbours,
    per_user_contribution,
)
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "Mean position (bounded DP)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """The noisy mean position of the kept locations."""
    return mean_release("dp", LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="dp_mean",
        label=LABEL,
        definition="pure_dp",
        summary="Releases the group's average position, blurred so that it barely depends on any one person.",
        formula=(
            "mean of f(x_i) + Laplace((W + H) / (n eps)) per coordinate, f the region's map into a W x H "
            "box of metres, n public (one location per person); with g > 1 locations per user, "
            "(sum of f(x_i) - c + Laplace(g (W + H) / (0.9 eps))) / (n + Laplace(g / (0.1 eps))), c the "
            "box's centre."
        ),
        citation="Dwork et al. 2006; Machanavajjhala and Kifer 2015",
        release=release,
        trial=partial(mean_trial, "dp"),
        metrics=(ERROR_M,),
        color="#ff7f0e",
        relation=chosen_neighbours,
        contribution=per_user_contribution,
        out_of_core=release,
        params=(neighbours_param("bounded"), MAX_PER_USER),
    )
)
