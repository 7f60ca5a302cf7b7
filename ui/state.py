"""Typed accessors over ``st.session_state``: the current dataset, policy, ledger, user and sampling mode.

Pages never touch ``st.session_state`` keys directly for these; they call the functions here.
The dataset id used by the ledger comes from the dataset's name (the loaded label until the curator renames
it, :func:`rename_dataset`), which carries its budget across sessions whatever the file's row order or column
names; the ledger refuses the same table (by fingerprint) under a second name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pandas as pd
import streamlit as st

from dpcore import config
from dpcore.data import (
    KINDS,
    PreparedData,
    Schema,
    fingerprint,
    handle_missing,
    infer_schema,
    load_sample,
    load_table,
    make_blobs,
    prepare,
    table_name,
)
from dpcore.errors import DataError, DPCoreError
from dpcore.ledger import Ledger, dataset_id_for_name
from dpcore.mechanisms import Sampler, check_random_state
from dpcore.policy import ApproxDP, Policy
from dpcore.steps import DropMissing, Impute
from ui import auth, roles

__all__ = [
    "DEFAULT_POLICY",
    "KEEP_PREFIX",
    "MAX_NAME_CHARS",
    "MODE_KEY",
    "SEED_KEY",
    "Dataset",
    "apply_choices",
    "apply_missing",
    "blobs_table",
    "choices",
    "dataset",
    "dataset_id_for",
    "demo_seed",
    "epsilon_source",
    "keep",
    "kept",
    "kept_values",
    "ledger",
    "mode",
    "persist",
    "policy",
    "prepared",
    "random_state",
    "recall_notice",
    "rename_dataset",
    "require_dataset",
    "require_prepared",
    "reset_cleaning",
    "sample_table",
    "set_dataset",
    "set_epsilon_source",
    "set_policy",
    "update_dataset",
    "upload_table",
    "user",
]

DATASET_KEY = "dp_dataset"
POLICY_KEY = "dp_policy"
MODE_KEY = "dp_mode"
SEED_KEY = "dp_seed"
RELEASE_PREFIX = "dp_release::"
KEEP_PREFIX = "dp_keep::"
EPS_SOURCE_PREFIX = "dp_eps_source::"  # domain -> (dataset id, mechanism, ε, how it was chosen)
MEMORY_KEY = "dp_dataset_memory"  # dataset id -> its choices (``choices``), for loading it again
RECALL_NOTICE_KEY = "dp_recall_notice"
DEFAULT_POLICY: Policy = ApproxDP(1.0, 1e-6)
MAX_NAME_CHARS = 100
Mode = Literal["secure", "demo"]


def dataset_id_for(name: str) -> str:
    """Ledger id of a dataset: from the name the curator gives it (``dpcore.ledger.dataset_id_for_name``)."""
    return dataset_id_for_name(name)


@dataclass(frozen=True)
class Dataset:
    """The table the curator works on.

    ``name`` carries the budget in the ledger (``dataset_id``); ``raw`` is the table as loaded (its
    fingerprint is recorded with every release); ``cleaned`` is
    ``raw`` after the curator's explicit missing-value choices (``steps``: (strategy, columns) in order,
    ``cleaning``: the same as typed plan steps, :mod:`dpcore.steps`); ``prepared`` is the output of
    ``dpcore.data.prepare`` on ``cleaned``
    (None until the curator prepares features). ``origin`` says how to load ``raw`` again in a restored
    session: ``{"sample": key}``, ``{"blobs": {...}}`` or ``{"source": spec, ...}`` (a folder file or a
    database table, ``ui.datasets.load_source_dataset``); None means the table itself is kept by
    fingerprint (``dpcore.sessions.store_table``), as for uploads.
    """

    name: str
    raw: pd.DataFrame
    schema: Schema
    cleaned: pd.DataFrame
    fingerprint: str
    source: str = ""
    prepared: PreparedData | None = None
    cleaning: tuple[DropMissing | Impute, ...] = ()
    steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    origin: Mapping[str, Any] | None = None

    @property
    def dataset_id(self) -> str:
        return dataset_id_for(self.name)

    @property
    def n_rows(self) -> int:
        return len(self.raw)


# -- dataset ---------------------------------------------------------------------------------------


def dataset() -> Dataset | None:
    """The current dataset, or None before one is loaded."""
    return st.session_state.get(DATASET_KEY)


def set_dataset(
    name: str,
    raw: pd.DataFrame,
    *,
    source: str = "",
    origin: Mapping[str, Any] | None = None,
    table_fingerprint: str | None = None,
) -> Dataset:
    """Make ``raw`` the current dataset (schema inferred, nothing prepared); forget pending releases.
    ``table_fingerprint`` names a larger table of which ``raw`` is a sample (default: ``raw``'s own).
    ``DataError`` for a name that cannot carry a budget (``dpcore.data.table_name``)."""
    name = table_name(name)
    if raw.empty:
        raise DataError(f"'{name}' has no rows; choose a file with at least one data row.")
    ds = Dataset(
        name=name,
        raw=raw,
        schema=infer_schema(raw),
        cleaned=raw,
        fingerprint=table_fingerprint or fingerprint(raw),
        source=source,
        origin=origin,
    )
    for key in [k for k in st.session_state if str(k).startswith(RELEASE_PREFIX)]:
        del st.session_state[key]
    memory = st.session_state.setdefault(MEMORY_KEY, {})
    previous = dataset()
    if previous is not None:
        memory[previous.dataset_id] = choices(previous)
    st.session_state[DATASET_KEY] = ds
    saved = memory.get(ds.dataset_id)
    if saved is not None and saved["fingerprint"] == ds.fingerprint and _chose_something(saved, ds):
        try:
            ds = apply_choices(saved)
        except (DPCoreError, KeyError, TypeError, ValueError) as err:
            st.session_state[DATASET_KEY] = replace(ds, prepared=None)
            st.session_state[RECALL_NOTICE_KEY] = (
                f"The steps chosen for '{ds.name}' earlier in this session could not be applied again "
                f"({err}); it starts from the table as loaded."
            )
            return dataset()  # type: ignore[return-value]
        st.session_state[RECALL_NOTICE_KEY] = (
            f"'{ds.name}' was used earlier in this session: its own column kinds, missing-value steps "
            f"({'; '.join(s.text for s in ds.cleaning) or 'none'}) and features are applied again, and its "
            "page settings are its own (another dataset's are never carried over)."
        )
    return ds


def _chose_something(saved: Mapping[str, Any], loaded: Dataset) -> bool:
    """Whether ``saved`` holds a choice beyond what loading ``loaded`` inferred."""
    sch = saved["schema"]
    inferred = (dict(loaded.schema.kinds), dict(loaded.schema.date_formats))
    return bool(saved["steps"] or saved["prepare"] or (sch["kinds"], sch["date_formats"]) != inferred)


def choices(ds: Dataset) -> dict[str, Any]:
    """What the curator chose for ``ds`` (JSON types and tuples): column kinds and encodings, missing-value
    steps, and the ``prepare`` arguments that give its features again (curator bounds in encoded units)."""
    p = ds.prepared
    prepared = None
    if p is not None:
        prepared = {
            "features": list(p.feature_names),
            "scaling": p.scaling,
            "bounds": {
                name: (float(lo), float(hi))
                for name, lo, hi in zip(p.feature_names, p.raw_lower, p.raw_upper, strict=True)
                if p.bound_sources[name] == "curator"
            },
            "data_bounds_ok": "data (leaks)" in p.bound_sources.values(),
            "private_epsilon": (p.private_bounds or {}).get("epsilon"),
        }
    return {
        "fingerprint": ds.fingerprint,
        "schema": {
            "kinds": dict(ds.schema.kinds),
            "date_formats": dict(ds.schema.date_formats),
            "categories": {k: list(v) for k, v in ds.schema.categories.items()},
            "notes": dict(ds.schema.notes),
        },
        "steps": [(strategy, tuple(columns)) for strategy, columns in ds.steps],
        "prepare": prepared,
    }


def apply_choices(saved: Mapping[str, Any]) -> Dataset:
    """Apply :func:`choices` saved for the current dataset again: schema, missing-value steps, features."""
    ds = _current()
    sch = saved["schema"]
    if list(sch["kinds"]) != [str(c) for c in ds.raw.columns]:
        raise DataError(f"The saved column kinds do not match '{ds.name}'; check them on the Data page.")
    unknown = sorted({str(k) for k in sch["kinds"].values()} - set(KINDS))
    if unknown:
        raise DataError(f"The saved column kinds include {', '.join(unknown)}, not a kind; set them again.")
    schema = Schema(
        kinds=sch["kinds"],
        date_formats=sch["date_formats"],
        categories={k: tuple(v) for k, v in sch["categories"].items()},
        notes=sch["notes"],
    )
    update_dataset(schema=schema)
    for strategy, columns in saved["steps"]:
        apply_missing(columns, strategy)
    wanted = saved.get("prepare")
    if wanted is not None:
        ds = _current()
        ready = prepare(
            ds.cleaned,
            ds.schema,
            wanted["features"],
            scaling=wanted["scaling"],
            bounds=wanted["bounds"],
            data_bounds_ok=wanted["data_bounds_ok"],
            private_epsilon=wanted.get("private_epsilon"),
        )
        update_dataset(prepared=ready)
    return _current()


def recall_notice() -> str | None:
    """Once: what loading the current dataset applied again from earlier in the session, or None."""
    return st.session_state.pop(RECALL_NOTICE_KEY, None)


def _current() -> Dataset:
    current = dataset()
    if current is None:
        raise DataError("No dataset is loaded; choose a sample or upload a file on the Data page first.")
    return current


def update_dataset(**changes: Any) -> Dataset:
    """Replace fields of the current dataset (``schema``, ``prepared``; cleaning goes through
    :func:`apply_missing` and :func:`reset_cleaning`, which keep the replayable steps)."""
    ds = replace(_current(), **changes)
    st.session_state[DATASET_KEY] = ds
    return ds


def rename_dataset(name: str) -> Dataset:
    """Give the current dataset the curator's ``name`` (stripped; it carries the budget in the ledger, see
    ``dpcore.ledger.dataset_id_for_name``). Widget values kept under the old dataset id (column kinds,
    features, bounds, region) are carried over to the new id, so renaming resets no other setting."""
    ds = _current()
    text = str(name).strip()
    if not text:
        raise DataError("The dataset name is empty; type a name (it carries the dataset's privacy budget).")
    if len(text) > MAX_NAME_CHARS:
        raise DataError(f"The dataset name has {len(text)} characters; use at most {MAX_NAME_CHARS}.")
    if not text.isprintable():
        raise DataError("The dataset name contains control characters (tabs, line breaks); remove them.")
    old, new = ds.dataset_id, dataset_id_for(text)
    if new != old:
        for name, value in kept_values().items():
            if old in name:
                st.session_state[KEEP_PREFIX + name.replace(old, new)] = value
    return update_dataset(name=text)


def apply_missing(columns: Sequence[str], strategy: str) -> Dataset:
    """Apply one missing-value treatment (``dpcore.data.handle_missing``) to the current cleaned table;
    the step is recorded so a restored session can replay it. The prepared features are dropped."""
    ds = _current()
    cleaned = handle_missing(ds.cleaned, list(columns), strategy)  # type: ignore[arg-type]
    removed = len(ds.cleaned) - len(cleaned)
    if removed and cleaned.empty:  # e.g. an unused column, empty in every row, among the columns
        empty = [c for c in columns if ds.cleaned[c].isna().all()]
        why = f" ({', '.join(map(repr, empty))} has no value in any row)" if empty else ""
        raise DataError(
            f"Dropping the rows with a missing value in {', '.join(map(repr, columns))} would remove all "
            f"{removed:,} rows{why}. Leave such columns out (an empty column cannot be a feature), or fill "
            "the values instead."
        )
    step = DropMissing(tuple(columns), removed) if strategy == "drop" else Impute(strategy, tuple(columns))
    return update_dataset(
        cleaned=cleaned,
        prepared=None,
        cleaning=(*ds.cleaning, step),
        steps=(*ds.steps, (strategy, tuple(columns))),
    )


def reset_cleaning() -> Dataset:
    """Undo every missing-value treatment: back to the table as loaded, nothing prepared."""
    return update_dataset(cleaned=_current().raw, prepared=None, cleaning=(), steps=())


def prepared() -> PreparedData | None:
    """The prepared feature matrix of the current dataset, or None."""
    ds = dataset()
    return None if ds is None else ds.prepared


def require_dataset() -> Dataset:
    """The current dataset; without one, say so, link to the Data page and stop the page."""
    ds = dataset()
    if ds is None:
        st.info("No dataset yet: choose a sample or upload a file on the Data page.")
        st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
        st.stop()
    return ds


def require_prepared() -> tuple[Dataset, PreparedData]:
    """The current dataset and its prepared features; otherwise a pointer to the Data page and stop."""
    ds = require_dataset()
    if ds.prepared is None:
        st.info("The features are not prepared yet: select features and bounds, then press Prepare.")
        st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
        st.stop()
    return ds, ds.prepared


# -- cached loaders --------------------------------------------------------------------------------


@st.cache_data(show_spinner="Loading the sample...", max_entries=4)
def sample_table(name: str) -> pd.DataFrame:
    """A bundled sample (``dpcore.data.SAMPLES`` key), cached per name."""
    return load_sample(name)


@st.cache_data(show_spinner="Reading the file...", max_entries=4)
def upload_table(data: bytes, filename: str) -> pd.DataFrame:
    """An uploaded file's table, cached by its bytes and name; raises ``DataError`` for bad files."""
    return load_table(data, filename=filename)


