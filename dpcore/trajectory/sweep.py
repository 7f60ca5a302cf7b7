"""The Trajectories page's comparison: every registered trajectory mechanism, and the per-fix planar Laplace
baseline, over an eps grid and trials (diagnostic).

Each mechanism's spec declares its diagnostic trial (synthetic trips from the prepared trips, drawn as its
release draws them) and the metrics it is scored by; every trial draws fresh noise with a diagnostic sampler
(never a release) and is scored against the prepared true trips with
:func:`dpcore.trajectory.metrics.utility` on the same random range queries. The per-fix baseline
(:func:`dpcore.trajectory.perpoint.per_point_laplace`) is no releasable mechanism (it does not hide how
many trips and fixes a person has): it is compared to show why per-point noise fails on trajectories. The
true trips, and everything computed here, are for the curator's eyes only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.registry import Metric
from dpcore.trajectory.metrics import Queries, Reference, utility
from dpcore.trajectory.perpoint import per_point_laplace
from dpcore.trajectory.prepare import TripSet, plane_box
from dpcore.trajectory.registry import MAX_FIXES, MAX_TRIPS, TRAJECTORIES, TRIP_METRICS

__all__ = ["BASELINE", "Baseline", "Comparison", "comparable", "compare"]


@dataclass(frozen=True)
class Baseline:
    """A comparison-only method: key, label, chart colour (hex) and ``trial`` as a spec's."""

    key: str
    label: str
    color: str
    trial: Callable[..., TripSet]
    metrics: tuple[Metric, ...] = TRIP_METRICS


def _per_point(
    trips: TripSet, region: Region, epsilon: float, random_state: Sampler, params: Mapping[str, Any]
) -> TripSet:
    m, n = params["max_trips"], params["max_fixes"]
    return per_point_laplace(trips, region, epsilon, m, n, random_state)


BASELINE = Baseline("per_point", "Planar Laplace per fix (baseline)", "#9467bd", _per_point)


def comparable() -> list[str]:
    """The trajectory mechanisms with a diagnostic trial (registration order), then the baseline."""
    return [k for k, s in TRAJECTORIES.items() if s.trial is not None] + [BASELINE.key]


def _method(key: str) -> Any:
    return BASELINE if key == BASELINE.key else TRAJECTORIES[key]


@dataclass(frozen=True)
class Comparison:
    """Per (mechanism, eps, trial) the declared measures (``table``), one synthetic run per mechanism at
    ``example_epsilon`` (``examples``) for the side-by-side maps and histograms, and each compared
    mechanism's label and colour and the metrics they declare (titles by name)."""

    table: pd.DataFrame
    examples: dict[str, TripSet]
    example_epsilon: float
    labels: dict[str, str]
    colors: dict[str, str]
    metrics: dict[str, str]

    def summary(self) -> pd.DataFrame:
        """Mean and standard deviation of every measure per (mechanism, eps)."""
        return self.table.groupby(["mechanism", "epsilon"])[list(self.metrics)].agg(["mean", "std"])


def compare(
    trips: TripSet,
    region: Region,
    epsilons: Sequence[float],
    *,
    max_trips: int,
    max_fixes: int,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    trials: int = 5,
    mechanisms: Sequence[str] | None = None,
    random_state: int = 0,
    n_queries: int = 100,
    progress: Callable[[float], None] | None = None,
) -> Comparison:
    """Run every mechanism ``trials`` times at every eps (diagnostic samplers seeded from ``random_state``, an
    int), each
    with its declared parameters (``params[key]``, defaults for the others) under the public limits."""
    eps_list = sorted({float(e) for e in epsilons})
    if not eps_list or min(eps_list) <= 0 or not 1 <= trials <= 100:
        raise ParameterError("give at least one positive ε and between 1 and 100 trials.")
    limits = {MAX_TRIPS.name: MAX_TRIPS.validate(max_trips), MAX_FIXES.name: MAX_FIXES.validate(max_fixes)}
    keys = list(comparable() if mechanisms is None else mechanisms)
    methods = [_method(k) for k in keys]  # an unknown key is refused, naming the known ones
    untried = [m.label for m in methods if m.trial is None]
    if untried:
        raise ParameterError(f"{', '.join(untried)} declare(s) no diagnostic trial; compare others.")
    chosen = [
        limits if m is BASELINE else m.validate_params({**(params or {}).get(m.key, {}), **limits})
        for m in methods
    ]
    box = plane_box(region)
    ref = Reference.of(trips, box, Queries.draw(n_queries, np.random.default_rng(random_state)))
    example_eps = eps_list[len(eps_list) // 2]
    rows, examples = [], {}
    total, done = len(methods) * len(eps_list) * trials, 0
    for method, values in zip(methods, chosen, strict=True):
        declared = [m.name for m in method.metrics]
        for eps in eps_list:
            for trial in range(trials):
                diagnostic = Sampler.diagnostic(random_state * 1_000_003 + trial * 1009 + len(rows))
                synthetic = method.trial(trips, region, eps, diagnostic, values)
                scores = utility(ref, synthetic)
                if not set(declared) <= set(scores):
                    raise ParameterError(
                        f"{method.label} declares metrics {declared}; the comparison scores {sorted(scores)}."
                    )
                rows.append(
                    {
                        "mechanism": method.key,
                        "epsilon": eps,
                        "trial": trial,
                        **{name: scores[name] for name in declared},
                    }
                )
                if eps == example_eps and trial == 0:
                    examples[method.key] = synthetic
                done += 1
                if progress is not None:
                    progress(done / total)
    metrics = {m.name: m.title for method in methods for m in method.metrics}
    return Comparison(
        pd.DataFrame(rows),
        examples,
        example_eps,
        {m.key: m.label for m in methods},
        {m.key: m.color for m in methods},
        metrics,
    )
