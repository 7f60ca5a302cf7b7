"""Release steps and parameters shared by pairs of location mechanisms (grids, mean positions, hotspots)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dpcore.location import trial_data
from dpcore.location.blowfish import blowfish_mean_sensitivity, dp_mean_sensitivity, noisy_mean
from dpcore.location.budget import per_member_epsilon
from dpcore.location.geometry import FloatArray, haversine_m
from dpcore.location.grids import ClampedPoints, DensityGrid, relative_error
from dpcore.location.hotspots import (
    fit_hotspots,
    hotspot_estimator,
    hotspot_trials,
    nearest_hotspot_distance_m,
    project_locations,
    true_hotspots,
)
from dpcore.location.registry import (
    ERROR_M,
    RANGE_ERROR,
    WCSS_LOSS,
    LocationInputs,
    kept_details,
    kept_diagnostics,
    no_delta,
)
from dpcore.location.trial_data import TrialData
from dpcore.mechanisms import Sampler, laplace_scale
from dpcore.plots.kmeans import diagnostic_annotation
from dpcore.plots.location import density_heatmap, hotspot_map, released_map
from dpcore.policy import Blowfish, DistanceThresholdGraph, Policy
from dpcore.registry import MechanismOutput, Param


def great_circle_threshold(policy: Policy) -> float | None:
    """The distance threshold θ (metres) of a Blowfish policy with a great-circle threshold graph, else
    None."""
    graph = policy.graph if isinstance(policy, Blowfish) else None
    if isinstance(graph, DistanceThresholdGraph) and graph.metric == "haversine":
        return float(graph.theta)
    return None


THETA = Param(
    "theta_m",
    "Distance threshold θ (metres)",
    float,
    50_000.0,
    low=1.0,
    high=2.0e7,
    help="Positions within θ metres of each other are protected, e.g. 50000.",
    from_policy=great_circle_threshold,
)
HOTSPOT_K = Param(
    "hotspot_k",
    "Number of hotspots K",
    int,
    8,
    low=1,
    high=30,
    help="Blowfish hotspots check every pair of cells each round: their cost grows as K².",
)
GRID_COLUMNS = ["lat_lo", "lat_hi", "lon_lo", "lon_hi", "noisy_count"]
GRID_SUMMARY = "Counts how many locations fall in each cell of a grid over the region and blurs every count"


def neighbours_param(*choices: str) -> Param:
    """Which datasets are neighbours: one person's locations added or removed, or replaced by others."""
    return Param(
        "neighbours",
        "Neighbouring datasets",
        str,
        choices[0],
        choices=choices,
        help="unbounded: one person's locations added or removed; bounded: replaced by others (n public).",
    )


N_PUBLIC = {
    "dp": "public: the number of people (bounded neighbours keep it; one location each)",
    "blowfish": "public: the number of locations kept (the policy moves locations, never adds one)",
}
N_NOISY = (
    "noisy count: kept locations + Laplace(g / (eps / 10)), the mean's sum noised with the other 9/10 "
    "(a person's number of locations is private under bounded neighbours)"
)
PLANE_NOTE = (
    "locations mapped to metres around the region centre by a map that never stretches a distance by more "
    "than its scale factor (azimuthal equidistant inside the region)"
)


def mean_release(
    policy: str,
    label: str,
    inputs: LocationInputs,
    epsilon: float,
    delta: float,
    params: dict[str, Any],
    random_state: Sampler,
) -> MechanismOutput:
    """Noisy mean position of the kept rows, calibrated for a person with ``group`` rows; the table's ``n``
    is the kept rows' number where the relation makes it public (Blowfish moves rows; one row per person),
    else a noisy count (bounded DP per user: a person's number of rows is private).

    ``inputs`` is a :class:`LocationInputs` or a table in an engine
    (:class:`dpcore.outofcore.locations.TableLocations`): both give the kept rows' count and mapped sums."""
    no_delta(delta)
    kept = inputs.projected(params["max_per_user"], random_state)
    theta = params.get("theta_m")
    public_n = policy == "blowfish" or kept.group == 1  # moved rows, or one row per person
    out = noisy_mean(
        kept.points,
        epsilon,
        policy=policy,
        theta_m=theta,
        points_per_person=kept.group,
        public_n=public_n,
        random_state=random_state,
    )
    table = pd.DataFrame({"lat": [out.lat], "lon": [out.lon], "n": [out.n]})
    figure = released_map(table["lat"], table["lon"], title=f"{label}: released locations")
    details = {
        **kept_details(kept, inputs),
        "n": N_PUBLIC[policy] if public_n else N_NOISY,
        "l1_sensitivity_m": out.l1_sensitivity_m,
        "laplace_scale_m": out.laplace_scale_m,
        "mapping": PLANE_NOTE,
    }
    if not public_n:
        details["count_laplace_scale"] = out.count_scale
        details["budget_log"] = [[name, e] for name, e in out.budget_log]
    if theta is not None:
        details["theta_m"] = theta
    return MechanismOutput(table, (figure,), details, kept_diagnostics(kept, inputs), kept.scope)


