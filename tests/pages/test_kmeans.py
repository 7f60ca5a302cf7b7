"""The K-means page (AppTest): comparison charts, one debit per release, refusals and parameter messages.

The Marketing Campaign sample is prepared with dpcore.data.prepare (5 features, curator bounds, min-max
scaling) and put in session state as the Data page would; comparisons use a 4-value eps grid and 3 trials.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.artifacts import short_id
from dpcore.data import fingerprint, infer_schema, load_sample, prepare
from dpcore.diagnostic_sample import DIAGNOSTIC_ROWS
from dpcore.ledger import Ledger
from dpcore.plan import features_step, policy_account
from dpcore.policy import Blowfish, LocalPDP, PartitionGraph, Policy, PureDP
from tests.panel import has_release_button, release_button
from tests.paths import ROOT
from ui import release as ui_release
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 120
APP = str(ROOT / "app.py")
BOUNDS = {
    "Income": (0, 200000),
    "MntWines": (0, 1500),
    "MntMeatProducts": (0, 1800),
    "Recency": (0, 100),
    "NumWebPurchases": (0, 30),
}


def _dataset(raw: pd.DataFrame, name: str, **prep_args) -> Dataset:
    schema = infer_schema(raw)
    ds = Dataset(name=name, raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw))
    return replace(ds, prepared=prepare(raw, schema, **prep_args))


@pytest.fixture(scope="module")
def marketing() -> Dataset:
    raw = load_sample("marketing_campaign")
    return _dataset(raw, "Marketing", features=list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")


@pytest.fixture
def tiny() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.2, 0.25, 0.8, 0.9, 0.95], "y": [1.0, 1.1, 0.9, 3.0, 3.2, 2.9]})
    return _dataset(raw, "tiny", features=["x", "y"], data_bounds_ok=True)


def _page(ds: Dataset | None, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if ds is not None:
        at.session_state["dp_dataset"] = ds
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page("pages/kmeans.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _ledger(ds: Dataset, eps: float, delta: float, policy: Policy = DEFAULT_POLICY) -> Ledger:
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(ds.dataset_id, policy), eps, delta)
    return ledger


def _titles(at: AppTest) -> list[str]:
    """Each chart's title as one line (dpcore.plots.style.wrap_title breaks long ones with <br>)."""
    specs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return [spec["layout"]["title"]["text"].replace("<br>", " ") for spec in specs]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_page_points_to_the_data_page_without_prepared_features(tiny: Dataset):
    at = _page(None)
    assert (
        any("No dataset yet" in i.value for i in at.info) and at.page_link[-1].label == "Go to the Data page"
    )
    at = _page(replace(tiny, prepared=None))
    assert any("not prepared yet" in i.value for i in at.info) and not at.get("plotly_chart")


def test_comparison_draws_the_charts_without_rerunning_the_sweep(marketing: Dataset):
    at = _page(marketing)
    assert any("Diagnostics (non-private)" in w.value for w in at.warning)
    assert "scaling: **minmax**" in at.markdown[0].value and "bounds: **curator**" in at.markdown[0].value
    assert _titles(at) == ["Elbow: WCSS vs K (non-private diagnostic, costs no budget)"]
    badges = [m.value for m in at.markdown if "not ε-DP: calibrated on this dataset" in m.value]
    assert len(badges) == 3  # white, white per cluster, colored (comparison list)
    assert at.checkbox(key="km_mech_dp_lloyd_mcmc").value is False  # slow: off by default
    at.select_slider(key="km_eps_range").set_value((0.5, 2.0))
    at.number_input(key="km_trials").set_value(3)
    at.button(key="km_run").click().run()
    assert not at.exception and not _errors(at)
    result = at.session_state["km_sweep"]
    assert result.params.eps == (0.5, 0.7, 1.0, 2.0) and result.params.trials == 3
    compared = {"white", "white_per_cluster", "colored", "dp_lloyd", "blowfish_lloyd"}
    assert set(result.frame["mechanism"]) == compared
    assert len(result.frame) == 5 * 4 * 3
    assert at.multiselect(key="km_violins").value == []  # violins on request: each slows every rerun
    at.multiselect(key="km_violins").set_value(["Income", "MntWines"]).run()
    titles = _titles(at)
    assert len(titles) == 6, titles
    assert titles[1].startswith("Fractional clustering loss") and titles[2].startswith("PCA embedding")
    assert titles[3] == "Cluster populations: true vs noisy centres"
    assert titles[4:] == [
        "Income per cluster: true vs noisy labels",
        "MntWines per cluster: true vs noisy labels",
    ]
    embedding = json.loads(at.get("plotly_chart")[2].proto.spec)
    names = {t.get("name", "") for t in embedding["data"]}
    assert {"White Gaussian: 1σ noise", "Colored Gaussian (optimal): 1σ noise", "true centres"} <= names
    frame = result.frame
    at.select_slider(key="km_view_eps").set_value(2.0).run()
    at.selectbox(key="km_view_mech").set_value("dp_lloyd").run()
    assert not at.exception and at.session_state["km_sweep"].frame is frame  # not recomputed
    assert "DP-Lloyd (SuLQ) centres (ε = 2)" in {
        t.get("name") for t in json.loads(at.get("plotly_chart")[2].proto.spec)["data"]
    }


