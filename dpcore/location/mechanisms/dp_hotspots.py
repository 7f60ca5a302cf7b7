"""DP hotspots: DP-Lloyd k-means on locations mapped to metres (Su et al. 2016; Lee and Kifer 2018).

Guarantee: eps-DP for one person's locations added or removed (``neighbours="unbounded"``) or replaced by
any others (``"bounded"``), at most g of them (the public ``max_per_user``, 1 without a user column):
DP-Lloyd runs at eps / g per location (group privacy) with the region's ``PlaneMap`` box as its public
bounds. Per user (g > 1) it picks its rounds from a Laplace count of the kept rows (2% of eps) under either
relation, so nothing it publishes depends on a person's number of rows.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dpcore.location.mechanisms._shared import (
    HOTSPOT_K,
    hotspot_diagnostic,
    hotspot_release,
    hotspot_trial,
    neighbours_param,
)
from dpcore.location.registry import (
    LOCATIONS,
    MAX_PER_USER,
    WCSS_LOSS,
    LocationInputs,
    chosen_neighbours,
    per_user_contribution,
)
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec

LABEL = "DP hotspots (DP-Lloyd)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """K released hotspot centres."""
    return hotspot_release("dp", LABEL, inputs, epsilon, delta, params, random_state)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="dp_hotspots",
        label=LABEL,
        definition="pure_dp",
        summary=(
            "Finds K centres where locations concentrate, from blurred counts and sums at every step, so "
            "the centres barely depend on any one person."
        ),
        formula=(
            "Lloyd's k-means on f(x_i) in metres; each round releases per-cluster counts and coordinate sums "
            "with Laplace noise (Su et al. budget split), at eps / g per location."
        ),
        citation="Su et al. 2016; Lee and Kifer 2018",
        release=release,
        trial=partial(hotspot_trial, "dp"),
        diagnostic_figures=partial(hotspot_diagnostic, "dp", LABEL, "map_hotspots_dp"),
        metrics=(WCSS_LOSS,),
        color="#8c564b",
        relation=chosen_neighbours,
        contribution=per_user_contribution,
        out_of_core=release,
        params=(HOTSPOT_K, neighbours_param("unbounded", "bounded"), MAX_PER_USER),
    )
)