def hotspot_release(
    policy: str,
    label: str,
    inputs: LocationInputs,
    epsilon: float,
    delta: float,
    params: dict[str, Any],
    random_state: Sampler,
) -> MechanismOutput:
    """DP-Lloyd / Blowfish k-means on the mapped rows at eps / g per row (group privacy for g rows).

    DP-Lloyd per user (g > 1) picks its rounds from a noisy row count under bounded neighbours too: they
    replace a person's rows by any number of others, so the kept count, and a T computed from it, is private.
    ``inputs`` as for :func:`mean_release`: the rounds read per-cluster counts and sums of the kept rows'
    mapped points, in memory or by passes of an engine."""
    no_delta(delta)
    kept = inputs.projected(params["max_per_user"], random_state)
    k, theta = params["hotspot_k"], params.get("theta_m")
    eps_row = per_member_epsilon(epsilon, kept.group)
    estimator = hotspot_estimator(
        kept.points,
        k,
        eps_row,
        policy=policy,
        theta_m=theta,
        neighbours=params.get("neighbours", "unbounded"),
        random_state=random_state,
        private_size=kept.group > 1,
    )
    centres, model = fit_hotspots(kept.points, estimator)
    table = pd.DataFrame({"hotspot": np.arange(1, k + 1), "lat": centres[:, 0], "lon": centres[:, 1]})
    details: dict[str, Any] = {
        **kept_details(kept, inputs),
        "n_clusters": k,
        "epsilon_per_location": eps_row,
        "n_iter": int(model.n_iter_),
        "budget_log_per_location": [[name, float(e)] for name, e in model.budget_log_],
        "mapping": PLANE_NOTE,
        "count_sensitivity": [float(v) for v in model.count_sensitivity_],
        "sum_l1_sensitivity_m": [float(v) for v in model.sum_sensitivity_],
    }
    if theta is not None:
        details["theta_m"] = theta
        details["theta_projected_m"] = float(model.graph.theta)
        details["sensitivity_gain_vs_bounded_dp"] = [float(v) for v in np.atleast_1d(model.sensitivity_gain_)]
    figure = hotspot_map(
        {label: (table["lat"], table["lon"])},
        title=f"{label}: released hotspot centres (K = {k}, ε = {epsilon:g})",
    )
    return MechanismOutput(table, (figure,), details, kept_diagnostics(kept, inputs), kept.scope)


def _grid(
    build: Callable[..., DensityGrid],
    inputs: LocationInputs,
    epsilon: float,
    delta: float,
    params: dict[str, Any],
    random_state: Sampler,
) -> tuple[Any, DensityGrid]:
    """The counted rows (at most m per user) and their grid, built with sensitivity m per cell."""
    no_delta(delta)
    counted = inputs.counted(params["max_per_user"], random_state)
    grid = build(
        counted.points,
        epsilon,
        neighbours=params["neighbours"],
        points_per_person=counted.group,
        random_state=random_state,
    )
    return counted, grid


def grid_release(
    build: Callable[..., DensityGrid],
    label: str,
    inputs: LocationInputs,
    epsilon: float,
    delta: float,
    params: dict[str, Any],
    random_state: Sampler,
) -> MechanismOutput:
    """Keep at most m rows per user, build the grid with sensitivity m per cell, table of its leaves.

    ``inputs`` is a :class:`LocationInputs` or a table in an engine
    (:class:`dpcore.outofcore.locations.TableLocations`): both give the rows counted."""
    counted, grid = _grid(build, inputs, epsilon, delta, params, random_state)
    table = pd.DataFrame(grid.leaves, columns=GRID_COLUMNS)
    figure = density_heatmap(grid, title=f"{label}: released noisy counts (ε = {epsilon:g})")
    details = {
        **kept_details(counted, inputs),
        "n_source": grid.n_source,
        "n_estimate": grid.n_estimate,
        "budget_log": [[name, e] for name, e in grid.budget_log],
        "cells_per_side_level_1": int(grid.counts.shape[0]),
    }
    return MechanismOutput(table, (figure,), details, kept_diagnostics(counted, inputs), counted.scope)


def grid_diagnostic(
    build: Callable[..., DensityGrid],
    chart: str,
    inputs: LocationInputs,
    *,
    epsilon: float,
    params: dict[str, Any],
    random_state: Sampler,
    tiles: bool,
    nonnegative: bool,
) -> dict[str, Any]:
    """The grid's heatmap from one diagnostic draw, its counts made non-negative by post-processing
    (``dpcore.postprocess.nonnegative_counts``, "project": keeps their total) when ``nonnegative``;
    ``tiles`` is not used (a heatmap draws no basemap)."""
    _, grid = _grid(build, inputs, epsilon, 0.0, params, random_state)
    figure = density_heatmap(grid, nonnegative="project" if nonnegative else None)
    return {chart: diagnostic_annotation(figure)}