@st.cache_data(show_spinner=False, max_entries=8)
def blobs_table(n_samples: int, n_features: int, centers: int, seed: int) -> pd.DataFrame:
    """Synthetic Gaussian blobs (``dpcore.data.make_blobs``), cached per parameters."""
    return make_blobs(n_samples=n_samples, n_features=n_features, centers=centers, seed=seed)


# -- policy, ledger, user ----------------------------------------------------------------------------


def policy() -> Policy:
    """The current privacy policy (default: (1, 1e-6)-DP, unbounded neighbours)."""
    return st.session_state.get(POLICY_KEY, DEFAULT_POLICY)


def set_policy(new: Policy) -> None:
    """Store a validated policy object (any ``dpcore.policy`` class)."""
    st.session_state[POLICY_KEY] = new


@st.cache_resource(show_spinner=False)
def _ledger(url: str) -> Ledger:
    return Ledger(url)


def ledger() -> Ledger:
    """The shared ledger at ``dpcore.config.ledger_url()`` (one per URL per server process)."""
    return _ledger(config.ledger_url())


def user() -> str:
    """Name recorded with releases: the signed-in identity (``ui.auth``), else ``DPCORE_USER`` or "local"."""
    return auth.current_user()


# -- sampling mode -----------------------------------------------------------------------------------


