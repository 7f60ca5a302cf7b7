"""Trajectories: compare the registered trajectory mechanisms and a per-fix baseline over ε; release one.

Diagnostics (sections 1-3) read the raw fixes and cost no budget; the release (section 4) runs one
mechanism once at one ε, debits the ledger once (``ui.release.release_panel``) and is the only output meant
to leave. Maps draw without a tile server.
"""

import json
from typing import Any

import streamlit as st

from dpcore.location.geometry import Region
from dpcore.plots.trajectory import (
    TRUE_COLOR,
    distribution_histograms,
    trips_map,
    trips_side_by_side,
    utility_vs_eps,
)
from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns
from dpcore.trajectory.registry import MAX_FIXES, MAX_TRIPS, TRAJECTORIES, scope_of
from dpcore.trajectory.roads import DEFAULT_REGION
from ui import datasets, state
from ui import trajectories_view as view
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.params import draw_params
from ui.release import current_plan, release_panel
from ui.text import md

ensure_entrypoint()

SAMPLE = "Sample: Road trips (synthetic GPS)"
NO_TRIP = "(none: split at a time gap)"
COMPARED_KEY = "traj_compared"
DIAGNOSTIC_BANNER = (
    "**Diagnostics (non-private).** Sections 1-3 use the raw fixes (true trips, errors over many noisy "
    "trials). They cost no budget and are for the curator only: do not share these charts."
)
EDGE_LABELS = ("South edge (lat min)", "North edge (lat max)", "West edge (lon min)", "East edge (lon max)")


def _sample_button(label: str) -> None:
    if st.button(label, key="traj_load_sample", icon=":material/route:"):
        with user_errors("loading the road trips sample") as outcome:
            datasets.load_sample_dataset(SAMPLE)
        if not outcome.failed:
            st.rerun()


def _pick(label: str, options: list[str], key: str, guess: tuple[str, ...], col) -> str | None:
    """A column for one role: the first whose name is a usual one for it, else none until chosen."""
    default = next((o for o in options if o.lower() in guess), None)
    valid = lambda v: v is None or v in options  # noqa: E731
    return col.selectbox(
        label, options, index=None, placeholder="Choose a column", key=state.persist(key, default, valid)
    )


def _fixes(ds: state.Dataset) -> view.Fixes:
    st.header("1. Columns")
    cols = list(ds.cleaned.columns)
    a, b, c = st.columns(3)
    person = _pick("Person (or vehicle) column", cols, "traj_person", ("person", "user", "id", "vehicle"), a)
    time = _pick("Timestamp column", cols, "traj_time", ("time", "timestamp", "datetime"), b)
    tz = c.text_input(
        "Time zone of timestamps without one",
        key=state.persist("traj_tz", "UTC"),
        help="An IANA name (UTC, Europe/Paris, ...). Timestamps with a zone or offset keep theirs.",
    )
    d, e, f = st.columns(3)
    lat = _pick("Latitude column (degrees)", cols, "traj_lat", ("lat", "latitude"), d)
    lon = _pick("Longitude column (degrees)", cols, "traj_lon", ("lon", "lng", "longitude"), e)
    if None in (person, time, lat, lon):
        st.info(
            f"Choose the person, timestamp, latitude and longitude columns of '{md(ds.name)}' (one row per "
            "GPS fix), or load the road trips sample."
        )
        st.stop()
    trips = [NO_TRIP, *cols]
    trip = f.selectbox(
        "Trip column (optional)", trips, key=state.persist("traj_trip", NO_TRIP, trips.__contains__)
    )
    with user_errors("reading the fixes") as read:
        fixes = view.read_fixes(ds.cleaned, person, time, lat, lon, None if trip == NO_TRIP else trip, tz)
    if read.failed:
        st.stop()
    st.caption(
        f"{fixes.lat.size:,} fixes · {fixes.n_people:,} people · times read as UTC (naive ones in "
        f"{md(tz)}) · dataset `{ds.fingerprint[:12]}`"
    )
    return fixes


