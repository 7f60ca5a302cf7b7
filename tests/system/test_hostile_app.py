"""Hostile inputs through the app's pages (AppTest): a clear st.error, no exception, the state kept.

One AppTest session per test walks many bad inputs in turn, which also shows the app keeps working
after each of them.
"""

from __future__ import annotations

import gzip
import logging
import time
import tomllib

import numpy as np
import pandas as pd
import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from dpcore.data import MAX_COLUMNS, fingerprint, load_table
from dpcore.errors import DataError
from dpcore.policy import ApproxDP
from tests.paths import ROOT
from tests.prep_table import edit_table
from tests.system.test_hostile_engine import BAD_FILES, WIDE_CSV, _xlsx
from ui.text import md

TIMEOUT = 60
MARKETING = "Sample: Marketing Campaign"
# The uploader itself refuses other extensions (and empty files), so .xls junk arrives named .xlsx.
UPLOAD_CASES = [
    (case, data, name + "x" if name.endswith(".xls") else name, pattern)
    for case, data, name, pattern in BAD_FILES
    if case not in {"empty", "whitespace only"}
]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    for text in [*_errors(at), *(w.value for w in at.warning), *(i.value for i in at.info)]:
        assert "Traceback" not in text and 'File "/' not in text


def _with_marketing(app_path: str) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value(MARKETING).run()
    at.button(key="data_load_sample").click().run()
    assert at.session_state["dp_dataset"].name == MARKETING
    return at


def _upload(at: AppTest, name: str, data: bytes) -> None:
    at.file_uploader(key="data_upload").set_value((name, data, "application/octet-stream")).run()


def test_bad_uploads_show_the_engine_message_and_keep_the_dataset(app_path: str) -> None:
    at = _with_marketing(app_path)
    before = at.session_state["dp_dataset"].fingerprint
    at.radio(key="data_source").set_value("Upload a file").run()
    for case, data, name, _ in UPLOAD_CASES:
        with pytest.raises(DataError) as expected:
            load_table(data, filename=name)
        _upload(at, name, data)
        _clean(at)
        assert _errors(at) == [md(str(expected.value))], case  # shown literally (Markdown-escaped)
        assert at.session_state["dp_dataset"].fingerprint == before, case
        assert any(f"still {MARKETING}" in c.value for c in at.caption), case
    assert len(UPLOAD_CASES) >= 15


CORPUS_STRIDE = 4  # every 4th corpus file through the page (all of them take some minutes)


def test_hostile_corpus_sample_through_the_data_page(app_path: str) -> None:
    """A quarter of tests/hostile_corpus.py uploaded in turn: each shows the engine's own refusal or loads
    the same table (same fingerprint); no exception, no generic "went wrong" note, every run in time."""
    from tests.hostile_corpus import corpus

    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    sample = [case for case in corpus()[::CORPUS_STRIDE] if case.data]  # the uploader refuses empty files
    loaded = refused = 0
    for i, case in enumerate(sample):
        name = f"{i:03d}-{case.name}"
        try:
            expected: str | None = fingerprint(load_table(case.data, filename=name))
        except DataError as err:
            expected = None
            message = md(str(err))
        start = time.perf_counter()
        _upload(at, name, case.data)
        assert time.perf_counter() - start < TIMEOUT, case.id
        _clean(at)
        assert not any("went wrong" in e for e in _errors(at)), (case.id, _errors(at))
        if expected is None:
            assert _errors(at) == [message], case.id
            refused += 1
        else:
            assert not _errors(at), (case.id, _errors(at))
            ds = at.session_state["dp_dataset"]
            assert (ds.name, ds.fingerprint) == (name, expected), case.id
            loaded += 1
    assert len(sample) >= 50 and loaded >= 25 and refused >= 15, (len(sample), loaded, refused)


def test_upload_over_the_limit_is_refused_on_the_page(app_path: str) -> None:
    at = _with_marketing(app_path)
    at.radio(key="data_source").set_value("Upload a file").run()
    old = st_config.get_option("server.maxUploadSize")
    st_config.set_option("server.maxUploadSize", 1)
    try:
        _upload(at, "big.csv", b"x,y\n" + b"1,2\n" * 300_000)
    finally:
        st_config.set_option("server.maxUploadSize", old)
    _clean(at)
    assert len(at.error) == 1 and "above the 1 MB upload limit" in at.error[0].value
    assert "raise server.maxUploadSize" in at.error[0].value
    assert at.session_state["dp_dataset"].name == MARKETING