def test_release_debits_once_across_reruns_and_clicks(marketing: Dataset, downloads):
    ledger = _ledger(marketing, 2.0, 1e-5)
    account = policy_account(marketing.dataset_id, DEFAULT_POLICY)
    at = _page(marketing)
    assert at.selectbox(key="km_rel_mech").value == "dp_lloyd"
    at.number_input(key="km_rel_eps").set_value(0.5).run()
    assert not at.download_button
    shown = dict(zip(at.table[-1].value.index, at.table[-1].value["value"], strict=True))
    assert shown["Mechanism"] == "DP-Lloyd (SuLQ)" and shown["ε"] == "0.5"
    assert shown["Number of clusters K"] == "4"
    release_button(at, "kmeans").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(dataset_id=marketing.dataset_id)
    assert record.definition == "pure_dp" and record.mechanism == "dp_lloyd" and record.account == account.key
    assert ledger.remaining(account) == pytest.approx((1.5, 1e-5))
    stem = f"kmeans-{short_id(record.request_id)}"
    assert sorted(b.label for b in at.download_button) == sorted(
        f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html")
    )
    table = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    assert len(table) == 4 and "Income [original units]" in table.columns  # public bounds: original units
    assert not [c for c in table.columns if "[scaled]" in c or "fraction" in c]  # and nothing else
    assert table["Income [original units]"].between(0, 200_000).all()  # clipped to the public bounds
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["definition"] == "pure_dp" and manifest["guarantee"].startswith("Differential privacy")
    assert "one row added or removed" in manifest["guarantee"]
    assert manifest["dataset_fingerprint"] == marketing.fingerprint
    assert manifest["sampling_mode"] == "secure" and manifest["parameters"]["n_clusters"] == 4
    assert manifest["details"]["budget_spent"] == pytest.approx(0.5)
    bounds_step = next(p["step"] for p in manifest["preparation"] if p["step"].startswith("features"))
    assert "Income [0.0, 200000.0]" in bounds_step
    income = manifest["details"]["columns"]["Income [original units]"]
    assert "clip it to the curator's public bounds" in income
    assert not any(p["data_derived"] for p in manifest["preparation"])
    report = downloads[f"{stem}-report.html"].decode()
    assert "Diagnostic:" not in report  # no raw-data chart leaves
    assert '<script src="http' not in report  # plotly.js is inlined: no network needed

    at.run().run()
    panel = at.session_state["dp_release::kmeans"]
    panel.result = None  # the session lost its result after the debit (e.g. an interrupted run)
    at.session_state["dp_release::kmeans"] = panel
    at.run()
    assert not has_release_button(at, "kmeans")  # the ledger's release is shown, not a fresh button
    assert any("This plan was released once" in i.value for i in at.info)
    assert sorted(b.label for b in at.download_button) == sorted(
        f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html")
    )
    assert len(ledger.releases(dataset_id=marketing.dataset_id)) == 1


def test_local_release_debits_its_own_account_and_is_recorded_as_local(marketing: Dataset, downloads):
    ledger = _ledger(marketing, 2.0, 1e-5)  # a budget for differential privacy only
    at = _page(marketing)
    at.selectbox(key="km_rel_mech").set_value("colored").run()
    assert release_button(at, "kmeans").disabled  # local epsilons never come out of the DP budget
    assert any("No budget is set for Local (ε, δ) guarantee for this dataset" in w.value for w in at.warning)
    ledger.set_budget(policy_account(marketing.dataset_id, LocalPDP(1.0, 1e-6)), 2.0, 1e-5)
    at.run()
    release_button(at, "kmeans").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(dataset_id=marketing.dataset_id)
    assert record.definition == "local_pdp" and record.delta == pytest.approx(1e-6)
    assert ledger.remaining(policy_account(marketing.dataset_id, DEFAULT_POLICY)) == (2.0, 1e-5)
    manifest = json.loads(next(v for k, v in downloads.items() if k.endswith("-manifest.json")))
    assert manifest["is_local"] is True and "local_notice" in manifest
    assert manifest["parameters"]["calibration"] == "analytic"
    assert "not differential privacy" in manifest["guarantee"]
    assert not manifest["guarantee"].startswith("Differential privacy")


