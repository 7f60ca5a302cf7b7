"""Locations: compare the registered location mechanisms over ε; release one.

Diagnostics (sections 1-3) read the raw coordinates and cost no budget; the release (section 4) runs one
mechanism once at one ε, debits the ledger once (``ui.release.release_panel``) and is the only output meant
to leave. Every mechanism's parameters are drawn from its spec's declaration (``ui.params``), compared and
released with the same values; maps draw without a tile server unless the curator ticks the
tile basemap (needs internet).
"""

from collections.abc import Callable
from typing import Any

import streamlit as st

from dpcore.location.geometry import Region
from dpcore.location.registry import LOCATIONS, MAX_PER_USER
from dpcore.location.sweep import MAX_TRIALS, comparable
from dpcore.plots.location import error_vs_eps
from dpcore.policy import GeoIndistinguishability
from ui import accuracy, datasets, state
from ui import locations_view as view
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.params import draw_params
from ui.release import current_plan, release_panel, stale_reason
from ui.requests_view import sweep_evidence
from ui.text import md

ensure_entrypoint()

SWEEP_KEY = "loc_sweep"
COMPARED_KEY = "loc_compared"
NO_USER = "(none: each row is its own user)"
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
        "User column (a user's locations are protected together)",
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


def _number_in(low: float, high: float) -> Callable[[Any], bool]:
    """A kept widget value is reused only if it is a number of the widget's type within its limits."""
    kind = type(low)
    return lambda v: type(v) is kind and low <= v <= high


def _parameters(coords: view.Coordinates) -> dict[str, dict[str, Any]]:
    """Every location mechanism's parameters, mechanism key -> {name: value}, from widgets drawn from what
    each declares: the comparison and the release use the same values."""
    st.subheader("Parameters")
    st.caption(
        "Each mechanism's parameters as it declares them: the comparison runs each one as it would be "
        "released, and the release panel uses the same values. Values set by the privacy policy are shown, "
        "not asked."
    )
    pol = state.policy()
    geo = pol if isinstance(pol, GeoIndistinguishability) else None
    if geo is not None:
        st.markdown(
            f"Geo-indistinguishability, from the Privacy policy page: level **l = {geo.level:.4g} within "
            f"r = {geo.radius_m:,.0f} m** (ε = {geo.epsilon_per_metre:.3g} per metre)."
        )
    st.page_link("pages/policy.py", label="Set it on the Privacy policy page", icon=":material/shield:")
    fixed = {} if coords.user_column is not None else {MAX_PER_USER.name: 1}
    return draw_params("loc", LOCATIONS.values(), pol, fixed=fixed)


