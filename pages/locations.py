"""Locations: compare planar Laplace, PriLocation, density grids, Blowfish means and hotspots; release one.

Diagnostics (sections 1-3) read the raw coordinates and cost no budget; the release (section 4) runs one
mechanism once at one ε, debits the ledger once (``ui.release.release_panel``) and is the only output meant
to leave. Maps draw without a tile server unless the curator ticks the basemap option.
"""

import numpy as np
import streamlit as st

from dpcore.errors import ParameterError
from dpcore.location.geometry import Region
from dpcore.location.prilocation import LEVELS
from dpcore.location.sweep import MECHANISMS
from dpcore.plots.location import (
    METRIC_TITLES,
    density_heatmap,
    displacement_histogram,
    error_vs_eps,
    hotspot_map,
    true_vs_released,
)
from dpcore.policy import Blowfish, DistanceThresholdGraph, GeoIndistinguishability
from ui import datasets, state
from ui import locations_view as view
from ui.errors import user_errors
from ui.release import release_panel

SWEEP_KEY = "loc_sweep"
NO_USER = "(none: each row is its own user)"
CUSTOM_HS = "custom (metres)"
AIRPORTS = "Sample: US airports"
DIAGNOSTIC_BANNER = (
    "**Diagnostics (non-private).** Sections 1-3 use the raw coordinates (true maps, errors over many noisy "
    "trials). They cost no budget and are for the curator only: do not share these charts."
)
BOX_KEYS = ("loc_lat_min", "loc_lat_max", "loc_lon_min", "loc_lon_max")


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
            f"'{ds.name}' has no column marked latitude and longitude. Mark them on the Data page (column "
            "kinds), or use the US airports sample."
        )
        st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
        st.stop()
    others = [c for c in ds.cleaned.columns if c not in (*lat_cols, *lon_cols)]
    a, b, c = st.columns(3)
    lat_col = a.selectbox("Latitude column (degrees)", lat_cols, key="loc_lat")
    lon_col = b.selectbox("Longitude column (degrees)", lon_cols, key="loc_lon")
    user_col = c.selectbox(
        "User column (PriLocation groups visits by user)", [NO_USER, *others], key="loc_user"
    )
    with user_errors("reading the coordinates") as read:
        coords = view.coordinates(ds.cleaned, lat_col, lon_col, None if user_col == NO_USER else user_col)
    if read.failed:
        st.stop()
    n_users = len(set(coords.users.tolist())) if coords.user_column else coords.lat.size
    st.caption(f"{coords.lat.size:,} locations · {n_users:,} users · dataset `{ds.fingerprint[:12]}`")
    return coords


def _apply_preset() -> None:
    box = view.PRESETS.get(st.session_state["loc_preset"])
    if box is not None:
        for key, value in zip(BOX_KEYS, box, strict=True):
            st.session_state[key] = value


def _region() -> Region:
    st.subheader("Public region")
    st.caption(
        "A box anyone could know (never the data's own extent, which would leak its extreme points). Points "
        "outside it are clamped onto its edge."
    )
    first = next(iter(view.PRESETS))
    st.selectbox("Preset", list(view.PRESETS), key="loc_preset", on_change=_apply_preset)
    for key, value in zip(BOX_KEYS, view.PRESETS[first] or (), strict=True):
        st.session_state.setdefault(key, value)
    cols = st.columns(4)
    labels = ("South edge (lat min)", "North edge (lat max)", "West edge (lon min)", "East edge (lon max)")
    box = [
        col.number_input(label, format="%.4f", key=key)
        for col, label, key in zip(cols, labels, BOX_KEYS, strict=True)
    ]
    with user_errors("checking the region") as outcome:
        region = Region(*map(float, box))
    if outcome.failed:
        st.stop()
    return region


def _parameters() -> view.Params:
    a, b = st.columns(2)
    with a:
        st.subheader("PriLocation")
        level = st.selectbox(
            "Hierarchy level to protect (HS)",
            [*LEVELS, CUSTOM_HS],
            index=list(LEVELS).index("state"),
            format_func=lambda k: k if k == CUSTOM_HS else f"{k} ({LEVELS[k]:,.0f} m)",
            key="loc_hs_level",
        )
        hs = (
            float(st.number_input("HS (metres)", min_value=1.0, value=10_000.0, key="loc_hs_m"))
            if level == CUSTOM_HS
            else LEVELS[level]
        )
        st.caption(
            "HS: the largest distance between two places of one unit of that level. A visit is hidden "
            "within about HS of where it was."
        )
        c1, c2 = st.columns(2)
        clusters = int(c1.number_input("Clusters", min_value=1, value=20, key="loc_clusters"))
        grid = int(c2.number_input("Clustering grid cells per side", min_value=1, value=30, key="loc_grid"))
    with b:
        st.subheader("Blowfish distance threshold")
        pol = state.policy()
        graph = pol.graph if isinstance(pol, Blowfish) else None
        if isinstance(graph, DistanceThresholdGraph) and graph.metric == "haversine":
            theta = float(graph.theta)
            st.caption(f"θ = {theta:,.0f} m, from the Privacy policy page ({graph.label}).")
        else:
            theta = float(
                st.number_input("θ (metres)", min_value=1.0, value=50_000.0, step=1000.0, key="loc_theta")
            )
            st.caption("Set a haversine distance-threshold policy on the Privacy policy page to use its θ.")
        st.caption(
            f"An adversary may learn the region a person is in, but not their position within {theta:,.0f} m."
        )
    geo_eps, radius = _geo()
    st.subheader("Hotspots (private k-means on projected coordinates)")
    k = int(
        st.number_input(
            "Number of hotspots K",
            min_value=1,
            max_value=30,
            value=8,
            step=1,
            help="Blowfish hotspots check every pair of cells each round: their cost grows as K².",
            key="loc_hotspot_k",
        )
    )
    st.caption(
        "Locations are clamped into the public region and projected to metres around its centre; DP hotspots "
        f"run DP-Lloyd, Blowfish hotspots Blowfish k-means with θ = {theta:,.0f} m (above)."
    )
    return view.Params(hs, theta, geo_eps, radius, clusters, grid, k)


