"""Data: load a table; check schema and encodings; handle missing values; features, bounds, scaling."""

from dataclasses import replace

import pandas as pd
import streamlit as st

from dpcore.data import (
    KINDS,
    MAX_COLUMNS,
    MAX_TABLE_BYTES,
    MISSING_STRATEGIES,
    column_encoding,
    missing_report,
    prepare,
)
from dpcore.data.dictionary import MAX_DICTIONARY_BYTES
from dpcore.data.io import NOTES_ATTR
from dpcore.data.sources import SOURCES, SourceSettings, SourceSpec
from dpcore.private_bounds import BoundsStep
from ui import datasets, roles, state
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.source_form import LOAD_KEY, source_form
from ui.text import md

ensure_entrypoint()

UPLOAD_ERROR_KEY = "dp_upload_error"
UPLOAD_DONE_KEY = "dp_upload_done"
SAVED_NOTE_KEY = "dp_prep_saved_note"
IMPORT_DONE_KEY = "dp_dictionary_done"  # the data dictionary file last imported (or refused), by file id
TABLE_ROWS = 12  # more columns than this scroll inside the preparation table
ROW_PX = 35
BLOBS = "Synthetic blobs"
UPLOAD = "Upload a file"
BUILT_IN = (*datasets.SAMPLE_CHOICES, BLOBS, UPLOAD)
FEATURE_KINDS = ("numeric", "categorical", "date", "latitude", "longitude")
DATA_DERIVED = "data-derived: not allowed for a differentially private release (demo or local-PDP only)"
STRATEGIES = {
    "drop": "drop the rows (no leak)",
    "median": f"fill with the median ({DATA_DERIVED})",
    "mean": f"fill with the mean ({DATA_DERIVED})",
    "mode": f"fill with the most frequent value ({DATA_DERIVED})",
}
SCALINGS = {
    "none": "None (original units)",
    "standardize": f"Standardise (mean 0, std 1; {DATA_DERIVED})",
    "minmax": "Min-max to [-1, 1] using the public bounds",
}
SCALING_NOTES = {
    "none": "Features stay in their units; the public bounds are used as entered.",
    "standardize": "Mean and standard deviation come from the data: they leak (recorded in the manifest), so "
    "differentially private, Blowfish and geo-indistinguishable releases are refused.",
    "minmax": "Computed from the bounds only: nothing more leaks than the bounds themselves.",
}


def _source_of(ds: state.Dataset | None) -> str:
    """The Source option that loads ``ds`` (the first sample when nothing is loaded)."""
    if ds is None:
        return BUILT_IN[0]
    sample = (ds.origin or {}).get("sample")
    if sample:  # by origin, not name: the curator may have renamed the sample
        return next(label for label, key in datasets.SAMPLE_CHOICES.items() if key == sample)
    kind = (ds.origin or {}).get("source", {}).get("kind")
    if kind in SOURCES:
        return SOURCES[kind].title
    return UPLOAD if ds.source.startswith("upload:") else BLOBS


def _settings() -> SourceSettings:
    """The operator's data folders and databases (none, with the reason shown, if the config is wrong)."""
    with user_errors("reading the data source settings") as outcome:
        settings = datasets.source_settings()
    if outcome.failed:
        return SourceSettings()
    return replace(  # only the folders and databases this user may load (ui.roles, [dpcore.access])
        settings,
        folders=tuple(f for f in settings.folders if roles.may_load(f)),
        databases=tuple(d for d in settings.databases if roles.may_load(d)),
    )


