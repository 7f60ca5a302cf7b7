"""Loading datasets into the session (samples, synthetic blobs, uploads, the operator's data sources) and
reading the bounds editor.

Each loader reads first and only then replaces the current dataset, so a bad file raises ``DataError``
and leaves the previous dataset in place.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
import streamlit as st

from dpcore import config
from dpcore.data import SAMPLES, Schema, fingerprint, prepare
from dpcore.data.dictionary import Dictionary, check_dictionary, merge_dictionary, read_dictionary_csv
from dpcore.data.saved import SavedPreparation, find_preparation, save_preparation
from dpcore.data.sources import (
    Field,
    LoadedSource,
    SourceContext,
    SourceSettings,
    SourceSpec,
    batch_source,
    refuse_ledger_database,
    source_from_dict,
)
from dpcore.errors import DataError, DPCoreError
from dpcore.plan import ReleasePlan, to_json
from dpcore.sessions import store_table
from ui import roles, state

SAMPLE_CHOICES: dict[str, str] = {
    "Sample: Marketing Campaign": "marketing_campaign",
    "Sample: US airports": "us_airports",
    "Sample: Road trips (synthetic GPS)": "road_trips",
}
BOUND_COLUMNS = ("feature", "kind", "lower", "upper")


def load_sample_dataset(label: str) -> state.Dataset:
    """Make a bundled sample (a key of ``SAMPLE_CHOICES``) the current dataset."""
    name = SAMPLE_CHOICES[label]
    return state.set_dataset(
        label, state.sample_table(name), source=SAMPLES[name][2], origin={"sample": name}
    )


def load_blobs_dataset(n_samples: int, n_features: int, centers: int, seed: int) -> state.Dataset:
    """Make synthetic Gaussian blobs the current dataset."""
    params = {"n_samples": int(n_samples), "n_features": int(n_features), "centers": int(centers)}
    table = state.blobs_table(**params, seed=int(seed))
    label = f"Synthetic blobs (n={n_samples}, d={n_features}, {centers} centres, seed {seed})"
    source = "scikit-learn make_blobs (synthetic, no real people)"
    return state.set_dataset(label, table, source=source, origin={"blobs": {**params, "seed": int(seed)}})


def load_upload(filename: str, data: bytes) -> state.Dataset:
    """Read an uploaded file and make it the current dataset; ``DataError`` keeps the previous one."""
    limit_mb = st.get_option("server.maxUploadSize")
    if len(data) > limit_mb * 1024 * 1024:
        raise DataError(
            f"'{filename}' is {len(data) / 2**20:.1f} MB, above the {limit_mb} MB upload limit. Upload a "
            "smaller file (a sample of rows, fewer columns), or raise server.maxUploadSize in "
            ".streamlit/config.toml."
        )
    table = state.upload_table(data, filename)
    detected = table.attrs.get("dpcore_source", "")
    source = f"upload: {filename}" + (f" ({detected})" if detected else "")
    digest = fingerprint(table)
    try:  # kept by fingerprint, so a reload or a restart restores the session; before it is in use
        store_table(table, digest)
    except OSError as err:
        raise DataError(
            f"'{filename}' was read, but the server's data folder {config.data_dir()} cannot keep it "
            f"({err.strerror or type(err).__name__}), and a session must be able to restore its table. "
            "Nothing was loaded. The operator must make the folder writable (or set DPCORE_DATA_DIR to one "
            "that is)."
        ) from err
    return state.set_dataset(filename, table, source=source, table_fingerprint=digest)


def source_settings() -> SourceSettings:
    """Allow-listed data folders, database connection names, the in-memory row limit and the database read
    time limit: the ``[dpcore]`` table of ``.streamlit/secrets.toml`` and the ``DPCORE_DATA_FOLDERS`` /
    ``DPCORE_MAX_ROWS`` / ``DPCORE_QUERY_TIMEOUT_S`` variables."""
    section = st.secrets.get("dpcore") if st.secrets.load_if_toml_exists() else None
    return SourceSettings.from_config(section if isinstance(section, Mapping) else {}, os.environ)


def database_engine(name: str) -> sa.Engine:
    """The SQLAlchemy engine of an allow-listed connection (``[connections.<name>]`` in the secrets),
    through ``st.connection``; ``DataError`` when it is not configured, cannot be opened or leads to the
    ledger's own database (:func:`~dpcore.data.sources.refuse_ledger_database`)."""
    if name not in source_settings().databases:
        raise DataError(f"'{name}' is not a database listed in [dpcore] databases; choose one from the list.")
    connections = st.secrets.get("connections") if st.secrets.load_if_toml_exists() else None
    section = connections.get(name) if isinstance(connections, Mapping) else None
    if not isinstance(section, Mapping):
        raise DataError(
            f"The database '{name}' has no [connections.{name}] section in .streamlit/secrets.toml; the "
            "operator must add its SQLAlchemy URL there."
        )
    try:  # the section passed explicitly: the same settings whichever secrets object the run uses
        engine = st.connection(name, type="sql", **_connection_kwargs(section)).engine
    except Exception as err:  # Streamlit's secret errors, SQLAlchemy's URL and driver errors
        raise DataError(
            f"The database connection '{name}' could not be opened ({type(err).__name__}); check its "
            f"[connections.{name}] section in .streamlit/secrets.toml."
        ) from err
    refuse_ledger_database(engine.url, config.ledger_url(), name)  # budgets, releases, session tokens
    return engine


