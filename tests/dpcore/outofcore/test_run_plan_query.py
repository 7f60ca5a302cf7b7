"""``run-plan --source URL --query SELECT``: a plan made on the Data page from a SELECT's labelled sample is
released by the batch job on the SELECT's whole result, read as the Data page reads it (one read-only
transaction, rows in the order of all columns, the same fingerprint), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from dpcore.data import infer_schema, prepare
from dpcore.data.sources import DatabaseQuery, DatabaseTable, FolderFile, load_source
from dpcore.errors import DataError, ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.outofcore.source import open_source
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP
from dpcore.releases import make_release
from dpcore.steps import DropMissing
from tests.dpcore.outofcore.test_clustering import BOUNDS, table
from tests.dpcore.outofcore.test_run_plan import cli
from ui.datasets import batch_command

# as a curator may type it: lines, a comment, a quoted string
QUERY = "SELECT a, b, c, note  -- the features\nFROM people\nWHERE c >= 10 AND note <> 'it''s'"
MAX_ROWS = 150


@pytest.fixture
def warehouse(ledger_url: str) -> str:
    """The URL of a database (a SQLite file, or a fresh database on the test PostgreSQL server) holding
    ``people``: 3,000 rows, some without ``a``, inserted in a shuffled order."""
    df = table(3000)
    df.loc[[4, 9, 700], "a"] = np.nan
    engine = sa.create_engine(ledger_url)
    df.sample(frac=1.0, random_state=5).to_sql("people", engine, index=False)
    engine.dispose()
    return ledger_url


def sampled_plan(url: str, sql: str = QUERY) -> tuple[ReleasePlan, pd.DataFrame]:
    """The plan the Data page makes on the SELECT's labelled sample (demo seed, so the release can be
    compared); the plan's fingerprint is the whole result's. Also the whole result, read in memory."""
    engine = sa.create_engine(url)
    try:
        loaded = load_source(DatabaseQuery("warehouse", sql), engine=engine, max_rows=MAX_ROWS, sample_seed=2)
        whole = load_source(DatabaseQuery("warehouse", sql), engine=engine, max_rows=10**6)
    finally:
        engine.dispose()
    assert loaded.sampled and len(loaded.table) == MAX_ROWS and loaded.n_rows == whole.n_rows > MAX_ROWS
    assert loaded.fingerprint == whole.fingerprint
    sample = loaded.table
    prep = prepare(sample, infer_schema(sample), list(BOUNDS), scaling="minmax", bounds=BOUNDS,
                   missing="drop")
    plan = ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=1.0,
        policy=PureDP(1.0),
        dataset_name="warehouse: people",
        fingerprint=loaded.fingerprint,
        params={"n_clusters": 3},
        preparation=preparation_steps([DropMissing(("a",), int(sample["a"].isna().sum()))], prep),
        mode="demo",
        seed=11,
    )
    return plan, whole.table


def test_the_batch_job_fingerprints_a_select_as_the_data_page(warehouse: str) -> None:
    engine = sa.create_engine(warehouse)
    try:
        sampled = load_source(DatabaseQuery("w", QUERY), engine=engine, max_rows=MAX_ROWS, sample_seed=1)
        with engine.connect() as conn:
            n = conn.execute(sa.text(f"SELECT COUNT(*) FROM ({QUERY}) AS q")).scalar_one()
    finally:
        engine.dispose()
    assert sampled.sampled and sampled.n_rows == n > MAX_ROWS
    with open_source(warehouse, query=QUERY) as src:
        assert src.fingerprint == sampled.fingerprint
        assert src.table.count().execute() == n
        assert src.table.columns == ("a", "b", "c", "note")
    # the table and the SELECT of every row read the same rows: the same fingerprint either way
    every_row = "SELECT * FROM people"
    with open_source(warehouse, table="people") as whole, open_source(warehouse, query=every_row) as q:
        assert whole.fingerprint == q.fingerprint != sampled.fingerprint


def test_a_plan_made_on_a_sample_of_a_select_releases_on_all_rows(warehouse: str, tmp_path: Path) -> None:
    plan, whole = sampled_plan(warehouse)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'releases.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    kw = {"ledger": ledger, "artifacts_dir": tmp_path / "batch", "user": "batch"}
    release = run_plan(plan.to_manifest(), warehouse, query=QUERY, **kw)
    assert release.record.dataset_fingerprint == plan.fingerprint
    assert ledger.budget(plan.account).epsilon_spent == 1.0
    # the release is the in-memory one on the whole result (same demo seed): every row was read
    prep = prepare(whole, infer_schema(whole), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    memory = Ledger.initialise(f"sqlite:///{tmp_path / 'memory.db'}")
    memory.set_budget(plan.account, epsilon=5.0)
    expected = make_release(
        memory, plan, KMeansInputs.from_prepared(prep), request_id="m", user="u",
        artifacts_dir=tmp_path / "memory", name="kmeans",
    )
    pd.testing.assert_frame_equal(release.table, expected.table, check_exact=True)
    # another SELECT is another table: refused, nothing spent
    for other in (QUERY.replace(">= 10", ">= 11"), "SELECT * FROM people", QUERY + " AND a IS NOT NULL"):
        with pytest.raises(DataError, match="not the table the plan was made on"):
            run_plan(plan.to_manifest(), warehouse, query=other, request_id="other", **kw)
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def shown_command(origin: dict) -> list[str]:
    """The words of the command the release panel shows for a sample of ``origin``'s source."""
    block = batch_command(origin)
    assert block.startswith("```bash\n") and block.endswith("\n```")
    return shlex.split(block.removeprefix("```bash\n").removesuffix("\n```"))