def _source_section() -> None:
    st.header("1. Choose a table")
    ds = state.dataset()
    settings = _settings()
    kinds = {k.title: k for k in SOURCES.values() if getattr(settings, k.allow_list)}  # configured ones
    sources = (*BUILT_IN, *kinds)
    if not roles.has(roles.OFFICER, roles.CURATOR):  # a viewer: the built-in demo data only
        sources = (*datasets.SAMPLE_CHOICES, BLOBS)
        st.caption("As a viewer you load the built-in samples and run the comparisons in demo mode.")
    choice = st.radio(
        "Source",
        sources,
        horizontal=True,
        key=state.persist("data_source", _source_of(ds), sources.__contains__),
    )
    if ds is not None:
        st.caption(f"In use: {md(ds.name)}. Loading another table replaces it.")
        _name(ds)
        sample = datasets.sample_of(ds)
        if sample:
            st.warning(sample)
        _read_again(ds)
    if choice in kinds:
        _operator_source(kinds[choice], settings, ds)
    elif choice in datasets.SAMPLE_CHOICES:
        if st.button(f"Load {choice}", key="data_load_sample"):
            with user_errors("loading the sample") as outcome:
                datasets.load_sample_dataset(choice)
            if not outcome.failed:
                st.rerun()
    elif choice == BLOBS:
        a, b, c, d = st.columns(4)
        n = a.number_input(
            "Rows",
            min_value=2,
            max_value=200_000,
            step=100,
            key=state.persist("data_blobs_n", 1000, _within(2, 200_000)),
        )
        dim = b.number_input(
            "Features", min_value=1, max_value=20, key=state.persist("data_blobs_d", 2, _within(1, 20))
        )
        centers = c.number_input(
            "Centres", min_value=1, max_value=50, key=state.persist("data_blobs_k", 4, _within(1, 50))
        )
        seed = d.number_input("Seed", min_value=0, key=state.persist("data_blobs_seed", 0, _within(0, 2**63)))
        if st.button("Generate blobs", key="data_load_blobs"):
            with user_errors("generating the blobs") as outcome:
                datasets.load_blobs_dataset(n, dim, centers, seed)
            if not outcome.failed:
                st.rerun()
    else:
        _upload()


def _within(low: int, high: int):
    """A ``persist`` check: a whole number from ``low`` to ``high`` (a value restored from a session may
    lie outside the field's range, which Streamlit refuses on every run)."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _name(ds: state.Dataset) -> None:
    """The dataset's name, which carries its privacy budget in the ledger; changed only by the button."""
    a, b = st.columns([4, 1], vertical_alignment="bottom")
    typed = a.text_input(
        "Dataset name",
        value=ds.name,
        key=f"data_name_{ds.dataset_id}",
        help="The name carries the privacy budget in the ledger: the same name is the same budget, whatever "
        "file it comes from, and a table already released under another name is refused. Case and spacing "
        f"are ignored; at most {state.MAX_NAME_CHARS} characters. Press Use this name to apply it.",
    )
    if b.button("Use this name", key="data_rename"):
        with user_errors("renaming the dataset") as outcome:
            state.rename_dataset(typed)
        if not outcome.failed:
            st.rerun()


def _read_again(ds: state.Dataset) -> None:
    """For a table read from a database: when it was read (reloads and other sessions reuse that read for
    the operator's ``source_cache_ttl_s``) and a button that reads it now."""
    note = datasets.read_note(ds)
    if note is None:
        return
    a, b = st.columns([4, 1], vertical_alignment="center")
    a.caption(note)
    if b.button("Read the table again", key="data_read_again"):
        with user_errors(f"reading {ds.name} again") as outcome, st.spinner("Reading the table again..."):
            datasets.read_source_again()
        if not outcome.failed:
            st.rerun()


def _limit_note(settings: SourceSettings) -> str:
    return (
        f"Tables of up to {settings.max_rows:,} rows are loaded whole; a larger one is read once in full "
        "(for its fingerprint, which names it in the ledger) and a uniform sample of "
        f"{settings.max_rows:,} rows is kept for the diagnostics, labelled as such."
    )


def _operator_source(kind: type[SourceSpec], settings: SourceSettings, ds: state.Dataset | None) -> None:
    """A source the operator configured, through its kind's widgets, and the button that loads it."""
    st.caption(f"{kind.intro(settings)} {_limit_note(settings)}")
    spec = source_form(kind, settings, ((ds.origin or {}) if ds is not None else {}).get("source"))
    if spec is not None and st.button("Load this table", key=LOAD_KEY):
        with user_errors(f"reading {spec.label}") as outcome, st.spinner("Reading the table in one pass..."):
            datasets.load_source_dataset(spec)
        if not outcome.failed:
            st.rerun()


