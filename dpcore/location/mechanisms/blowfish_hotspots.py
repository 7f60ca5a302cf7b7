"""Blowfish hotspots: k-means under the distance-threshold policy (Machanavajjhala and Kifer 2015).

Guarantee: (eps, G^{d,theta})-Blowfish: replacing each of one person's locations (at most g: the public
``max_per_user``, 1 without a user column) by one at most theta metres away changes any output's
probability by at most e^eps; n is public. Blowfish k-means runs at eps / g per location with the L2
threshold k theta in the region's ``PlaneMap`` (k its scale factor), whatever lies outside the region.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.mechanisms._shared import (
    HOTSPOT_K,
    THETA,
    hotspot_diagnostic,
    hotspot_release,
    hotspot_trial,
)
from dpcore.location.registry import (
    LOCATIONS,
    MAX_PER_USER,
    WCSS_LOSS,
    LocationInputs,
    per_user_contribution,
    threshold_relation,
)
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "Blowfish hotspots (distance threshold θ)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """K released hotspot centres."""
    return hotspot_release("blowfish", LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="blowfish_hotspots",
        label=LABEL,
        definition="blowfish",
        summary=(
            "Finds K centres where locations concentrate, blurred so that an observer may learn roughly "
            "where a person is but not their position within θ metres; here the blur is about twice that "
            "of the differentially private hotspots, so prefer those unless you need this policy."
        ),
        formula=(
            "Lloyd's k-means on f(x_i) in metres with per-round noisy counts and sums calibrated to the "
            "graph joining positions within k θ (Blowfish k-means), at eps / g per location."
        ),
        citation="Machanavajjhala and Kifer 2015; He, Machanavajjhala and Ding 2014",
        release=release,
        trial=partial(hotspot_trial, "blowfish"),
        diagnostic_figures=partial(hotspot_diagnostic, "blowfish", LABEL, "map_hotspots_blowfish"),
        metrics=(WCSS_LOSS,),
        color="#e377c2",
        relation=threshold_relation(THETA.name),
        contribution=per_user_contribution,
        out_of_core=release,
        params=(HOTSPOT_K, THETA, MAX_PER_USER),
    )
)
