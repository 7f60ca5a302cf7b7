"""The HTML release report in Chromium, offline: a 40-column table and a chart fit a desktop and a phone
screen (the page never scrolls sideways; the table scrolls inside its box) and nothing is fetched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from playwright.sync_api import Browser

from dpcore.html_report import html_report
from tests.dpcore.test_report import manifest

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_report_fits_the_screen_offline(browser: Browser, tmp_path: Path, width: int, height: int) -> None:
    rng = np.random.default_rng(0)
    wide = pd.DataFrame(
        rng.normal(size=(30, 40)) * 1e3, columns=[f"feature_{i}_long_name" for i in range(40)]
    )
    page_html = html_report(
        "Wide release", manifest(), [go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))], [("Released table", wide)]
    )
    path = tmp_path / "report.html"
    path.write_text(page_html, encoding="utf-8")
    context = browser.new_context(viewport={"width": width, "height": height}, offline=True)
    try:
        page = context.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri())
        page.wait_for_selector(".plotly-graph-div .main-svg")
        page_width, screen = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        box_width, box_scroll = page.evaluate(
            "() => [document.querySelector('.scroll').clientWidth,"
            " document.querySelector('.scroll').scrollWidth]"
        )
        chart = page.locator(".plotly-graph-div").bounding_box()
    finally:
        context.close()
    assert page_width <= screen  # nothing sticks out of the page
    assert box_width < screen and box_scroll > box_width  # the wide table scrolls inside its box
    assert chart is not None and chart["width"] <= screen and chart["height"] > 100
    assert requests == [path.as_uri()]  # only the file itself: plotly.js is inside it