def _upload() -> None:
    limit = st.get_option("server.maxUploadSize")
    # No extension filter: dpcore.data.load_table decides by content and explains what it cannot read
    # (e.g. an old .xls), where the uploader would only say "file type not allowed".
    uploaded = st.file_uploader(
        f"Upload a table (CSV/TSV/TXT, gzip CSV, Parquet or Excel .xlsx; up to {limit} MB, at most "
        f"{MAX_COLUMNS:,} columns; compressed files up to {MAX_TABLE_BYTES // 2**20} MB unpacked)",
        key="data_upload",
    )
    if uploaded is None:
        return
    failed = st.session_state.get(UPLOAD_ERROR_KEY)
    if failed is not None and failed[0] == uploaded.file_id:
        st.error(md(failed[1]))
        _kept()
        return
    if st.session_state.get(UPLOAD_DONE_KEY) == uploaded.file_id:
        return
    with user_errors(f"reading {uploaded.name}") as outcome:
        datasets.load_upload(uploaded.name, uploaded.getvalue())
    if outcome.failed:
        st.session_state[UPLOAD_ERROR_KEY] = (uploaded.file_id, outcome.message)
        _kept()
        return
    st.session_state[UPLOAD_DONE_KEY] = uploaded.file_id
    st.rerun()


def _kept() -> None:
    ds = state.dataset()
    if ds is not None:
        st.caption(f"Nothing was changed: the dataset in use is still {md(ds.name)}.")


def _rows(ds: state.Dataset) -> str:
    """Size of the table in use (after the missing-value steps), with how many loaded rows were dropped."""
    n, dropped = len(ds.cleaned), ds.n_rows - len(ds.cleaned)
    size = f"{n:,} rows × {ds.cleaned.shape[1]} columns"
    return f"{size} ({dropped:,} of {ds.n_rows:,} rows dropped)" if dropped else size


def _overview(ds: state.Dataset) -> None:
    st.header("2. Table and schema")
    st.markdown(f"**{md(ds.name)}** · {_rows(ds)} · fingerprint `{ds.fingerprint[:16]}`")
    if ds.source:
        st.caption(md(ds.source))
    for note in ds.raw.attrs.get(NOTES_ATTR, ()):  # what loading interpreted (dpcore.data.load_table)
        st.warning(md(note))
    with user_errors("showing the first rows"):
        st.dataframe(ds.raw.head(20), hide_index=True)
    notes = ds.schema.to_frame()
    notes = notes[(notes["date format"] != "") | (notes["public categories"] != "") | (notes["note"] != "")]
    if not notes.empty:
        st.caption("Date formats, declared categories and notes")
        st.dataframe(notes, hide_index=True)
    _encodings(ds)


def _saved_offer(ds: state.Dataset) -> None:
    """Settings kept on the server for this dataset's name or table: offered, applied only when asked."""
    saved = datasets.saved_offer(ds)
    if saved is None:
        return
    where = (
        f"for '{md(saved.name)}'"
        if saved.dataset_id == ds.dataset_id
        else f"for this same table under the name '{md(saved.name)}'"
    )
    other = ""
    if saved.fingerprint != ds.fingerprint:
        other = " (for a table with other rows: its columns are checked)"
    table = saved.choices.get("table") or {}
    st.info(
        f"Settings were saved {where} on {saved.when}{other}: {len(table.get('features', ()))} features, "
        f"{len(table.get('bounds', {}))} with public bounds. They are not applied unless you ask.",
        icon=":material/history:",
    )
    a, b = st.columns(2)
    if a.button(f"Use the settings from {saved.when}", key="data_use_saved", type="primary"):
        with user_errors("applying the saved settings") as outcome:
            datasets.use_saved(saved)
        if not outcome.failed:
            st.rerun()
    if b.button("Start from the table as loaded", key="data_decline_saved"):
        datasets.decline_saved(ds)
        st.rerun()


