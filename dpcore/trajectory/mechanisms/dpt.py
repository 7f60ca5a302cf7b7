"""DPT (He et al. 2015): eps-DP synthetic trips for one person's at most m trips of at most L fixes added
or removed (:mod:`dpcore.trajectory.dpt`)."""

from __future__ import annotations

from typing import Any

from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismOutput, MechanismSpec, Param
from dpcore.trajectory.mechanisms._shared import synthetic_release, synthetic_trial
from dpcore.trajectory.prepare import TripSet
from dpcore.trajectory.registry import (
    MAX_FIXES,
    MAX_TRIPS,
    NEIGHBOURS,
    TRAJECTORIES,
    TRIP_METRICS,
    TrajectoryInputs,
    person_contribution,
    person_relation,
)

LABEL = "DPT synthetic trips"


def _model(params: dict[str, Any]) -> dict[str, Any]:
    return {"finest": params["finest_cells"], "levels": params["levels"], "order": params["order"]}


def release(
    inputs: TrajectoryInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    return synthetic_release(LABEL, _model(params), inputs, epsilon, delta, params, random_state)


def trial(
    trips: TripSet, region: Region, epsilon: float, random_state: Sampler, params: dict[str, Any]
) -> TripSet:
    """Synthetic trips from prepared ``trips`` (diagnostic sampler), as :func:`release` draws them."""
    return synthetic_trial(_model(params), trips, region, epsilon, random_state, params)


SPEC = TRAJECTORIES.register(
    MechanismSpec(
        domain="trajectory",
        key="dpt",
        label=LABEL,
        definition="pure_dp",
        summary=(
            "Learns how people move between map cells of several sizes from blurred counts, then draws "
            "new, made-up trips from what it learned, so no released trip belongs to anyone."
        ),
        formula=(
            "Grids of n, n/2, ... cells a side; each trip as neighbouring anchor cells in the grid that fits "
            "its speed, at most L_k = min(L, 2 x cells) anchors; eps/10: trips per grid + Laplace(m / "
            "(eps/10)) selects the grids; eps/10: start cells + Laplace(m / (eps/10)); the rest split over "
            "levels j = 1..phi + 1 of the prefix trees, each j-gram count + Laplace(m w_j(L_k) / eps_j); "
            "synthesis by an order-phi Markov walk with direction weights."
        ),
        citation="He, Cormode, Machanavajjhala, Procopiuc and Srivastava 2015; Zhu et al. 2017, s.12.3.2",
        release=release,
        trial=trial,
        metrics=TRIP_METRICS,
        color="#d62728",
        relation=person_relation,
        contribution=person_contribution,
        out_of_core=release,
        params=(
            MAX_TRIPS,
            MAX_FIXES,
            Param(
                "finest_cells",
                "Finest grid (cells a side)",
                int,
                64,
                low=4,
                high=256,
                help="Cells a side of the finest reference system; must halve into whole cells.",
            ),
            Param(
                "levels",
                "Reference systems",
                int,
                4,
                low=1,
                high=6,
                help="How many grids, each with cells twice as large as the previous.",
            ),
            Param(
                "order", "Markov order", int, 2, low=1, high=3, help="How many past cells predict the next."
            ),
            NEIGHBOURS,
        ),
    )
)
