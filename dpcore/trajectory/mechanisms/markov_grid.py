"""Baseline: one uniform grid and an order-1 Markov model, eps-DP for one person's at most m trips of at
most L fixes added or removed (DPT with one reference system, order 1, no direction weights)."""

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

LABEL = "Uniform grid Markov trips (baseline)"


def _model(params: dict[str, Any]) -> dict[str, Any]:
    return {"finest": params["grid_cells"], "levels": 1, "order": 1, "window": 0}


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
        key="markov_grid",
        label=LABEL,
        definition="pure_dp",
        summary=(
            "Counts moves between neighbouring cells of one grid with blurred counts and draws made-up trips "
            "from them (what DPT's several grid sizes improve on)."
        ),
        formula=(
            "One grid of n cells a side; trips as neighbouring anchor cells, at most min(L, 2n); trip count, "
            "start cells and cell and move counts + Laplace noise (eps/10, eps/10, 4 eps/10 each); "
            "synthesis by an order-1 Markov walk."
        ),
        citation="He, Cormode, Machanavajjhala, Procopiuc and Srivastava 2015 (their baseline)",
        release=release,
        trial=trial,
        metrics=TRIP_METRICS,
        color="#2ca02c",
        relation=person_relation,
        contribution=person_contribution,
        out_of_core=release,
        params=(
            MAX_TRIPS,
            MAX_FIXES,
            Param(
                "grid_cells",
                "Grid (cells a side)",
                int,
                32,
                low=2,
                high=256,
                help="Cells a side of the grid.",
            ),
            NEIGHBOURS,
        ),
    )
)