def test_over_budget_release_is_disabled_with_the_reason(marketing: Dataset):
    ledger = _ledger(marketing, 0.3, 0.0)
    at = _page(marketing)
    assert any("more than the budget left" in w.value for w in at.warning)
    assert release_button(at, "kmeans").disabled
    assert not at.download_button and ledger.releases(dataset_id=marketing.dataset_id) == []


def test_bad_parameters_show_messages(marketing: Dataset, tiny: Dataset):
    at = _page(marketing)
    at.selectbox(key="km_calibration").set_value("classic").run()
    assert any("classic Gaussian calibration is valid only for epsilon" in e for e in _errors(at))
    assert at.button(key="km_run").disabled
    at.select_slider(key="km_eps_range").set_value((0.1, 0.7)).run()
    assert not _errors(at) and not at.button(key="km_run").disabled
    at.number_input(key="km_delta").set_value(0.0).run()
    assert any("delta" in e.lower() or "δ" in e for e in _errors(at)) and at.button(key="km_run").disabled
    at.number_input(key="km_k").set_value(1).run()
    assert any("K = 1" in e for e in _errors(at)) and "km_run" not in [b.key for b in at.button]

    at = _page(tiny)  # K = 4 on 6 rows leaves a cluster with one row: no leave-one-out centroid
    assert any("has a single row" in e and "Choose a smaller K" in e for e in _errors(at))
    at.number_input(key="km_k").set_value(2).run()
    # bounds taken from the data: a secure DP release is refused, with the fix
    assert [e for e in _errors(at) if "read values from the data" in e and "public bounds" in e]
    assert features_step(tiny.prepared).bounds == ("data", "data")
    at.number_input(key="km_k").set_value(7).run()
    assert not at.exception and any("exceeds the number of rows (6)" in e for e in _errors(at))


def test_singleton_cluster_blocks_only_the_local_mechanisms(tiny: Dataset):
    at = _page(tiny)  # K = 4 on 6 rows: one cluster has a single row
    error, refusal = _errors(at)  # the local mechanisms are blocked; DP-Lloyd is refused (data bounds)
    assert "read values from the data" in refusal
    assert error.startswith("White Gaussian, White Gaussian per cluster, Colored Gaussian (optimal)")
    assert "has a single row" in error and "Choose a smaller K" in error
    assert all(at.checkbox(key=f"km_mech_{m}_blocked").disabled for m in ("white", "colored"))
    assert at.selectbox(key="km_rel_mech").options == [
        "DP-Lloyd (SuLQ)",
        "Blowfish k-means",
        "DP-Lloyd + MCMC",
        "Gaussian DP-Lloyd (L2 ball)",
        "Private summary + k-means++",
    ]
    at.select_slider(key="km_eps_range").set_value((1.0, 2.0))
    at.number_input(key="km_trials").set_value(2)
    at.button(key="km_run").click().run()
    assert not at.exception and _errors(at) == [error, refusal]
    assert set(at.session_state["km_sweep"].frame["mechanism"]) == {"dp_lloyd", "blowfish_lloyd"}
    assert at.session_state["km_sweep"].params.k == 4


def test_settings_survive_leaving_the_page(marketing: Dataset):
    at = _page(marketing)
    at.number_input(key="km_k").set_value(3)
    at.checkbox(key="km_mech_white").uncheck()
    at.checkbox(key="km_mech_blowfish_lloyd").uncheck()
    at.select_slider(key="km_eps_range").set_value((0.5, 0.7))
    at.number_input(key="km_delta").set_value(1e-4)
    at.selectbox(key="km_calibration").set_value("paper")
    at.number_input(key="km_trials").set_value(2)
    at.selectbox(key="km_rel_mech").set_value("colored").run()
    at.number_input(key="km_rel_eps").set_value(0.7)
    at.number_input(key="km_rel_delta").set_value(1e-7)
    at.selectbox(key="km_rel_calibration").set_value("paper")
    at.button(key="km_run").click().run()
    at.multiselect(key="km_violins").set_value(["Recency"]).run()
    assert not at.exception and not _errors(at)
    expected = {
        "km_k": 3,
        "km_mech_white": False,
        "km_mech_colored": True,
        "km_mech_blowfish_lloyd": False,
        "km_eps_range": (0.5, 0.7),
        "km_delta": 1e-4,
        "km_calibration": "paper",
        "km_trials": 2,
        "km_rel_mech": "colored",
        "km_rel_eps": 0.7,
        "km_rel_delta": 1e-7,
        "km_rel_calibration": "paper",
        "km_violins": ["Recency"],
    }
    at.switch_page("pages/ledger.py").run()
    assert not at.exception and "km_k" not in at.session_state  # Streamlit dropped the widget state
    at.switch_page("pages/kmeans.py").run()
    assert not at.exception
    assert {key: at.session_state[key] for key in expected} == expected
    assert at.number_input(key="km_k").value == 3 and at.selectbox(key="km_rel_mech").value == "colored"
    assert list(at.select_slider(key="km_eps_range").value) == [0.5, 0.7]
    assert at.multiselect(key="km_violins").value == ["Recency"]
    assert _titles(at)[-1] == "Recency per cluster: true vs noisy labels"


