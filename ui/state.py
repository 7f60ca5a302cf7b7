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
    PreparedData,
    Schema,
    fingerprint,
    handle_missing,
    infer_schema,
    load_sample,
    load_table,
    make_blobs,
)
from dpcore.errors import DataError
from dpcore.ledger import Ledger, dataset_id_for_name
from dpcore.mechanisms import Sampler
from dpcore.policy import ApproxDP, Policy
from ui import auth

__all__ = [
    "DEFAULT_POLICY",
    "KEEP_PREFIX",
    "MAX_NAME_CHARS",
    "MODE_KEY",
    "SEED_KEY",
    "Dataset",
    "apply_missing",
    "blobs_table",
    "dataset",
    "dataset_id_for",
    "demo_seed",
    "kept",
    "ledger",
    "mode",
    "persist",
    "policy",
    "prepared",
    "rename_dataset",
    "require_dataset",
    "require_prepared",
    "reset_cleaning",
    "sample_table",
    "sampler",
    "set_dataset",
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
    ``cleaning``: the same in words); ``prepared`` is the output of ``dpcore.data.prepare`` on ``cleaned``
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
    cleaning: tuple[str, ...] = ()
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
    ``table_fingerprint`` names a larger table of which ``raw`` is a sample (default: ``raw``'s own)."""
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
    st.session_state[DATASET_KEY] = ds
    return ds


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
        for key in [str(k) for k in st.session_state if str(k).startswith(KEEP_PREFIX) and old in str(k)]:
            widget = key[len(KEEP_PREFIX) :]
            value = st.session_state[widget] if widget in st.session_state else st.session_state[key]
            st.session_state[key.replace(old, new)] = value
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
    words = f"{strategy} on {', '.join(columns)} ({removed} rows removed)"
    return update_dataset(
        cleaned=cleaned,
        prepared=None,
        cleaning=(*ds.cleaning, words),
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
    """``"secure"`` (release mode, the default) or ``"demo"`` (fixed seed, outputs marked DEMO)."""
    return "demo" if st.session_state.get(MODE_KEY) == "demo" else "secure"


def demo_seed() -> int | None:
    """The demo seed in demo mode (default 0), None in release mode."""
    if mode() != "demo":
        return None
    return int(st.session_state.get(SEED_KEY) or 0)


def sampler() -> Sampler:
    """``Sampler()`` (OS entropy, OpenDP samplers) in release mode; ``Sampler(seed)`` in demo mode."""
    seed = demo_seed()
    return Sampler() if seed is None else Sampler(seed)


# -- widget values kept across pages -----------------------------------------------------------------


def kept(key: str, default: Any = None) -> Any:
    """The value last kept for the widget ``key`` by :func:`persist` (``default`` if none)."""
    return st.session_state.get(KEEP_PREFIX + key, default)


def persist(key: str, default: Any, valid: Callable[[Any], bool] | None = None) -> str:
    """Key for a widget whose value survives leaving the page; call it in place of ``key=`` each run.

    Streamlit drops the state of widgets that a run does not draw (e.g. while another page is shown),
    so the value is also kept under the plain session key ``dp_keep::<key>``. Before the widget is drawn,
    a dropped (or no longer ``valid``) value is re-seeded from that copy, else from ``default``; the
    widget must then be created without its own default (``value=``, ``index=``, ``default=``).
    """
    kept = KEEP_PREFIX + key
    ok = valid or (lambda _v: True)
    if key not in st.session_state or not ok(st.session_state[key]):
        saved = st.session_state.get(kept, default)
        st.session_state[key] = saved if ok(saved) else default
    st.session_state[kept] = st.session_state[key]
    return key
