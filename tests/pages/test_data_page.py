"""The Data page keeps what the curator chose: the source, the row count after cleaning, the public bounds
(each where it was typed, kept across pages), and says where a choice is data-derived."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.prep_table import edit_table, table_cells

TIMEOUT = 60
MARKETING = "Sample: Marketing Campaign"
GOOD_CSV = b"age,income,city\n34,52000,Oslo\n51,61000,Bergen\n29,39000,Oslo\n"
DATA_DERIVED = "data-derived: not allowed for a differentially private release (demo or local-PDP only)"


def _data_page(app_path: str) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    return at


def _with_marketing(app_path: str) -> AppTest:
    at = _data_page(app_path)
    at.radio(key="data_source").set_value(MARKETING).run()
    at.button(key="data_load_sample").click().run()
    assert at.session_state["dp_dataset"].name == MARKETING
    return at


def _leave_and_return(at: AppTest) -> None:
    at.switch_page("pages/ledger.py").run()
    at.switch_page("pages/data.py").run()
    assert not at.exception, [e.value for e in at.exception]


def _shown(at: AppTest, features: list[str]) -> dict[str, tuple[str, str]]:
    cells = {f: table_cells(at, f) for f in features}
    return {f: (c["lower"], c["upper"]) for f, c in cells.items()}


def test_source_choice_stays_on_the_upload_after_leaving_the_page(app_path: str) -> None:
    at = _data_page(app_path)
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value(("people.csv", GOOD_CSV, "text/csv")).run()
    assert at.session_state["dp_dataset"].name == "people.csv"
    _leave_and_return(at)
    assert at.radio(key="data_source").value == "Upload a file"
    assert any("In use: people.csv" in c.value for c in at.caption)
    assert at.session_state["dp_dataset"].name == "people.csv"


def test_source_choice_follows_a_loaded_sample_and_blobs(app_path: str) -> None:
    at = _with_marketing(app_path)
    _leave_and_return(at)
    assert at.radio(key="data_source").value == MARKETING
    at.radio(key="data_source").set_value("Synthetic blobs").run()
    at.number_input(key="data_blobs_n").set_value(300).run()
    at.button(key="data_load_blobs").click().run()
    assert at.session_state["dp_dataset"].n_rows == 300
    _leave_and_return(at)
    assert at.radio(key="data_source").value == "Synthetic blobs"
    assert at.number_input(key="data_blobs_n").value == 300


def test_row_counts_are_the_cleaned_tables_and_say_how_many_were_dropped(app_path: str) -> None:
    at = _with_marketing(app_path)
    assert any("2,240 rows × 29 columns" in m.value for m in at.markdown)
    at.selectbox(key="data_missing_strategy").set_value("drop").run()
    at.button(key="data_apply_missing").click().run()
    assert len(at.session_state["dp_dataset"].cleaned) == 2216
    overview = [m.value for m in at.markdown if "fingerprint" in m.value]
    assert overview and "2,216 rows × 29 columns" in overview[0] and "24 of 2,240 rows dropped" in overview[0]
    assert not any("2,240 rows ×" in m.value for m in at.markdown)
    sidebar = [c.value for c in at.sidebar.caption]
    assert any("2,216 rows" in c and "24 dropped" in c for c in sidebar), sidebar
    at.button(key="data_reset_missing").click().run()
    assert any("2,240 rows × 29 columns" in m.value for m in at.markdown)


def test_each_bound_lands_in_its_features_row(app_path: str) -> None:
    at = _with_marketing(app_path)
    at.selectbox(key="data_missing_strategy").set_value("drop").run()
    at.button(key="data_apply_missing").click().run()
    edit_table(at, features=["Income", "MntWines"], bounds={"MntWines": ("0", "1500")})
    assert _shown(at, ["Income", "MntWines"]) == {"Income": ("", ""), "MntWines": ("0", "1500")}
    at.button(key="data_prepare").click().run()  # refused (Income has no bounds): nothing prepared
    assert any("No public bounds" in e.value for e in at.error)
    assert at.session_state["dp_dataset"].prepared is None
    edit_table(at, bounds={"Income": ("0", "200000")})
    assert _shown(at, ["Income", "MntWines"]) == {"Income": ("0", "200000"), "MntWines": ("0", "1500")}
    at.button(key="data_prepare").click().run()
    assert not at.error, [e.value for e in at.error]
    prepared = at.session_state["dp_dataset"].prepared
    assert prepared.feature_names == ("Income", "MntWines")
    assert prepared.raw_lower.tolist() == [0.0, 0.0] and prepared.raw_upper.tolist() == [200000.0, 1500.0]
    assert prepared.bounds_source == "curator"


TYPED = {"MntWines": ("0", "1500"), "Year_Birth": ("1890", "2010")}


def test_the_table_applies_whole_survives_leaving_the_page_and_refuses_a_bad_row(app_path: str) -> None:
    at = _with_marketing(app_path)
    edit_table(at, features=["Income", "MntWines"], bounds={"MntWines": ("0", "1500")})
    edit_table(at, features=["Income", "MntWines", "Year_Birth"], bounds={"Year_Birth": ("1890", "2010")})
    _leave_and_return(at)
    assert at.session_state["dp_dataset"].schema.kinds["Year_Birth"] == "numeric"
    assert [table_cells(at, f)["feature"] for f in ("Income", "MntWines", "Year_Birth")] == [True] * 3
    assert _shown(at, ["MntWines", "Year_Birth"]) == TYPED
    edit_table(at, features=["Year_Birth"])  # removing a feature forgets nothing
    edit_table(at, features=["Year_Birth", "MntWines"])
    assert _shown(at, ["MntWines", "Year_Birth"]) == TYPED
    # one bad row (lower >= upper) and one bad kind: nothing of the edit is applied, both are named
    edit_table(at, bounds={"MntWines": ("9", "1")}, kinds={"Education": "numeric"}, units={"Income": "USD"})
    errors = " ".join(e.value for e in at.error)
    assert "2 of 29 rows" in errors and "lower 9 is not below upper 1" in errors and "holds text" in errors
    assert _shown(at, ["MntWines"]) == {"MntWines": ("0", "1500")} and table_cells(at, "Income")["unit"] == ""
    assert at.session_state["dp_dataset"].schema.kinds["Education"] == "categorical"


def test_data_derived_choices_say_they_are_not_allowed_for_a_dp_release(app_path: str) -> None:
    at = _with_marketing(app_path)
    strategies = at.selectbox(key="data_missing_strategy").options
    assert [DATA_DERIVED in s for s in strategies] == [False, True, True, True]  # drop, median, mean, mode
    edit_table(at, features=["MntWines"])
    assert DATA_DERIVED in at.checkbox(key="data_bounds_ok").label
    scalings = at.radio(key="data_scaling").options
    assert [DATA_DERIVED in s for s in scalings] == [False, True, False]  # none, standardise, min-max