def source_context(settings: SourceSettings | None = None) -> SourceContext:
    """What the Data page reads sources with: the operator's folders and connections (engines through
    :func:`database_engine`), the database time limit, listings kept a minute."""
    settings = settings or source_settings()
    return SourceContext(
        folders=settings.folders,
        databases=settings.databases,
        connect=database_engine,
        timeout_s=settings.query_timeout_s,
        memo=_listing,
    )


@st.cache_data(ttl=60, show_spinner=False)
def _listing(key: tuple[Any, ...], _compute: Any) -> Any:
    """A listing (a database's tables) kept a minute per ``key`` (its source kind's: a connection's name
    and URL, so a connection given another URL is listed afresh)."""
    return _compute()


def source_options(
    kind: type[SourceSpec], field: Field, chosen: Mapping[str, str], settings: SourceSettings
) -> dict[str, dict[str, str]]:
    """The choices of a source kind's widget (shown label -> the spec fields it fills) under ``settings``
    (the folders and databases this user may load), given the fields ``chosen`` before it."""
    return kind.options(field.name, source_context(settings), chosen)


def _plain(section: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _plain(v) if isinstance(v, Mapping) else v for k, v in section.items()}


def _connection_kwargs(section: Mapping[str, Any]) -> dict[str, Any]:
    """A ``[connections.<name>]`` section as ``st.connection`` keyword arguments (its ``type`` is given)."""
    return {k: v for k, v in _plain(section).items() if k != "type"}


def _read_now(spec: SourceSpec, settings: SourceSettings, sample_seed: int) -> tuple[LoadedSource, float]:
    """One read of ``spec`` (a database's stopped after the operator's time limit) and the time it ended
    (seconds since the epoch)."""
    loaded = spec.load(source_context(settings), max_rows=settings.max_rows, sample_seed=sample_seed)
    return loaded, time.time()


@st.cache_data(show_spinner=False, max_entries=4)
def _kept_read(
    spec: dict[str, str], stamp: tuple[Any, ...], folders: tuple[str, ...], max_rows: int, sample_seed: int,
    _settings: SourceSettings,
) -> tuple[LoadedSource, float]:
    """A read kept per server by the source ``spec``, what its rows depend on (``stamp``: its files'
    modification times and sizes, its connection's URL), the allow-listed folders, the row limit and the
    sample seed: a reload or a second tab does not read a large table again. A failed read raises and is
    not kept; :func:`_read` drops a re-readable source's entry older than ``source_cache_ttl_s``."""
    return _read_now(source_from_dict(spec), _settings, sample_seed)


def _read(
    spec: SourceSpec, settings: SourceSettings, sample_seed: int, *, again: bool
) -> tuple[LoadedSource, float]:
    """The rows of ``spec`` and when they were read: the read this server keeps while the source's stamp
    holds, for a re-readable source (a database) only while it is younger than the operator's
    ``source_cache_ttl_s`` (0: none is kept) and ``again`` is False; else a new read, kept."""
    if spec.reread and settings.source_cache_ttl_s == 0:
        return _read_now(spec, settings, sample_seed)
    stamp = spec.stamp(source_context(settings))
    key = (spec.to_dict(), stamp, settings.folders, settings.max_rows, sample_seed)
    if again:
        _kept_read.clear(*key, settings)
    asked = time.time()
    loaded, read_at = _kept_read(*key, settings)
    if spec.reread and asked - read_at >= settings.source_cache_ttl_s:  # kept longer than allowed (not new)
        _kept_read.clear(*key, settings)
        loaded, read_at = _kept_read(*key, settings)
    return loaded, read_at