def test_the_page_shows_the_command_for_the_source() -> None:
    url = "<URL of the database connection warehouse>"
    query = DatabaseQuery("warehouse", QUERY)
    assert shown_command({"source": query.to_dict()})[5:] == ["--source", url, "--query", QUERY]
    table_words = shown_command({"source": DatabaseTable("warehouse", "big people").to_dict()})
    assert table_words[5:] == ["--source", url, "--table", "big people"]
    folder_words = shown_command({"source": FolderFile("/srv/tables", "year=2020/part 0.parquet").to_dict()})
    assert folder_words == [*"python -m dpcore run-plan PLAN.json".split(), "--source",
                            "/srv/tables/year=2020/part 0.parquet"]
    fenced = batch_command({"source": DatabaseQuery("w", "SELECT `a```, b FROM t").to_dict()})
    assert fenced.startswith("````bash\n") and fenced.endswith("\n````")  # longer than any run of backticks


def test_run_plan_query_from_the_command_line(warehouse: str, tmp_path: Path) -> None:
    plan, _ = sampled_plan(warehouse)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan.to_manifest()))
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    args = (plan_file, "--source", warehouse, "--ledger", url, "--artifacts", tmp_path / "out")
    # the command the release panel shows for the sample, with the operator's URL put in
    shown = shown_command({"source": DatabaseQuery("warehouse", QUERY).to_dict(), "sampled": True})
    assert shown[7:9] == ["--query", QUERY]
    out = cli(*args, *shown[7:9])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"released: request plan-{plan.key[:32]}")
    assert Ledger(url).budget(plan.account).epsilon_spent == 1.0
    again = cli(*args, "--query", QUERY)
    assert again.returncode == 0 and again.stdout.startswith("already released (nothing spent)")
    other = cli(*args, "--query", "SELECT * FROM people", "--request-id", "other")
    assert other.returncode == 2 and "not the table the plan was made on" in other.stderr
    assert "Traceback" not in other.stderr
    assert Ledger(url).budget(plan.account).epsilon_spent == 1.0


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DELETE FROM people", "Only a SELECT can be run here, not DELETE"),
        ("SELECT * FROM people; DELETE FROM people", "The query holds 2 statements"),
        ("SELECT a FROM people; SELECT b FROM people", "The query holds 2 statements"),
        ("WITH d AS (DELETE FROM people RETURNING *) SELECT * FROM d", "could change the database"),
    ],
)
def test_anything_but_one_select_is_refused_by_the_cli(sql: str, message: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    engine = sa.create_engine(url)
    table(50).to_sql("people", engine, index=False)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(sampled_plan_manifest()))
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger.initialise(ledger).close()
    out = cli(plan_file, "--source", url, "--query", sql, "--ledger", ledger)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    with engine.connect() as conn:  # nothing ran
        assert conn.execute(sa.text("SELECT COUNT(*) FROM people")).scalar_one() == 50
    engine.dispose()