def _geo() -> tuple[float, float]:
    st.subheader("Geo-indistinguishability (planar Laplace)")
    pol = state.policy()
    form = st.radio(
        "Give ε as", ["level l within radius r", "ε per metre"], horizontal=True, key="loc_geo_form"
    )
    a, b = st.columns(2)
    per_metre = form == "ε per metre"
    if per_metre:
        default = pol.epsilon if isinstance(pol, GeoIndistinguishability) else 0.0005
        value = a.number_input("ε per metre", min_value=0.0, value=default, format="%.3g", key="loc_geo_eps")
        label = "Protected radius r for the ledger (metres)"
    else:
        value = a.number_input("Level l", min_value=0.0, value=1.0, key="loc_geo_level")
        label = "within radius r (metres)"
    radius = b.number_input(label, min_value=0.0, value=2000.0, key="loc_geo_radius")
    with user_errors("checking the geo-indistinguishability parameters") as outcome:
        geo = (
            GeoIndistinguishability(value) if per_metre else GeoIndistinguishability.from_level(value, radius)
        )
        if radius <= 0:
            raise ParameterError("The protected radius r must be a positive number of metres, e.g. 2000.")
        st.info(geo.plain_language())
    if outcome.failed:
        st.stop()
    return geo.epsilon_per_metre, float(radius)


def _compare(key: str, coords: view.Coordinates, region: Region, params: view.Params, tiles: bool) -> None:
    hs, clusters, grid = params.hs_m, params.n_clusters, params.grid_size
    st.header("3. Compare mechanisms (diagnostics, no budget)")
    chosen = st.multiselect(
        "Mechanisms",
        list(MECHANISMS),
        default=list(MECHANISMS),
        format_func=lambda m: MECHANISMS[m][0],
        key="loc_mechs",
    )
    a, b = st.columns(2)
    lo, hi = a.select_slider("ε range", options=view.EPS_OPTIONS, value=(0.1, 5.0), key="loc_eps_range")
    eps = tuple(e for e in view.EPS_OPTIONS if lo <= e <= hi)
    trials = int(b.number_input("Trials per ε", min_value=1, max_value=50, value=3, key="loc_trials"))
    st.caption(
        "Planar Laplace runs at ε / HS per metre and the Blowfish mean at θ = HS, so every mechanism is "
        "compared at the same ε. Hotspots: fractional WCSS loss (WCSS of the released centres minus WCSS of "
        f"non-private k-means, over the latter; projected m²) with K = {params.hotspot_k} and the Blowfish "
        f"hotspots at θ = {params.theta_m:,.0f} m."
    )
    args = (tuple(chosen), eps, trials, (region.lat_min, region.lat_max, region.lon_min, region.lon_max))
    hot = (params.hotspot_k, params.theta_m)
    settings = (key, *args, hs, clusters, grid, *hot)
    if st.button("Run comparison", type="primary", disabled=not chosen, key="loc_run"):
        with (
            st.status(f"Comparing {len(chosen)} mechanisms × {len(eps)} ε × {trials} trials...") as status,
            user_errors("running the comparison") as outcome,
        ):
            frame = view.sweep(key, coords.lat, coords.lon, coords.users, *args, hs, clusters, grid, *hot)
            st.session_state[SWEEP_KEY] = (settings, frame)
        status.update(
            label="Comparison failed" if outcome.failed else "Comparison done",
            state="error" if outcome.failed else "complete",
        )
    stored = st.session_state.get(SWEEP_KEY)
    if stored is None or stored[0][0] != key:
        st.info("Press Run comparison to compare the mechanisms over the ε range (costs no budget).")
        return
    if stored[0] != settings:
        st.caption("The settings changed since this comparison ran: press Run comparison to update it.")
    frame = stored[1]
    for metric in (m for m in METRIC_TITLES if m in set(frame["metric"])):
        st.plotly_chart(error_vs_eps(frame, metric=metric), key=f"loc_err_{metric}")
    _maps(key, coords, region, params, tiles, eps)


