"""Error-vs-epsilon comparison of the location mechanisms (internal comparison, never a release).

Every registered location mechanism declares its diagnostic trial and the metrics it reports on its spec
(:mod:`dpcore.location.trial_data`); this module runs the chosen ones over an eps grid and trials, each
with its declared parameters, and returns one tidy frame. All noise comes from ``Sampler.diagnostic``
(fast numpy noise, one independent seed per mechanism): the results are curator diagnostics computed on
the true data. What does not depend on eps (checked points, user codes, query boxes and their true answers,
the projected mean, non-private k-means) is computed once per comparison, on first use. Every row counts as
one person (per location). Small matrix products run with one BLAS thread (threads only add overhead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region, validate_latlon
from dpcore.location.registry import LOCATIONS
from dpcore.location.trial_data import TrialData
from dpcore.mechanisms import Sampler, _check_epsilon
from dpcore.registry import Metric

COLUMNS = ["mechanism", "label", "epsilon", "trial", "metric", "value"]
Progress = Callable[[float, str], None]
MAX_TRIALS = 50  # trials per eps of one comparison
MAX_EPS_VALUES = 25  # eps values of one comparison
MAX_QUERIES = 1000  # random rectangle queries scoring the density grids


def comparable() -> list[str]:
    """The location mechanisms with a diagnostic trial, in registration order."""
    return [key for key, spec in LOCATIONS.items() if spec.trial is not None]


def declared_metrics(frame: pd.DataFrame) -> dict[str, Metric]:
    """The metrics of a comparison frame by name, in the order its mechanisms declare them; a metric its
    mechanism does not declare is refused (a chart never leaves one off silently)."""
    out: dict[str, Metric] = {}
    for mech, metric in dict.fromkeys(zip(frame["mechanism"], frame["metric"], strict=True)):
        spec = LOCATIONS[str(mech)]
        known = {m.name: m for m in spec.metrics}
        if metric not in known:
            raise ParameterError(
                f"{spec.label} declares no metric {metric!r} (it declares {', '.join(known) or 'none'})."
            )
    for mech in dict.fromkeys(frame["mechanism"]):
        for m in LOCATIONS[str(mech)].metrics:
            out.setdefault(m.name, m)
    present = set(frame["metric"])
    return {name: m for name, m in out.items() if name in present}


def _seed(seed: int, mech: str) -> int:
    """A per-mechanism diagnostic seed, independent of which other mechanisms are swept."""
    return int(np.random.SeedSequence([seed, *mech.encode()]).generate_state(1)[0])


def location_sweep(
    lat: ArrayLike,
    lon: ArrayLike,
    users: ArrayLike,
    mechanisms: Sequence[str],
    eps_grid: Sequence[float],
    trials: int,
    *,
    region: Region,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    n_queries: int = 50,
    random_state: int = 0,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Tidy frame (mechanism, label, epsilon, trial, metric, value) over eps_grid x trials.

    ``params[key]`` are mechanism ``key``'s parameters (its declared ones, defaults for the others), as
    its release would use them; ``n_queries`` random rectangle queries score the density grids.
    ``random_state`` (an int) seeds the diagnostic samplers. ``progress(fraction, text)`` is called as the
    work advances (e.g. a Streamlit progress bar).
    """
    params = params or {}
    specs = [LOCATIONS[m] for m in mechanisms]  # an unknown key is refused, naming the known ones
    untried = [s.label for s in specs if s.trial is None]
    if untried:
        raise ParameterError(f"{', '.join(untried)} declare(s) no diagnostic trial; compare others.")
    values = [s.validate_params(params.get(s.key, {})) for s in specs]
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or not 1 <= trials <= MAX_TRIALS:
        raise ParameterError(f"trials must be a whole number from 1 to {MAX_TRIALS} (got {trials!r}).")
    if not 1 <= len(eps_grid) <= MAX_EPS_VALUES:
        raise ParameterError(
            f"give 1 to {MAX_EPS_VALUES} epsilon values to sweep, e.g. [0.5, 1, 2] (got {len(eps_grid)})."
        )
    eps = np.array([_check_epsilon(e) for e in eps_grid])
    whole = not isinstance(n_queries, bool) and isinstance(n_queries, (int, np.integer))
    if not whole or not 1 <= n_queries <= MAX_QUERIES:
        raise ParameterError(f"n_queries must be a whole number from 1 to {MAX_QUERIES} (got {n_queries!r}).")
    if not isinstance(region, Region):
        raise ParameterError("the sweep needs a public region: pass region=Region(lat_min, ...).")
    report = progress or (lambda _f, _t: None)
    trials = int(trials)
    frames = []
    with threadpool_limits(1, user_api="blas"):
        la, lo = validate_latlon(lat, lon, table=True)
        data = TrialData(la, lo, np.asarray(users), region, int(n_queries), random_state)
        t_idx, e_idx = np.meshgrid(np.arange(trials), np.arange(eps.size), indexing="ij")
        for done, (spec, chosen) in enumerate(zip(specs, values, strict=True)):
            report(done / len(specs), f"{spec.label}...")
            diagnostic = Sampler.diagnostic(_seed(random_state, spec.key))
            out = spec.trial(data, eps, trials, diagnostic, chosen)
            declared = [m.name for m in spec.metrics]
            if sorted(out) != sorted(declared):
                raise ParameterError(
                    f"{spec.label}'s trial reported {sorted(out)}, not the metrics it declares {declared}."
                )
            for metric in declared:
                frames.append(
                    pd.DataFrame(
                        {
                            "mechanism": spec.key,
                            "label": spec.label,
                            "epsilon": eps[e_idx.ravel()],
                            "trial": t_idx.ravel(),
                            "metric": metric,
                            "value": np.asarray(out[metric], dtype=float).reshape(trials, eps.size).ravel(),
                        }
                    )
                )
    report(1.0, "done")
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]