def sampled_plan_manifest() -> dict:
    """A DP-Lloyd plan (its fingerprint irrelevant: the query is refused before any row is compared)."""
    df = table(50)
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS)
    return ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd", epsilon=1.0, policy=PureDP(1.0), dataset_name="people",
        fingerprint=prep.fingerprint, params={"n_clusters": 3}, preparation=preparation_steps([], prep),
    ).to_manifest()


def test_table_and_query_are_for_database_sources_only(warehouse: str, tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="--table NAME or --query"):
        open_source(warehouse)
    with pytest.raises(ParameterError, match="--table NAME or --query"):
        open_source(warehouse, table="people", query=QUERY)
    path = tmp_path / "t.parquet"
    table(20).to_parquet(path, index=False)
    with pytest.raises(ParameterError, match="--query is for a database source"):
        open_source(path, query=QUERY)
    with pytest.raises(DataError, match="no table 'nobody'"):
        open_source(warehouse, table="nobody")


def test_command_line_refusals_of_the_source_print_one_line(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(sampled_plan_manifest()))
    ledger = ("--ledger", f"sqlite:///{tmp_path / 'l.db'}")
    Ledger.initialise(ledger[1]).close()
    both = cli(plan_file, "--source", "sqlite:///x.db", "--table", "t", "--query", "SELECT 1", *ledger)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    for url in ("nosuchdialect://host/db", "sqlite+nosuchdriver:///x.db"):
        bad = cli(plan_file, "--source", url, "--table", "t", *ledger)
        assert bad.returncode == 2 and "Cannot open the database URL" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr


def test_a_column_whose_first_or_last_chunks_are_all_missing_is_staged(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows come sorted, so missing values gather in the first chunks (SQLite sorts NULL first) or the last
    (PostgreSQL): a text or date column missing in a whole chunk is staged with its type, every value kept;
    a column with numbers in some chunks and text in others is refused, as the Data page refuses it."""
    n = 60
    missing = np.arange(n) < 25
    df = pd.DataFrame(
        {
            "city": np.where(missing, None, np.where(np.arange(n) % 2, "Oslo", "Bergen")),
            "when": pd.Series(pd.date_range("2024-01-01", periods=n, freq="h")).where(~missing),
            "x": np.arange(n, dtype=float),
        }
    )
    engine = sa.create_engine(ledger_url)
    df.to_sql("people", engine, index=False)
    page = load_source(DatabaseTable("w", "people"), engine=engine, max_rows=10)
    monkeypatch.setattr("dpcore.data.sources.database.CHUNK_ROWS", 10)
    with open_source(ledger_url, table="people") as src:
        assert src.fingerprint == page.fingerprint
        staged = src.table.to_pandas()
    assert staged["city"].notna().sum() == n - 25 and set(staged["city"].dropna()) == {"Oslo", "Bergen"}
    assert staged["when"].notna().sum() == n - 25
    assert sorted(staged["when"].dropna().dt.tz_localize(None)) == list(df["when"].dropna())
    assert staged["x"].sum() == df["x"].sum()
    if engine.dialect.name == "sqlite":  # a column without a declared type keeps numbers and text apart
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE codes (code, x REAL)")
            conn.exec_driver_sql("INSERT INTO codes VALUES " + ", ".join(f"({k}, {k})" for k in range(20)))
            conn.exec_driver_sql("INSERT INTO codes VALUES ('c1', 1.5)")
        with pytest.raises(DataError, match="mixing types"):
            load_source(DatabaseTable("w", "codes"), engine=engine)
        with pytest.raises(DataError, match="has a column mixing types \\('code'"):
            open_source(ledger_url, table="codes")
    engine.dispose()


def test_a_select_ending_in_a_comment_is_read(warehouse: str) -> None:
    """The SELECT is wrapped as a subquery to count and order its rows: a trailing ``--`` comment must not
    swallow the wrapper's closing parenthesis (on the Data page and in the batch job alike)."""
    sql = "SELECT a, b, c, note FROM people -- every row"
    engine = sa.create_engine(warehouse)
    page = load_source(DatabaseQuery("w", sql), engine=engine, max_rows=MAX_ROWS)
    engine.dispose()
    with open_source(warehouse, query=sql) as src, open_source(warehouse, table="people") as whole:
        assert src.fingerprint == page.fingerprint == whole.fingerprint
