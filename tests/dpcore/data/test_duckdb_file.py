"""The DuckDB database file source kind (dpcore/data/sources/duckdb_file.py): listed under the allow-listed
folders, opened read-only with no access to other files, loaded and sampled with the whole table's
fingerprint in any storage order, and replayed by the batch command (``--source FILE.duckdb --table``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from dpcore.__main__ import main
from dpcore.data import fingerprint, infer_schema, prepare
from dpcore.data.sources import SOURCES, SourceContext, batch_source, from_command_line, load_source
from dpcore.data.sources.duckdb_file import DuckDBFile
from dpcore.errors import DataError, ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.outofcore.source import open_spec
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP
from dpcore.releases import make_release
from dpcore.steps import DropMissing

BOUNDS = {"a": (-10.0, 10.0), "b": (0.0, 10.0)}


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"a": rng.normal(0, 3, n).round(3), "b": rng.uniform(0, 10, n).round(3)})
    df["city"] = np.where(np.arange(n) % 3 == 0, "Oslo", "Bergen")
    df["n"] = np.arange(n)
    df.loc[[4, 9], "a"] = np.nan
    return df


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An allow-listed folder with ``shop.duckdb``: ``people`` (stored shuffled), a view reading a file
    outside the folder, ``empty``, and ``slow`` (300M rows to sort); a Parquet file beside it that is not a
    DuckDB file."""
    root = tmp_path_factory.mktemp("duck") / "tables"
    root.mkdir()
    secret = root.parent / "secret.csv"
    secret.write_text("token\nhunter2\n")
    shuffled = people().sample(frac=1.0, random_state=1)  # noqa: F841 (read by DuckDB by name)
    with duckdb.connect(str(root / "shop.duckdb")) as con:
        con.execute("CREATE TABLE people AS SELECT * FROM shuffled")
        con.execute(f"CREATE VIEW leak AS SELECT * FROM read_csv('{secret}')")
        con.execute("CREATE TABLE empty (x INTEGER)")
        con.execute("CREATE VIEW slow AS SELECT range AS x, range % 7 AS y FROM range(300000000)")
    people().to_parquet(root / "people.parquet")
    return root


def ctx_of(folder: Path) -> SourceContext:
    return SourceContext(folders=(str(folder),))


def test_it_is_listed_with_its_tables_and_loads_whole_or_sampled_with_one_fingerprint(folder: Path) -> None:
    ctx = ctx_of(folder)
    assert SOURCES["duckdb_file"] is DuckDBFile
    files = DuckDBFile.options("file", ctx, {})
    assert files == {"tables/shop.duckdb": {"folder": str(folder), "path": "shop.duckdb"}}
    tables = DuckDBFile.options("table", ctx, files["tables/shop.duckdb"])
    assert list(tables) == ["empty", "leak", "people", "slow"]
    spec = DuckDBFile(str(folder), "shop.duckdb", "people")
    whole = load_source(spec, folders=[str(folder)], max_rows=1000)
    sample = load_source(spec, folders=[str(folder)], max_rows=100, sample_seed=4)
    again = load_source(spec, folders=[str(folder)], max_rows=100, sample_seed=4)
    assert (whole.n_rows, whole.sampled) == (300, False)
    assert (sample.n_rows, sample.sampled, len(sample.table)) == (300, True, 100)
    assert whole.fingerprint == sample.fingerprint == spec.fingerprint(ctx)
    assert fingerprint(sample.table) == fingerprint(again.table)
    expected = people().sort_values(["a", "b", "city", "n"], na_position="last").reset_index(drop=True)
    pd.testing.assert_frame_equal(whole.table, expected, check_dtype=False)
    with open_spec(spec, ctx) as src:
        assert src.fingerprint == whole.fingerprint and src.table.count().to_pyarrow().as_py() == 300


