"""Helpers of the Present page: which story may be told, its cached charts, the budget already spent and
the one-file HTML download.

What a story may show (``dpcore.story``): a shipped sample's precomputed story (public data); the current
dataset's own story only in demo mode, labelled so (it is computed from the table's rows); for a real
dataset in release mode, no accuracy chart at all (those are non-private diagnostics, kept on the
comparison pages), only what ε means and what the ledger says was released. Shipped stories load from a
small CSV (cached once per server), so the first chart shows without computing anything.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dpcore.data import PreparedData
from dpcore.kmeans.sweep import diagnostic_rows
from dpcore.ledger import dataset_id_for_name
from dpcore.plots.story import centres_chart, clustering_chart, meaning_chart
from dpcore.story import (
    SAMPLE_STORIES,
    STORY_EPS,
    Story,
    at_epsilon,
    centres_sentence,
    clustering_sentence,
    meaning_sentence,
    sample_story,
    story_html,
    story_trials,
    summarise,
)
from ui import state
from ui.datasets import SAMPLE_CHOICES
from ui.kmeans_view import data_key, true_clustering

__all__ = [
    "DEMO_BANNER",
    "Told",
    "choices",
    "default_choice",
    "demo_story",
    "download",
    "home_meaning_chart",
    "released_story",
    "sample",
    "shipped",
    "spent_epsilon",
    "tell",
]

DP_DEFINITIONS = ("pure_dp", "approx_dp")
DEMO_TRIALS = 10
DEMO_BANNER = (
    "DEMO MODE: computed from the rows of '{name}' themselves, with diagnostic noise. These charts reveal "
    "information about this table: show them only if it is not sensitive. Nothing here is a privacy release."
)
SAMPLE_NOTE = (
    "Public sample shipped with the app: precomputed once with diagnostic noise ({provenance}). The same "
    "method on a sensitive table is run by the curator on the K-means page and is not shown here."
)
REFUSED = (
    "'{name}' is a real dataset in release mode: its accuracy charts would be computed from its own rows "
    "(non-private diagnostics), so they stay on the K-means and Locations pages, for the curator only. "
    "This story shows only what ε means and what has been released from it. For accuracy charts, present "
    "a shipped sample, or switch the sidebar to demo mode for a table that is not sensitive."
)
_SAMPLE_LABELS = {key: label for label, key in SAMPLE_CHOICES.items() if key in SAMPLE_STORIES}


def choices(ds: state.Dataset | None) -> list[str]:
    """The stories on offer: the shipped samples, then the current dataset unless it is one of them."""
    options = list(_SAMPLE_LABELS.values())
    if ds is not None and (ds.origin or {}).get("sample") not in _SAMPLE_LABELS:
        options.append(f"Current dataset: {ds.name}")
    return options


def default_choice(ds: state.Dataset | None) -> str:
    """The current dataset's sample if it is one, else the first shipped sample (no click needed)."""
    key = (ds.origin or {}).get("sample") if ds is not None else None
    return _SAMPLE_LABELS.get(key, next(iter(_SAMPLE_LABELS.values())))


def sample(label: str) -> str | None:
    """The sample key behind a story label, or None for the current dataset."""
    return next((key for key, text in _SAMPLE_LABELS.items() if text == label), None)


@st.cache_data(show_spinner=False, max_entries=4)
def shipped(key: str) -> Story:
    """The shipped story of sample ``key``, read once per server."""
    return sample_story(key)


@st.cache_data(show_spinner="Computing the story on this dataset (demo mode, diagnostic noise)...")
def _demo(key: str, name: str, _prep: PreparedData, k: int, seed: int) -> Story:
    # the rows a comparison reads: every row, or a uniform sample of a large table
    X, labels = diagnostic_rows(_prep.X, true_clustering(key, _prep.X, k)[0], key)
    trials = story_trials(X, labels, (_prep.lower, _prep.upper), STORY_EPS, DEMO_TRIALS, random_state=seed)
    provenance = f"DP-Lloyd, K = {k}, {DEMO_TRIALS} trials per ε, diagnostic noise with seed {seed}"
    return Story(f"{name} (demo mode)", "clusters", "", trials, provenance, demo=True)


def demo_story(ds: state.Dataset, prep: PreparedData) -> Story:
    """The current dataset's story in demo mode (cached by its data key, K and the demo seed)."""
    k = int(state.kept("km_k", 4) or 4)
    return _demo(data_key(prep), ds.name, prep, k, int(state.demo_seed() or 0))


