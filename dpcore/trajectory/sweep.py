"""The Trajectories page's comparison: DPT and both baselines over an eps grid and trials (diagnostic).

Every trial draws fresh noise with a diagnostic sampler (never a release) and scores the synthetic trips
against the prepared true trips with :func:`dpcore.trajectory.metrics.utility` on the same random range
queries. The true trips, and everything computed here, are for the curator's eyes only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.trajectory.dpt import DPT
from dpcore.trajectory.metrics import METRICS, Queries, Reference, utility
from dpcore.trajectory.perpoint import per_point_laplace
from dpcore.trajectory.prepare import TripSet, plane_box

__all__ = ["MECHANISMS", "Comparison", "compare", "synthesise"]

MECHANISMS = {
    "dpt": "DPT (hierarchical reference systems)",
    "markov_grid": "Uniform grid, order-1 Markov (baseline)",
    "per_point": "Planar Laplace per fix (baseline)",
}
GRID_CELLS = 32  # the first baseline's grid: cells a side


def synthesise(
    key: str,
    trips: TripSet,
    region: Region,
    epsilon: float,
    max_trips: int,
    max_fixes: int,
    random_state: Sampler,
    **params: Any,
) -> tuple[TripSet, Any]:
    """(synthetic trips in plane metres, the fitted model or None) of mechanism ``key`` at ``epsilon``."""
    if key == "per_point":
        return per_point_laplace(trips, region, epsilon, max_trips, max_fixes, random_state), None
    if key == "dpt":
        kw = {
            "finest": params.get("finest", 64),
            "levels": params.get("levels", 4),
            "order": params.get("order", 2),
            "window": params.get("window", 3),
        }
    elif key == "markov_grid":
        kw = {"finest": params.get("grid_cells", GRID_CELLS), "levels": 1, "order": 1, "window": 0}
    else:
        raise ParameterError(f"Unknown trajectory mechanism {key!r}; choose one of {', '.join(MECHANISMS)}.")
    model = DPT(
        epsilon,
        max_trips=max_trips,
        max_fixes=max_fixes,
        box=plane_box(region),
        random_state=random_state,
        **kw,
    ).fit(trips)
    return model.sample(), model


@dataclass(frozen=True)
class Comparison:
    """Per (mechanism, eps, trial) the utility measures (``table``), and one synthetic run per mechanism at
    ``example_epsilon`` (``examples``) for the side-by-side maps and histograms."""

    table: pd.DataFrame
    examples: dict[str, TripSet]
    example_epsilon: float

    def summary(self) -> pd.DataFrame:
        """Mean and standard deviation of every measure per (mechanism, eps)."""
        return self.table.groupby(["mechanism", "epsilon"])[list(METRICS)].agg(["mean", "std"])


def compare(
    trips: TripSet,
    region: Region,
    epsilons: Sequence[float],
    *,
    max_trips: int,
    max_fixes: int,
    trials: int = 5,
    mechanisms: Sequence[str] = tuple(MECHANISMS),
    random_state: int = 0,
    n_queries: int = 100,
    progress: Callable[[float], None] | None = None,
) -> Comparison:
    """Run every mechanism ``trials`` times at every eps (diagnostic samplers seeded from ``random_state``,
    an int)."""
    eps_list = sorted({float(e) for e in epsilons})
    if not eps_list or min(eps_list) <= 0 or not 1 <= trials <= 100:
        raise ParameterError("give at least one positive ε and between 1 and 100 trials.")
    box = plane_box(region)
    ref = Reference.of(trips, box, Queries.draw(n_queries, np.random.default_rng(random_state)))
    example_eps = eps_list[len(eps_list) // 2]
    rows, examples = [], {}
    total, done = len(mechanisms) * len(eps_list) * trials, 0
    for key in mechanisms:
        for eps in eps_list:
            for trial in range(trials):
                diagnostic = Sampler.diagnostic(random_state * 1_000_003 + trial * 1009 + len(rows))
                synthetic, _ = synthesise(key, trips, region, eps, max_trips, max_fixes, diagnostic)
                rows.append({"mechanism": key, "epsilon": eps, "trial": trial, **utility(ref, synthetic)})
                if eps == example_eps and trial == 0:
                    examples[key] = synthetic
                done += 1
                if progress is not None:
                    progress(done / total)
    return Comparison(pd.DataFrame(rows), examples, example_eps)
