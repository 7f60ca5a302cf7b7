"""Mean position under the Blowfish distance-threshold policy (Machanavajjhala and Kifer 2015).

Guarantee: (eps, G^{d,theta})-Blowfish: replacing each of one person's locations (at most g: the public
``max_per_user``, 1 without a user column) by one at most theta metres away changes any output's
probability by at most e^eps; the group size n is public. Delta_1 = sqrt(2) k theta g / n in the region's
``PlaneMap`` (k its scale factor), whatever lies outside the region.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.mechanisms._shared import THETA, mean_release, mean_trial
from dpcore.location.registry import (
    ERROR_M,
    LOCATIONS,
    MAX_PER_USER,
    LocationInputs,
    per_user_contribution,
    threshold_relation,
)
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "Mean position (Blowfish θ)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """The noisy mean position of the kept locations."""
    return mean_release("blowfish", LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="blowfish_mean",
        label=LABEL,
        definition="blowfish",
        summary=(
            "Releases the group's average position, blurred so that an observer may learn roughly where "
            "a person is but not their position within θ metres."
        ),
        formula=(
            "mean of f(x_i) + Laplace(sqrt(2) k θ g / (n eps)) per coordinate, f the region's map to metres "
            "(k-Lipschitz), n public, g = most locations per user."
        ),
        citation="Machanavajjhala and Kifer 2015; He, Machanavajjhala and Ding 2014",
        release=release,
        trial=partial(mean_trial, "blowfish"),
        metrics=(ERROR_M,),
        color="#9467bd",
        relation=threshold_relation(THETA.name),
        contribution=per_user_contribution,
        out_of_core=release,
        params=(THETA, MAX_PER_USER),
    )
)