@st.cache_resource(show_spinner=False)
def _sample_seeds() -> dict[tuple[tuple[tuple[str, str], ...], int], int]:
    """The sample seed of each source and row limit on this server, drawn once from the OS entropy source:
    sessions that load the same large table get the same diagnostic sample, hence one kept read."""
    return {}


def load_source_dataset(
    spec: SourceSpec, sample_seed: int | None = None, *, again: bool = False
) -> state.Dataset:
    """Read an operator's source (any kind of ``dpcore.data.sources``) and make it the current dataset.
    Above the row limit the dataset is a uniform sample for the diagnostics, drawn with
    ``sample_seed`` (when None, this server's seed for the source, drawn once from the OS entropy source;
    kept in the session plan), under the whole table's name and fingerprint (its ledger account is the whole
    table's); :func:`sample_of` says it is a sample. A database read is stopped at the operator's time limit
    (``query_timeout_s``) and kept per server for ``source_cache_ttl_s`` seconds; ``again`` reads it now."""
    source = spec.where
    if not roles.may_load(source):  # ui.roles, [dpcore.access]: also a restored session or a forged choice
        raise DataError(
            f"Your role may not load data from {Path(source).name or source!r} ([dpcore.access] in "
            ".streamlit/secrets.toml); nothing was loaded. Ask the operator or a privacy officer."
        )
    settings = source_settings()
    if sample_seed is None:
        key = (tuple(sorted(spec.to_dict().items())), settings.max_rows)
        sample_seed = _sample_seeds().setdefault(key, secrets.randbits(63))
    sample_seed = int(sample_seed)
    loaded, read_at = _read(spec, settings, sample_seed, again=again)
    origin = {
        "source": spec.to_dict(),
        "seed": sample_seed,
        "sampled": loaded.sampled,
        "rows": loaded.n_rows,
        **({"read_at": read_at} if spec.reread else {}),
    }
    return state.set_dataset(
        spec.label,
        loaded.table,
        source=loaded.description,
        origin=origin,
        table_fingerprint=loaded.fingerprint,
    )


def restore_source_dataset(origin: Mapping[str, Any]) -> state.Dataset:
    """Load again the source a saved session used (the same sample rows, through its seed)."""
    return load_source_dataset(source_from_dict(origin["source"]), origin.get("seed"))


def read_source_again() -> state.Dataset:
    """Read the current database dataset's table or SELECT now, not from this server's kept read (the
    table may have changed), with the same sample seed, under the curator's name: the rows and the
    fingerprint of this read replace both of the earlier one (a new fingerprint is what later releases
    carry)."""
    ds = state.dataset()
    origin = (ds.origin or {}) if ds is not None else {}
    if "read_at" not in origin:
        raise DataError("The dataset in use was not read from a database; load a database table first.")
    fresh = load_source_dataset(source_from_dict(origin["source"]), origin.get("seed"), again=True)
    return fresh if fresh.name == ds.name else state.update_dataset(name=ds.name)


def read_note(ds: state.Dataset | None) -> str | None:
    """For a dataset read from a database, when it was read and how long this server keeps that read
    for reloads and other sessions (``source_cache_ttl_s``), else None."""
    read_at = (ds.origin or {}).get("read_at") if ds is not None else None
    if read_at is None:
        return None
    when = datetime.fromtimestamp(read_at, UTC)
    shown = when.strftime("%H:%M UTC" if when.date() == datetime.now(UTC).date() else "%Y-%m-%d %H:%M UTC")
    ttl = source_settings().source_cache_ttl_s
    if ttl == 0:
        kept = "every load and reload reads it again ([dpcore] source_cache_ttl_s = 0)"
    else:
        until = datetime.fromtimestamp(read_at + ttl, UTC).strftime("%H:%M UTC")
        kept = f"reloads and other sessions use this read until {until} ([dpcore] source_cache_ttl_s)"
    return (
        f"Read from the database at {shown}; {kept}. If the table has changed since, read it again: the "
        "new rows come with their own fingerprint, which later releases carry."
    )


