"""What eps do I need? Smallest grid eps meeting an accuracy target, on synthetic and real sweeps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore.accuracy import (
    LOCATION_ERROR_M,
    Target,
    eps_for_target,
    metric_curves,
    tidy,
)
from dpcore.data import fingerprint, infer_schema, load_sample, prepare
from dpcore.errors import ParameterError
from tests.paths import ROOT
from ui.state import Dataset

GRID = (0.5, 1.0, 2.0, 5.0, 10.0)


def _kmeans_frame(curves: dict[str, callable], trials: int = 9) -> pd.DataFrame:
    """A k-means-style wide sweep: fractional_loss = curve(eps, trial), ari = 1 - that."""
    rows = []
    for mech, curve in curves.items():
        for eps in GRID:
            for t in range(trials):
                loss = curve(eps, t)
                rows.append((mech, eps, t, loss, 1.0 - loss))
    return pd.DataFrame(rows, columns=["mechanism", "epsilon", "trial", "fractional_loss", "ari"])


def _by_mech(answers: list) -> dict:
    return {a.mechanism: a for a in answers}


def test_smallest_grid_eps_meeting_the_target_and_interpolation() -> None:
    frame = _kmeans_frame({"dp_lloyd": lambda e, t: 1.0 / e, "white": lambda e, t: 5.0 / e})
    answers = _by_mech(eps_for_target(frame, Target("fractional_loss", 0.25), interpolate=True))
    dp = answers["dp_lloyd"]
    assert dp.epsilon == 5.0 and dp.achieved == pytest.approx(0.2)  # 1/2 = 0.5 > 0.25 >= 1/5
    assert dp.interpolated == pytest.approx(4.0)  # log-log line through (2, 0.5), (5, 0.2): exactly 1/eps
    assert "interpolated" in dp.note and "not measured" in dp.note
    white = answers["white"]
    assert white.epsilon is None and white.achieved is None
    assert white.note == "not reached on the grid: 0.5 at the largest ε = 10"
    plain = _by_mech(eps_for_target(frame, Target("fractional_loss", 0.25)))["dp_lloyd"]
    assert plain.interpolated is None and plain.note == ""


def test_quantile_is_the_share_of_trials_that_must_meet_the_target() -> None:
    frame = _kmeans_frame({"dp_lloyd": lambda e, t: (t + 1) / e})  # trial constants 1..9
    median = _by_mech(eps_for_target(frame, Target("fractional_loss", 1.0, 0.5)))["dp_lloyd"]
    assert median.epsilon == 5.0 and median.achieved == pytest.approx(5 / 5)  # median constant 5
    q90 = float(np.quantile(np.arange(1, 10), 0.9))  # 8.2
    strict = _by_mech(eps_for_target(frame, Target("fractional_loss", 1.0, 0.9)))["dp_lloyd"]
    assert strict.epsilon == 10.0 and strict.achieved == pytest.approx(q90 / 10)
    # A score (higher is better): 90% of trials must reach it, so its 10% quantile is checked.
    ari = _by_mech(eps_for_target(frame, Target("ari", 0.15, 0.9)))["dp_lloyd"]
    assert ari.epsilon == 10.0 and ari.achieved == pytest.approx(1 - q90 / 10)  # 0.18; at eps 5: -0.64


def test_noisy_curve_must_stay_within_the_target_and_nan_trials_fail() -> None:
    bumpy = {0.5: 3.0, 1.0: 0.1, 2.0: 0.4, 5.0: 0.1, 10.0: 0.05}
    frame = _kmeans_frame({"dp_lloyd": lambda e, t: bumpy[e], "blowfish": lambda e, t: 0.01})
    answers = _by_mech(eps_for_target(frame, Target("fractional_loss", 0.2)))
    assert answers["dp_lloyd"].epsilon == 5.0  # met at 1 by chance, not at 2
    assert "not at every larger one" in answers["dp_lloyd"].note
    assert answers["blowfish"].epsilon == 0.5 and "smaller ε may do" in answers["blowfish"].note
    lost = (frame.mechanism == "blowfish") & (frame.epsilon == 10.0) & (frame.trial < 5)
    frame.loc[lost, "fractional_loss"] = np.nan
    failed = _by_mech(eps_for_target(frame, Target("fractional_loss", 0.2)))["blowfish"]
    assert failed.epsilon is None  # 5 of 9 trials missing at the largest eps: the median fails


def test_location_targets_in_metres() -> None:
    rows = []
    for eps in GRID:
        for t in range(5):
            rows += [
                ("planar_laplace", "Planar Laplace", eps, t, LOCATION_ERROR_M, 20_000.0 / eps),
                ("dp_mean", "Mean (DP)", eps, t, LOCATION_ERROR_M, 40_000.0 / eps),
                ("uniform_grid", "UG", eps, t, "median_relative_error", 0.1 / eps),
            ]
    sweep = pd.DataFrame(rows, columns=["mechanism", "label", "epsilon", "trial", "metric", "value"])
    answers = _by_mech(eps_for_target(sweep, Target(LOCATION_ERROR_M, 8_000.0, 0.5)))
    assert set(answers) == {"planar_laplace", "dp_mean"}  # the grid has no error in metres
    assert answers["planar_laplace"].epsilon == 5.0 and answers["planar_laplace"].achieved == 4_000.0
    assert answers["dp_mean"].epsilon == 5.0 and answers["planar_laplace"].label == "Planar Laplace"


def test_bad_targets_are_refused() -> None:
    frame = _kmeans_frame({"dp_lloyd": lambda e, t: 1.0 / e})
    with pytest.raises(ParameterError, match="strictly between 0 and 1"):
        Target("fractional_loss", 0.1, 1.0)
    with pytest.raises(ParameterError, match="finite"):
        Target("fractional_loss", float("nan"))
    with pytest.raises(ParameterError, match="no metric 'wcss'"):
        eps_for_target(frame, Target("wcss", 1.0))
    with pytest.raises(ParameterError, match="mechanism, epsilon and trial"):
        tidy(frame.drop(columns="trial"))


def test_answers_agree_with_a_real_kmeans_sweep() -> None:
    from dpcore.data import make_blobs
    from dpcore.kmeans import sweep, true_clustering

    X = make_blobs(n_samples=300, n_features=3, centers=3, seed=2).to_numpy(dtype=float)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    labels, _ = true_clustering(X, 3)
    bounds = (np.full(3, -4.0), np.full(3, 4.0))
    grid = [0.1, 0.3, 1.0, 3.0, 10.0]
    frame = sweep(X, labels, ["colored", "dp_lloyd"], grid, trials=6, bounds=bounds, random_state=3)
    target = Target("fractional_loss", 0.05, 0.75)
    curves = metric_curves(frame, target)
    answers = eps_for_target(frame, target)
    assert any(a.epsilon is not None for a in answers)
    for answer in answers:
        curve = curves[curves.mechanism == answer.mechanism]
        q75 = frame[frame.mechanism == answer.mechanism].groupby("epsilon").fractional_loss.quantile(0.75)
        np.testing.assert_allclose(curve.value.to_numpy(), q75.to_numpy())
        if answer.epsilon is not None:
            assert (curve[curve.epsilon >= answer.epsilon].value <= 0.05).all()
            below = curve[curve.epsilon < answer.epsilon]
            assert below.empty or below.value.iloc[-1] > 0.05


# ---------------------------------------------------------------- the pages: "use this eps"

APP = str(ROOT / "app.py")
BOUNDS = {"Income": (0, 200000), "MntWines": (0, 1500), "MntMeatProducts": (0, 1800), "Recency": (0, 100)}


def _kmeans_page() -> AppTest:
    raw = load_sample("marketing_campaign")
    schema = infer_schema(raw)
    ds = Dataset(name="Marketing", raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw))
    prepared = prepare(raw, schema, features=list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["dp_dataset"] = replace(ds, prepared=prepared)
    at.run()
    at.switch_page("pages/kmeans.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _budget(name: str, policy_key: str, epsilon: float, neighbours: str = "unbounded") -> None:
    """A budget of ``epsilon`` on dataset ``name``'s account for the policy ``policy_key``."""
    from dpcore import config
    from dpcore.ledger import Ledger, dataset_id_for_name
    from dpcore.plan import policy_account
    from dpcore.policy import make_policy

    delta = 1e-6 if policy_key != "pure_dp" else 0.0
    policy = make_policy(policy_key, epsilon=1.0, delta=delta, neighbours=neighbours)
    Ledger(config.ledger_url()).set_budget(policy_account(dataset_id_for_name(name), policy), epsilon, 1e-5)


