"""A bad name can never break a session (issue 25, finding 5; AppTest): a file name that cannot name a
dataset is refused at upload with the limit and the fix, and a session plan holding a bad name, kind or
value is restored without it, saying so.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.sessions import SessionStore

TIMEOUT = 120
MARKETING = "Sample: Marketing Campaign"
PAGES = ("pages/data.py", "pages/kmeans.py", "pages/policy.py", "pages/home.py")


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _open(app_path: str, token: str | None = None) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    if token is not None:
        at.query_params["s"] = token
    return _ok(at.run())


def _with_marketing(app_path: str) -> AppTest:
    at = _open(app_path)
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value(MARKETING).run()
    at.button(key="data_load_sample").click().run()
    assert _ok(at).session_state["dp_dataset"].name == MARKETING
    return at


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("n" * 300 + ".csv", "The file name has 304 characters; at most 255 are allowed"),
        ("   ", "The file name is empty; rename the file and upload it again"),
    ],
    ids=["300 characters", "blank"],
)
def test_a_file_name_that_cannot_name_a_dataset_is_refused_and_every_page_works(
    app_path: str, name: str, message: str
) -> None:
    """Before: an uncaught ParameterError on every page, and on every reload of the session's URL."""
    at = _with_marketing(app_path)
    token = at.query_params["s"]
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value((name, b"a,b\n1,2\n3,4\n", "text/csv")).run()
    assert any(message in e.value for e in _ok(at).error), [e.value for e in at.error]
    assert at.session_state["dp_dataset"].name == MARKETING
    for page in PAGES:
        _ok(at.switch_page(page).run())
    assert _open(app_path, token).session_state["dp_dataset"].name == MARKETING


def _saved_with(app_path: str, **dataset) -> str:
    """The token of a session whose saved plan holds the Marketing sample with ``dataset`` changed."""
    at = _with_marketing(app_path)
    token = at.query_params["s"]
    store = SessionStore(config.ledger_url())
    plan = store.load(token)
    store.update(token, {"dataset": {**plan["dataset"], **dataset}})
    return token


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"name": "n" * 300}, "The dataset name has 300 characters"),
        ({"name": ""}, "The dataset name is empty"),
        ({"schema_kinds": "bogus"}, "include bogus, not a kind"),
    ],
    ids=["name of 300 characters", "empty name", "unknown kind"],
)
def test_a_session_plan_with_a_bad_name_or_kind_restores_without_it(
    app_path: str, change: dict, said: str
) -> None:
    """Before: the bad name was restored and broke every page again on each reload."""
    kind = change.pop("schema_kinds", None)
    if kind is not None:
        at = _with_marketing(app_path)
        token = at.query_params["s"]
        store = SessionStore(config.ledger_url())
        dataset = store.load(token)["dataset"]
        dataset["schema"]["kinds"] = {column: kind for column in dataset["schema"]["kinds"]}
        store.update(token, {"dataset": dataset})
    else:
        token = _saved_with(app_path, **change)
    again = _open(app_path, token)
    notices = [w.value for w in again.warning]
    for page in PAGES:
        _ok(again.switch_page(page).run())
    assert any("Session restored, except the dataset" in n and said in n for n in notices), notices
    assert "dp_dataset" not in again.session_state or again.session_state["dp_dataset"].name == MARKETING
    _open(app_path, token)  # and the next reload works too


def test_a_restored_field_value_outside_its_range_is_replaced_by_the_default(app_path: str) -> None:
    """A kept value Streamlit refuses (above the field's maximum) would fail the Data page on every run."""
    at = _open(app_path)
    token = at.query_params["s"]
    SessionStore(config.ledger_url()).update(
        token, {"widgets": {"data_source": "Synthetic blobs", "data_blobs_n": 10**9, "data_blobs_k": -3}}
    )
    again = _open(app_path, token)
    _ok(again.switch_page("pages/data.py").run())
    assert again.number_input(key="data_blobs_n").value == 1000
    assert again.number_input(key="data_blobs_k").value == 4