def spent_epsilon(dataset_id: str) -> float:
    """ε spent so far by the ε-DP and (ε, δ)-DP releases of ``dataset_id`` in the current sampling mode (the
    ledger's records; demo releases spend the demo account only)."""
    records = state.ledger().releases(dataset_id=dataset_id)
    spent = [r.epsilon for r in records if r.definition in DP_DEFINITIONS and r.sampling_mode == state.mode()]
    return float(sum(spent))


def story_dataset_id(label: str, ds: state.Dataset | None) -> str:
    """The ledger id whose spending the story marks: the current dataset's when it is this story's, else
    the shipped sample's under its own name."""
    key = sample(label)
    if ds is not None and (key is None or (ds.origin or {}).get("sample") == key):
        return ds.dataset_id
    return dataset_id_for_name(label)


@dataclass(frozen=True)
class Told:
    """A story ready to show: its title, banner (demo) or note, one sentence per chart at the chosen ε,
    the charts, and closing notes."""

    title: str
    banner: str
    sentences: tuple[str, ...]
    figures: tuple[go.Figure, ...]
    notes: tuple[str, ...]


@st.cache_resource(show_spinner=False, max_entries=16)
def _charts(name: str, _story: Story, spent: float) -> tuple[go.Figure, ...]:
    """The story's charts, once per (story, spent) per server (``name`` names every input)."""
    summary = summarise(_story.trials)
    marker = spent or None
    return (
        clustering_chart(summary, _story.groups, marker),
        centres_chart(summary, _story.unit, marker),
        meaning_chart(STORY_EPS, marker),
    )


def tell(story: Story, epsilon: float, spent: float) -> Told:
    """The story's charts and its sentences at ``epsilon``."""
    name = f"{story.title}|{story.provenance}|{len(story.trials)}|{float(story.trials['worse_pct'].sum())}"
    row = at_epsilon(summarise(story.trials), epsilon)
    sentences = (
        clustering_sentence(row, story.groups),
        centres_sentence(row, story.unit),
        meaning_sentence(float(row["epsilon"])),
    )
    banner = DEMO_BANNER.format(name=story.title.removesuffix(" (demo mode)")) if story.demo else ""
    notes = (
        _spent_note(spent),
        "Method: DP-Lloyd (differentially private k-means; Su et al. 2016), the median of the runs and "
        "their middle half shaded.",
        "" if story.demo else SAMPLE_NOTE.format(provenance=story.provenance),
    )
    return Told(story.title, banner, sentences, _charts(name, story, spent), tuple(n for n in notes if n))


def _spent_note(spent: float) -> str:
    if spent > 0:
        return f"Budget already spent on this dataset: ε = {spent:g} (dashed red line)."
    return "Nothing has been released from this dataset yet (no budget spent)."


def released_story(ds: state.Dataset, epsilon: float, spent: float) -> Told:
    """A real dataset in release mode: what ε means and what was released, nothing from its rows."""
    listed = tuple(
        f"Released {row['time (UTC)']} UTC: {row['mechanism']} at ε = {row['ε']:g}"
        + (f", δ = {row['δ']:g}" if row["δ"] else "")
        for _, row in released_table(ds).iterrows()
    )
    return Told(
        f"{ds.name}: what the privacy budget means",
        "",
        (meaning_sentence(epsilon),),
        (meaning_chart(STORY_EPS, spent or None),),
        (_spent_note(spent), *listed),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60] or "story"


@st.cache_data(show_spinner=False, max_entries=8)
def _html(name: str, _told: Told) -> bytes:
    """The story's one-file HTML, once per ``name`` (which names every text of ``_told``)."""
    told = _told
    return story_html(
        told.title, list(told.sentences), list(told.figures), list(told.notes), told.banner
    ).encode()


def download(told: Told) -> tuple[str, functools.partial[bytes]]:
    """File name and a callable building the story's self-contained HTML when it is downloaded."""
    name = f"{told.title}|{told.sentences}|{told.notes}|{told.banner}"
    prefix = "DEMO-" if told.banner else ""
    return f"{prefix}story-{_slug(told.title)}.html", functools.partial(_html, name, told)


@st.cache_resource(show_spinner=False)
def home_meaning_chart() -> go.Figure:
    """What ε means (no data at all), for the Home page, built once per server."""
    return meaning_chart(STORY_EPS)


def released_table(ds: state.Dataset) -> pd.DataFrame:
    """The dataset's releases as the Ledger page lists them (released outputs only)."""
    from ui.ledger_view import releases_frame

    frame = releases_frame(state.ledger(), ds.dataset_id)
    return frame[["time (UTC)", "mechanism", "privacy definition", "ε", "δ", "mode"]]