def _table(ds: state.Dataset) -> None:
    """The preparation table: one row per column, applied together (one rerun) or imported as CSV."""
    st.header("3. Preparation table")
    st.markdown(
        "One row per column: its **kind**, whether it is a **feature**, its **public bounds** (values you "
        "know without looking at the data, e.g. age 18 to 100; dates as 2012-01-01; categorical columns are "
        "bounded by their codes), its **unit** and its **missing-value step** (drop keeps the privacy "
        f"guarantee; median, mean and mode are {DATA_DERIVED}). Edit any cells, then press **Apply**: "
        "every row is checked, and the table is applied whole or not at all."
    )
    dic = datasets.dictionary(ds)
    frame = dic.to_frame()
    missing = missing_report(ds.raw)["missing"]
    frame.insert(1, "missing values", [int(missing[c]) for c in frame["column"]])
    cc = st.column_config
    with st.form(key=f"data_table_form_{ds.dataset_id}", border=False, enter_to_submit=False):
        edited = st.data_editor(
            frame,
            key=datasets.table_key(ds),
            hide_index=True,
            num_rows="fixed",
            disabled=["column", "missing values"],
            height=(min(len(frame), TABLE_ROWS) + 1) * ROW_PX + 3,
            column_config={
                "column": cc.TextColumn("column", pinned=True),
                "missing values": cc.NumberColumn("missing values", help="Missing cells as loaded"),
                "kind": cc.SelectboxColumn("kind", options=list(KINDS), required=True),
                "feature": cc.CheckboxColumn("feature", help="Cluster on this column"),
                "lower": cc.TextColumn("lower", help="Public lower bound (empty: none)"),
                "upper": cc.TextColumn("upper", help="Public upper bound (empty: none)"),
                "unit": cc.TextColumn("unit", help="e.g. years, EUR, mm (shown with the features)"),
                "missing": cc.SelectboxColumn(
                    "missing", options=["none", *MISSING_STRATEGIES], required=True
                ),
            },
        )
        applied = st.form_submit_button("Apply", type="primary", key="data_apply_table")
    if applied:
        with user_errors("applying the preparation table") as outcome:
            datasets.apply_edited(edited.drop(columns=["missing values"]))
        if not outcome.failed:
            st.rerun()
    a, b = st.columns([2, 1], vertical_alignment="bottom")
    uploaded = a.file_uploader(
        "Import a data dictionary (CSV with a header row: column, kind, feature, lower, upper, unit, "
        "missing; only column is required)",
        type=["csv", "txt"],
        key=f"data_dictionary_{ds.dataset_id}",
    )
    b.download_button(
        "Export the table as CSV",
        data=dic.to_csv(),
        file_name=f"{ds.name}-data-dictionary.csv",
        mime="text/csv",
        on_click="ignore",
        icon=":material/download:",
        key="data_export_table",
    )
    _import(ds, uploaded)


def _import(ds: state.Dataset, uploaded) -> None:
    """Apply a data dictionary file once (by file id); a refused one is reported until another is chosen."""
    if uploaded is None:
        return
    done = st.session_state.get(IMPORT_DONE_KEY)
    if done is not None and done[0] == uploaded.file_id:
        if done[1]:
            st.error(md(done[1]))
        else:
            st.success(f"Imported {md(uploaded.name)}: the table above is applied.")
        return
    if uploaded.size > MAX_DICTIONARY_BYTES:
        message = f"{uploaded.name} is over {MAX_DICTIONARY_BYTES // 1024} KB; it is not a data dictionary."
        st.session_state[IMPORT_DONE_KEY] = (uploaded.file_id, message)
        st.error(message)
        return
    with user_errors(f"importing {uploaded.name}") as outcome:
        datasets.import_dictionary(uploaded.getvalue())
    st.session_state[IMPORT_DONE_KEY] = (uploaded.file_id, outcome.message if outcome.failed else "")
    if not outcome.failed:
        st.rerun()


