"""Mean position under bounded eps-DP (the full-domain policy of Machanavajjhala and Kifer 2015).

Guarantee: bounded eps-DP: replacing one person's locations (at most g: the public ``max_per_user``, 1
without a user column) by any others changes any output's probability by at most e^eps; the group size n
is public. Delta_1 = (W + H) g / n, W + H the L1 diameter of the box the region's ``PlaneMap`` maps into.
"""

from __future__ import annotations

from typing import Any

from dpcore.location.mechanisms._shared import mean_release, neighbours_param
from dpcore.location.registry import LOCATIONS, MAX_PER_USER, LocationInputs
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "Mean position (bounded DP)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], sampler: Sampler
) -> MechanismOutput:
    """The noisy mean position of the kept locations."""
    return mean_release("dp", LABEL, inputs, epsilon, delta, params, sampler)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="dp_mean",
        label=LABEL,
        definition="pure_dp",
        summary="Releases the group's average position, blurred so that it barely depends on any one person.",
        formula=(
            "mean of f(x_i) + Laplace((W + H) g / (n eps)) per coordinate, f the region's map into a W x H "
            "box of metres, n public, g = most locations per user."
        ),
        citation="Dwork et al. 2006; Machanavajjhala and Kifer 2015",
        release=release,
        params=(neighbours_param("bounded"), MAX_PER_USER),
    )
)