def _maps(
    key: str, coords: view.Coordinates, region: Region, params: view.Params, tiles: bool, eps_grid: tuple
) -> None:
    hs, geo_eps, clusters, grid = params.hs_m, params.geo_eps, params.n_clusters, params.grid_size
    st.subheader("Maps at one ε (diagnostic)")
    eps = float(
        st.select_slider(
            "ε for the maps", options=eps_grid, value=eps_grid[len(eps_grid) // 2], key="loc_map_eps"
        )
    )
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    with user_errors("drawing the maps") as outcome:
        d = view.diagnostics(key, coords.lat, coords.lon, coords.users, box, geo_eps, eps, hs, clusters, grid)
    if outcome.failed:
        return
    if d.sample.size < coords.lat.size:
        st.caption(f"Maps show a fixed random subset of {d.sample.size:,} of the {coords.lat.size:,} points.")
    la, lo = coords.lat[d.sample], coords.lon[d.sample]
    title = f"Planar Laplace, ε = {geo_eps:.3g} per metre: true vs released"
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
    left, right = st.columns(2)
    left.plotly_chart(density_heatmap(d.uniform), key="loc_heat_ug")
    right.plotly_chart(density_heatmap(d.adaptive), key="loc_heat_ag")
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
        f"{view.RELEASES[m].label}: {h.mean_distance_m[m] / 1000:,.0f} km": (c[:, 0], c[:, 1])
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


def _release(coords: view.Coordinates, region: Region, params: view.Params, tiles: bool) -> None:
    hs, theta, geo_eps, radius = params.hs_m, params.theta_m, params.geo_eps, params.radius_m
    clusters, grid = params.n_clusters, params.grid_size
    st.header("4. Release (the only output meant to leave)")
    a, b = st.columns(2)
    mech = a.selectbox(
        "Mechanism to release",
        list(view.RELEASES),
        format_func=lambda m: view.RELEASES[m].label,
        key="loc_rel_mech",
    )
    spec = view.RELEASES[mech]
    pol = state.policy()
    if mech == "planar_laplace":
        eps = GeoIndistinguishability(geo_eps).level_at(radius)
        b.markdown(
            f"ε = {geo_eps:.3g} per metre (section 2). The ledger debits the level within "
            f"r = {radius:,.0f} m: **{eps:.4g}**."
        )
    else:
        default = 1.0 if isinstance(pol, GeoIndistinguishability) else float(pol.epsilon)
        eps = float(
            b.number_input("ε to spend", min_value=0.0, value=default, format="%.4g", key="loc_rel_eps")
        )
    with user_errors("checking the release parameters") as outcome:
        policy = view.release_policy(
            mech, geo_eps if mech == "planar_laplace" else eps, hs_m=hs, theta_m=theta
        )
    if outcome.failed:
        return
    run = view.release_runner(
        mech,
        coords,
        region,
        epsilon=eps,
        geo_eps=geo_eps,
        hs_m=hs,
        theta_m=theta,
        n_clusters=clusters,
        grid_size=grid,
        tiles=tiles,
        hotspot_k=params.hotspot_k,
    )
    release_params = {
        "mechanism_key": mech,
        "region": region.to_dict(),
        "columns": list(coords.columns),
        "epsilon_per_metre": geo_eps if mech == "planar_laplace" else None,
        "ledger_radius_m": radius if mech == "planar_laplace" else None,
        "hs_m": hs if mech == "prilocation" else None,
        "theta_m": theta if mech in ("blowfish_mean", "blowfish_hotspots") else None,
        "hotspot_k": params.hotspot_k if mech in view.HOTSPOTS else None,
        "n_clusters": clusters if mech == "prilocation" else None,
        "grid_size": grid if mech == "prilocation" else None,
    }
    release_panel(
        key="locations",
        mechanism=spec.label,
        guarantee=spec.guarantee,
        epsilon=eps,
        delta=0.0,
        run=run,
        params=release_params,
        policy=policy,
        calibration="none (Laplace / exponential mechanism)",
        bounds_source="curator (public region box)",
        title=f"Locations released with {spec.label}",
    )


st.title("Locations")
dataset = state.dataset()
if dataset is None:
    st.info("No dataset yet: load the US airports sample here, or choose a file on the Data page.")
    _sample_button("Load the US airports sample")
    st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
    st.stop()
st.warning(DIAGNOSTIC_BANNER, icon=":material/visibility:")
if dataset.name != AIRPORTS:
    _sample_button("Use the US airports sample instead")
coordinates = _coordinates(dataset)
st.header("2. Public region and parameters")
public_region = _region()
outside = int((~public_region.contains(coordinates.lat, coordinates.lon)).sum())
if outside:
    st.warning(
        f"{outside:,} of {coordinates.lat.size:,} locations lie outside the public region (a count from "
        "the raw data, shown to you only): every mechanism clamps them onto the region's edge."
    )
parameters = _parameters()
use_tiles = st.checkbox("Tile basemap for maps (needs internet)", value=False, key="loc_tiles")
data_key = view.data_key(dataset.fingerprint, dataset.cleaning, coordinates.columns)
_compare(data_key, coordinates, public_region, parameters, use_tiles)
st.divider()
_release(coordinates, public_region, parameters, use_tiles)
