"""The app's pages run without exception with no dataset, with the Marketing sample and with an upload.

AppTest (Streamlit 1.67) drives ``st.file_uploader`` directly, so uploads go through the real widget.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dpcore.data import load_table
from dpcore.errors import DataError
from tests.prep_table import edit_table
from ui import datasets
from ui.nav import PAGES, ROOT, registered_pages

TIMEOUT = 60
GOOD_CSV = b"age,income,city\n34,52000,Oslo\n51,61000,Bergen\n29,39000,Oslo\n"
BAD_CSV = b"a,b\n1,2\n3,4,5,6\n7,8\n"


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _visit_all(at: AppTest, expected: dict[str, str] | None = None) -> None:
    """Every page runs; a page in ``expected`` shows only errors containing its expected text."""
    for path, title, _ in registered_pages():
        at.switch_page(path).run()
        assert not at.exception, f"{title}: {[e.value for e in at.exception]}"
        wanted = (expected or {}).get(title)
        errors = _errors(at)
        assert all(wanted in e for e in errors) if wanted else not errors, f"{title}: {errors}"
        if wanted:
            assert errors, f"{title}: expected an error containing {wanted!r}"


def test_only_existing_pages_are_registered(app_path: str):
    pages = registered_pages()
    assert pages == [p for p in PAGES if (ROOT / p[0]).exists()]
    assert pages[0][0] == "pages/home.py" and {"Data", "Privacy policy", "Ledger"} <= {t for _, t, _ in pages}
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    assert not at.exception
    assert [link.label for link in at.page_link] == [t for _, t, _ in pages[1:]]
    assert at.sidebar.radio(key="dp_mode").value == "secure"  # release mode by default


def test_every_page_runs_without_a_dataset(app_path: str):
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    _visit_all(at)
    at.switch_page("pages/data.py").run()
    assert any("No dataset yet" in i.value for i in at.info)


def test_marketing_sample_load_clean_prepare_then_every_page(app_path: str):
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Sample: Marketing Campaign").run()
    at.button(key="data_load_sample").click().run()
    ds = at.session_state["dp_dataset"]
    assert ds.name == "Sample: Marketing Campaign" and ds.n_rows == 2240 and ds.prepared is None
    assert ds.schema.kinds["ID"] == "identifier" and ds.schema.kinds["Dt_Customer"] == "date"

    edit_table(at, features=["ID"])  # identifiers cannot be features: the table is refused whole
    assert any("an identifier cannot be a feature" in e for e in _errors(at))
    edit_table(at, features=["Income", "MntWines", "Education"])
    at.button(key="data_prepare").click().run()
    assert any("No public bounds" in e or "missing" in e for e in _errors(at))
    assert at.session_state["dp_dataset"].prepared is None  # nothing prepared silently

    at.selectbox(key="data_missing_strategy").set_value("drop").run()
    at.button(key="data_apply_missing").click().run()
    ds = at.session_state["dp_dataset"]
    assert len(ds.cleaned) == 2216 and ds.n_rows == 2240  # 24 rows without income dropped explicitly

    at.button(key="data_prepare").click().run()
    assert any("No public bounds" in e for e in _errors(at))  # bounds are never taken silently
    at.checkbox(key="data_bounds_ok").check().run()
    assert any("leaks information" in w.value or "extreme values" in w.value for w in at.warning)
    at.radio(key="data_scaling").set_value("minmax").run()
    at.button(key="data_prepare").click().run()
    assert not at.exception and not _errors(at)
    prepared = at.session_state["dp_dataset"].prepared
    assert prepared.X.shape == (2216, 3) and prepared.bounds_source == "data (leaks)"
    assert prepared.X.min() >= -1 and prepared.X.max() <= 1
    assert any(w.value.startswith("Leak: Income") for w in at.warning)
    # bounds read from the data: the K-means page refuses a secure DP release and says why
    _visit_all(at, {"K-means": "read values from the data"})


def test_upload_then_bad_upload_keeps_the_previous_dataset(app_path: str):
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value(("people.csv", GOOD_CSV, "text/csv")).run()
    assert not at.exception and not _errors(at)
    ds = at.session_state["dp_dataset"]
    assert ds.name == "people.csv" and ds.n_rows == 3 and list(ds.raw.columns) == ["age", "income", "city"]
    assert ds.schema.kinds == {"age": "numeric", "income": "numeric", "city": "categorical"}
    at.run()  # a rerun with the same file does not reload it
    assert at.session_state["dp_dataset"] is not None and at.session_state["dp_dataset"].name == "people.csv"

    with pytest.raises(DataError) as expected:
        load_table(BAD_CSV, filename="broken.csv")
    at.file_uploader(key="data_upload").set_value(("broken.csv", BAD_CSV, "text/csv")).run()
    assert not at.exception
    assert _errors(at) == [str(expected.value)]
    assert at.session_state["dp_dataset"].fingerprint == ds.fingerprint  # previous dataset kept
    assert any("still people.csv" in c.value for c in at.caption)
    at.run()  # the message stays while the bad file is selected; still no change
    assert _errors(at) == [str(expected.value)] and at.session_state["dp_dataset"].name == "people.csv"
    _visit_all(at)


def test_upload_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(datasets.st, "get_option", lambda name: 1)  # 1 MB limit
    with pytest.raises(DataError, match="above the 1 MB upload limit"):
        datasets.load_upload("big.csv", b"x\n" + b"1\n" * 600_000)


def test_parse_bounds_reads_text_cells():
    from dpcore.data import infer_schema

    table = load_table(GOOD_CSV, filename="p.csv")
    frame = datasets.bounds_frame(["age", "income", "city"], infer_schema(table), {"age": ("18", "100")})
    assert frame["lower"].tolist() == ["18", "", ""]
    frame.loc[1, ["lower", "upper"]] = ["0", "2e5"]
    frame.loc[2, ["lower", "upper"]] = ["x", "y"]  # categorical rows are bounded by their codes
    assert datasets.parse_bounds(frame) == {"age": (18.0, 100.0), "income": (0.0, 200000.0)}
    frame.loc[1, "upper"] = ""
    with pytest.raises(DataError, match="both a lower and an upper"):
        datasets.parse_bounds(frame)