def test_kmeans_page_use_this_eps_sets_the_release_panel() -> None:
    _budget("Marketing", "local_pdp", 3.0)
    at = _kmeans_page()
    at.select_slider(key="km_eps_range").set_value((0.5, 2.0))
    at.number_input(key="km_trials").set_value(3)
    at.button(key="km_run").click().run()
    assert not at.exception and not at.get("km_acc_use_colored")
    assert any(c.value.startswith("Diagnostic (uses the true data, not a release)") for c in at.caption)
    before = (at.selectbox(key="km_rel_mech").value, at.number_input(key="km_rel_eps").value)
    assert before == ("dp_lloyd", 1.0)
    frame = at.session_state["km_sweep"].frame
    colored = frame[frame.mechanism == "colored"].groupby("epsilon").fractional_loss.quantile(0.75)
    target = float(f"{colored[2.0]:.3g}") * 1.01  # met at eps = 2, not at 1
    assert colored[1.0] > target
    at.number_input(key="km_acc_value_fractional_loss").set_value(target).run()
    answers = eps_for_target(frame, Target("fractional_loss", target, 0.75))
    (answer,) = [a for a in answers if a.mechanism == "colored"]
    assert answer.epsilon == 2.0
    (table,) = [d.value for d in at.dataframe if "smallest ε on the grid" in d.value.columns]
    row = table[table["mechanism"] == "Colored Gaussian (optimal)"].iloc[0]
    assert row["smallest ε on the grid"] == 2.0 and row["guarantee"].startswith("Local, not DP")
    at.button(key="km_acc_use_colored").click().run()
    assert not at.exception
    assert at.selectbox(key="km_rel_mech").value == "colored"
    assert at.number_input(key="km_rel_eps").value == 2.0
    at.run()  # the choice stays: the release panel keeps it across reruns
    assert at.number_input(key="km_rel_eps").value == 2.0
    shown = dict(zip(at.table[-1].value.index, at.table[-1].value["value"], strict=True))
    assert shown["ε chosen with"].startswith("'What ε do I need?': ")  # the plan says where ε came from
    assert any("was chosen from a non-private comparison on this dataset" in w.value for w in at.warning)
    at.number_input(key="km_rel_eps").set_value(1.5).run()  # typed by the curator: no longer the helper's
    shown = dict(zip(at.table[-1].value.index, at.table[-1].value["value"], strict=True))
    assert "ε chosen with" not in shown