def test_users_never_see_error_details() -> None:
    """An exception no page catches shows a generic note: no message, type or stack (paths, values)."""
    config = tomllib.loads(
        (ROOT / ".streamlit" / "config.toml").read_text()
    )
    value = config["client"]["showErrorDetails"]
    assert value == st_config.ShowErrorDetailsConfigOptions.NONE.value == "none"


def test_unexpected_errors_are_logged_without_their_message(caplog: pytest.LogCaptureFixture) -> None:
    """Library messages quote cell values; the log gets the type and the stack, never the message."""
    from ui.errors import user_errors

    cell = "0001-01-01 (Alice)"  # the stack shows code lines, where only the variable's name appears
    with caplog.at_level(logging.ERROR, logger="dpcore.app"):
        with user_errors("reading t.parquet") as outcome:
            try:
                raise KeyError(cell)
            except KeyError as inner:
                raise ValueError(f"Out of bounds nanosecond timestamp: {cell}") from inner
    assert outcome.failed and outcome.message.endswith("the details were logged.")
    assert "ValueError" in caplog.text and "KeyError" in caplog.text and "test_hostile_app.py" in caplog.text
    assert "Alice" not in caplog.text and "0001-01-01" not in caplog.text


@pytest.mark.parametrize(
    ("name", "data", "column", "shown"),
    [
        ("accounts.csv", b"account,b\n99999999999999999999,1\n2,3\n", "account", "99999999999999999999"),
        ("huge.xlsx", _xlsx([["a", "b"], [1e308, 1], [2, 3]]), "a", 1e308),
    ],
    ids=["integer beyond int64", "1e308 Excel cell"],
)
def test_huge_numbers_are_shown_on_the_data_page(
    app_path: str, name: str, data: bytes, column: str, shown
) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    _upload(at, name, data)
    _clean(at)
    assert not _errors(at), _errors(at)
    assert at.session_state["dp_dataset"].name == name
    assert at.dataframe[0].value[column].iloc[0] == shown


def test_what_loading_interpreted_is_shown_on_the_data_page(app_path: str) -> None:
    """Issue 11, item 19: the load notes (here: joined gzip members, a repeated header) are on the page."""
    data = gzip.compress(b"a,b\n1,2\n") + gzip.compress(b"a,b\n3,4\n")
    notes = load_table(data, filename="joined.csv.gz").attrs["dpcore_notes"]
    assert len(notes) == 2
    at = _uploaded(app_path, "joined.csv.gz", data)
    _clean(at)
    assert [w.value for w in at.warning] == [md(n) for n in notes]
    assert at.session_state["dp_dataset"].schema.kinds == {"a": "numeric", "b": "numeric"}
    at = _uploaded(app_path, "plain.csv", b"a,b\n1,2\n3,4\n")
    _clean(at)
    assert not at.warning


def test_wide_tables_are_refused_within_seconds_and_500_columns_stay_fast(app_path: str) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    start = time.perf_counter()
    _upload(at, "wide.csv", WIDE_CSV)
    assert time.perf_counter() - start < 10
    _clean(at)
    assert len(at.error) == 1 and "has 10,000 columns; at most 500 can be loaded" in at.error[0].value
    assert "dp_dataset" not in at.session_state
    names = [f"c{i}" for i in range(MAX_COLUMNS)]
    table = pd.DataFrame(np.random.default_rng(0).normal(size=(50, MAX_COLUMNS)).round(3), columns=names)
    _upload(at, "500.csv", table.to_csv(index=False).encode())
    ds = at.session_state["dp_dataset"]
    assert ds.raw.shape == (50, MAX_COLUMNS)
    steps = [
        lambda: edit_table(at, kinds={names[-1]: "categorical"}),
        lambda: edit_table(at, features=names[:5]),
        lambda: at.radio(key="data_scaling").set_value("minmax").run(),
    ]
    for step in steps:
        start = time.perf_counter()
        step()
        assert time.perf_counter() - start < 10  # measured 0.2-0.7 s; 10,000 columns took 5-15 s
        _clean(at)


def _prepare(at: AppTest, features: list[str], *, scaling: str = "none", data_bounds: bool = True) -> None:
    edit_table(at, features=features)
    at.radio(key="data_scaling").set_value(scaling).run()
    box = at.checkbox(key="data_bounds_ok")
    (box.check() if data_bounds else box.uncheck()).run()
    at.button(key="data_prepare").click().run()


