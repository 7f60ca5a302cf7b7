"""The privacy/utility trade-off told to stakeholders: the Present page and its one-file HTML download.

A story is a table of noisy trials of one ε-differentially private mechanism, DP-Lloyd (Blum et al. 2005;
Su et al. 2016), on one dataset at each ε of a grid, in plain units:

- ``worse_pct`` = 100 (WCSS(noisy centres) − WCSS(true)) / WCSS(true): how much worse the clustering
  fits the rows than the same clustering without privacy (Ravi, Scaglione & Peisert 2021, Fig. 2);
- ``shift_pct`` = 100 sqrt(Σ_k ||c̃_k − c_k||² / (K Σ_j w_j²)): how far the centres move, as a share of
  the public range (w_j the width of feature j's bounds; with equal widths, the root-mean-square shift of
  one coordinate divided by its range);
- ``shift_units`` = sqrt(Σ_k ||c̃_k − c_k||² / K): the root-mean-square distance a centre moves, in the
  data's own unit (kilometres for locations) when every feature shares it, else NaN.

Every number comes from diagnostic noise on the true data (``dpcore.kmeans.sweep``), so a story is shown
for a shipped public sample (precomputed, reproducibly, by ``python -m dpcore.experiments.story``), or
for the current dataset in labelled demo mode; never for a real dataset in release mode, where the
Present page shows only what ε means and what was released. ``truthful_probability`` (Machanavajjhala &
Kifer 2015) says what ε means at each point. No Streamlit here.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from importlib import resources
from io import StringIO

import numpy as np
import pandas as pd

from dpcore.errors import ParameterError
from dpcore.kmeans import KMEANS
from dpcore.policy import odds_bound, truthful_probability
from dpcore.registry import presented

__all__ = [
    "MECHANISM",
    "SAMPLE_STORIES",
    "STORY_EPS",
    "Story",
    "at_epsilon",
    "centres_sentence",
    "clustering_sentence",
    "meaning_sentence",
    "sample_story",
    "story_html",
    "story_trials",
    "summarise",
]

MECHANISM = presented(KMEANS).key  # the mechanism whose release the story tells (DP-Lloyd)
STORY_EPS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 10.0)
COLUMNS = ("epsilon", "trial", "worse_pct", "shift_pct", "shift_units")
BAND = (0.25, 0.75)  # the middle half of the trials


@dataclass(frozen=True)
class Story:
    """One dataset's story: ``title`` (what the data is), ``groups`` (what a cluster centre stands for,
    plural, e.g. "customer segments"), ``unit`` of ``shift_units`` ("" when the features have different
    units), ``trials`` (the tidy table of :data:`COLUMNS`), ``provenance`` (how it was computed) and
    ``demo`` (computed from the current dataset's own rows in demo mode)."""

    title: str
    groups: str
    unit: str
    trials: pd.DataFrame
    provenance: str
    demo: bool = False

    def __post_init__(self) -> None:
        missing = set(COLUMNS) - set(self.trials.columns)
        if missing:
            raise ParameterError(f"a story's trials need the columns {sorted(missing)}; use story_trials().")
        if self.trials.empty or not (self.trials["epsilon"] > 0).all():
            raise ParameterError("a story needs at least one trial at an ε > 0.")


#: The shipped samples' stories: sample key -> (title, groups, unit); their trials are in
#: ``dpcore/samples/story/<key>.csv``, written by ``python -m dpcore.experiments.story``.
SAMPLE_STORIES: dict[str, tuple[str, str, str]] = {
    "marketing_campaign": ("Marketing Campaign: 2,216 customers, 28 columns", "customer segments", ""),
    "us_airports": ("US airports: the contiguous United States", "airport hubs", "km"),
}


def story_trials(
    X: np.ndarray,
    labels: np.ndarray,
    bounds: tuple[np.ndarray, np.ndarray],
    eps_grid: tuple[float, ...] = STORY_EPS,
    trials: int = 20,
    *,
    random_state: int = 0,
    same_unit: bool = False,
) -> pd.DataFrame:
    """The tidy story table of DP-Lloyd on ``X`` (n, d) against the clustering ``labels`` with public
    ``bounds``: ``trials`` diagnostic fits per ε (never a release), ``random_state`` (an int) for
    reproducibility; ``shift_units`` is NaN unless ``same_unit`` (every feature in one unit)."""
    from dpcore.kmeans.sweep import sweep

    lower, upper = (np.asarray(b, dtype=float) for b in bounds)
    frame = sweep(
        X, labels, [MECHANISM], list(eps_grid), trials, bounds=(lower, upper), random_state=random_state
    )
    k = int(np.asarray(labels).max()) + 1
    per_centre = frame["centroid_mse"].to_numpy(dtype=float) / k
    return pd.DataFrame(
        {
            "epsilon": frame["epsilon"].to_numpy(dtype=float),
            "trial": frame["trial"].to_numpy(dtype=int),
            "worse_pct": 100.0 * frame["fractional_loss"].to_numpy(dtype=float),
            "shift_pct": 100.0 * np.sqrt(per_centre / float(np.sum((upper - lower) ** 2))),
            "shift_units": np.sqrt(per_centre) if same_unit else np.nan,
        }
    )


def sample_story(key: str) -> Story:
    """The shipped story of the sample ``key`` (a key of :data:`SAMPLE_STORIES`)."""
    if key not in SAMPLE_STORIES:
        raise ParameterError(f"No story is shipped for {key!r}; choose one of {', '.join(SAMPLE_STORIES)}.")
    title, groups, unit = SAMPLE_STORIES[key]
    text = resources.files("dpcore").joinpath("samples", "story", f"{key}.csv").read_text(encoding="utf-8")
    comments = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    trials = pd.read_csv(StringIO(text), comment="#")
    return Story(title, groups, unit, trials, " ".join(comments))


def summarise(trials: pd.DataFrame) -> pd.DataFrame:
    """Per ε: median and middle half (25th and 75th percentiles) of each story column."""
    lo, hi = BAND
    stats = trials.groupby("epsilon", sort=True)[["worse_pct", "shift_pct", "shift_units"]]
    out = stats.median().add_suffix("_median")
    out = out.join(stats.quantile(lo).add_suffix("_lo")).join(stats.quantile(hi).add_suffix("_hi"))
    return out.reset_index()


def at_epsilon(summary: pd.DataFrame, epsilon: float) -> pd.Series:
    """The summary row of the grid's ε nearest ``epsilon`` (on a log scale)."""
    eps = summary["epsilon"].to_numpy(dtype=float)
    return summary.iloc[int(np.argmin(np.abs(np.log(eps) - math.log(epsilon))))]


def _pct(value: float) -> str:
    if not math.isfinite(value):
        return "an unknown share"
    return f"{value:.0f}%" if abs(value) >= 10 else f"{value:.1f}%"


def _distance(value: float, unit: str) -> str:
    if not (unit and math.isfinite(value)):
        return ""
    if unit == "km" and value < 1:
        return f"about {value * 1000:,.0f} m"
    return f"about {value:,.0f} {unit}" if value >= 10 else f"about {value:.1f} {unit}"


def clustering_sentence(row: pd.Series, groups: str) -> str:
    """At ε, how much worse the private clustering fits, in one sentence."""
    worse = float(row["worse_pct_median"])
    band = f"half of the runs between {_pct(row['worse_pct_lo'])} and {_pct(row['worse_pct_hi'])}"
    if worse < 0.05:
        return f"At ε = {row['epsilon']:g}, the {groups} fit the data as well as without privacy ({band})."
    return (
        f"At ε = {row['epsilon']:g}, the {groups} fit the data {_pct(worse)} worse than without privacy "
        f"({band})."
    )


def centres_sentence(row: pd.Series, unit: str) -> str:
    """At ε, how far the centres move, in one sentence (share of the data range, and a distance)."""
    distance = _distance(float(row["shift_units_median"]), unit)
    return (
        f"At ε = {row['epsilon']:g}, centres move by {_pct(row['shift_pct_median'])} of the data range"
        f"{', ' + distance if distance else ''}."
    )


def meaning_sentence(epsilon: float) -> str:
    """What ε means in one sentence: the best yes/no guess about one person (Machanavajjhala & Kifer 2015)."""
    truthful = truthful_probability(epsilon)
    odds = odds_bound(epsilon)
    return (
        f"ε = {epsilon:g} means: whatever an attacker knew before, a yes/no guess about one person drawn "
        f"from the release is right at most {100 * truthful:.0f}% of the time (a coin flip: 50%); their "
        f"odds change by at most {odds:.3g} times."
    )


_CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;padding:1.5rem 1rem 3rem;"
    "max-width:1000px;color:#1d2733;line-height:1.45}h1{font-size:1.6rem}.figure{max-width:100%;"
    "overflow-x:auto;margin:1.5rem 0}.banner{padding:.75rem 1rem;margin:1rem 0;border-radius:6px;"
    "background:#fde7c2;border:1px solid #e0a030;font-weight:600}.note{color:#5a6877;font-size:.9rem}"
)


def story_html(title: str, sentences: list[str], figures: list, notes: list[str], banner: str = "") -> str:
    """One self-contained HTML page (plotly.js inlined once: opens offline, fetches nothing): ``title``,
    an optional ``banner`` (e.g. demo mode), the ``sentences``, the ``figures`` and the ``notes``."""
    from plotly.offline import get_plotlyjs

    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>',
        f"<h1>{html.escape(title)}</h1>",
    ]
    if banner:
        parts.append(f'<div class="banner">{html.escape(banner)}</div>')
    parts += [f"<p>{html.escape(s)}</p>" for s in sentences]
    for fig in figures:
        chart = fig.to_html(
            full_html=False, include_plotlyjs=False, include_mathjax=False, config={"responsive": True}
        )
        parts.append(f'<div class="figure">{chart}</div>')
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    parts.append("</body></html>")
    return "\n".join(parts)
