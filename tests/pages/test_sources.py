"""The Data page's operator-configured sources (AppTest, configured through ``at.secrets``): a file from an
allow-listed folder and a database table load as an upload does; a large one is a labelled uniform sample
under the whole table's fingerprint, released only on the whole table (a batch job); a query that is not one
SELECT is refused and changes nothing; a reload restores the source without uploading anything."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, load_table
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan, policy_account
from dpcore.sessions import SessionStore
from tests.paths import ROOT
from tests.prep_table import edit_table, table_cells
from ui import datasets
from ui.state import DEFAULT_POLICY

TIMEOUT = 60
FOLDER, DATABASE, QUERY = "File in a data folder", "Database table", "Database query (one SELECT)"
SQL_KEY = "data_source_database_query_sql_warehouse"  # the SELECT typed for the connection warehouse


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _people(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(n)
    return pd.DataFrame(
        {
            "age": rng.integers(18, 90, n),
            "income": rng.normal(50_000, 9_000, n),
            "city": ["Oslo", "Bergen"] * (n // 2),
        }
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "tables"
    root.mkdir()
    _people(60).to_parquet(root / "small.parquet")
    _people(400).to_parquet(root / "large.parquet")
    return root


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    engine = sa.create_engine(url)
    _people(80).to_sql("people", engine, index=False)
    pd.DataFrame({"x": [1]}).to_sql("x", engine, index=False)
    engine.dispose()
    return url


def _open(secrets: dict[str, Any], token: str | None = None, *, data_page: bool = True) -> AppTest:
    """A new browser session (with the URL's ``token``), on the Data page unless ``data_page`` is False."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for key, value in secrets.items():
        at.secrets[key] = value
    if token is not None:
        at.query_params["s"] = token
    _ok(at.run())
    if data_page:
        at.switch_page("pages/data.py").run()
    return _ok(at)


def _folder_secrets(folder: Path, max_rows: int = 100) -> dict[str, Any]:
    return {"dpcore": {"data_folders": [str(folder)], "max_rows": max_rows}}


def _load_folder_file(at: AppTest, label: str) -> None:
    at.radio(key="data_source").set_value(FOLDER).run()
    at.selectbox(key="data_source_folder_file_file").set_value(label).run()
    at.button(key="data_load_source").click().run()
    _ok(at)


def test_sources_are_offered_only_when_the_operator_configures_them(folder: Path) -> None:
    assert {FOLDER, DATABASE}.isdisjoint(_open({}).radio(key="data_source").options)
    assert FOLDER in _open(_folder_secrets(folder)).radio(key="data_source").options


def test_a_file_from_an_allow_listed_folder_loads_as_an_upload(folder: Path) -> None:
    at = _open(_folder_secrets(folder))
    at.radio(key="data_source").set_value(FOLDER).run()
    listed = at.selectbox(key="data_source_folder_file_file").options
    assert listed == ["tables/large.parquet", "tables/small.parquet"]
    assert any("up to 100 rows are loaded whole" in c.value for c in at.caption)
    _load_folder_file(at, "tables/small.parquet")
    ds = at.session_state["dp_dataset"]
    assert ds.name == "tables/small.parquet" and ds.n_rows == 60
    assert ds.fingerprint == fingerprint(load_table(folder / "small.parquet"))  # as if it were uploaded
    assert not at.warning  # the whole table: no sample notice
    assert at.radio(key="data_source").value == FOLDER


def test_a_large_file_is_a_labelled_sample_released_only_on_the_whole_table(
    folder: Path, downloads: dict[str, bytes], tmp_path: Path
) -> None:
    at = _open(_folder_secrets(folder))
    _load_folder_file(at, "tables/large.parquet")
    ds = at.session_state["dp_dataset"]
    assert ds.n_rows == 100 and ds.name == "tables/large.parquet"  # the whole table's name and fingerprint
    assert ds.fingerprint == fingerprint(load_table(folder / "large.parquet"))
    assert any("uniform sample of 100 of the 400 rows" in w.value for w in at.warning)
    assert "Uniform sample of 100 of 400 rows: diagnostics; releases use them all" in [
        w.value for w in at.sidebar.warning
    ]
    edit_table(at, features=["age"], bounds={"age": ("18", "90")})
    at.button(key="data_prepare").click().run()
    ledger = Ledger(config.ledger_url())  # a budget, so that the sample is the only reason to refuse
    ledger.set_budget(policy_account(ds.dataset_id, DEFAULT_POLICY), 5.0, 1e-5)
    ledger.close()
    at.switch_page("pages/kmeans.py").run()
    _ok(at)
    assert not [b for b in at.button if str(b.label).startswith("Release (spends")]  # not from the sample
    (release,) = [b for b in at.button if str(b.label).startswith("Release on the whole table (400 rows")]
    assert not release.disabled  # a batch job on this server (tests/pages/test_whole_table.py)
    command = f"python -m dpcore run-plan PLAN.json --source {folder / 'large.parquet'}\n"
    assert any(command in m.value for m in at.markdown)  # the command for this source, for a terminal
    # the plan for a batch job on the whole table: its name and fingerprint, not the sample's
    (name,) = [n for n in downloads if n.startswith("plan-")]
    manifest = json.loads(downloads[name])
    plan = ReleasePlan.from_manifest(manifest)
    assert plan.dataset_name == "tables/large.parquet" and plan.fingerprint == ds.fingerprint
    assert plan.mechanism == "dp_lloyd" and plan.mode == "secure"
    # ... which the batch command releases on the whole table, from the same account
    ledger = Ledger(config.ledger_url())
    release = run_plan(
        manifest, folder / "large.parquet", ledger=ledger, artifacts_dir=tmp_path / "batch", user="batch"
    )
    assert release.record.dataset_fingerprint == ds.fingerprint and release.record.account == plan.account.key
    assert ledger.budget(plan.account).epsilon_spent == plan.epsilon
    ledger.close()


def test_a_database_table_and_a_select_load_and_other_statements_are_refused(warehouse: str) -> None:
    connection = {"type": "sql", "url": warehouse}  # "type" as Streamlit's docs write it
    secrets = {"dpcore": {"databases": ["warehouse"]}, "connections": {"warehouse": connection}}
    at = _open(secrets)
    at.radio(key="data_source").set_value(DATABASE).run()
    assert at.selectbox(key="data_source_database_table_table_warehouse").options == ["people", "x"]
    at.selectbox(key="data_source_database_table_table_warehouse").set_value("people").run()
    at.button(key="data_load_source").click().run()
    ds = _ok(at).session_state["dp_dataset"]
    assert ds.name == "warehouse: people" and ds.n_rows == 80
    assert list(ds.raw.columns) == ["age", "income", "city"]
    at.radio(key="data_source").set_value(QUERY).run()
    at.text_area(key=SQL_KEY).input("SELECT age FROM people WHERE age < 40").run()
    at.button(key="data_load_source").click().run()
    assert list(_ok(at).session_state["dp_dataset"].raw.columns) == ["age"]
    at.text_area(key=SQL_KEY).input("SELECT 1; DROP TABLE x").run()
    at.button(key="data_load_source").click().run()
    assert any("exactly one SELECT" in e.value for e in _ok(at).error)
    assert list(at.session_state["dp_dataset"].raw.columns) == ["age"]  # the dataset in use is kept
    engine = sa.create_engine(warehouse)
    assert "x" in sa.inspect(engine).get_table_names()
    engine.dispose()
    again = _open(secrets, token=at.query_params["s"])  # a reload runs the saved SELECT again
    restored = again.session_state["dp_dataset"]
    assert restored.name == "warehouse: SELECT age FROM people WHERE age < 40"
    assert restored.fingerprint == at.session_state["dp_dataset"].fingerprint


def test_a_reload_restores_a_folder_source_with_the_same_sample(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []

    read = datasets._read_now

    def counted(spec, *args):
        reads.append(spec.path)
        return read(spec, *args)

    monkeypatch.setattr(datasets, "_read_now", counted)
    secrets = _folder_secrets(folder)
    at = _open(secrets)
    _load_folder_file(at, "tables/large.parquet")
    first = at.session_state["dp_dataset"]
    again = _open(secrets, token=at.query_params["s"])  # a new browser session with the URL's token
    ds = again.session_state["dp_dataset"]
    assert ds.name == first.name and ds.fingerprint == first.fingerprint
    pd.testing.assert_frame_equal(ds.raw, first.raw)  # the same sample rows, through the saved seed
    assert not again.error and again.radio(key="data_source").value == FOLDER
    assert reads == ["large.parquet"]  # the unchanged file is read once per server, not per session
    _people(500).to_parquet(folder / "large.parquet")  # changed on disk: read again, and no longer the same
    third = _open(secrets, token=at.query_params["s"], data_page=False)
    assert reads == ["large.parquet"] * 2
    assert any("not the table this session used" in w.value for w in third.warning)


def test_a_tampered_session_plan_cannot_read_outside_the_folders(folder: Path) -> None:
    """The source in a saved plan is checked again on restore: a path edited to lead out of the
    allow-listed folder is refused and nothing is loaded."""
    _people(10).to_parquet(folder.parent / "secret.parquet")
    secrets = _folder_secrets(folder)
    at = _open(secrets)
    _load_folder_file(at, "tables/small.parquet")
    token = at.query_params["s"]
    store = SessionStore(config.ledger_url())
    saved = store.load(token)
    saved["dataset"]["origin"]["source"]["path"] = "../secret.parquet"
    store.update(token, {"dataset": saved["dataset"]})
    store.close()
    again = _open(secrets, token=token, data_page=False)
    assert "dp_dataset" not in again.session_state
    assert any("not a path inside the folder" in w.value for w in again.warning)


def test_a_column_empty_in_every_row_is_left_out_of_the_drop_and_cannot_empty_it(tmp_path: Path) -> None:
    """A database table with an unused (all-NULL) column: the missing-value step's default columns held
    it, so pressing Apply dropped every row and the page went on with an empty table; now it is left out
    of the default, and dropping on it is refused with the reason, the table kept."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    engine = sa.create_engine(url)
    people = _people(60).assign(unused=None)
    people.loc[::6, "income"] = None
    people.to_sql("people", engine, index=False)
    engine.dispose()
    at = _open({"dpcore": {"databases": ["w"]}, "connections": {"w": {"url": url}}})
    at.radio(key="data_source").set_value(DATABASE).run()
    at.button(key="data_load_source").click().run()
    ds = _ok(at).session_state["dp_dataset"]
    columns = at.multiselect(key=f"data_missing_cols_{ds.dataset_id}")
    assert columns.options == ["income", "unused"] and columns.value == ["income"]
    at.button(key="data_apply_missing").click().run()
    assert len(_ok(at).session_state["dp_dataset"].cleaned) == 50
    at.button(key="data_reset_missing").click().run()
    at.multiselect(key=f"data_missing_cols_{ds.dataset_id}").set_value(["income", "unused"]).run()
    at.button(key="data_apply_missing").click().run()
    assert any("would remove all 60 rows" in e.value and "'unused' has no value" in e.value for e in at.error)
    assert len(_ok(at).session_state["dp_dataset"].cleaned) == 60


def test_a_source_unreadable_at_one_reload_is_restored_at_the_next(folder: Path) -> None:
    """A reload while the source cannot be read (the operator's config without the folder, a database
    down, a file being replaced) says so; the session then saved "no dataset" over its plan, so the
    next reload, with the source back, restored nothing and the curator's choices were lost."""
    secrets = _folder_secrets(folder)
    at = _open(secrets)
    _load_folder_file(at, "tables/small.parquet")
    ds = at.session_state["dp_dataset"]
    edit_table(at, features=["age", "income"])
    token = at.query_params["s"]
    failed = _open({"dpcore": {"data_folders": []}}, token=token, data_page=False)
    assert "dp_dataset" not in failed.session_state
    assert any("is not an allow-listed data folder" in w.value for w in failed.warning)
    again = _open(secrets, token=token)
    restored = again.session_state["dp_dataset"]
    assert restored.name == ds.name and restored.fingerprint == ds.fingerprint
    assert [table_cells(again, f)["feature"] for f in ("age", "income")] == [True, True]


def test_a_runaway_select_is_stopped_at_the_operators_time_limit_and_the_page_keeps_working(
    warehouse: str,
) -> None:
    """A SELECT that would run for minutes held the page (a spinner, nothing else usable) for as long as
    the database took; now it is stopped at the operator's limit with the fix, the dataset in use kept."""
    runaway = (
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
        "SELECT COUNT(*) AS n FROM c"
    )
    secrets = {
        "dpcore": {"databases": ["warehouse"], "query_timeout_s": 0.5},
        "connections": {"warehouse": {"url": warehouse}},
    }
    at = _open(secrets)
    at.radio(key="data_source").set_value(DATABASE).run()
    assert any("stopped after 0.5 s" in c.value for c in at.caption)
    at.button(key="data_load_source").click().run()
    first = _ok(at).session_state["dp_dataset"]
    at.radio(key="data_source").set_value(QUERY).run()
    at.text_area(key=SQL_KEY).input(runaway).run()
    start = time.monotonic()
    at.button(key="data_load_source").click().run(timeout=20)
    assert time.monotonic() - start < 10
    (error,) = _ok(at).error
    assert "stopped after the database time limit of 0.5 s" in error.value
    assert "add a WHERE clause" in error.value and "query_timeout_s" in error.value
    ds = at.session_state["dp_dataset"]
    assert ds.name == "warehouse: people" and ds.fingerprint == first.fingerprint  # the dataset is kept
    at.text_area(key=SQL_KEY).input("SELECT age FROM people WHERE age < 40").run()
    at.button(key="data_load_source").click().run()  # the page keeps working: the next read loads
    assert not _ok(at).error and list(at.session_state["dp_dataset"].raw.columns) == ["age"]