def _compare(
    key: str, coords: view.Coordinates, region: Region, params: dict[str, dict[str, Any]], tiles: bool
) -> None:
    st.header("3. Compare mechanisms (diagnostics, no budget)")
    options = comparable()
    chosen = st.multiselect(
        "Mechanisms",
        options,
        format_func=lambda m: LOCATIONS[m].label,
        key=state.persist("loc_mechs", options, lambda v: set(v) <= set(options)),
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
    st.caption(
        "Each mechanism runs with its parameters above, as it would be released (ε is the level l of a "
        "geo-indistinguishable mechanism), every row counted as one person; each is scored by the metrics "
        "it declares."
    )
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    # every row counts as one person in the comparison: the per-user limit is the release's alone
    used = view.params_json(
        {m: {k: v for k, v in params[m].items() if k != MAX_PER_USER.name} for m in chosen}
    )
    settings = (key, tuple(chosen), eps, trials, box, used)
    # the last comparison's settings are kept in the session plan: a reload, restart or second tab
    # shows that comparison again (from this server's cache when it has it) and the release still checks it
    compared = st.session_state[state.persist(COMPARED_KEY, None)]
    if st.button("Run comparison", type="primary", disabled=not chosen, key="loc_run"):
        with (
            st.status(f"Comparing {len(chosen)} mechanisms × {len(eps)} ε × {trials} trials...") as status,
            user_errors("running the comparison") as outcome,
        ):
            frame = view.sweep(key, coords.lat, coords.lon, coords.users, *settings[1:])
            st.session_state[SWEEP_KEY] = (settings, frame)
            st.session_state[COMPARED_KEY] = settings
        status.update(
            label="Comparison failed" if outcome.failed else "Comparison done",
            state="error" if outcome.failed else "complete",
        )
    elif SWEEP_KEY not in st.session_state and compared is not None and compared[0] == key:
        with st.spinner("Showing the last comparison again..."), user_errors("redrawing the last comparison"):
            frame = view.sweep(key, coords.lat, coords.lon, coords.users, *compared[1:])
            st.session_state[SWEEP_KEY] = (tuple(compared), frame)
    stored = st.session_state.get(SWEEP_KEY)
    if stored is None or stored[0][0] != key:
        st.info("Press Run comparison to compare the mechanisms over the ε range (costs no budget).")
        return
    if tuple(stored[0]) != settings:
        st.caption("The settings changed since this comparison ran: press Run comparison to update it.")
    frame = stored[1]
    if note := view.sample_note(coords.lat.size):
        st.info(note, icon=":material/filter_alt:")
    st.plotly_chart(error_vs_eps(frame), key="loc_err_all")
    accuracy.locations_eps_finder(
        frame,
        list(LOCATIONS),
        params=lambda m: params[m],
        scope=view.release_scope(coords, next(iter(params.values()))),
    )
    ran = view.compared_params(stored[0])
    _maps(key, coords, region, {m: ran[m] for m in stored[0][1]}, stored[0][2], tiles)


def _eps_pair(value: object) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2 and all(e in view.EPS_OPTIONS for e in value)


def _maps(
    key: str,
    coords: view.Coordinates,
    region: Region,
    params: dict[str, dict[str, Any]],
    eps_grid: tuple,
    tiles: bool,
) -> None:
    st.subheader("Maps at one ε (diagnostic)")
    eps = float(
        st.select_slider(
            "ε for the maps",
            options=eps_grid,
            key=state.persist("loc_map_eps", eps_grid[len(eps_grid) // 2], eps_grid.__contains__),
        )
    )
    nonnegative = st.checkbox(
        "Show the grid counts made non-negative (post-processing of the noisy counts: keeps their total, "
        "costs no privacy)",
        key=state.persist("loc_heat_nonneg", False),
    )
    st.caption(
        "Each compared mechanism drawn once with diagnostic noise on the true data at this ε (the level l "
        "of a geo-indistinguishable one) with the parameters it was compared with: true vs released where "
        "it declares it, else its release output. Curator only: do not share."
    )
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    users = coords.users if coords.user_column else None
    cols = st.columns(2)
    i = 0
    for mech, values in params.items():
        with user_errors(f"drawing the maps of {LOCATIONS[mech].label}") as outcome:
            chosen = view.params_json(values)
            figures = view.diagnostic_figures(
                key, coords.lat, coords.lon, users, box, mech, eps, chosen, tiles, nonnegative
            )
        if outcome.failed:
            continue
        for name, fig in figures.items():
            cols[i % 2].plotly_chart(fig, key=f"loc_{name}")
            i += 1


def _compared_settings(key: str, mech: str) -> dict[str, object] | None:
    """The release-relevant settings of the last comparison of these coordinates (the region and
    ``mech``'s parameters by label, when it was compared), or None."""
    stored = st.session_state.get(SWEEP_KEY)
    if stored is None or stored[0][0] != key:
        return None
    ran = view.compared_params(stored[0]).get(mech)
    labels = _compared_labels(mech)
    return {"region": stored[0][4], **{labels[n]: v for n, v in (ran or {}).items() if n in labels}}


def _compared_labels(mech: str) -> dict[str, str]:
    """Name -> label of ``mech``'s parameters that its comparison reads (every row counts as one person
    there: the per-user limit is the release's alone)."""
    return {p.name: p.label for p in LOCATIONS[mech].params if p.name != MAX_PER_USER.name}


def _now(box: tuple, mech: str, values: dict[str, Any], compared: dict[str, object] | None) -> dict[str, Any]:
    """The release's settings under the names :func:`_compared_settings` gives them."""
    now: dict[str, Any] = {"region": box}
    if compared is not None and len(compared) > 1:  # the release's mechanism was compared
        now.update({label: values[name] for name, label in _compared_labels(mech).items()})
    return now


def _release(
    key: str,
    coords: view.Coordinates,
    region: Region,
    params: dict[str, dict[str, Any]],
    private_eps: float | None,
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
            st.info(
                f"{spec.label} spends a level l within a radius r: set them on the Privacy policy page."
            )
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
    values = params[mech]
    scope = view.release_scope(coords, values)
    st.caption(f"Protection: {scope}.")
    with user_errors("reading the locations to release") as outcome:
        inputs = view.release_inputs(coords, None if private_eps is not None else region)
    if outcome.failed:
        return
    box = (region.lat_min, region.lat_max, region.lon_min, region.lon_max)
    public, private = view.release_steps(coords, region, private_eps)
    used = [c for c in coords.columns if c is not None]
    plan = current_plan(
        "location",
        mech,
        epsilon=eps,
        params=values,
        scope=scope,
        steps=public,
        used=used,
        private=private,
    )
    compared = _compared_settings(key, mech)
    stale = stale_reason(compared, _now(box, mech, values, compared))
    stored = st.session_state.get(SWEEP_KEY)
    frame = stored[1] if stored is not None and stored[0][0] == key else None
    chart = None if frame is None else lambda: error_vs_eps(frame)
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
parameters = _parameters(coordinates)
use_tiles = st.checkbox("Tile basemap for maps (needs internet)", key=state.persist("loc_tiles", False))
data_key = view.data_key(dataset.fingerprint, dataset.cleaning, coordinates.columns)
_compare(data_key, coordinates, public_region, parameters, use_tiles)
st.divider()
_release(data_key, coordinates, public_region, parameters, private_epsilon)