@pytest.mark.parametrize(
    ("name", "content", "kind_change", "features", "scaling", "message"),
    [
        ("one.csv", b"a,b\n1,2\n", None, ["a"], "none", "at least 2 are needed"),
        ("flat.csv", b"a,b\n5,1\n5,2\n5,3\n", None, ["a", "b"], "standardize", "Cannot standardise constant"),
        ("holes.csv", b"a,b\n1,2\n,3\n4,5\n", None, ["a", "b"], "none", "missing or infinite values"),
        ("inf.csv", b"a,b\n1,2\ninf,3\n4,5\n", None, ["a", "b"], "none", "1 infinite"),
        ("huge.csv", b"a,b\n1e400,2\n1,3\n4,5\n", None, ["a", "b"], "none", "1 infinite"),
        (
            "geo.csv",
            b"lat,lon\n95,1\n10,2\n",
            ("lat", "latitude"),
            ["lat", "lon"],
            "none",
            "outside [-90, 90]",
        ),
    ],
    ids=["one row", "constant column", "NaN", "inf", "huge number", "latitude out of range"],
)
def test_bad_tables_are_refused_at_prepare(
    app_path: str,
    name: str,
    content: bytes,
    kind_change: tuple[str, str] | None,
    features: list[str],
    scaling: str,
    message: str,
) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    _upload(at, name, content)
    _clean(at)
    assert not _errors(at) and at.session_state["dp_dataset"].name == name
    if kind_change is not None:
        column, kind = kind_change
        edit_table(at, kinds={column: kind})
        if at.error:  # a kind that does not fit the column's values is refused at Apply, nothing changed
            assert len(at.error) == 1 and md(message) in at.error[0].value, _errors(at)
            assert at.session_state["dp_dataset"].schema.kinds[column] != kind
            return
        assert at.session_state["dp_dataset"].schema.kinds[column] == kind
    _prepare(at, features, scaling=scaling)
    _clean(at)
    assert len(at.error) == 1 and md(message) in at.error[0].value, _errors(at)
    assert at.session_state["dp_dataset"].prepared is None
    # the app keeps working: a valid choice on the same table prepares (or explains the missing values)
    _prepare(at, features[:1] if name != "one.csv" else ["a"], scaling="none")
    _clean(at)


POLICY_CASES = [
    ("approx_dp", "pol_eps", 0.0, "epsilon must be a finite number > 0 (got 0)"),
    ("approx_dp", "pol_eps", -1.0, "epsilon must be a finite number > 0 (got -1)"),
    ("approx_dp", "pol_delta", 1.0, "delta must be in (0, 1)"),
    ("approx_dp", "pol_delta", 2.5, "delta must be in (0, 1)"),
    ("approx_dp", "pol_delta", 0.0, "delta must be in (0, 1)"),
    ("local_pdp", "pol_delta", 1.0, "delta must be in (0, 1)"),
    ("pure_dp", "pol_eps", -0.5, "epsilon must be a finite number > 0"),
    ("blowfish", "pol_theta", 0.0, "theta must be a finite number > 0"),
    ("blowfish", "pol_theta", -2.0, "theta must be a finite number > 0"),
    ("geo_ind", "pol_geo_radius", 0.0, "radius_m must be a finite number > 0"),
    ("geo_ind", "pol_geo_level", -1.0, "must be a finite number > 0"),
]
GOOD_VALUES = {
    "pol_eps": 0.7,
    "pol_delta": 1e-7,
    "pol_theta": 1.0,
    "pol_geo_radius": 500.0,
    "pol_geo_level": 1.0,
}


def test_bad_policy_parameters_keep_the_policy(app_path: str) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/policy.py").run()
    good = ApproxDP(0.7, 1e-7)
    at.number_input(key="pol_eps").set_value(0.7).run()
    at.number_input(key="pol_delta").set_value(1e-7).run()
    assert at.session_state["dp_policy"] == good
    for definition, key, value, message in POLICY_CASES:
        at.selectbox(key="pol_definition").set_value(definition).run()
        if definition == "blowfish":
            at.selectbox(key="pol_graph").set_value("distance_threshold").run()
        at.number_input(key=key).set_value(value).run()
        _clean(at)
        assert any(message in e for e in _errors(at)), (definition, key, value, _errors(at))
        assert any("Nothing was changed" in c.value for c in at.caption)
        at.number_input(key=key).set_value(GOOD_VALUES[key]).run()
        _clean(at)
        assert not _errors(at), (definition, key, _errors(at))
        at.selectbox(key="pol_definition").set_value("approx_dp").run()
        at.number_input(key="pol_eps").set_value(0.7).run()
        at.number_input(key="pol_delta").set_value(1e-7).run()
        assert at.session_state["dp_policy"] == good


