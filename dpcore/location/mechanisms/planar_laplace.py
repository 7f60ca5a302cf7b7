"""Planar Laplace per location: level l within r metres of geo-indistinguishability (Andres et al. 2013).

Each kept location is moved by planar Laplace noise, sampled exactly on a public grid of step u
(``dpcore.location.laplace``) at l' / (r + 1.5 u) per metre, l' = ``per_member_epsilon(l, g)`` (g = the
public most locations of one user, 1 without a user column): the grid adds < 1.5 u to any distance, so
moving every location of one person by at most r metres changes any output's probability by at most
e^(g l') <= e^l. Outputs outside the region go to the nearest grid point inside it and the rows are
shuffled (post-processing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcore.accounts import Relation
from dpcore.errors import PolicyError
from dpcore.location import trial_data
from dpcore.location.budget import per_member_epsilon
from dpcore.location.geometry import FloatArray
from dpcore.location.laplace import GRID_CALIBRATION, PlanarLaplace, grid_note
from dpcore.location.registry import (
    ERROR_M,
    LOCATIONS,
    MAX_PER_USER,
    LocationInputs,
    keep_per_user,
    kept_details,
    kept_diagnostics,
    no_delta,
    per_user_contribution,
)
from dpcore.location.trial_data import TrialData
from dpcore.mechanisms import Sampler
from dpcore.plots.location import displacement_histogram, released_map, true_vs_released
from dpcore.policy import GeoIndistinguishability, protected_radius
from dpcore.registry import Calibration, MechanismOutput, MechanismSpec, Param

LABEL = "Planar Laplace (per location)"


def release(
    inputs: LocationInputs, *, epsilon: float, delta: float, params: dict[str, Any], random_state: Sampler
) -> MechanismOutput:
    """``epsilon`` is the level l within ``params["radius_m"]`` metres, for a whole person."""
    no_delta(delta)
    kept = keep_per_user(inputs, params["max_per_user"], random_state)
    radius = float(params["radius_m"])
    level_point = per_member_epsilon(epsilon, kept.group)
    mech = PlanarLaplace(level=level_point, radius_m=radius, region=inputs.region, random_state=random_state)
    z_lat, z_lon = mech.release(kept.lat, kept.lon)
    order = random_state.rng.permutation(kept.n)
    table = pd.DataFrame({"lat": z_lat[order], "lon": z_lon[order]})
    figure = released_map(table["lat"], table["lon"], title=f"{LABEL}: released locations")
    details = {
        **kept_details(kept, inputs),
        "level": float(epsilon),
        "radius_m": radius,
        "level_per_location": level_point,
        "grid_step_m": mech.step_m,
        "epsilon_per_metre": mech.noise_epsilon_per_metre,
        "discretisation": grid_note(level_point, radius),
        "truncation": "outputs outside the region moved to the nearest grid point inside it; rows shuffled",
    }
    diagnostics = {
        **kept_diagnostics(kept, inputs),
        "median_displacement_m": float(pd.Series(mech.displacement_m_).median()),
    }
    return MechanismOutput(table, (figure,), details, diagnostics, kept.scope)


def diagnostic_figures(
    inputs: LocationInputs,
    *,
    epsilon: float,
    params: dict[str, Any],
    random_state: Sampler,
    tiles: bool,
    nonnegative: bool,
) -> dict[str, Any]:
    """True vs released locations of one diagnostic draw at level ``epsilon`` within r, and the histogram
    of their great-circle displacements against the Gamma(2, 1/e) density of the noise radius (e per
    metre). ``nonnegative`` is not used (no counts)."""
    kept = keep_per_user(inputs, params["max_per_user"], random_state)
    radius = float(params["radius_m"])
    level_point = per_member_epsilon(epsilon, kept.group)
    mech = PlanarLaplace(level=level_point, radius_m=radius, region=inputs.region, random_state=random_state)
    z_lat, z_lon = mech.release(kept.lat, kept.lon)
    per_metre = mech.noise_epsilon_per_metre
    title = f"{LABEL}, l = {epsilon:g} within r = {radius:,.0f} m ({per_metre:.3g} / m): true vs released"
    return {
        "map_laplace": true_vs_released(kept.lat, kept.lon, z_lat, z_lon, tiles=tiles, title=title),
        "displacement": displacement_histogram(mech.displacement_m_, per_metre),
    }


def trial(
    data: TrialData, eps: FloatArray, trials: int, random_state: Sampler, params: dict[str, Any]
) -> dict[str, FloatArray]:
    """Per user the mean displacement in metres, averaged over users, at level eps within r (every row its
    own person): the great-circle displacement equals the noise radius (destination-point formula), so it
    is drawn directly, r / eps x Gamma(2, 1) i.i.d. per visit, at most ``trial_data.DRAW_ENTRIES`` at a
    time (the same draws, in the same order, as all at once)."""
    per_user = np.bincount(data.visits.codes)
    starts = np.r_[0, np.cumsum(per_user)[:-1]]
    runs, visits = trials * eps.size, int(per_user.sum())
    mean = np.empty(runs)
    step = max(1, trial_data.DRAW_ENTRIES // visits)
    for start in range(0, runs, step):
        # Draws are i.i.d. per visit, so visit i of the sorted layout can take any user's slot.
        g = random_state.rng.gamma(2.0, 1.0, (min(step, runs - start), visits))
        mean[start : start + step] = (np.add.reduceat(g, starts, axis=1) / per_user).mean(axis=1)
    return {ERROR_M.name: mean.reshape(trials, eps.size) / eps * float(params["radius_m"])}


def relation(params: dict[str, Any], policy: Any) -> Relation:
    """One location moved, the level counted within the policy's radius r, which must be the release's own
    ``radius_m`` (set on the Privacy policy page only)."""
    r, own = protected_radius(policy, LABEL), float(params["radius_m"])
    if own != r:
        raise PolicyError(
            f"{LABEL} would count its level within {own:g} m, but the policy's protected radius is {r:g} m; "
            "the radius is set on the Privacy policy page only."
        )
    return Relation("geo_ind", "geo", r)


SPEC = LOCATIONS.register(
    MechanismSpec(
        domain="location",
        key="planar_laplace",
        label=LABEL,
        definition="geo_ind",
        summary=(
            "Each location is moved in a random direction by a random distance: at level l within r metres, "
            "two places up to r metres apart look alike, and places farther apart less so."
        ),
        formula=(
            "z = the grid point of x moved by n in Z^2 with Pr[n] proportional to exp(-e u ||n||), sampled "
            "exactly on a public grid of step u in the tangent plane at the region's centre; "
            "e = l' / (r + 1.5 u) per metre, l' = l / m for at most m locations per user (m = 1 without a "
            "user column)."
        ),
        citation="Andres et al. 2013; Zhu et al. 2017, s.12.3",
        release=release,
        calibration=lambda _params: Calibration(GRID_CALIBRATION),
        trial=trial,
        diagnostic_figures=diagnostic_figures,
        metrics=(ERROR_M,),
        color="#1f77b4",
        relation=relation,
        contribution=per_user_contribution,
        params=(
            Param(
                "radius_m",
                "Radius r (metres)",
                float,
                1000.0,
                low=0.01,
                high=2.0e7,
                help="The distance within which two places are protected at level l, e.g. 1000.",
                from_policy=lambda pol: pol.radius_m if isinstance(pol, GeoIndistinguishability) else None,
                hidden=True,  # set with the level on the Privacy policy page only
            ),
            MAX_PER_USER,
        ),
    )
)