def hotspot_diagnostic(
    policy: str,
    label: str,
    chart: str,
    inputs: LocationInputs,
    *,
    epsilon: float,
    params: dict[str, Any],
    random_state: Sampler,
    tiles: bool,
    nonnegative: bool,
) -> dict[str, Any]:
    """True hotspots (non-private k-means, seed 0) vs the centres of one diagnostic release, over the raw
    locations; the legend gives the mean great-circle distance from each true hotspot to the nearest
    released one (``nearest_hotspot_distance_m``). ``nonnegative`` is not used (no counts)."""
    k = params["hotspot_k"]
    out = hotspot_release(policy, label, inputs, epsilon, 0.0, params, random_state)
    released = out.table[["lat", "lon"]].to_numpy()
    data = project_locations(inputs.lat, inputs.lon, inputs.region)
    true = data.to_latlon(true_hotspots(data, k, 0))
    distance_km = nearest_hotspot_distance_m(true, released) / 1000
    figure = hotspot_map(
        {f"{label}: {distance_km:,.0f} km": (released[:, 0], released[:, 1])},
        true_centres=(true[:, 0], true[:, 1]),
        points=(inputs.lat, inputs.lon),
        tiles=tiles,
        title=(
            f"{label}, ε = {epsilon:g}, K = {k}: true vs released centres<br><sup>Legend: mean great-circle "
            "distance from each true hotspot (non-private k-means) to the nearest released one, for this "
            "one diagnostic draw.</sup>"
        ),
    )
    return {chart: figure}


def grid_trial(
    build: Callable[..., DensityGrid],
    data: TrialData,
    eps: FloatArray,
    trials: int,
    random_state: Sampler,
    params: dict[str, Any],
) -> dict[str, FloatArray]:
    """Median relative error of the random rectangle queries (Qardaji et al. 2013) per run; the grid is
    sized with the true n (as if the curator entered it), every row its own person."""
    points: ClampedPoints = data.clamped
    out = np.empty((trials, eps.size))
    for i, e in enumerate(eps):
        for t in range(trials):
            grid = build(
                points,
                float(e),
                neighbours=params["neighbours"],
                n_estimate=float(data.n),
                random_state=random_state,
            )
            answers = grid.range_query(data.boxes)
            out[t, i] = float(np.median(relative_error(answers, data.box_truth, data.n)))
    return {RANGE_ERROR.name: out}


def mean_trial(
    policy: str, data: TrialData, eps: FloatArray, trials: int, random_state: Sampler, params: dict[str, Any]
) -> dict[str, FloatArray]:
    """Great-circle metres between the true and the released mean position (both through the region's
    map), n public, every row its own person; the noise of every trial and eps drawn in one call."""
    sens = (
        blowfish_mean_sensitivity(data.n, params["theta_m"], data.region)
        if policy == "blowfish"
        else dp_mean_sensitivity(data.n, data.region)
    )
    scale = np.array([laplace_scale(sens, e) for e in eps])
    noise = random_state.laplace((trials, eps.size, 2), 1.0) * scale[None, :, None]
    mx, my = data.mean_xy
    r_lat, r_lon = data.plane.inverse(mx + noise[..., 0], my + noise[..., 1])
    return {ERROR_M.name: haversine_m(*data.mean_latlon, r_lat, r_lon)}


def hotspot_trial(
    policy: str, data: TrialData, eps: FloatArray, trials: int, random_state: Sampler, params: dict[str, Any]
) -> dict[str, FloatArray]:
    """Fractional WCSS loss (WCSS_released - WCSS_true) / WCSS_true in plane metres² vs non-private k-means
    (Ravi et al. 2021, Fig. 2), every row its own person; every trial's released centres scored by grid
    filtering (``dpcore.kmeans.cells.PlanarCells``: exact nearest centres, whole cells scored as scatter +
    n ||mean - c||²) in chunks of bounded size."""
    k = params["hotspot_k"]
    proj, cells = data.projected
    base = data.true_wcss(k)
    centres = hotspot_trials(
        proj, k, eps.tolist(), trials, random_state, policy=policy, theta_m=params.get("theta_m")
    )
    sets = centres.reshape(-1, *centres.shape[2:])
    # chunks of centre sets: grid filtering holds (sets x K x cells) bounds and up to n rows per set
    step = max(1, trial_data.DRAW_ENTRIES // max(sets.shape[1] * cells.count.size, data.n))
    scores = np.concatenate([cells.wcss(sets[i : i + step]) for i in range(0, len(sets), step)])
    return {WCSS_LOSS.name: (scores.reshape(centres.shape[:2]).T - base) / base}
