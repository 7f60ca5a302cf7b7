"""The Locations page (AppTest): airports sample, comparison charts, one debit per release, bad inputs.

The US airports sample is loaded through the page's own button (the app's dataset helper); comparisons use
a 2-value eps range and 2 trials to stay fast.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.artifacts import short_id
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Account, Ledger
from dpcore.location.contribution import PER_LOCATION
from dpcore.plan import policy_account
from dpcore.policy import GeoIndistinguishability
from dpcore.steps import Impute
from tests.panel import has_release_button, release_button
from tests.paths import ROOT
from ui.state import DEFAULT_POLICY, POLICY_KEY, Dataset
from ui.text import md

TIMEOUT = 120
APP = str(ROOT / "app.py")


def _page(ds: Dataset | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if ds is not None:
        at.session_state["dp_dataset"] = ds
    at.run()
    at.switch_page("pages/locations.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _airports() -> AppTest:
    at = _page()
    assert any("No dataset yet" in i.value for i in at.info)
    at.button(key="loc_load_airports").click().run()
    assert not at.exception and not _errors(at)
    return at


def _one_line(text: str) -> str:
    """``text`` with the line breaks dpcore.plots.style.wrap_title puts in long chart titles (as HTML or as
    JSON-escaped HTML in a report) read as spaces."""
    return text.replace("\\u003cbr\\u003e", " ").replace("<br>", " ")


def _titles(at: AppTest) -> list[str]:
    return [_one_line(json.loads(el.proto.spec)["layout"]["title"]["text"]) for el in at.get("plotly_chart")]


def _title(el) -> str:
    return json.loads(el.proto.spec)["layout"]["title"]["text"]


def _size(values: list | dict) -> int:
    """Length of a Plotly JSON array (a list, or a base64 typed array {"dtype", "bdata"})."""
    return _array(values).size


def _array(values: list | dict) -> np.ndarray:
    """A Plotly JSON array (a list, or a base64 typed array {"dtype", "bdata", "shape"}) as floats."""
    if isinstance(values, dict):
        flat = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).astype(float)
        return flat.reshape([int(n) for n in str(values.get("shape", flat.size)).split(",")])
    return np.asarray(values, dtype=float)


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_airports_sample_loads_and_comparison_draws_charts():
    at = _airports()
    assert at.session_state["dp_dataset"].name == "Sample: US airports"
    assert (
        at.selectbox(key="loc_lat").value == "latitude" and at.selectbox(key="loc_lon").value == "longitude"
    )
    assert any("Diagnostics (non-private)" in w.value for w in at.warning)
    assert any("outside the public region" in w.value for w in at.warning)  # Alaska, Hawaii, ...
    assert any("Privacy policy page" in link.label for link in at.page_link)  # geo-ind is set there only
    assert not at.get("plotly_chart")
    at.select_slider(key="loc_eps_range").set_value((0.5, 1.0))
    at.number_input(key="loc_trials").set_value(2)
    at.button(key="loc_run").click().run()
    assert not at.exception and not _errors(at)
    _, frame = at.session_state["loc_sweep"]
    assert set(frame["mechanism"]) == {
        "planar_laplace",
        "prilocation",
        "uniform_grid",
        "adaptive_grid",
        "blowfish_mean",
        "dp_mean",
        "dp_hotspots",
        "blowfish_hotspots",
    }
    assert len(frame) == 8 * 2 * 2 and sorted(set(frame["epsilon"])) == [0.5, 1.0]
    hot = frame[frame["metric"] == "fractional_wcss_loss"]
    assert set(hot["label"]) == {"DP hotspots (DP-Lloyd)", "Blowfish hotspots (distance threshold θ)"}
    assert len(hot) == 8 and hot["value"].between(-0.05, 20).all()
    titles = _titles(at)
    assert [t for t in titles if "vs ε" in t] == [
        "Error of every mechanism vs ε (median over trials, band 25–75%)"  # one trade-off chart
    ]
    # the curator diagnostics each spec declares (true vs released, displacement, heatmaps), else its
    # release figures, drawn once with diagnostic noise at the map's ε
    charts = {el.key: json.loads(el.proto.spec) for el in at.get("plotly_chart")}
    title = {k: _one_line(c["layout"]["title"]["text"]) for k, c in charts.items()}
    assert title["loc_map_laplace"].startswith("Planar Laplace (per location), l = 1 within r = 1,000 m")
    assert title["loc_map_laplace"].endswith("true vs released")
    points = [t["name"] for t in charts["loc_map_laplace"]["data"] if t["type"] == "scattergl"]
    assert points == ["true", "released"]
    assert title["loc_displacement"].startswith("Planar Laplace displacement, ε = ")
    assert [t["type"] for t in charts["loc_displacement"]["data"]] == ["histogram", "scatter"]
    assert title["loc_map_pri"].endswith("true vs released visits")
    assert title["loc_heat_ug"].startswith("Private density (uniform grid, ε = 1")
    assert title["loc_heat_ag"].startswith("Private density (adaptive grid, ε = 1")
    hotspots = charts["loc_map_hotspots_dp"]
    assert title["loc_map_hotspots_dp"].startswith("DP hotspots (DP-Lloyd), ε = 1, K = 8: true vs released")
    assert "mean great-circle distance from each true hotspot" in title["loc_map_hotspots_dp"]
    names = [t.get("name", "") for t in hotspots["data"]]
    assert names[1:3] == ["locations (raw data)", "true hotspots (non-private k-means)"]
    assert names[3].startswith("DP hotspots (DP-Lloyd): ") and names[3].endswith(" km")
    assert [_size(t["x"]) for t in hotspots["data"][2:]] == [8, 8]
    assert hotspots["layout"]["yaxis"]["scaleanchor"] == "x"  # equal ground scale, offline
    assert "loc_map_hotspots_blowfish" in charts
    assert any(t.startswith("Mean position (bounded DP): released") for t in title.values())  # no diagnostic
    assert all(
        any(a["text"].startswith("Diagnostic") for a in c["layout"]["annotations"]) for c in charts.values()
    )  # every map read the true data: stamped as a diagnostic
    assert at.checkbox(key="loc_tiles").value is False  # offline by default: no tile server
    assert not any(t.get("type") == "scattermap" for c in charts.values() for t in c["data"])
    raw = _array(charts["loc_heat_ug"]["data"][0]["z"])
    assert raw.min() < 0  # noisy counts as released
    at.checkbox(key="loc_heat_nonneg").check().run()
    assert not at.exception and not _errors(at)
    heat = next(json.loads(el.proto.spec) for el in at.get("plotly_chart") if el.key == "loc_heat_ug")
    assert "made non-negative by post-processing" in _one_line(heat["layout"]["title"]["text"])
    fixed = _array(heat["data"][0]["z"])
    assert fixed.min() >= 0 and fixed.sum() == pytest.approx(raw.sum())  # projection keeps the total
    at.run()
    assert at.session_state["loc_sweep"][1] is frame  # a rerun keeps the comparison


def test_release_debits_once_across_reruns(downloads):
    at = _airports()
    geo = GeoIndistinguishability.from_level(1.0, 2000.0)
    at.session_state[POLICY_KEY] = geo  # set on the Privacy policy page
    ds = at.session_state["dp_dataset"]
    ledger, account = Ledger(config.ledger_url()), policy_account(ds.dataset_id, geo)
    ledger.set_budget(account, 3.0)
    at.run()
    assert at.selectbox(key="loc_rel_mech").value == "planar_laplace"
    assert any(c.value == f"Protection: {PER_LOCATION}." for c in at.caption)
    assert any(i.value.startswith("Geo-indistinguishability at level 1 within 2000 metres") for i in at.info)
    assert not at.download_button
    release_button(at, "locations").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(account)
    assert record.definition == "geo_ind" and record.mechanism == "planar_laplace"
    assert record.epsilon == pytest.approx(1.0)  # level 1 within r = 2000 m
    stem = f"locations-{short_id(record.request_id)}"
    assert sorted(b.label for b in at.download_button) == sorted(
        f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html")
    )
    table = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    assert list(table.columns) == ["lat", "lon"] and len(table) == 3376
    assert table["lat"].between(24, 50).all() and table["lon"].between(-125, -66).all()  # clamped to region
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["definition"] == "geo_ind" and manifest["sampling_mode"] == "secure"
    assert manifest["scope"] == PER_LOCATION and manifest["details"]["scope"] == PER_LOCATION
    assert manifest["parameters"]["radius_m"] == 2000.0
    u = manifest["details"]["grid_step_m"]  # exact sampling on a public grid: level 1 within r + 1.5 u
    assert u == 1.0 and manifest["details"]["epsilon_per_metre"] == pytest.approx(1 / (2000.0 + 1.5 * u))
    report = _one_line(downloads[f"{stem}-report.html"].decode())
    assert "Planar Laplace (per location): released locations" in report
    assert "True locations (raw data)" not in report and "Diagnostic:" not in report
    at.run().run()
    assert len(ledger.releases(account)) == 1
    assert ledger.remaining(account)[0] == pytest.approx(2.0)


def test_release_with_a_user_column_protects_a_user_with_the_public_maximum(downloads):
    at = _airports()
    ds = at.session_state["dp_dataset"]
    ledger = Ledger(config.ledger_url())
    account = policy_account(ds.dataset_id, DEFAULT_POLICY, per_user=4)  # a per-user budget of its own
    ledger.set_budget(account, 3.0, 1e-6)
    at.selectbox(key="loc_user").set_value("country").run()  # one user: every row is in the USA
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    at.number_input(key="loc_max_per_user").set_value(4).run()
    scope = "per user (at most 4 locations each)"
    assert any(c.value == f"Protection: {scope}." for c in at.caption)
    assert any(scope in i.value and i.value.startswith("Differential privacy with ε = 1") for i in at.info)
    release_button(at, "locations").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(account)
    manifest = json.loads(downloads[f"locations-{short_id(record.request_id)}-manifest.json"])
    assert manifest["scope"] == scope and manifest["details"]["max_per_user"] == 4
    assert manifest["parameters"]["max_per_user"] == 4


@pytest.mark.parametrize("mech", ["dp_hotspots", "blowfish_hotspots"])
def test_hotspot_release_debits_once_and_offers_downloads(downloads, mech):
    at = _airports()
    ds = at.session_state["dp_dataset"]
    if mech == "dp_hotspots":
        account = policy_account(ds.dataset_id, DEFAULT_POLICY)
        sentence = "Differential privacy with ε = 1: for two datasets that differ by one row added or removed"
    else:
        account = Account(ds.dataset_id, "blowfish", "one location replaced by one at most 50000 m away")
        sentence = "Blowfish privacy with ε = 1: for two datasets that differ by one location replaced by one"
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(account, 3.0)
    at.number_input(key="loc_hotspot_k").set_value(5).run()
    at.selectbox(key="loc_rel_mech").set_value(mech).run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    label = "DP hotspots (DP-Lloyd)" if mech == "dp_hotspots" else "Blowfish hotspots (distance threshold θ)"
    assert any(i.value.startswith(sentence) for i in at.info)
    release_button(at, "locations").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(account)
    assert record.mechanism == mech and record.epsilon == pytest.approx(1.0)
    assert record.definition == ("pure_dp" if mech == "dp_hotspots" else "blowfish")
    stem = f"locations-{short_id(record.request_id)}"
    assert sorted(b.label for b in at.download_button) == sorted(
        f"{stem}{s}" for s in (".csv", ".json", "-manifest.json", "-report.html")
    )
    table = pd.read_csv(io.BytesIO(downloads[f"{stem}.csv"]))
    assert list(table.columns) == ["hotspot", "lat", "lon"] and len(table) == 5
    assert table["lat"].between(24, 50).all() and table["lon"].between(-125, -66).all()
    manifest = json.loads(downloads[f"{stem}-manifest.json"])
    assert manifest["sampling_mode"] == "secure" and manifest["parameters"]["hotspot_k"] == 5
    assert manifest["parameters"].get("theta_m") == (None if mech == "dp_hotspots" else 50_000.0)
    report = _one_line(downloads[f"{stem}-report.html"].decode())
    assert f"<title>{label}: released output</title>" in report
    assert "released hotspot centres (K = 5" in report
    assert "true hotspots" not in report and "Diagnostic:" not in report
    at.run().run()
    assert len(ledger.releases(account)) == 1
    assert ledger.remaining(account)[0] == pytest.approx(2.0)


def test_over_budget_release_is_refused_without_downloads():
    at = _airports()
    ds = at.session_state["dp_dataset"]
    ledger, account = Ledger(config.ledger_url()), policy_account(ds.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(account, 0.5, 1e-6)
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    assert any("more than the budget left" in w.value for w in at.warning)
    assert release_button(at, "locations").disabled
    assert not at.download_button and ledger.releases(account) == []


def test_bad_inputs_show_messages():
    at = _airports()
    suffix = at.session_state["dp_dataset"].dataset_id
    at.selectbox(key=f"loc_region_{suffix}").set_value("Custom (enter the box below)").run()
    south = at.number_input(key=f"loc_box_0_{suffix}")
    assert south.value == 24.0  # the custom box starts from the region chosen before
    south.set_value(60.0).run()
    assert not at.exception
    assert any(md("lat_min < lat_max") in e for e in _errors(at))  # shown literally (Markdown-escaped)
    assert "loc_run" not in [b.key for b in at.button]  # the rest of the page waits for a valid region
    at.number_input(key=f"loc_box_0_{suffix}").set_value(24.0).run()
    assert not _errors(at)
    at.selectbox(key="loc_rel_mech").set_value("dp_mean").run()
    at.number_input(key="loc_rel_eps").set_value(0.0).run()
    assert not at.exception and any("epsilon" in e for e in _errors(at))
    assert not has_release_button(at, "locations")


def test_out_of_range_coordinates_show_a_message():
    raw = pd.DataFrame({"latitude": [40.0, 95.0, 41.0], "longitude": [-100.0, -101.0, -102.0]})
    schema = infer_schema(raw).with_kind("latitude", "latitude")  # as the curator marks it on the Data page
    ds = Dataset(name="bad", raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw))
    at = _page(ds)
    assert not at.exception
    assert any(md("latitude must be in [-90, 90]") in e for e in _errors(at))
    assert "loc_run" not in [b.key for b in at.button]


def test_release_refuses_settings_that_changed_since_the_comparison():
    at = _airports()
    ds = at.session_state["dp_dataset"]
    ledger, account = Ledger(config.ledger_url()), policy_account(ds.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(account, 3.0, 1e-6)
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    at.select_slider(key="loc_eps_range").set_value((0.5, 1.0))
    at.number_input(key="loc_trials").set_value(1)
    at.button(key="loc_run").click().run()
    assert not at.exception and not release_button(at, "locations").disabled
    at.number_input(key="loc_hotspot_k").set_value(5).run()  # another mechanism's parameter
    assert not release_button(at, "locations").disabled  # the grid's comparison still holds
    at.selectbox(key="loc_neighbours").set_value("bounded").run()  # the grid's own, changed after comparing
    assert release_button(at, "locations").disabled
    assert any("Neighbouring datasets changed since the last comparison" in w.value for w in at.warning)
    at.selectbox(key="loc_neighbours").set_value("unbounded").run()  # set back: what was compared
    assert not release_button(at, "locations").disabled
    assert ledger.releases(account) == []


def _with_imputed(column: str) -> Dataset:
    """A location table whose ``column`` had missing values filled with its median (data-derived)."""
    from dpcore.data import handle_missing

    rng = np.random.default_rng(0)
    raw = pd.DataFrame(
        {"latitude": rng.uniform(30, 45, 60), "longitude": rng.uniform(-120, -80, 60), "income": 1.0}
    )
    raw.loc[[3, 9], column] = np.nan
    cleaned = handle_missing(raw, [column], "median")
    return Dataset(
        name="imputed.csv", raw=raw, schema=infer_schema(raw), cleaned=cleaned, fingerprint=fingerprint(raw),
        cleaning=(Impute("median", (column,)),), steps=(("median", (column,)),),
    )


def _in_us(at: AppTest) -> AppTest:
    suffix = at.session_state["dp_dataset"].dataset_id
    return at.selectbox(key=f"loc_region_{suffix}").set_value("Contiguous US (24, 50, -125, -66)").run()


def test_imputing_a_column_the_release_does_not_read_neither_blocks_nor_voids_it() -> None:
    ds = _with_imputed("income")
    Ledger(config.ledger_url()).set_budget(policy_account(ds.dataset_id, DEFAULT_POLICY), 2.0, 1e-5)
    at = _in_us(_page(ds))
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    assert not at.exception and not _errors(at)
    shown = at.table[-1].value["value"].tolist()
    assert "median on income (0 rows removed) (no column this release reads: no effect on it)" in shown
    assert not release_button(at, "locations").disabled
    release_button(at, "locations").click().run()
    (record,) = Ledger(config.ledger_url()).releases(dataset_id=ds.dataset_id)
    assert record.definition == "pure_dp"
    assert not any("does not cover" in s.value for s in at.info)  # the guarantee stands


def test_imputing_a_coordinate_refuses_a_dp_release_with_a_location_fix() -> None:
    at = _in_us(_page(_with_imputed("latitude")))
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    (refusal,) = [e for e in _errors(at) if "read values from the data" in e]
    assert "drop the rows missing a coordinate or user instead of imputing" in refusal
    assert "min-max" not in refusal and "public bounds" not in refusal