def sample_of(ds: state.Dataset | None) -> str | None:
    """For a dataset that is a uniform sample of a larger table, a sentence saying so, else None."""
    origin = (ds.origin or {}) if ds is not None else {}
    if not origin.get("sampled"):
        return None
    return (
        f"This table is a uniform sample of {ds.n_rows:,} of the {origin['rows']:,} rows of the source: "
        "comparisons and diagnostics run on the sample; a release runs on the whole table, as a batch job on "
        "this server."
    )


def sample_label(ds: state.Dataset | None) -> str | None:
    """A short label for a dataset that is a uniform sample of a larger table (for the sidebar), else None."""
    if sample_of(ds) is None:
        return None
    rows = f"{ds.n_rows:,} of {ds.origin['rows']:,}"
    return f"Uniform sample of {rows} rows: diagnostics; releases use them all"


def batch_command(origin: Mapping[str, Any]) -> str:
    """The ``run-plan`` command for the whole table of a source dataset's ``origin``, as a Markdown code
    block: the arguments its kind names it by (a file's path; a database's table or SELECT exactly as typed,
    newlines kept; a database's URL stays in the operator's config, so a placeholder names its connection)."""
    try:
        rows = source_from_dict(origin.get("source") or {}).command_line()
    except DPCoreError:
        rows = ["<the table>"]
    command = " ".join(["python -m dpcore run-plan PLAN.json --source", *map(shlex.quote, rows)])
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", command)), default=0))
    return f"{fence}bash\n{command}\n{fence}"


def job_source(origin: Mapping[str, Any]) -> dict[str, Any]:
    """What a whole-table batch job on the source of a dataset's ``origin`` reads
    (:func:`dpcore.data.sources.batch_source`): the spec, checked against the allow-lists again, with the
    folders or its connection's URL (password included: it goes only to the job's process)."""
    spec = source_from_dict(origin.get("source") or {})
    ctx = source_context()
    spec.stamp(ctx)
    return batch_source(spec, ctx)


def release_refusal(ds: state.Dataset | None, plan: ReleasePlan) -> str | None:
    """Why the dashboard cannot release ``plan`` from ``ds``, a sample of a larger table (a batch job on the
    whole table would refuse it), or None (not a sample, or the panel runs it on the whole table)."""
    sample = sample_of(ds)
    if sample is None:
        return None
    from dpcore.outofcore.run_plan import batch_refusal  # the engines load only for a sample's plan

    problem = batch_refusal(plan, rows=ds.origin.get("rows"))
    if problem is not None:
        return f"{sample} A release must use the whole table, as a batch job; this plan cannot: {problem}"
    return None


def offer_whole_table_plan(plan: ReleasePlan, key: str) -> None:
    """On a sample of a larger table: the plan (whose dataset name and fingerprint are the whole table's) to
    download and the ``python -m dpcore run-plan`` command that releases it from a terminal, if a batch job
    can run it (the release panel can also run it on this server)."""
    ds = state.dataset()
    if sample_of(ds) is None:
        return
    from dpcore.outofcore.run_plan import batch_refusal

    if batch_refusal(plan, rows=(ds.origin or {}).get("rows")) is not None:
        return
    with st.expander("Or run it from a terminal, as the operator"):
        st.markdown(
            "The same batch job from a shell on a machine that can read the source (it debits the same "
            "ledger under the same request id, so it never spends twice):\n\n"
            + batch_command(ds.origin or {})
        )
        st.download_button(
            "Download the plan for the whole table",
            data=to_json(plan.to_manifest()),
            file_name=f"plan-{plan.dataset_id}-{plan.mechanism}.json",
            mime="application/json",
            key=f"{key}_whole_table_plan",
            on_click="ignore",
            icon=":material/download:",
        )


def bounds_frame(features: list[str], schema: Schema, stored: Mapping[str, tuple[str, str]]) -> pd.DataFrame:
    """Editor rows: one per feature with its kind and the stored public bounds as text (empty if none)."""
    return pd.DataFrame(
        {
            "feature": features,
            "kind": [schema.kinds[f] for f in features],
            "lower": [stored.get(f, ("", ""))[0] for f in features],
            "upper": [stored.get(f, ("", ""))[1] for f in features],
        },
        columns=list(BOUND_COLUMNS),
    )