def test_bad_budgets_are_refused_and_the_budget_kept(app_path: str) -> None:
    at = _with_marketing(app_path)
    at.switch_page("pages/policy.py").run()
    at.number_input(key="pol_budget_eps").set_value(2.0).run()
    at.number_input(key="pol_budget_delta").set_value(1e-5).run()
    _save_budget(at)
    assert any("Budget saved" in s.value for s in at.success)
    for eps, delta, message in [
        (0.0, 1e-5, "must be > 0"),
        (-3.0, 1e-5, "must be > 0"),
        (2.0, 1.0, md("delta must be in [0, 1)")),
        (2.0, -1e-3, md("delta must be in [0, 1)")),
    ]:
        at.number_input(key="pol_budget_eps").set_value(eps).run()
        at.number_input(key="pol_budget_delta").set_value(delta).run()
        _save_budget(at)
        _clean(at)
        assert any(message in e for e in _errors(at)), (eps, delta, _errors(at))
        status = _ledger_status(at)
        assert (status.epsilon_total, status.delta_total) == (2.0, 1e-5)


def _save_budget(at: AppTest) -> None:
    at.text_input(key="pol_budget_reason").input("test budget").run()
    next(b for b in at.button if b.label == "Save budget").click().run()


def _ledger_status(at: AppTest):
    from dpcore.ledger import Ledger
    from dpcore.plan import policy_account
    from ui.state import DEFAULT_POLICY

    ds = at.session_state["dp_dataset"]
    ledger = Ledger()
    try:
        return ledger.budget(policy_account(ds.dataset_id, DEFAULT_POLICY))
    finally:
        ledger.close()


def _uploaded(app_path: str, name: str, content: bytes) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    _upload(at, name, content)
    assert at.session_state["dp_dataset"].name == name
    return at


def test_k_larger_than_rows_is_refused_on_the_kmeans_page(app_path: str) -> None:
    at = _uploaded(app_path, "five.csv", b"a,b\n0.1,0.2\n0.3,0.1\n0.9,0.8\n0.7,0.9\n0.5,0.5\n")
    _prepare(at, ["a", "b"], scaling="minmax")
    assert at.session_state["dp_dataset"].prepared is not None
    at.switch_page("pages/kmeans.py").run()
    _clean(at)
    at.number_input(key="km_k").set_value(9).run()
    _clean(at)
    assert any("exceeds the number of rows (5)" in e for e in _errors(at)), _errors(at)
    at.number_input(key="km_k").set_value(2).run()
    _clean(at)
    # only the release is refused (bounds read from the data), with the reason; the page keeps working
    assert _errors(at) and all("read values from the data" in e for e in _errors(at)), _errors(at)


def test_out_of_range_coordinates_and_bad_region_on_the_locations_page(app_path: str) -> None:
    at = _uploaded(app_path, "geo.csv", b"lat,lon\n95,1\n10,2\n12,3\n")
    edit_table(at, kinds={"lat": "latitude"})  # refused: the table keeps lat numeric
    assert any(md("outside [-90, 90] degrees") in e for e in _errors(at)), _errors(at)
    at.switch_page("pages/locations.py").run()
    _clean(at)
    assert not _errors(at) and any("no column marked latitude" in i.value for i in at.info)

    at = _uploaded(app_path, "ok.csv", b"lat,lon\n45,1\n10,2\n12,3\n")
    suffix = at.session_state["dp_dataset"].dataset_id
    at.switch_page("pages/locations.py").run()
    _clean(at)
    assert not _errors(at)
    at.selectbox(key=f"loc_region_{suffix}").set_value("Custom (enter the box below)").run()
    for i, edge in enumerate((60.0, 50.0, -10.0, 10.0)):  # south edge above the north edge
        at.number_input(key=f"loc_box_{i}_{suffix}").set_value(edge).run()
    _clean(at)
    assert any(md("lat_min < lat_max") in e for e in _errors(at)), _errors(at)
    at.number_input(key=f"loc_box_0_{suffix}").set_value(0.0).run()
    _clean(at)
    assert not _errors(at)


def _sampler_script() -> None:
    import streamlit as st

    from ui import state

    s = state.random_state()
    st.markdown(f"{s.mode} {s.seed}")


def test_ui_sampler_is_secure_in_release_mode_even_with_a_stale_seed() -> None:
    at = AppTest.from_function(_sampler_script, default_timeout=TIMEOUT)
    at.session_state["dp_seed"] = 7  # a seed left over from demo mode
    at.run()
    assert [m.value for m in at.markdown] == ["secure None"]
    at.session_state["dp_mode"] = "demo"
    at.run()
    assert [m.value for m in at.markdown] == ["demo 7"]