def _limits(ds: state.Dataset, fixes: view.Fixes) -> tuple[Region, int, int, float, float]:
    st.header("2. Public limits")
    st.caption(
        "Limits anyone could know, entered by you and never read from the data: the region, how many trips "
        "a person makes at most (extra trips are dropped at random) and how many fixes a trip has at most "
        "(longer trips are cut). The noise protects one person with that many trips."
    )
    sample = (ds.origin or {}).get("sample") == "road_trips"
    preset = (DEFAULT_REGION.lat_min, DEFAULT_REGION.lat_max, DEFAULT_REGION.lon_min, DEFAULT_REGION.lon_max)
    box = [
        col.number_input(
            label,
            value=None,
            format="%.4f",
            key=state.persist(f"traj_box_{i}_{ds.dataset_id}", preset[i] if sample else None),
        )
        for i, (col, label) in enumerate(zip(st.columns(4), EDGE_LABELS, strict=True))
    ]
    if any(edge is None for edge in box):
        st.info("Enter the four edges of the public region, in degrees (a published box, not the data's).")
        st.stop()
    a, b, c, d = st.columns(4)
    m = int(
        a.number_input(
            MAX_TRIPS.label, 1, int(MAX_TRIPS.high), key=state.persist("traj_m", 2), help=MAX_TRIPS.help
        )
    )
    n = int(
        b.number_input(
            MAX_FIXES.label, 2, int(MAX_FIXES.high), key=state.persist("traj_L", 60), help=MAX_FIXES.help
        )
    )
    gap = float(
        c.number_input("New trip after a gap of (minutes)", 1.0, 1440.0, key=state.persist("traj_gap", 20.0))
    )
    speed = float(
        d.number_input(
            "Fixes faster than this are noise (m/s)", 1.0, 1000.0, key=state.persist("traj_speed", 70.0)
        )
    )
    with user_errors("checking the region") as outcome:
        region = Region(*map(float, box))
    if outcome.failed:
        st.stop()
    return region, m, n, gap * 60.0, speed


def _parameters(m: int, n: int) -> dict[str, dict[str, Any]]:
    """Every trajectory mechanism's parameters, mechanism key -> {name: value}, from widgets drawn from
    what each declares (the limits above fixed): the comparison and the release use the same values."""
    st.subheader("Mechanism parameters")
    fixed = {MAX_TRIPS.name: m, MAX_FIXES.name: n}
    return draw_params("traj", TRAJECTORIES.values(), state.policy(), fixed=fixed)


def _compare(key: str, trips, region: Region, limits: tuple[float, ...], params: dict) -> None:
    st.header("3. Compare mechanisms (diagnostics, no budget)")
    st.caption(
        "Every mechanism and a per-fix planar Laplace baseline, each with its parameters above, run on the "
        "trips above and scored against them."
    )
    a, b = st.columns(2)
    eps = a.multiselect("ε values", list(view.EPS_OPTIONS), key=state.persist("traj_eps", [0.5, 1.0, 2.0]))
    trials = int(b.number_input("Trials per ε", 1, 20, key=state.persist("traj_trials", 3)))
    settings = [key, list(limits), sorted(eps), trials, json.dumps(params, sort_keys=True)]
    compared = st.session_state[state.persist(COMPARED_KEY, None)]
    if st.button("Run comparison", type="primary", disabled=not eps, key="traj_run"):
        st.session_state[COMPARED_KEY] = compared = settings
    if compared is None or compared[0] != key or len(compared) < len(settings):
        st.info("Press Run comparison to compare the mechanisms over the ε values (costs no budget).")
        return
    if compared != settings:
        st.caption("The settings changed since this comparison ran: press Run comparison to update it.")
    with st.spinner("Comparing the mechanisms..."), user_errors("running the comparison") as outcome:
        result = view.comparison(
            key, trips, tuple(compared[1]), tuple(compared[2]), int(compared[3]), compared[4]
        )
    if outcome.failed:
        return
    labels = result.labels
    st.plotly_chart(utility_vs_eps(result.table, result.metrics, labels, result.colors), key="traj_utility")
    colors = {"True trips": TRUE_COLOR} | {labels[k]: c for k, c in result.colors.items()}
    panels = {"True trips": view.latlon_trips(trips, region)}
    panels.update({labels[k]: view.latlon_trips(t, region) for k, t in result.examples.items()})
    st.plotly_chart(
        trips_side_by_side(
            panels, region, title=f"True and synthetic trips (ε = {result.example_epsilon:g})", colors=colors
        ),
        key="traj_side",
    )
    c1, c2 = st.columns(2)
    sets = {"True trips": trips, **{labels[k]: t for k, t in result.examples.items()}}
    c1.plotly_chart(
        distribution_histograms(view.per_trip_km(sets, "length"), title="Trip length", colors=colors),
        key="traj_len",
    )
    c2.plotly_chart(
        distribution_histograms(view.per_trip_km(sets, "diameter"), title="Trip diameter", colors=colors),
        key="traj_dia",
    )


