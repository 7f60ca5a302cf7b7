"""A stakeholder's walk in an 800 px window: a fresh app, one click on Present, the Marketing story's
charts readable (legend under the plot, title inside the chart), and the story downloaded as one HTML file
that draws its charts offline, fetching nothing."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.e2e import assert_no_exception, download, go, main

CHART = ".js-plotly-plot"


def _boxes(page: Page, index: int) -> dict[str, dict[str, float]]:
    """Bounding boxes of one chart's svg, plot area, legend and title."""
    return page.evaluate(
        """(i) => {
          const chart = document.querySelectorAll('.js-plotly-plot')[i];
          const box = (sel) => { const r = chart.querySelector(sel).getBoundingClientRect();
            return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
          return {svg: box('.main-svg'), plot: box('.nsewdrag'), legend: box('.legend'),
                  title: box('.gtitle')};
        }""",
        index,
    )


def test_present_the_marketing_story_at_800_px_and_download_it(page: Page, tmp_path: Path) -> None:
    page.set_viewport_size({"width": 800, "height": 900})
    go(page, "Present")
    body = main(page)
    expect(body.get_by_text("How much worse the customer segments").first).to_be_visible()
    expect(page.locator(CHART)).to_have_count(3)
    assert_no_exception(page)
    for i in range(3):
        boxes = _boxes(page, i)
        svg, plot, legend, title = boxes["svg"], boxes["plot"], boxes["legend"], boxes["title"]
        assert legend["top"] >= plot["bottom"] - 1, f"chart {i}: the legend overlaps the plot: {boxes}"
        assert plot["right"] - plot["left"] > 0.6 * (svg["right"] - svg["left"]), f"chart {i}: {boxes}"
        assert svg["left"] - 1 <= title["left"] and title["right"] <= svg["right"] + 1, f"chart {i}: {boxes}"
    name, content = download(page, "Download this story")
    assert name.startswith("story-") and name.endswith(".html")
    text = content.decode()
    assert "<script src" not in text and "How much worse the customer segments" in text
    path = tmp_path / name
    path.write_bytes(content)
    context = page.context.browser.new_context(offline=True, viewport={"width": 800, "height": 900})
    try:
        offline = context.new_page()
        requests: list[str] = []
        offline.on("request", lambda r: requests.append(r.url))
        offline.goto(path.as_uri())
        expect(offline.locator(".plotly-graph-div .main-svg").first).to_be_visible()
        assert offline.locator(".plotly-graph-div").count() == 3
    finally:
        context.close()
    assert requests == [path.as_uri()]