def _encodings(ds: state.Dataset) -> None:
    encoded = ds.schema.columns("categorical", "date")
    if not encoded:
        return
    st.subheader("Encodings")
    enc_key = state.persist(f"data_enc_col_{ds.dataset_id}", encoded[0], encoded.__contains__)
    column = st.selectbox("Show the encoding of", encoded, key=enc_key)
    with user_errors("building the encoding"):
        enc = column_encoding(ds.cleaned, ds.schema, column)
        if ds.schema.kinds[column] == "date":
            fmt = enc.format or "native datetime"
            st.markdown(
                f"**{md(column)}**: days since 1970-01-01 (fractional for times), parsed with format "
                f"{md(fmt)}."
            )
            new_fmt = st.text_input(
                "Date format (strptime)", key=state.persist(f"data_fmt_{column}", enc.format or "")
            )
            if st.button("Use this date format", key="data_set_fmt") and new_fmt:
                state.update_dataset(schema=ds.schema.with_date_format(column, new_fmt), prepared=None)
                st.rerun()
        else:
            origin = "declared public" if enc.public else "read from the data (leaks which categories occur)"
            st.markdown(f"**{md(column)}**: category → code, categories {origin}.")
            st.dataframe(enc.table(), hide_index=True)
            listed = st.text_input(
                "Declare the public category list (comma-separated, in code order)",
                key=state.persist(f"data_cats_{column}", ""),
            )
            if st.button("Declare categories", key="data_set_cats") and listed.strip():
                cats = [c.strip() for c in listed.split(",") if c.strip()]
                state.update_dataset(schema=ds.schema.with_categories(column, cats), prepared=None)
                st.rerun()


def _missing(ds: state.Dataset) -> None:
    st.header("4. Missing values")
    report = missing_report(ds.cleaned)
    bad = report[(report["missing"] > 0) | (report["infinite"] > 0)]
    for step in ds.cleaning:
        st.caption(f"Applied: {md(step.text)}")
    if bad.empty:
        st.success("No missing or infinite values in the current table.")
    else:
        st.dataframe(bad.reset_index(), hide_index=True)
        a, b = st.columns(2)
        listed = list(bad.index)
        empty = [c for c in listed if report.loc[c, "missing"] == len(ds.cleaned)]
        if empty:
            st.caption(
                f"No value in any row: {md(', '.join(empty))}. Dropping the rows missing them would empty "
                "the table; they are left out of the columns below (and cannot be features)."
            )
        default = [c for c in listed if c not in empty]
        columns = a.multiselect(
            "Columns",
            listed,
            key=state.persist(f"data_missing_cols_{ds.dataset_id}", default, lambda v: set(v) <= set(listed)),
        )
        strategy = b.selectbox(
            "Treatment",
            MISSING_STRATEGIES,
            format_func=STRATEGIES.__getitem__,
            key=state.persist("data_missing_strategy", "drop", STRATEGIES.__contains__),
        )
        if st.button("Apply to the table", key="data_apply_missing") and columns:
            with user_errors("handling missing values") as outcome:
                state.apply_missing(columns, strategy)
            if not outcome.failed:
                st.rerun()
    if ds.cleaning and st.button("Reset to the table as loaded", key="data_reset_missing"):
        state.reset_cleaning()
        st.rerun()


def _eps_b_ok(value: object) -> bool:
    return isinstance(value, float) and 0.001 <= value <= 10


