"""The release step shared by DPT and its uniform-grid baseline: prepare, fit, sample, write."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler
from dpcore.plots.trajectory import trips_map
from dpcore.registry import MechanismOutput
from dpcore.trajectory.dpt import DPT
from dpcore.trajectory.outofcore import TrajectoryTable
from dpcore.trajectory.prepare import TripSet, plane_box
from dpcore.trajectory.registry import TrajectoryInputs

TIMESTAMPS = "not released: synthetic trips carry no time (no true timestamp leaves)"
COLUMNS = ["trip", "point", "lat", "lon"]


def geojson(table: pd.DataFrame) -> bytes:
    """The released trips as a GeoJSON FeatureCollection: a LineString per trip (a Point for a one-anchor
    trip), properties ``trip`` and, in demo mode, ``notice``."""
    features = []
    notice = table["notice"].iloc[0] if "notice" in table.columns and len(table) else None
    for trip, rows in table.groupby("trip", sort=True):
        coords = [
            [round(float(lo), 7), round(float(la), 7)]
            for la, lo in zip(rows["lat"], rows["lon"], strict=True)
        ]
        geometry = (
            {"type": "LineString", "coordinates": coords}
            if len(coords) > 1
            else {"type": "Point", "coordinates": coords[0]}
        )
        props: dict[str, Any] = {"trip": int(trip)}
        if notice is not None:
            props["notice"] = str(notice)
        features.append({"type": "Feature", "geometry": geometry, "properties": props})
    return json.dumps({"type": "FeatureCollection", "features": features}).encode()


def synthetic_release(
    label: str,
    model_params: dict[str, Any],
    inputs: TrajectoryInputs | TrajectoryTable,
    epsilon: float,
    delta: float,
    params: dict[str, Any],
    random_state: Sampler,
) -> MechanismOutput:
    """Prepare the trips under the plan's limits, fit the noisy model at ``epsilon``, draw the synthetic
    trips; the table has one row per point (trip, point, lat, lon). ``inputs`` in memory, or a table in
    DuckDB read by passes (the same release with the same sampler)."""
    if delta != 0:
        raise ParameterError(f"{label} spends no delta; pass delta = 0 (got {delta!r}).")
    region = inputs.region
    model = DPT(
        epsilon,
        max_trips=params["max_trips"],
        max_fixes=params["max_fixes"],
        box=plane_box(region),
        random_state=random_state,
        **model_params,
    )
    limits, counts = inputs.fit_model(model, params, random_state)
    synthetic = model.sample()
    lat, lon = region.clip(*synthetic.to_latlon(region))  # the square's corners beyond the region
    table = pd.DataFrame(
        {
            "trip": synthetic.trip_of + 1,
            "point": np.arange(synthetic.n_fixes) - np.repeat(synthetic.offsets[:-1], synthetic.lengths),
            "lat": np.round(lat, 7),
            "lon": np.round(lon, 7),
        },
        columns=COLUMNS,
    )
    figure = trips_map(
        (table["lat"], table["lon"], synthetic.offsets), region, title=f"{label}: synthetic trips"
    )
    hier = model.hierarchy_
    details = {
        "scope": limits.scope,
        "region": region.to_dict(),
        "max_trips": limits.max_trips,
        "max_fixes": limits.max_fixes,
        "trip_gap_s": limits.gap_s,
        "max_speed_mps": limits.max_speed_mps,
        "reference_systems_cells_per_side": [int(hier.cells(k)) for k in range(hier.levels)],
        "reference_systems_used": [int(hier.cells(k)) for k in model.selected_],
        "markov_order": model.order,
        "direction_window": model.window,
        "budget_log": [[name, e] for name, e in model.budget_log_],
        "laplace_scales": {name: np.atleast_1d(v).tolist() for name, v in model.scale_.items()},
        "synthetic_trips": synthetic.n_trips,
        "timestamps": TIMESTAMPS,
    }
    return MechanismOutput(table, (figure,), details, dict(counts), limits.scope, files={".geojson": geojson})


def synthetic_trial(
    model_params: dict[str, Any],
    trips: TripSet,
    region: Region,
    epsilon: float,
    random_state: Sampler,
    params: dict[str, Any],
) -> TripSet:
    """Diagnostic: the noisy model fitted at ``epsilon`` on trips already prepared under the limits of
    ``params`` (``random_state``: a diagnostic sampler); its synthetic trips in plane metres, as the
    release draws them."""
    model = DPT(
        epsilon,
        max_trips=params["max_trips"],
        max_fixes=params["max_fixes"],
        box=plane_box(region),
        random_state=random_state,
        **model_params,
    )
    return model.fit(trips).sample()
