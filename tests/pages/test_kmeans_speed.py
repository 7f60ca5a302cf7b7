"""The K-means page's speed paths (AppTest): DP-Lloyd + MCMC in the background with one chain per ε by
default, Cancel stops it, and a comparison this server already ran shows on a second visit without
recomputing (and ticking one more mechanism computes that one only).

Uses the Marketing Campaign sample prepared as in ``tests/pages/test_kmeans.py``.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.test_kmeans import _page, _titles, marketing  # noqa: F401  (marketing is a fixture)
from ui import kmeans_view as view
from ui.state import Dataset

JOIN_S = 120


@pytest.fixture(autouse=True)
def _fresh_memo():
    """Each test starts with an empty comparison memo (it is shared by every session of a process)."""
    view._memo.clear()
    yield
    view._memo.clear()


def _mcmc_page(ds: Dataset, steps: int) -> AppTest:
    at = _page(ds)
    at.select_slider(key="km_eps_range").set_value((0.5, 1.0))
    at.number_input(key="km_trials").set_value(3)
    at.checkbox(key="km_mech_dp_lloyd_mcmc").check().run()
    at.number_input(key="km_mcmc_steps").set_value(steps).run()
    assert not at.exception
    return at


def _stop(job: view.SweepJob) -> None:
    job.cancel.set()
    assert job.thread is not None
    job.thread.join(JOIN_S)


def _stop_when_done(job: view.SweepJob) -> None:
    assert job.thread is not None
    job.thread.join(JOIN_S)
    _stop(job)
    assert not job.running and job.error is None


def test_mcmc_runs_in_the_background_with_one_chain_per_eps(marketing: Dataset):  # noqa: F811
    at = _mcmc_page(marketing, 400)
    assert at.number_input(key="km_mcmc_chains").value == 1  # more on request
    at.button(key="km_run").click().run()
    job: view.SweepJob = at.session_state["km_job"]
    try:
        assert not at.exception and at.button(key="km_run").disabled  # one comparison at a time
        assert at.button(key="km_cancel").label == "Cancel the comparison" and at.get("progress")
        assert job.thread is not None
        job.thread.join(JOIN_S)
        assert not job.running and job.error is None
    finally:
        _stop(job)
    at.run()  # the panel sees the job ended and shows its result
    assert not at.exception and "km_job" not in at.session_state
    frame = at.session_state["km_sweep"].frame
    counts = frame.groupby("mechanism").size().to_dict()
    assert counts.pop("dp_lloyd_mcmc") == 3  # one chain at each of the 3 eps (0.5, 0.7, 1.0)
    assert set(counts.values()) == {3 * 3}  # the other mechanisms: 3 trials at each eps
    assert not at.button(key="km_run").disabled


def test_cancel_stops_the_background_comparison(marketing: Dataset):  # noqa: F811
    at = _mcmc_page(marketing, 5_000_000)  # about 10 minutes of chains if nothing stopped them
    at.button(key="km_run").click().run()
    job: view.SweepJob = at.session_state["km_job"]
    try:
        at.button(key="km_cancel").click().run()
        assert job.cancel.is_set()
        start = time.monotonic()
        assert job.thread is not None
        job.thread.join(JOIN_S)
        assert not job.running and time.monotonic() - start < 60
    finally:
        _stop(job)
    at.run()
    assert not at.exception and "km_job" not in at.session_state and "km_sweep" not in at.session_state
    assert any("Comparison cancelled" in i.value for i in at.info)
    assert view.cached_sweep(job.key, job.params) is None


def test_second_visit_shows_the_comparison_without_recomputing(marketing: Dataset, monkeypatch):  # noqa: F811
    calls: list[list[str]] = []
    sweep = view.sweep
    monkeypatch.setattr(
        view, "sweep", lambda X, lab, mechs, *a, **kw: calls.append(mechs) or sweep(X, lab, mechs, *a, **kw)
    )
    first = _page(marketing)
    first.select_slider(key="km_eps_range").set_value((0.5, 1.0))
    first.number_input(key="km_trials").set_value(2)
    first.button(key="km_run").click().run()
    assert not first.exception and len(calls) == 5  # one part per default mechanism
    shown = first.session_state["km_sweep"]

    second = _page(marketing)  # another session (a reload, a second tab) on the same data
    second.select_slider(key="km_eps_range").set_value((0.5, 1.0))
    second.number_input(key="km_trials").set_value(2).run()
    assert not second.exception and len(calls) == 5  # shown without pressing Run, nothing recomputed
    pd.testing.assert_frame_equal(second.session_state["km_sweep"].frame, shown.frame)
    assert any(title.startswith("Fractional clustering loss") for title in _titles(second))

    second.checkbox(key="km_mech_dp_lloyd_mcmc").check().run()
    second.number_input(key="km_mcmc_steps").set_value(300)
    second.button(key="km_run").click().run()
    job: view.SweepJob = second.session_state["km_job"]
    _stop_when_done(job)
    assert calls[5:] == [["dp_lloyd_mcmc"]]  # only the newly ticked mechanism ran
    second.run()
    assert set(second.session_state["km_sweep"].frame["mechanism"]) == {
        *shown.frame["mechanism"],
        "dp_lloyd_mcmc",
    }
    second.number_input(key="km_trials").set_value(3).run()  # other settings: the charts are not current
    assert any("settings changed" in c.value for c in second.caption) and len(calls) == 6