def mode() -> Mode:
    """``"secure"`` (release mode, the default) or ``"demo"`` (fixed seed, outputs marked DEMO); always demo
    for a viewer (``ui.roles``: viewers run the comparison pages in demo mode only)."""
    if not roles.has(roles.OFFICER, roles.CURATOR):
        return "demo"
    return "demo" if st.session_state.get(MODE_KEY) == "demo" else "secure"


def demo_seed() -> int | None:
    """The demo seed in demo mode (default 0), None in release mode."""
    if mode() != "demo":
        return None
    return int(st.session_state.get(SEED_KEY) or 0)


def random_state() -> Sampler:
    """``Sampler()`` (OS entropy, OpenDP samplers) in release mode; ``Sampler(seed)`` in demo mode."""
    return check_random_state(demo_seed())


# -- widget values kept across pages -----------------------------------------------------------------


def set_epsilon_source(domain: str, mechanism: str, epsilon: float, how: str) -> None:
    """Record that the release panel of ``domain`` was set to ``mechanism`` at ``epsilon`` by ``how``
    (a helper reading the comparison on the raw data), for the current dataset."""
    ds = _current()
    st.session_state[EPS_SOURCE_PREFIX + domain] = (ds.dataset_id, mechanism, float(epsilon), how)


def epsilon_source(domain: str, mechanism: str, epsilon: float) -> str:
    """How the panel's ε was chosen, while it still holds the value that choice set (else "")."""
    ds = dataset()
    found = st.session_state.get(EPS_SOURCE_PREFIX + domain)
    if ds is None or found is None or found[:3] != (ds.dataset_id, mechanism, float(epsilon)):
        return ""
    return found[3]