def test_bounded_policy_releases_dp_lloyd_calibrated_for_bounded_neighbours(marketing: Dataset, downloads):
    bounded = PureDP(1.0, neighbours="bounded")
    ledger = _ledger(marketing, 2.0, 0.0, bounded)
    at = _page(marketing, dp_policy=bounded)
    at.number_input(key="km_rel_eps").set_value(0.5).run()
    release_button(at, "kmeans").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(dataset_id=marketing.dataset_id)
    assert record.definition == "pure_dp" and record.epsilon == pytest.approx(0.5)
    assert record.account == policy_account(marketing.dataset_id, bounded).key
    manifest = json.loads(next(v for k, v in downloads.items() if k.endswith("-manifest.json")))
    assert "differ by one row's value replaced" in manifest["guarantee"]
    assert manifest["parameters"]["neighbours"] == "bounded"
    log = [query for query, _ in manifest["details"]["budget_log"]]
    assert log and not any(q.startswith("row count") for q in log)  # n is public under bounded neighbours


def test_blowfish_shows_its_units_and_sensitivity_gain(marketing: Dataset):
    at = _page(marketing, dp_policy=Blowfish(1.0, PartitionGraph(0.5)))
    captions = [c.value for c in at.caption]
    units = "in the scaled feature space prepared on the Data page; with min-max scaling, 1.0 = half the"
    assert any("Partition (blocks of width 0.5)" in c and units in c for c in captions)
    (gain,) = [c for c in captions if c.startswith("Noise of Blowfish with the Partition")]
    assert "can be up to 4 times smaller with this graph" in gain  # 5 widths of 2 over 5 blocks of 0.5
    pattern = r"ε = 1, it (gave no gain over bounded DP here|added ([\d.]+) (to ([\d.]+) )?times less)"
    run = re.search(pattern, gain)
    assert run, gain
    assert all(1.0 <= float(v) <= 4.0 for v in run.groups()[1::2] if v)


def test_release_refuses_a_k_that_was_not_compared(marketing: Dataset):
    _ledger(marketing, 2.0, 1e-5)
    at = _page(marketing)
    at.select_slider(key="km_eps_range").set_value((0.5, 0.7))
    at.number_input(key="km_trials").set_value(1)
    at.button(key="km_run").click().run()
    assert not at.exception and not release_button(at, "kmeans").disabled
    at.number_input(key="km_k").set_value(3).run()
    assert release_button(at, "kmeans").disabled
    assert any("K changed since the last comparison" in w.value for w in at.warning)


def test_large_table_compares_on_a_labelled_sample_and_releases_every_row(
    downloads, monkeypatch: pytest.MonkeyPatch
):
    rng = np.random.default_rng(3)
    n = DIAGNOSTIC_ROWS + 10_000
    centres = rng.choice([-5.0, 5.0], size=(n, 2))
    raw = pd.DataFrame(np.clip(centres + rng.normal(size=(n, 2)), -10, 10), columns=["x", "y"])
    bounds = dict.fromkeys("xy", (-10, 10))
    large = _dataset(raw, "large", features=["x", "y"], scaling="minmax", bounds=bounds)
    ledger = _ledger(large, 2.0, 1e-5)
    released: list[int] = []
    original = ui_release.make_release

    def spy(ledger, plan, inputs, **kwargs):
        released.append(inputs.X.shape[0])
        return original(ledger, plan, inputs, **kwargs)

    monkeypatch.setattr(ui_release, "make_release", spy)
    at = _page(large)
    at.select_slider(key="km_eps_range").set_value((0.5, 2.0))
    at.number_input(key="km_trials").set_value(2)
    at.button(key="km_run").click().run()
    assert not at.exception and not _errors(at)
    label = f"Comparison on a uniform sample of 50,000 of {n:,} rows; the release uses every row."
    assert at.session_state["km_sweep"].sample.startswith(label)
    assert [i.value for i in at.info if i.value.startswith(label)]  # shown with the comparison
    at.number_input(key="km_rel_eps").set_value(0.5).run()
    release_button(at, "kmeans").click().run()
    assert not at.exception and not _errors(at)
    assert released == [n]  # the release ran on every row, not on the comparison's sample
    (record,) = ledger.releases(dataset_id=large.dataset_id)
    manifest = json.loads(next(v for k, v in downloads.items() if k.endswith("-manifest.json")))
    assert manifest["dataset_fingerprint"] == large.fingerprint and record.mechanism == "dp_lloyd"