def _value(text: object) -> float | str:
    value = str(text).strip()
    try:
        return float(value)
    except ValueError:
        return value  # a date bound such as 2012-01-01, parsed by dpcore.data.prepare


def parse_bounds(edited: pd.DataFrame) -> dict[str, tuple[float | str, float | str]]:
    """Bounds typed in the editor, by feature; rows with both cells empty are skipped.

    Categorical features are skipped (their bounds are fixed by the encoding); a row with only one of the
    two bounds raises ``DataError``.
    """
    out: dict[str, tuple[float | str, float | str]] = {}
    for row in edited.itertuples(index=False):
        lower = "" if pd.isna(row.lower) else str(row.lower).strip()
        upper = "" if pd.isna(row.upper) else str(row.upper).strip()
        if row.kind == "categorical" or (not lower and not upper):
            continue
        if not (lower and upper):
            raise DataError(f"Give both a lower and an upper bound for '{row.feature}', or leave both empty.")
        out[str(row.feature)] = (_value(lower), _value(upper))
    return out


# -- the preparation table (``dpcore.data.dictionary``) and its memory on the server -------------------

PREP_KEY = "data_prep"  # kept per dataset: [[column, feature, lower, upper, unit], ...]
TABLE_VERSION_KEY = "dp_prep_table_version"  # a new editor (no stale edits) after each apply
OFFER_KEY = "dp_prep_offer_done::"  # + dataset id: its saved settings were used or declined


def dictionary(ds: state.Dataset) -> Dictionary:
    """The dataset's preparation table: its kinds and missing-value steps, and the kept features, bounds and
    units (of columns the table has)."""
    rows = [r for r in state.kept(PREP_KEY) or () if r[0] in ds.schema.kinds]
    return Dictionary(
        kinds=dict(ds.schema.kinds),
        features=tuple(c for c in ds.schema.kinds if any(r[0] == c and r[1] for r in rows)),
        bounds={r[0]: (str(r[2]), str(r[3])) for r in rows if r[2] or r[3]},
        units={r[0]: str(r[4]) for r in rows if r[4]},
        missing={c: s for s, columns in ds.steps for c in columns},
    )


def table_key(ds: state.Dataset) -> str:
    """The editor's widget key: a new one after every apply, so edits already applied are not replayed."""
    return f"data_table_{ds.dataset_id}_{st.session_state.get(TABLE_VERSION_KEY, 0)}"


def apply_dictionary(dic: Dictionary) -> state.Dataset:
    """Apply a checked preparation table in one step: column kinds, missing-value steps (replayed from the
    table as loaded when they changed), features, bounds and units. All or nothing: a step that fails (e.g.
    dropping rows would empty the table) restores the dataset as it was and raises."""
    before = state.dataset()
    if before is None:
        raise DataError("No dataset is loaded; choose a sample or upload a file first.")
    try:
        schema = dic.schema(before.schema)
        if schema != before.schema:
            state.update_dataset(schema=schema, prepared=None)
        if dictionary(before).missing != dict(dic.missing):
            state.reset_cleaning()
            for strategy, columns in dic.steps():
                state.apply_missing(columns, strategy)
    except DPCoreError:
        st.session_state[state.DATASET_KEY] = before
        raise
    old = dictionary(before)
    if (old.features, dict(old.bounds)) != (dic.features, dict(dic.bounds)):
        state.update_dataset(prepared=None)
    state.keep(PREP_KEY, _rows(dic))
    st.session_state[TABLE_VERSION_KEY] = st.session_state.get(TABLE_VERSION_KEY, 0) + 1
    return _current_dataset()


def _rows(dic: Dictionary) -> list[list[str | bool]]:
    """The kept form of a table's features, bounds and units (lists: a session stores them)."""
    named = [c for c in dic.kinds if c in dic.features or c in dic.bounds or c in dic.units]
    return [
        [c, c in dic.features, *dic.bounds.get(c, ("", "")), dic.units.get(c, "")] for c in named
    ]


def apply_edited(edited: pd.DataFrame) -> state.Dataset:
    """Apply the table as edited on the page (every row checked first)."""
    ds = _current_dataset()
    return apply_dictionary(check_dictionary(edited, ds.raw))