#: Widgets whose values belong to the session, not to a dataset: the sampling mode and seed, where a table
#: comes from (it is chosen before the dataset exists), the policy (one per session) and the map tiles.
SESSION_WIDGETS = ("dp_mode", "dp_seed", "data_source", "data_blobs_", "pol_")
SESSION_WIDGETS += ("loc_tiles",)
OWNER_PREFIX = "dp_owner::"


def _scope(key: str) -> str:
    """The dataset a widget's value belongs to: the current dataset's id, or "" for a session widget."""
    ds = dataset()
    return "" if ds is None or key.startswith(SESSION_WIDGETS) else ds.dataset_id


def _kept_key(key: str) -> str:
    """Where the value of widget ``key`` is kept: ``dp_keep::<key>@<dataset id>`` (``dp_keep::<key>`` for a
    session widget), so each dataset keeps its own settings."""
    scope = _scope(key)
    return KEEP_PREFIX + key + (f"@{scope}" if scope else "")


def kept_values() -> dict[str, Any]:
    """Every kept widget value by its kept name (``<key>`` or ``<key>@<dataset id>``): the live value while
    the widget holds it for that dataset (a value the browser just sent is in it before the run draws
    the widget), else the kept copy."""
    out = {}
    for kept_key in [str(k) for k in st.session_state if str(k).startswith(KEEP_PREFIX)]:
        name = kept_key[len(KEEP_PREFIX) :]
        key, _, scope = name.partition("@")
        live = key in st.session_state and st.session_state.get(OWNER_PREFIX + key) == scope
        out[name] = st.session_state[key] if live else st.session_state[kept_key]
    return out