def _features(ds: state.Dataset) -> None:
    st.header("5. Features, bounds and scaling")
    dic = datasets.dictionary(ds)
    features = list(dic.features)
    if not features:
        st.info("No feature yet: tick **feature** for the columns to cluster on in the table, then Apply.")
        return
    unbounded = [
        f for f in features if f not in dic.bounds and ds.schema.kinds[f] in ("numeric", "date")
    ]
    st.markdown(f"**Features** ({len(features)}): {md(', '.join(features))}.")
    if unbounded:
        st.caption(f"No public bounds for: {md(', '.join(unbounded))}.")
    demo = state.mode() == "demo"
    refused = datasets.PRIVATE_IN_DEMO.format(public="public bounds in the table above")
    private = st.checkbox(
        "Estimate the missing bounds privately, spending ε_b from this dataset's budget (with the release)",
        key=state.persist(datasets.PRIVATE_KEY, False),
        disabled=demo,
        help=refused
        if demo
        else "Each feature without public bounds gets its lower and upper bound from OpenDP's differentially "
        "private quantile (1% and 99%) when a release runs: ε_b is debited with the release's ε, in the same "
        "ledger transaction, and the bounds are recorded in its manifest. Until then comparisons use the "
        "data's range (not private).",
    )
    if demo:
        st.caption(f"Estimating bounds privately: {refused}")
    eps_b = None
    if private and not demo:
        eps_b = st.number_input(
            "ε_b for the private bounds (split over 2 quantiles per feature)",
            min_value=0.001,
            max_value=10.0,
            step=0.05,
            format="%.3f",
            key=state.persist(datasets.PRIVATE_EPS_KEY, 0.1, _eps_b_ok),
        )
        buys = f": {BoundsStep(tuple(unbounded), eps_b).accuracy()}" if unbounded else ""
        st.caption(
            f"Each of the {2 * len(unbounded)} quantiles gets ε_b / {2 * len(unbounded) or 1}{buys}. Even on "
            "a large table the bounds come out wider than the data (Marketing's 2,216 rows, 4 features at "
            "ε_b = 0.1: hundreds of times wider), so more noise in the release. Public bounds are better "
            "when you have them."
        )
    data_bounds = st.checkbox(
        f"Use bounds from the data (leaks information: not private; {DATA_DERIVED})",
        key=state.persist("data_bounds_ok", False),
    )
    if data_bounds:
        st.warning(
            "Features without bounds will use the data's min and max. Those reveal the extreme values "
            "(one person's value can set them), so the release is no longer differentially private with "
            "respect to them. The leak is recorded in the manifest."
        )
    scaling = st.radio(
        "Scaling",
        list(SCALINGS),
        format_func=SCALINGS.__getitem__,
        horizontal=True,
        key=state.persist("data_scaling", "none", SCALINGS.__contains__),
    )
    st.caption(SCALING_NOTES[scaling])
    if st.button("Prepare", type="primary", key="data_prepare"):
        with user_errors("preparing the features") as outcome:
            ready = prepare(
                ds.cleaned,
                ds.schema,
                features,
                scaling=scaling,
                bounds=datasets.table_bounds(dic, ds.schema),
                data_bounds_ok=data_bounds,
                private_epsilon=eps_b,
            )
        if not outcome.failed:
            ds = state.update_dataset(prepared=ready)
            st.session_state[SAVED_NOTE_KEY] = datasets.save_settings(ds, scaling, data_bounds, eps_b)
            st.rerun()


def _prepared(ds: state.Dataset) -> None:
    p = ds.prepared
    if p is None:
        return
    st.header("6. Prepared features")
    st.success(
        f"{p.n_samples:,} rows × {p.n_features} features ready (scaling: {p.scaling}; "
        f"bounds source: {p.bounds_source}; {p.n_dropped} rows dropped)."
    )
    saved = st.session_state.pop(SAVED_NOTE_KEY, None)
    if saved:
        st.caption(md(saved))
    if p.private_bounds:
        st.info(
            f"The bounds of {md(', '.join(p.private_bounds['features']))} will be estimated privately when a "
            f"release runs (ε_b = {p.private_bounds['epsilon']:g}, debited with it); comparisons use the "
            "data's range until then. Not available in demo mode (OpenDP's randomness is not the demo "
            "seed's, so the release could not be reproduced)."
        )
    for leak in p.leaks:
        st.warning(f"Leak: {md(leak.text)}")
    units = datasets.dictionary(ds).units
    for warning in p.warnings:
        st.info(md(warning))
    st.dataframe(
        pd.DataFrame(
            {
                "feature": p.feature_names,
                "kind": p.kinds,
                "lower": p.raw_lower,
                "upper": p.raw_upper,
                "unit": [units.get(f, "") for f in p.feature_names],
                "bounds from": [p.bound_sources[f] for f in p.feature_names],
                "values clipped": [p.clipped[f] for f in p.feature_names],
                "scaled lower": p.lower,
                "scaled upper": p.upper,
            }
        ),
        hide_index=True,
    )


st.title("Data")
_source_section()
current = state.dataset()
if current is None:
    st.info("No dataset yet: load a sample, generate blobs or upload a file.")
else:
    _overview(current)
    _saved_offer(current)
    _table(current)
    _missing(state.dataset())
    _features(state.dataset())
    _prepared(state.dataset())
