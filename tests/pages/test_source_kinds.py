"""The Data page offers every registered source kind through its declared widgets (AppTest): the DuckDB
file kind, and a kind defined in a test module, appear when the operator configures folders and load the
table under its fingerprint, with no page code naming them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from dpcore.data.sources import load_source
from dpcore.data.sources.duckdb_file import DuckDBFile
from tests.dpcore.data.test_source_registry import JsonLines, json_kind, people  # noqa: F401 (a fixture)
from tests.pages.test_sources import _folder_secrets, _ok, _open
from ui import datasets
from ui.source_form import LOAD_KEY


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "tables"
    root.mkdir()
    frame = people()  # noqa: F841 (read by DuckDB by name)
    with duckdb.connect(str(root / "shop.duckdb")) as con:
        con.execute("CREATE TABLE people AS SELECT * FROM frame")
    people().to_json(root / "people.jsonl", orient="records", lines=True)
    return root


def _loaded(folder: Path, title: str, choices: dict[str, str]):
    """The dataset loaded by choosing ``choices`` (widget key -> option) of the kind ``title``; the page
    shows those choices still after the load (they belong to the browser session, not to a dataset)."""
    at = _open(_folder_secrets(folder, max_rows=100))
    at.radio(key="data_source").set_value(title).run()
    for key, value in choices.items():
        at.selectbox(key=key).set_value(value).run()
    at.button(key=LOAD_KEY).click().run()
    assert [_ok(at).selectbox(key=key).value for key in choices] == list(choices.values())
    return at.session_state["dp_dataset"]


def test_a_duckdb_file_is_offered_and_loads_as_a_labelled_sample(folder: Path) -> None:
    table_key = f"data_source_duckdb_file_table_{folder}_shop.duckdb"  # kept per file
    choices = {"data_source_duckdb_file_file": "tables/shop.duckdb", table_key: "people"}
    ds = _loaded(folder, DuckDBFile.title, choices)
    spec = DuckDBFile(str(folder), "shop.duckdb", "people")
    assert ds.origin["source"] == spec.to_dict() and ds.origin["sampled"] and ds.origin["rows"] == 240
    assert ds.fingerprint == load_source(spec, folders=[str(folder)]).fingerprint and len(ds.raw) == 100
    assert f"--source {folder}/shop.duckdb --table people" in datasets.batch_command(ds.origin)


def test_a_kind_defined_in_a_test_module_is_offered_and_loads(
    folder: Path,
    json_kind: type[JsonLines],  # noqa: F811 (the fixture)
) -> None:
    ds = _loaded(folder, json_kind.title, {"data_source_test_json_lines_file": "people.jsonl"})
    assert ds.origin["source"] == JsonLines(str(folder), "people.jsonl").to_dict() and ds.n_rows == 100
    pd.testing.assert_frame_equal(ds.raw.iloc[:0], pd.read_json(folder / "people.jsonl", lines=True).iloc[:0])