def _release(
    fixes: view.Fixes, region: Region, m: int, n: int, gap: float, speed: float, params: dict
) -> None:
    st.header("4. Release (the only output meant to leave)")
    a, b = st.columns(2)
    keys = list(TRAJECTORIES)
    mech = a.selectbox(
        "Mechanism to release",
        keys,
        format_func=lambda k: TRAJECTORIES[k].label,
        key=state.persist("traj_rel_mech", keys[0], keys.__contains__),
    )
    spec = TRAJECTORIES[mech]
    st.markdown(spec.summary)
    with st.expander("Formula and sources"):
        st.markdown(f"{spec.formula}\n\n*{spec.citation}*")
    eps = float(
        b.number_input("ε to spend", min_value=0.0, format="%.4g", key=state.persist("traj_rel_eps", 1.0))
    )
    scope = scope_of(m, n)
    st.caption(
        f"Protection: one person's trips, {scope}. The release debits the dataset's per-user account with "
        f"at most {m * n:,} rows per user (m × L): on the Privacy policy page, its unit is 'per user' with "
        f"{m * n:,} as the most rows per user."
    )
    with user_errors("reading the fixes to release") as outcome:
        inputs = view.release_inputs(fixes, region, gap, speed)
    if outcome.failed:
        return
    steps = (TrajectoryColumns(*fixes.columns, tz=fixes.tz), PublicTripLimits.of(region, gap, speed))
    used = [c for c in fixes.columns if c is not None]
    plan = current_plan(
        "trajectory",
        mech,
        epsilon=eps,
        params=params[mech],
        scope=scope,
        steps=steps,
        used=used,
    )
    release_panel(key="trajectories", plan=plan, inputs=inputs)


st.title("Trajectories")
dataset = state.dataset()
if dataset is None:
    st.info(
        "No dataset yet: load the road trips sample here, or choose a file of GPS fixes on the Data page."
    )
    _sample_button("Load the road trips sample")
    st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
    st.stop()
st.warning(DIAGNOSTIC_BANNER, icon=":material/visibility:")
if (dataset.origin or {}).get("sample") != "road_trips":
    _sample_button("Use the road trips sample instead")
chosen = _fixes(dataset)
public_region, max_trips, max_fixes, gap_s, speed_mps = _limits(dataset, chosen)
data_key = view.data_key(dataset.fingerprint, dataset.cleaning, chosen)
box = (public_region.lat_min, public_region.lat_max, public_region.lon_min, public_region.lon_max)
limits = (*box, max_trips, max_fixes, gap_s, speed_mps)
with st.spinner("Preparing the trips..."), user_errors("preparing the trips") as prep:
    ready = view.prepared(data_key, chosen, limits)
if prep.failed:
    st.stop()
counts = ready.counts
st.caption(
    f"{counts['trips_used']:,} trips of {counts['fixes_used']:,} fixes used (raw counts, for you only): "
    f"{counts['fixes_outside_region']:,} fixes outside the region and {counts['fixes_too_fast']:,} too fast "
    f"dropped, {counts['trips_over_cap']:,} trips over the per-person limit dropped, "
    f"{counts['fixes_truncated']:,} fixes cut from long trips."
)
if ready.trips.n_trips == 0:
    st.warning("No trip is left under these limits: widen the region, the gap or the speed limit.")
    st.stop()
st.plotly_chart(
    trips_map(
        view.latlon_trips(ready.trips, public_region),
        public_region,
        title="True trips (non-private)",
        color=TRUE_COLOR,
        diagnostic=True,
    ),
    key="traj_true_map",
)
parameters = _parameters(max_trips, max_fixes)
_compare(data_key, ready.trips, public_region, limits, parameters)
st.divider()
_release(chosen, public_region, max_trips, max_fixes, gap_s, speed_mps, parameters)