def import_dictionary(data: bytes) -> state.Dataset:
    """Apply a data dictionary CSV: its rows replace those of the columns it names (its absent headers keep
    their values); every row is checked first and a refused row applies nothing."""
    ds = _current_dataset()
    merged, problems = merge_dictionary(dictionary(ds).to_frame(), read_dictionary_csv(data))
    return apply_dictionary(check_dictionary(merged, ds.raw, problems=problems))


def _current_dataset() -> state.Dataset:
    ds = state.dataset()
    if ds is None:
        raise DataError("No dataset is loaded; choose a sample or upload a file first.")
    return ds


def table_bounds(dic: Dictionary, schema: Schema) -> dict[str, tuple[float | str, float | str]]:
    """The public bounds of the table's features as ``prepare`` takes them (numbers, or date text)."""
    return parse_bounds(bounds_frame(list(dic.features), schema, dic.bounds))


def save_settings(
    ds: state.Dataset, scaling: str, data_bounds_ok: bool, private_epsilon: float | None
) -> str:
    """Keep the dataset's prepared settings on the server under its name (``dpcore.data.saved``); a
    sentence saying so, or why they could not be kept (the preparation itself stands)."""
    choices = state.choices(ds)
    choices.update(
        table=dictionary(ds).to_dict(),
        options={"scaling": scaling, "data_bounds_ok": data_bounds_ok, "private_epsilon": private_epsilon},
    )
    try:
        saved = save_preparation(config.data_dir(), ds.dataset_id, ds.name, ds.fingerprint, choices)
    except (OSError, DPCoreError) as err:
        return f"These settings could not be kept on the server for the next load ({type(err).__name__})."
    st.session_state[OFFER_KEY + ds.dataset_id] = True
    return f"Settings kept on the server for the next load of '{ds.name}' ({saved.when})."


def saved_offer(ds: state.Dataset) -> SavedPreparation | None:
    """Settings saved on the server for this dataset's name or table, to offer (never applied unasked):
    None once used or declined in this session, or when they are the ones in use."""
    if st.session_state.get(OFFER_KEY + ds.dataset_id) or ds.prepared is not None:
        return None
    try:
        return find_preparation(config.data_dir(), ds.dataset_id, ds.fingerprint)
    except DPCoreError:
        return None


def decline_saved(ds: state.Dataset) -> None:
    st.session_state[OFFER_KEY + ds.dataset_id] = True


def use_saved(saved: SavedPreparation) -> state.Dataset:
    """Apply saved settings to the current dataset (checked against its columns), then prepare as they
    did; all or nothing."""
    before = _current_dataset()
    ch = saved.choices
    try:
        state.reset_cleaning()
        state.apply_choices({**ch, "prepare": None})
        dic = Dictionary.from_dict(ch["table"])
        check_dictionary(dic.to_frame(), before.raw)
        apply_dictionary(dic)
        options = ch.get("options") or {}
        state.keep("data_scaling", options.get("scaling", "none"))
        state.keep("data_bounds_ok", bool(options.get("data_bounds_ok")))
        eps_b = options.get("private_epsilon")
        state.keep(PRIVATE_KEY, eps_b is not None)
        if eps_b is not None:
            state.keep(PRIVATE_EPS_KEY, float(eps_b))
        if dic.features:
            ds = _current_dataset()
            ready = prepare(
                ds.cleaned,
                ds.schema,
                list(dic.features),
                scaling=options.get("scaling", "none"),
                bounds=table_bounds(dic, ds.schema),
                data_bounds_ok=bool(options.get("data_bounds_ok")),
                private_epsilon=eps_b,
            )
            state.update_dataset(prepared=ready)
    except (DPCoreError, KeyError, TypeError, ValueError) as err:
        st.session_state[state.DATASET_KEY] = before
        raise DataError(
            f"The settings saved on {saved.when} do not fit '{before.name}' ({err}); nothing was changed."
        ) from None
    decline_saved(before)
    return _current_dataset()


PRIVATE_KEY = "data_private_bounds"
PRIVATE_EPS_KEY = "data_private_eps"
PRIVATE_IN_DEMO = (
    "Not available in demo mode: the private estimate draws OpenDP's own randomness, not the demo seed, so "
    "the release could not be reproduced (a demo release refuses it). Switch the sidebar's Sampling mode to "
    "Release mode to use it, or give {public}."
)