def kept(key: str, default: Any = None) -> Any:
    """The value last kept for the widget ``key`` by :func:`persist` for the current dataset."""
    return st.session_state.get(_kept_key(key), default)


def keep(key: str, value: Any) -> None:
    """Set the widget ``key`` (drawn later in the run, or in the next one) and its kept copy to ``value``."""
    st.session_state[key] = value
    st.session_state[_kept_key(key)] = value
    st.session_state[OWNER_PREFIX + key] = _scope(key)


def persist(key: str, default: Any, valid: Callable[[Any], bool] | None = None) -> str:
    """Key for a widget whose value survives leaving the page; call it in place of ``key=`` each run.

    Streamlit drops the state of widgets that a run does not draw (e.g. while another page is shown),
    so the value is also kept under a plain session key (:func:`_kept_key`), one per dataset: loading or
    switching to another dataset shows that dataset's own value (or ``default``), never the one chosen for
    another table. Before the widget is drawn, a dropped (or no longer ``valid``, or another dataset's)
    value is re-seeded from that copy, else from ``default``; the widget must then be created without its
    own default (``value=``, ``index=``, ``default=``).

    The value is set again on every run, so Streamlit sends it with the widget each time: a run that ends
    early (a click during a session restore, ``st.rerun``) has its unsent messages dropped, and a widget
    the browser never received would otherwise show its own default (an empty region box) and send that
    default back, over the kept value and the saved plan. A widget in an ``st.form`` would lose unsubmitted
    edits at each rerun: none is kept by this function.
    """
    scope = _scope(key)
    kept_key = _kept_key(key)
    ok = valid or (lambda _v: True)
    if key in st.session_state and st.session_state.get(OWNER_PREFIX + key, scope) != scope:
        del st.session_state[key]  # the value on screen was chosen for another dataset
    if key not in st.session_state or not ok(st.session_state[key]):
        saved = st.session_state.get(kept_key, default)
        value = saved if ok(saved) else default
    else:
        value = st.session_state[key]
    st.session_state[key] = value  # every run: the browser is sent the value (see above)
    st.session_state[OWNER_PREFIX + key] = scope
    st.session_state[kept_key] = value
    return key