def test_an_answer_above_the_budget_left_is_not_offered_and_never_fills_the_panel() -> None:
    _budget("Marketing", "local_pdp", 1.5)  # the colored answer below is ε = 2
    at = _kmeans_page()
    at.select_slider(key="km_eps_range").set_value((0.5, 2.0))
    at.number_input(key="km_trials").set_value(3)
    at.button(key="km_run").click().run()
    frame = at.session_state["km_sweep"].frame
    colored = frame[frame.mechanism == "colored"].groupby("epsilon").fractional_loss.quantile(0.75)
    at.number_input(key="km_acc_value_fractional_loss").set_value(float(f"{colored[2.0]:.3g}") * 1.01).run()
    assert not at.exception and not at.get("km_acc_use_colored")
    assert any("ε = 2 is more than the 1.5 left" in c.value for c in at.caption)
    panel = (at.selectbox(key="km_rel_mech").value, at.number_input(key="km_rel_eps").value)
    assert panel == ("dp_lloyd", 1.0)


def test_locations_page_use_this_eps_sets_the_release_panel() -> None:
    _budget("Sample: US airports", "approx_dp", 3.0, neighbours="bounded")  # the mean position's account
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/locations.py").run()
    at.button(key="loc_load_airports").click().run()
    at.select_slider(key="loc_eps_range").set_value((0.5, 2.0))
    at.number_input(key="loc_trials").set_value(2)
    at.button(key="loc_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="loc_acc_metric").set_value(LOCATION_ERROR_M).run()
    at.number_input(key=f"loc_acc_value_{LOCATION_ERROR_M}").set_value(1e8).run()  # 100,000 km: all meet
    at.selectbox(key="loc_rel_mech").set_value("dp_mean").run()
    assert at.number_input(key="loc_rel_eps").value == 1.0
    at.button(key="loc_acc_use_dp_mean").click().run()
    assert not at.exception
    assert at.selectbox(key="loc_rel_mech").value == "dp_mean"
    assert at.number_input(key="loc_rel_eps").value == 0.5  # met at the smallest eps of the grid
    assert not at.get("loc_acc_use_planar_laplace") and any(
        "level l = 0.5 with Radius r (metres) = 1,000 on the Privacy policy page" in c.value
        for c in at.caption
    )  # its release spends the policy's level: advice, not a button