def test_it_is_read_only_and_reads_no_other_file(folder: Path) -> None:
    before = (folder / "shop.duckdb").stat().st_mtime_ns
    with pytest.raises(DataError, match=r"DuckDB refused the read of 'tables/shop\.duckdb: leak'"):
        load_source(DuckDBFile(str(folder), "shop.duckdb", "leak"), folders=[str(folder)])
    with pytest.raises(DataError, match="has no rows"):
        load_source(DuckDBFile(str(folder), "shop.duckdb", "empty"), folders=[str(folder)])
    with pytest.raises(DataError, match="has no table 'people; DROP TABLE people'"):
        injected = DuckDBFile(str(folder), "shop.duckdb", "people; DROP TABLE people")
        load_source(injected, folders=[str(folder)])
    assert (folder / "shop.duckdb").stat().st_mtime_ns == before


def test_a_read_stops_at_the_time_limit(folder: Path) -> None:
    start = time.monotonic()
    with pytest.raises(DataError, match=r"stopped after the time limit of 0\.3 s.*query_timeout_s"):
        load_source(DuckDBFile(str(folder), "shop.duckdb", "slow"), folders=[str(folder)], timeout_s=0.3)
    assert time.monotonic() - start < 3


def test_paths_outside_the_allow_list_and_other_files_are_refused(folder: Path) -> None:
    with pytest.raises(DataError, match="not an allow-listed data folder"):
        load_source(DuckDBFile(str(folder.parent), "tables/shop.duckdb", "people"), folders=[str(folder)])
    with pytest.raises(DataError, match=r"no absolute paths, no '\.\.'"):
        load_source(DuckDBFile(str(folder), "../tables/shop.duckdb", "people"), folders=[str(folder)])
    with pytest.raises(DataError, match="not a DuckDB database file"):
        DuckDBFile(str(folder), "people.parquet", "people")
    (folder.parent / "fake.duckdb").write_text("not a database")
    with pytest.raises(DataError, match="could not be opened as a DuckDB database"):
        load_source(DuckDBFile(str(folder.parent), "fake.duckdb", "t"), folders=[str(folder.parent)])
    with pytest.raises(ParameterError, match="give --table NAME"):
        from_command_line(str(folder / "shop.duckdb"))
    with pytest.raises(DataError, match="No DuckDB database file at"):
        from_command_line(str(folder / "absent.duckdb"), table="people")


def test_a_plan_made_on_it_replays_in_the_batch_command_and_the_job_form(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DP-Lloyd demo release made on the loaded table; ``python -m dpcore run-plan --source shop.duckdb
    --table people`` replays it on the whole table (DuckDB engine, same fingerprint); the job's saved form
    finds the same source and spends nothing more under the same request id."""
    spec = DuckDBFile(str(folder), "shop.duckdb", "people")
    df = load_source(spec, folders=[str(folder)], max_rows=1000).table
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    plan = ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd", epsilon=1.0, policy=PureDP(1.0), dataset_name="shop",
        fingerprint=prep.fingerprint, params={"n_clusters": 3},
        preparation=preparation_steps([DropMissing(("a",), 2)], prep), mode="demo", seed=7,
    )
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger.initialise(url)
    ledger.set_budget(plan.account, epsilon=5.0)
    dash = make_release(
        ledger, plan, KMeansInputs.from_prepared(prep), request_id="dash", user="u",
        artifacts_dir=tmp_path / "dash", name="kmeans",
    )
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dash.manifest))
    argv = ["run-plan", str(plan_file), "--source", str(folder / "shop.duckdb"), "--table", "people"]
    args = [*argv, "--ledger", url, "--artifacts", str(tmp_path / "batch"), "--request-id", "batch-1"]
    assert main(args) == 0, capsys.readouterr().err
    assert "released: request batch-1" in capsys.readouterr().out
    from dpcore.outofcore.run_plan import run_plan

    job = json.loads(json.dumps(batch_source(spec, ctx_of(folder))))
    source, context = from_command_line(str(folder / "shop.duckdb"), table="people")
    assert job["spec"] == source.to_dict() and tuple(job["folders"]) == context.folders
    again = run_plan(
        dash.manifest, source, context=context, ledger=ledger, artifacts_dir=tmp_path / "batch", user="u",
        request_id="batch-1",
    )
    assert again.replayed and ledger.remaining(plan.account)[0] == pytest.approx(3.0)
    ledger.close()
