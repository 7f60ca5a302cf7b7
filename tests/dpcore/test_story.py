"""dpcore.story and dpcore.plots.story: the trade-off story's numbers, sentences, charts and one-file HTML."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from dpcore.data import make_blobs
from dpcore.errors import ParameterError
from dpcore.experiments import story as generator
from dpcore.plots.story import EPS_TITLE, SPENT_NAME, centres_chart, clustering_chart, meaning_chart
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


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return summarise(sample_story("us_airports").trials)


def test_shipped_stories_cover_the_grid_with_every_trial():
    for key in SAMPLE_STORIES:
        story = sample_story(key)
        counts = story.trials.groupby("epsilon")["trial"].nunique()
        assert tuple(counts.index) == STORY_EPS and (counts == generator.TRIALS).all()
        assert "seed 0" in story.provenance and "not a release" in story.provenance
        assert story.trials["shift_units"].notna().all() == bool(story.unit)


def test_the_marketing_story_is_reproduced_by_its_generator():
    X, labels, bounds, same_unit = generator.marketing()
    frame = story_trials(
        X, labels, bounds, STORY_EPS, generator.TRIALS, random_state=generator.SEED, same_unit=same_unit
    )
    shipped = (generator.OUT / "marketing_campaign.csv").read_text(encoding="utf-8")
    assert shipped.split("\n", 1)[1] == generator._csv(frame)


def test_story_trials_are_plain_units_and_repeatable():
    X = make_blobs(300, 2, 3, seed=1).to_numpy()
    labels = np.repeat(np.arange(3), 100)
    X = np.vstack([X[labels == k] for k in range(3)])  # any fixed clustering will do
    bounds = (np.full(2, -12.0), np.full(2, 12.0))
    a = story_trials(X, labels, bounds, (0.5, 5.0), 4, random_state=3, same_unit=True)
    b = story_trials(X, labels, bounds, (0.5, 5.0), 4, random_state=3, same_unit=True)
    pd.testing.assert_frame_equal(a, b)
    # a centre's mean distance is the share of the box diagonal times the diagonal
    diagonal = np.sqrt(np.sum((bounds[1] - bounds[0]) ** 2))
    np.testing.assert_allclose(a["shift_units"], a["shift_pct"] / 100 * diagonal)
    assert story_trials(X, labels, bounds, (1.0,), 2, random_state=3)["shift_units"].isna().all()
    with pytest.raises(ParameterError, match="columns"):
        Story("t", "g", "", a.drop(columns="worse_pct"), "p")


def test_sentences_say_what_happens_at_one_epsilon(summary: pd.DataFrame):
    row = at_epsilon(summary, 0.45)
    assert row["epsilon"] == 0.5
    worse = clustering_sentence(row, "airport hubs")
    assert re.fullmatch(
        r"At ε = 0\.5, the airport hubs fit the data [\d.]+% worse than without privacy "
        r"\(half of the runs between [\d.]+% and [\d.]+%\)\.",
        worse,
    )
    assert re.fullmatch(
        r"At ε = 0\.5, centres move by [\d.]+% of the data range, about [\d,]+ km\.",
        centres_sentence(row, "km"),
    )
    assert centres_sentence(row, "").endswith("of the data range.")
    assert "right at most 73% of the time (a coin flip: 50%)" in meaning_sentence(1.0)


def test_charts_read_without_a_presenter(summary: pd.DataFrame):
    figures = [
        clustering_chart(summary, "airport hubs"),
        centres_chart(summary, "km"),
        meaning_chart(STORY_EPS),
    ]
    for fig in figures:
        assert fig.layout.xaxis.title.text == EPS_TITLE and EPS_TITLE.startswith("← more privacy")
        assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type != "log"
        assert fig.layout.legend.orientation == "h"  # under the plot: readable at 800 px
        assert all(len(line) <= 48 for line in fig.layout.title.text.split("<br>"))
        hovered = [t for t in fig.data if t.hovertemplate == "%{customdata}<extra></extra>"]
        assert hovered and all(str(s).startswith(("At ε = ", "ε = ")) for s in hovered[0].customdata)
        assert not any(SPENT_NAME in (t.name or "") for t in fig.data)
    assert figures[0].layout.yaxis.title.text == "worse than without privacy (%)"
    assert figures[1].layout.yaxis.title.text == "shift (% of the data range)"
    assert any(" km." in s for s in figures[1].data[1].customdata)
    assert figures[2].data[0].y == (50.0, 50.0)  # the coin flip


def test_the_budget_already_spent_is_marked(summary: pd.DataFrame):
    for fig in (
        clustering_chart(summary, "hubs", 1.5),
        centres_chart(summary, "km", 1.5),
        meaning_chart(STORY_EPS, 1.5),
    ):
        marker = [t for t in fig.data if (t.name or "").startswith(SPENT_NAME)]
        assert len(marker) == 1 and marker[0].name == f"{SPENT_NAME} (ε = 1.5)"
        assert tuple(marker[0].x) == (1.5, 1.5) and marker[0].line.dash == "dash"
        assert marker[0].customdata[0] == "ε = 1.5 has already been spent on releases of this dataset."
    assert not any((t.name or "").startswith(SPENT_NAME) for t in meaning_chart(STORY_EPS, 0.0).data)


def test_the_story_is_one_self_contained_html_file(summary: pd.DataFrame):
    figures = [clustering_chart(summary, "hubs", 1.0), meaning_chart(STORY_EPS, 1.0)]
    page = story_html("Hubs <demo>", ["At ε = 1, hubs move."], figures, ["note & more"], banner="DEMO MODE")
    assert page.count(get_plotlyjs()) == 1  # plotly.js inlined once
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(http", page)
    assert page.count('class="plotly-graph-div"') == 2
    assert "<h1>Hubs &lt;demo&gt;</h1>" in page and "note &amp; more" in page and "DEMO MODE" in page
