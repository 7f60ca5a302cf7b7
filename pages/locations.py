"""Locations: compare planar Laplace, PriLocation, density grids, Blowfish means and hotspots; release one.

Diagnostics (sections 1-3) read the raw coordinates and cost no budget; the release (section 4) runs one
mechanism once at one ε, debits the ledger once (``ui.release.release_panel``) and is the only output meant
to leave. Maps draw without a tile server unless the curator ticks the basemap option.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import streamlit as st

from dpcore.location.geometry import Region
from dpcore.location.prilocation import LEVELS
from dpcore.location.registry import LOCATIONS, MAX_PER_USER
from dpcore.location.sweep import MAX_TRIALS, MECHANISMS
from dpcore.plots.location import (
    density_heatmap,
    displacement_histogram,
    error_vs_eps,
    hotspot_map,
    true_vs_released,
)
from dpcore.policy import Blowfish, DistanceThresholdGraph, GeoIndistinguishability
from ui import accuracy, datasets, state
from ui import locations_view as view
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.release import current_plan, release_panel, stale_reason
from ui.requests_view import sweep_evidence
from ui.text import md

ensure_entrypoint()

SWEEP_KEY = "loc_sweep"
COMPARED_KEY = "loc_compared"
NO_USER = "(none: each row is its own user)"
CUSTOM_HS = "custom (metres)"
AIRPORTS = "Sample: US airports"
DIAGNOSTIC_BANNER = (
    "**Diagnostics (non-private).** Sections 1-3 use the raw coordinates (true maps, errors over many noisy "
    "trials). They cost no budget and are for the curator only: do not share these charts."
)
EDGE_LABELS = ("South edge (lat min)", "North edge (lat max)", "West edge (lon min)", "East edge (lon max)")


def _sample_button(label: str) -> None:
    if st.button(label, key="loc_load_airports", icon=":material/flight:"):
        with user_errors("loading the US airports sample") as outcome:
            datasets.load_sample_dataset(AIRPORTS)
        if not outcome.failed:
            st.rerun()


def _coordinates(ds: state.Dataset) -> view.Coordinates:
    st.header("1. Coordinates")
    lat_cols, lon_cols = ds.schema.columns("latitude"), ds.schema.columns("longitude")
    if not lat_cols or not lon_cols:
        st.info(
            f"'{md(ds.name)}' has no column marked latitude and longitude. Mark them on the Data page "
            "(column kinds), or use the US airports sample."
        )
        st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
        st.stop()
    others = [c for c in ds.cleaned.columns if c not in (*lat_cols, *lon_cols)]
    a, b, c = st.columns(3)
    lat_key = state.persist("loc_lat", lat_cols[0], lat_cols.__contains__)
    lat_col = a.selectbox("Latitude column (degrees)", lat_cols, key=lat_key)
    lon_key = state.persist("loc_lon", lon_cols[0], lon_cols.__contains__)
    lon_col = b.selectbox("Longitude column (degrees)", lon_cols, key=lon_key)
    users = [NO_USER, *others]
    user_col = c.selectbox(
        "User column (PriLocation groups visits by user)",
        users,
        key=state.persist("loc_user", NO_USER, users.__contains__),
    )
    with user_errors("reading the coordinates") as read:
        coords = view.coordinates(ds.cleaned, lat_col, lon_col, None if user_col == NO_USER else user_col)
    if read.failed:
        st.stop()
    n_users = len(set(coords.users.tolist())) if coords.user_column else coords.lat.size
    st.caption(f"{coords.lat.size:,} locations · {n_users:,} users · dataset `{ds.fingerprint[:12]}`")
    return coords


def _region(ds: state.Dataset) -> Region:
    st.subheader("Public region")
    st.caption(
        "A box anyone could know, chosen by you: never the data's own extent, which would leak its extreme "
        "points. Points outside it are clamped onto its edge."
    )
    suffix = ds.dataset_id
    choice = st.selectbox(
        "Public region",
        list(view.PRESETS),
        index=None,
        placeholder="Choose the public region of this dataset",
        key=state.persist(f"loc_region_{suffix}", view.default_region(ds.origin), _known_region),
        on_change=_custom_from_previous,
        args=(suffix,),
    )
    if choice is None:
        st.info(
            "Choose a public region for this dataset: one of the regions listed, or a custom box whose "
            "edges are public knowledge (e.g. a county's or a city's published boundary box)."
        )
        st.stop()
    preset = view.PRESETS[choice]
    cols = st.columns(4)
    if preset is not None:
        for col, label, value in zip(cols, EDGE_LABELS, preset, strict=True):
            col.number_input(label, value=value, format="%.4f", disabled=True)
        return Region(*preset)
    box = [
        col.number_input(label, value=None, format="%.4f", key=state.persist(f"loc_box_{i}_{suffix}", None))
        for i, (col, label) in enumerate(zip(cols, EDGE_LABELS, strict=True))
    ]
    if any(edge is None for edge in box):
        st.info("Enter the four edges of the custom box, in degrees.")
        st.stop()
    with user_errors("checking the region") as outcome:
        region = Region(*map(float, box))
    if outcome.failed:
        st.stop()
    return region


def _private_region() -> float | None:
    """ε_b when the curator has no public region and the release estimates one privately, else None."""
    demo = state.mode() == "demo"
    refused = datasets.PRIVATE_IN_DEMO.format(public="a public region below")
    ticked = st.checkbox(
        "No public region: estimate it privately at release, spending ε_b from this dataset's budget",
        key=state.persist("loc_private_region", False),
        disabled=demo,
        help=refused
        if demo
        else "The release first estimates the region's edges with OpenDP's differentially private quantile "
        "(1% and 99% of the latitudes and of the longitudes): ε_b is debited with the release, on its "
        "account, in the same ledger transaction, and the region is recorded in its manifest.",
    )
    if demo:
        st.caption(f"Estimating the region privately: {refused}")
        return None
    if not ticked:
        return None
    eps_b = float(
        st.number_input(
            "ε_b for the private region (split over 4 quantiles)",
            min_value=0.001,
            max_value=10.0,
            step=0.05,
            format="%.3f",
            key=state.persist("loc_private_eps", 0.1, _number_in(0.001, 10.0)),
        )
    )
    st.info(
        "The release estimates its region privately (what ε_b buys is under What will run, below). Until "
        "then the comparison and the maps use the data's own extent (not private: for you only). A public "
        "region is better when you have one: with few locations the estimate can be far wider than the data "
        "or cut it."
    )
    return eps_b


def _known_region(value: object) -> bool:
    return value is None or value in view.PRESETS


def _custom_from_previous(suffix: str) -> None:
    """A custom box whose edges were never set starts from the region chosen before it."""
    previous = view.PRESETS.get(state.kept(f"loc_region_{suffix}"))
    if st.session_state[f"loc_region_{suffix}"] != view.CUSTOM_REGION or previous is None:
        return
    keys = [f"loc_box_{i}_{suffix}" for i in range(4)]
    if all(state.kept(k) is None and k not in st.session_state for k in keys):
        for k, edge in zip(keys, previous, strict=True):
            st.session_state[k] = edge


def _param_high(mechanism: str, name: str) -> float:
    """The registry's upper limit of a mechanism's parameter (the widget's ``max_value``)."""
    return float(next(p.high for p in LOCATIONS[mechanism].params if p.name == name))  # type: ignore[arg-type]


MAX_METRES = _param_high("prilocation", "hs_m")  # HS and θ alike: half the Earth's circumference
MAX_CLUSTERS = int(_param_high("prilocation", "n_clusters"))
MAX_GRID = int(_param_high("prilocation", "grid_size"))
MAX_LOCATIONS_PER_USER = int(_param_high("prilocation", "max_per_user"))


def _number_in(low: float, high: float) -> Callable[[Any], bool]:
    """A kept widget value is reused only if it is a number of the widget's type within its limits."""
    kind = type(low)
    return lambda v: type(v) is kind and low <= v <= high


def _parameters() -> view.Params:
    a, b = st.columns(2)
    with a:
        st.subheader("PriLocation")
        levels = [*LEVELS, CUSTOM_HS]
        level = st.selectbox(
            "Hierarchy level to protect (HS)",
            levels,
            format_func=lambda k: k if k == CUSTOM_HS else f"{k} ({LEVELS[k]:,.0f} m)",
            key=state.persist("loc_hs_level", "state", levels.__contains__),
        )
        hs = (
            float(
                st.number_input(
                    "HS (metres)",
                    min_value=1.0,
                    max_value=MAX_METRES,
                    key=state.persist("loc_hs_m", 10_000.0, _number_in(1.0, MAX_METRES)),
                )
            )
            if level == CUSTOM_HS
            else LEVELS[level]
        )
        st.caption(
            "HS: the largest distance between two places of one unit of that level. A visit is hidden "
            "within about HS of where it was."
        )
        c1, c2 = st.columns(2)
        clusters = int(
            c1.number_input(
                "Clusters",
                min_value=1,
                max_value=MAX_CLUSTERS,
                key=state.persist("loc_clusters", 20, _number_in(1, MAX_CLUSTERS)),
            )
        )
        grid = int(
            c2.number_input(
                "Clustering grid cells per side",
                min_value=1,
                max_value=MAX_GRID,
                key=state.persist("loc_grid", 30, _number_in(1, MAX_GRID)),
            )
        )
    with b:
        st.subheader("Blowfish distance threshold")
        pol = state.policy()
        graph = pol.graph if isinstance(pol, Blowfish) else None
        if isinstance(graph, DistanceThresholdGraph) and graph.metric == "haversine":
            theta = float(graph.theta)
            st.caption(f"θ = {theta:,.0f} m, from the Privacy policy page ({graph.label}).")
        else:
            theta = float(
                st.number_input(
                    "θ (metres)",
                    min_value=1.0,
                    max_value=MAX_METRES,
                    step=1000.0,
                    key=state.persist("loc_theta", 50_000.0, _number_in(1.0, MAX_METRES)),
                )
            )
            st.caption("Set a haversine distance-threshold policy on the Privacy policy page to use its θ.")
        st.caption(
            f"An adversary may learn the region a person is in, but not their position within {theta:,.0f} m."
        )
    geo = _geo()
    st.subheader("Hotspots (private k-means on projected coordinates)")
    k = int(
        st.number_input(
            "Number of hotspots K",
            min_value=1,
            max_value=30,
            step=1,
            help="Blowfish hotspots check every pair of cells each round: their cost grows as K².",
            key=state.persist("loc_hotspot_k", 8),
        )
    )
    st.caption(
        "Locations are clamped into the public region and projected to metres around its centre; DP hotspots "
        f"run DP-Lloyd, Blowfish hotspots Blowfish k-means with θ = {theta:,.0f} m (above)."
    )
    if geo is None:
        return view.Params(hs, theta, None, None, clusters, grid, k)
    return view.Params(hs, theta, geo.epsilon_per_metre, geo.radius_m, clusters, grid, k)


def _geo() -> GeoIndistinguishability | None:
    """The geo-indistinguishability policy, read-only: it is set in one place, the Privacy policy page."""
    st.subheader("Geo-indistinguishability (planar Laplace)")
    pol = state.policy()
    if isinstance(pol, GeoIndistinguishability):
        st.markdown(
            f"From the Privacy policy page: level **l = {pol.level:.4g} within r = {pol.radius_m:,.0f} m** "
            f"(ε = {pol.epsilon_per_metre:.3g} per metre). A planar Laplace release spends level l within r."
        )
        st.info(pol.plain_language())
    else:
        st.info(
            "Planar Laplace releases under geo-indistinguishability: set its level l within a radius r as "
            "the privacy policy. Until then, its diagnostic map runs at ε / HS per metre, as in the "
            "comparison."
        )
    st.page_link("pages/policy.py", label="Set it on the Privacy policy page", icon=":material/shield:")
    return pol if isinstance(pol, GeoIndistinguishability) else None


def _compare(key: str, coords: view.Coordinates, region: Region, params: view.Params, tiles: bool) -> None:
    hs, clusters, grid = params.hs_m, params.n_clusters, params.grid_size
    st.header("3. Compare mechanisms (diagnostics, no budget)")
    chosen = st.multiselect(
        "Mechanisms",
        list(MECHANISMS),
        format_func=lambda m: MECHANISMS[m][0],
        key=state.persist("loc_mechs", list(MECHANISMS), lambda v: set(v) <= set(MECHANISMS)),
    )
    a, b = st.columns(2)
    lo, hi = a.select_slider(
        "ε range",
        options=view.EPS_OPTIONS,
        value=(0.1, 5.0),  # a pair makes it a range slider; the kept value in session state wins
        key=state.persist("loc_eps_range", (0.1, 5.0), _eps_pair),
    )
    eps = tuple(e for e in view.EPS_OPTIONS if lo <= e <= hi)
    trials = int(
        b.number_input(
            "Trials per ε",
            min_value=1,
            max_value=MAX_TRIALS,
            key=state.persist("loc_trials", 3, _number_in(1, MAX_TRIALS)),
        )
    )
    planar = (
        f"Planar Laplace runs as it is released: ε is its level l within the policy's r = "
        f"{params.radius_m:,.0f} m"
        if params.radius_m is not None
        else "Planar Laplace runs at ε / HS per metre (no geo-indistinguishability policy yet: its release "
        "will use the policy's level within r)"
    )
    st.caption(
        f"{planar}; the Blowfish mean and hotspots at θ = {params.theta_m:,.0f} m, as released. Hotspots: "
        "fractional WCSS loss (WCSS of the released centres minus WCSS of non-private k-means, over the "
        f"latter; projected m²) with K = {params.hotspot_k}."
    )
    args = (tuple(chosen), eps, trials, (region.lat_min, region.lat_max, region.lon_min, region.lon_max))
    hot = (params.hotspot_k, params.theta_m, params.radius_m)
    settings = (key, *args, hs, clusters, grid, *hot)
    # the last comparison's settings are kept in the session plan: a reload, restart or second tab
    # shows that comparison again (from this server's cache when it has it) and the release still checks it
    compared = st.session_state[state.persist(COMPARED_KEY, None)]
    if st.button("Run comparison", type="primary", disabled=not chosen, key="loc_run"):
        with (
            st.status(f"Comparing {len(chosen)} mechanisms × {len(eps)} ε × {trials} trials...") as status,
            user_errors("running the comparison") as outcome,
        ):
            frame = view.sweep(key, coords.lat, coords.lon, coords.users, *args, hs, clusters, grid, *hot)
            st.session_state[SWEEP_KEY] = (settings, frame)
            st.session_state[COMPARED_KEY] = settings
        status.update(
            label="Comparison failed" if outcome.failed else "Comparison done",
            state="error" if outcome.failed else "complete",
        )
    elif SWEEP_KEY not in st.session_state and compared is not None and compared[0] == key:
        with st.spinner("Showing the last comparison again..."), user_errors("redrawing the last comparison"):
            frame = view.sweep(key, coords.lat, coords.lon, coords.users, *compared[1:])
            st.session_state[SWEEP_KEY] = (compared, frame)
    stored = st.session_state.get(SWEEP_KEY)
    if stored is None or stored[0][0] != key:
        st.info("Press Run comparison to compare the mechanisms over the ε range (costs no budget).")
        return
    if stored[0] != settings:
        st.caption("The settings changed since this comparison ran: press Run comparison to update it.")
    frame = stored[1]
    sweep_hs = stored[0][5]  # the HS the comparison ran with: DE x HS is the error in metres
    if note := view.sample_note(coords.lat.size):
        st.info(note, icon=":material/filter_alt:")
    st.plotly_chart(error_vs_eps(frame, hs_m=sweep_hs), key="loc_err_all")
    released = replace(params, max_per_user=int(state.kept("loc_max_per_user", 1)))  # the panel's, below
    accuracy.locations_eps_finder(
        frame,
        sweep_hs,
        list(LOCATIONS),
        params=lambda m: view.release_params(m, released),
        scope=view.release_scope(coords, released),
        radius_m=params.radius_m,
    )
    _maps(key, coords, region, params, tiles, eps)


def _eps_pair(value: object) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2 and all(e in view.EPS_OPTIONS for e in value)


def _maps(
    key: str, coords: view.Coordinates, region: Region, params: view.Params, tiles: bool, eps_grid: tuple
) -> None:
    hs, clusters, grid = params.hs_m, params.n_clusters, params.grid_size
    st.subheader("Maps at one ε (diagnostic)")
    eps = float(
        st.select_slider(
            "ε for the maps",
            options=eps_grid,
            key=state.persist("loc_map_eps", eps_grid[len(eps_grid) // 2], eps_grid.__contains__),
        )
    )
    geo_eps = eps / hs if params.geo_eps is None else params.geo_eps
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    with user_errors("drawing the maps") as outcome:
        d = view.diagnostics(key, coords.lat, coords.lon, coords.users, box, geo_eps, eps, hs, clusters, grid)
    if outcome.failed:
        return
    if d.sample.size < coords.lat.size:
        st.caption(f"Maps show a fixed random subset of {d.sample.size:,} of the {coords.lat.size:,} points.")
    la, lo = coords.lat[d.sample], coords.lon[d.sample]
    source = "ε / HS, as in the comparison" if params.geo_eps is None else "the privacy policy"
    title = f"Planar Laplace, ε = {geo_eps:.3g} per metre ({source}): true vs released"
    st.plotly_chart(
        true_vs_released(la, lo, d.laplace_lat, d.laplace_lon, tiles=tiles, title=title),
        key="loc_map_laplace",
    )
    st.plotly_chart(displacement_histogram(d.displacement_m, geo_eps), key="loc_displacement")
    if d.prilocation is None:
        st.warning(f"PriLocation at ε = {eps:g}: {d.prilocation_note}")
    else:
        rel = d.prilocation.iloc[: view.PLOT_POINTS]
        title = f"PriLocation, ε = {eps:g}, HS = {hs:,.0f} m: true vs released visits"
        st.plotly_chart(
            true_vs_released(la, lo, rel["lat"], rel["lon"], tiles=tiles, title=title), key="loc_map_pri"
        )
    nonneg = "project" if st.checkbox(
        "Show the grid counts made non-negative (post-processing of the noisy counts: keeps their total, "
        "costs no privacy)",
        key=state.persist("loc_heat_nonneg", False),
    ) else None
    left, right = st.columns(2)
    left.plotly_chart(density_heatmap(d.uniform, nonnegative=nonneg), key="loc_heat_ug")
    right.plotly_chart(density_heatmap(d.adaptive, nonnegative=nonneg), key="loc_heat_ag")
    _hotspot_map(key, coords, box, params, tiles, eps, la, lo)


def _hotspot_map(
    key: str,
    coords: view.Coordinates,
    box: tuple[float, float, float, float],
    params: view.Params,
    tiles: bool,
    eps: float,
    la: np.ndarray,
    lo: np.ndarray,
) -> None:
    k, theta = params.hotspot_k, params.theta_m
    with user_errors("fitting the hotspots") as outcome:
        h = view.hotspot_diagnostics(key, coords.lat, coords.lon, box, eps, k, theta)
    if outcome.failed:
        return
    released = {
        f"{LOCATIONS[m].label}: {h.mean_distance_m[m] / 1000:,.0f} km": (c[:, 0], c[:, 1])
        for m, c in h.released.items()
    }
    fig = hotspot_map(
        released,
        true_centres=(h.true[:, 0], h.true[:, 1]),
        points=(la, lo),
        tiles=tiles,
        title=f"Hotspots, ε = {eps:g}, K = {k}: true vs released centres",
    )
    st.plotly_chart(fig, key="loc_map_hotspots")
    st.caption(
        "Legend: mean great-circle distance from each true hotspot (non-private k-means) to the nearest "
        "released one, for this one diagnostic draw."
    )


def _compared_settings(key: str) -> dict[str, object] | None:
    """The release-relevant settings of the last comparison of these coordinates, or None."""
    stored = st.session_state.get(SWEEP_KEY)
    if stored is None or stored[0][0] != key:
        return None
    radius = stored[0][10] if len(stored[0]) > 10 else None  # comparisons saved before it was compared
    return dict(zip(_SETTING_NAMES, (stored[0][4], *stored[0][5:10], radius), strict=True))


_SETTING_NAMES = ("region", "HS", "clusters", "clustering grid", "hotspots K", "θ", "radius r")


def _release(
    key: str, coords: view.Coordinates, region: Region, params: view.Params, private_eps: float | None
) -> None:
    st.header("4. Release (the only output meant to leave)")
    a, b = st.columns(2)
    keys = list(LOCATIONS)
    mech = a.selectbox(
        "Mechanism to release",
        keys,
        format_func=lambda m: LOCATIONS[m].label,
        key=state.persist("loc_rel_mech", keys[0], keys.__contains__),
    )
    spec = LOCATIONS[mech]
    st.markdown(spec.summary)
    with st.expander("Formula and sources"):
        st.markdown(f"{spec.formula}\n\n*{spec.citation}*")
    pol = state.policy()
    geo = pol if isinstance(pol, GeoIndistinguishability) else None
    if spec.definition == "geo_ind":
        if geo is None:
            st.info("Planar Laplace spends a level l within a radius r: set them on the Privacy policy page.")
            return
        eps = geo.level
        b.markdown(f"Level l = **{eps:.4g}** within r = {geo.radius_m:,.0f} m, from the Privacy policy page.")
    else:
        default = 1.0 if geo is not None else float(pol.epsilon)
        eps = float(
            b.number_input(
                "ε to spend", min_value=0.0, format="%.4g", key=state.persist("loc_rel_eps", default)
            )
        )
    if coords.user_column is not None:
        most = int(
            st.number_input(
                "Most locations per user (public)",
                min_value=1,
                max_value=MAX_LOCATIONS_PER_USER,
                step=1,
                help=MAX_PER_USER.help,
                key=state.persist("loc_max_per_user", 1, _number_in(1, MAX_LOCATIONS_PER_USER)),
            )
        )
        params = replace(params, max_per_user=most)
    scope = view.release_scope(coords, params)
    st.caption(f"Protection: {scope}.")
    with user_errors("reading the locations to release") as outcome:
        inputs = view.release_inputs(coords, None if private_eps is not None else region)
    if outcome.failed:
        return
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    public, private = view.release_steps(coords, region, private_eps)
    release_params = view.release_params(mech, params)
    used = [c for c in coords.columns if c is not None]
    plan = current_plan(
        "location",
        mech,
        epsilon=eps,
        params=release_params,
        scope=scope,
        steps=public,
        used=used,
        private=private,
    )
    now = (box, params.hs_m, params.n_clusters, params.grid_size, params.hotspot_k, params.theta_m)
    now += (params.radius_m,)
    stale = stale_reason(_compared_settings(key), dict(zip(_SETTING_NAMES, now, strict=True)))
    stored = st.session_state.get(SWEEP_KEY)
    frame = stored[1] if stored is not None and stored[0][0] == key else None
    chart = None if frame is None else lambda: error_vs_eps(frame, hs_m=stored[0][5])
    evidence = sweep_evidence(frame, mech, eps, chart)
    release_panel(key="locations", plan=plan, inputs=inputs, stale=stale, evidence=evidence)


st.title("Locations")
dataset = state.dataset()
if dataset is None:
    st.info("No dataset yet: load the US airports sample here, or choose a file on the Data page.")
    _sample_button("Load the US airports sample")
    st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
    st.stop()
st.warning(DIAGNOSTIC_BANNER, icon=":material/visibility:")
if (dataset.origin or {}).get("sample") != "us_airports":  # by where it came from: a renamed sample too
    _sample_button("Use the US airports sample instead")
coordinates = _coordinates(dataset)
st.header("2. Public region and parameters")
private_epsilon = _private_region()
public_region = view.data_extent(coordinates) if private_epsilon is not None else _region(dataset)
outside = int((~public_region.contains(coordinates.lat, coordinates.lon)).sum())
if outside:
    st.warning(
        f"{outside:,} of {coordinates.lat.size:,} locations lie outside the public region (a count from "
        "the raw data, shown to you only): every mechanism clamps them onto the region's edge."
    )
parameters = _parameters()
use_tiles = st.checkbox("Tile basemap for maps (needs internet)", key=state.persist("loc_tiles", False))
data_key = view.data_key(dataset.fingerprint, dataset.cleaning, coordinates.columns)
_compare(data_key, coordinates, public_region, parameters, use_tiles)
st.divider()
_release(data_key, coordinates, public_region, parameters, private_epsilon)
