"""Data sources (dpcore.data.sources): allow-listed folders refuse every path leading out of them, a query
runs only as one read-only SELECT, a source's fingerprint is computed in one streaming pass and equals the
in-memory one (and an upload's of the same file), and a large source keeps a uniform sample."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from scipy import stats

from dpcore.data import fingerprint, load_table
from dpcore.data.fingerprint import FingerprintStream
from dpcore.data.sources import (
    DatabaseQuery,
    DatabaseTable,
    FolderFile,
    SourceSettings,
    list_folder_files,
    list_tables,
    load_source,
    resolve_folder_file,
    source_from_dict,
    validate_select,
)
from dpcore.data.sources.database import _read_only
from dpcore.errors import DataError
from tests.postgres_server import BACKENDS, PostgresServer


def _mixed(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Every dtype family, missing values placed so that some chunks have none and some only missing."""
    rng = np.random.default_rng(seed)
    ints = pd.array(rng.integers(-9, 9, n), dtype="Int64")
    ints[n - 3] = pd.NA
    flags = pd.array(rng.integers(0, 2, n).astype(bool), dtype="boolean")
    flags[n // 2] = pd.NA
    return pd.DataFrame(
        {
            "int_na": ints,
            "big": rng.integers(0, 2**62, n),
            "real": rng.normal(size=n),
            "whole": np.round(rng.normal(size=n) * 100),
            "flag_na": flags,
            "flag": rng.integers(0, 2, n).astype(bool),
            "text": [None if k % 37 == 0 else f'é "{k}"\n' for k in range(n)],
            "late_text": [None if k < n // 2 else "x" for k in range(n)],
            "when": pd.date_range("2021-03-01", periods=n, freq="37min", tz="Europe/Oslo"),
            "empty": [None] * n,
        }
    )


def _parquet(df: pd.DataFrame, path: Path, *, pandas_metadata: bool = True) -> Path:
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table if pandas_metadata else table.replace_schema_metadata(None), path, row_group_size=97)
    return path


# -- streaming fingerprint ----------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 64, 250, 10_000])
@pytest.mark.parametrize("pandas_metadata", [True, False])
def test_streaming_fingerprint_equals_the_in_memory_one(
    tmp_path: Path, batch: int, pandas_metadata: bool
) -> None:
    path = _parquet(_mixed(), tmp_path / "t.parquet", pandas_metadata=pandas_metadata)
    with FingerprintStream() as stream:
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=batch):
            stream.update(record_batch.to_pandas())
        assert stream.hexdigest() == fingerprint(load_table(path))


def test_streaming_fingerprint_resolves_chunk_types_as_a_whole_read_does() -> None:
    """Chunks as a chunked SQL read gives them: ints, then floats with a missing value, then an all-None
    object chunk; bools, then objects with None; dates, then an all-None chunk."""
    whole = pd.DataFrame(
        {
            "n": [1.0, 2.0, 3.0, np.nan, None, None],
            "b": [True, False, True, None, None, False],
            "d": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03", None, None, None]),
        }
    )
    chunks = [
        pd.DataFrame({"n": [1, 2], "b": [True, False], "d": pd.to_datetime(["2020-01-01", "2020-01-02"])}),
        pd.DataFrame({"n": [3.0, np.nan], "b": [True, None], "d": pd.to_datetime(["2020-01-03", None])}),
        pd.DataFrame({"n": [None, None], "b": [None, False], "d": [None, None]}, dtype=object),
    ]
    assert whole["b"].dtype == object
    with FingerprintStream() as stream:
        for chunk in chunks:
            stream.update(chunk)
        assert stream.hexdigest() == fingerprint(whole)
    # all ints, no missing value: the integer family, as fingerprint() of the whole column
    with FingerprintStream() as stream:
        for part in np.array_split(np.arange(10, dtype=np.int64), 3):
            stream.update(pd.DataFrame({"n": part}))
        assert stream.hexdigest() == fingerprint(pd.DataFrame({"n": np.arange(10)}))


def test_streaming_fingerprint_refuses_changing_columns() -> None:
    with FingerprintStream() as stream:
        stream.update(pd.DataFrame({"a": [1]}))
        with pytest.raises(DataError, match="same columns"):
            stream.update(pd.DataFrame({"b": [1]}))


# -- folders --------------------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An allow-listed folder with a Parquet file, a CSV file, a folder of Parquet parts, and next to it
    a secret file outside the folder."""
    root = tmp_path / "allowed"
    (root / "parts").mkdir(parents=True)
    df = _mixed(300)
    _parquet(df, root / "people.parquet")
    df[["big", "real", "text"]].to_csv(root / "people.csv", index=False)
    for k in range(3):
        _parquet(df.iloc[k * 100 : (k + 1) * 100], root / "parts" / f"part-{k}.parquet")
    (tmp_path / "secret.csv").write_text("salary\n1\n")
    return root


def test_folder_file_outside_the_allow_list_is_refused(folder: Path, tmp_path: Path) -> None:
    folders = [str(folder)]
    refusals = {
        "..": FolderFile(str(folder), "../secret.csv"),
        "nested ..": FolderFile(str(folder), "parts/../../secret.csv"),
        "absolute": FolderFile(str(folder), str(tmp_path / "secret.csv")),
        "backslash": FolderFile(str(folder), "..\\secret.csv"),
        "other folder": FolderFile(str(tmp_path), "secret.csv"),
        "empty": FolderFile(str(folder), ""),
    }
    for what, spec in refusals.items():
        with pytest.raises(DataError) as err:
            load_source(spec, folders=folders)
        assert "allow-listed" in str(err.value) or "not a path inside" in str(err.value), what


def test_symbolic_links_leading_out_are_refused_and_not_listed(folder: Path, tmp_path: Path) -> None:
    (folder / "escape.csv").symlink_to(tmp_path / "secret.csv")
    (folder / "outside").symlink_to(tmp_path, target_is_directory=True)
    (folder / "inside.parquet").symlink_to(folder / "people.parquet")  # stays inside: allowed
    folders = [str(folder)]
    for rel in ("escape.csv", "outside/secret.csv", "outside"):
        with pytest.raises(DataError, match="leads outside the allow-listed folder"):
            resolve_folder_file(FolderFile(str(folder), rel), folders)
    listed = {spec.path for spec in list_folder_files(folders)}
    assert listed == {
        "inside.parquet",
        "people.csv",
        "people.parquet",
        "parts",
        "parts/part-0.parquet",
        "parts/part-1.parquet",
        "parts/part-2.parquet",
    }
    assert resolve_folder_file(FolderFile(str(folder), "inside.parquet"), folders) == [
        (folder / "people.parquet").resolve()
    ]


def test_a_symbolic_link_among_a_folders_parts_is_refused(folder: Path, tmp_path: Path) -> None:
    _parquet(pd.DataFrame({"x": [1]}), tmp_path / "foreign.parquet")
    (folder / "parts" / "part-9.parquet").symlink_to(tmp_path / "foreign.parquet")
    with pytest.raises(DataError, match="leads outside"):
        load_source(FolderFile(str(folder), "parts"), folders=[str(folder)])


def test_a_parquet_file_from_a_folder_has_the_uploads_table_and_fingerprint(folder: Path) -> None:
    spec = FolderFile(str(folder), "people.parquet")
    uploaded = load_table((folder / "people.parquet").read_bytes(), filename="people.parquet")
    whole = load_source(spec, folders=[str(folder)])
    pd.testing.assert_frame_equal(whole.table, uploaded)
    assert whole.fingerprint == fingerprint(uploaded) and not whole.sampled and whole.n_rows == 300
    sampled = load_source(spec, folders=[str(folder)], max_rows=40, sample_seed=3)
    assert sampled.sampled and sampled.n_rows == 300 and len(sampled.table) == 40
    assert sampled.fingerprint == whole.fingerprint  # the whole table's, computed in the streaming pass
    assert "uniform sample of 40 of 300 rows" in sampled.description


def test_a_folder_of_parquet_parts_is_one_table(folder: Path) -> None:
    spec = FolderFile(str(folder), "parts")
    whole = load_source(spec, folders=[str(folder)])
    assert whole.n_rows == 300 and whole.fingerprint == fingerprint(load_table(folder / "people.parquet"))
    assert load_source(spec, folders=[str(folder)], max_rows=7).fingerprint == whole.fingerprint


def test_a_partitioned_folder_is_one_table_in_path_order(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    frames = [_mixed(50, seed) for seed in range(3)]
    for year, frame in zip((2021, 2020, 2022), frames, strict=True):
        (root / "events" / f"year={year}").mkdir(parents=True)
        _parquet(frame, root / "events" / f"year={year}" / "part-0.parquet")
    listed = [spec.path for spec in list_folder_files([str(root)])]
    assert listed == [
        "events",  # two or more Parquet files below it: one table
        "events/year=2020/part-0.parquet",
        "events/year=2021/part-0.parquet",
        "events/year=2022/part-0.parquet",
    ]
    spec, folders = FolderFile(str(root), "events"), [str(root)]
    whole = load_source(spec, folders=folders)
    in_order = _parquet(pd.concat([frames[1], frames[0], frames[2]]), tmp_path / "all.parquet")
    assert whole.n_rows == 150 and whole.fingerprint == fingerprint(load_table(in_order))
    assert load_source(spec, folders=folders, max_rows=9).fingerprint == whole.fingerprint


def test_a_csv_file_from_a_folder_reads_as_an_upload(folder: Path) -> None:
    spec = FolderFile(str(folder), "people.csv")
    upload = load_table((folder / "people.csv").read_bytes(), filename="people.csv")
    loaded = load_source(spec, folders=[str(folder)], max_rows=50, sample_seed=1)
    assert loaded.fingerprint == fingerprint(upload) and loaded.n_rows == 300 and len(loaded.table) == 50


def test_a_folder_file_whose_text_inflates_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """A 0.1 MB Parquet file of one 1 MB text repeated 1,500 times (1.5 GB once read) is refused by the
    streaming read with a message; before, each batch was expanded in memory."""
    from tests.system.test_hostile_engine import PARQUET_TEXT_BOMB

    root = tmp_path / "allowed"
    root.mkdir()
    (root / "bomb.parquet").write_bytes(PARQUET_TEXT_BOMB)
    spec = FolderFile(str(root), "bomb.parquet")
    with pytest.raises(DataError, match=r"MB of values in 1,500 rows once read.*shorten the long text"):
        load_source(spec, folders=[str(root)], max_rows=100)


def test_the_sample_is_uniform_and_repeatable(tmp_path: Path) -> None:
    """Each row is kept with probability m / n: the kept positions over many seeds fill ten equal bins
    evenly (chi-square test), the rows are distinct rows of the table, and a seed draws the same rows."""
    root = tmp_path / "allowed"
    root.mkdir()
    n, m = 1000, 50
    _parquet(pd.DataFrame({"row": np.arange(n)}), root / "rows.parquet")
    spec, folders = FolderFile(str(root), "rows.parquet"), [str(root)]
    counts = np.zeros(10)
    for seed in range(100):
        rows = load_source(spec, folders=folders, max_rows=m, sample_seed=seed).table["row"].to_numpy()
        assert len(np.unique(rows)) == m and rows.min() >= 0 and rows.max() < n
        counts += np.bincount(rows // (n // 10), minlength=10)
    assert stats.chisquare(counts).pvalue > 1e-3
    again = [load_source(spec, folders=folders, max_rows=m, sample_seed=5).table for _ in range(2)]
    pd.testing.assert_frame_equal(*again)


# -- databases ------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """A database with a table ``people`` (numbers, missing values, text) and a table ``x``: a SQLite file
    or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'warehouse.db'}")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        name = f"w_{uuid.uuid4().hex}"
        server.admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
        request.addfinalizer(lambda: server.admin(f'DROP DATABASE "{name}" WITH (FORCE)'))
        engine = sa.create_engine(server.url(name))
    rng = np.random.default_rng(2)
    people = pd.DataFrame(
        {
            "age": rng.integers(18, 90, 500),
            "income": np.where(rng.random(500) < 0.1, np.nan, rng.normal(50_000, 9_000, 500)),
            "city": rng.choice(["Oslo", "Bergen", None], 500),
        }
    )
    people.to_sql("people", engine, index=False)
    pd.DataFrame({"x": [1]}).to_sql("x", engine, index=False)
    yield engine
    engine.dispose()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; DROP TABLE x",
        "SELECT * FROM people; DELETE FROM x",
        "select 1;\n-- harmless\nDROP TABLE x;",
        "DROP TABLE x",
        "DELETE FROM x",
        "INSERT INTO x VALUES (2)",
        "UPDATE x SET x = 2",
        "CREATE TABLE y AS SELECT 1",
        "WITH d AS (DELETE FROM x RETURNING *) SELECT * FROM d",
        "SELECT * INTO y FROM x",
        "SELECT * FROM x FOR UPDATE",
        "PRAGMA query_only = OFF",
        "ATTACH DATABASE 'other.db' AS other",
        "",
    ],
)
def test_only_one_select_is_accepted(database: sa.Engine, sql: str) -> None:
    with pytest.raises(DataError):
        validate_select(sql, "postgresql" if "RETURNING" in sql else "sqlite")
    with pytest.raises(DataError):
        load_source(DatabaseQuery("warehouse", sql), engine=database)
    assert "x" in list_tables(database)
    with database.connect() as conn:
        assert conn.execute(sa.text("SELECT x FROM x")).scalars().all() == [1]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT age, city FROM people WHERE age > 30;",
        "WITH old AS (SELECT * FROM people WHERE age > 60) SELECT age FROM old",
        "SELECT age FROM people UNION ALL SELECT x FROM x",
        "select 'DROP TABLE x; --' as s from people",
    ],
)
def test_selects_are_accepted(database: sa.Engine, sql: str) -> None:
    assert validate_select(sql, "sqlite") == sql.strip().rstrip(";")
    assert len(load_source(DatabaseQuery("warehouse", sql), engine=database).table) > 0


def test_the_read_is_read_only(database: sa.Engine) -> None:
    with database.connect() as conn, conn.begin():
        _read_only(conn)
        with pytest.raises(sa.exc.DBAPIError, match=r"read-?only"):
            conn.execute(sa.text("INSERT INTO x VALUES (2)"))
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA query_only = OFF")


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)  # sequences: a PostgreSQL feature
def test_a_select_with_a_side_effect_fails_in_the_read_only_transaction(database: sa.Engine) -> None:
    """nextval() passes as a SELECT but writes; PostgreSQL's read-only transaction refuses it."""
    with database.begin() as conn:
        conn.exec_driver_sql("CREATE SEQUENCE s")
    with pytest.raises(DataError, match="read-only transaction"):
        load_source(DatabaseQuery("warehouse", "SELECT nextval('s') AS n"), engine=database)
    with database.connect() as conn:
        assert conn.exec_driver_sql("SELECT last_value, is_called FROM s").one() == (1, False)


def test_a_table_is_read_in_one_pass_with_the_same_fingerprint_whole_or_sampled(database: sa.Engine) -> None:
    spec = DatabaseTable("warehouse", "people")
    whole = load_source(spec, engine=database)
    assert whole.n_rows == 500 and not whole.sampled
    sampled = load_source(spec, engine=database, max_rows=60, sample_seed=4)
    assert sampled.sampled and len(sampled.table) == 60 and sampled.n_rows == 500
    assert sampled.fingerprint == whole.fingerprint
    # rows are read in the order of all columns: the fingerprint does not depend on the scan order
    with database.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE shuffled AS SELECT * FROM people ORDER BY random()")
    shuffled = load_source(DatabaseTable("warehouse", "shuffled"), engine=database)
    assert shuffled.fingerprint == whole.fingerprint
    query = load_source(DatabaseQuery("warehouse", "SELECT * FROM people"), engine=database, max_rows=10)
    assert query.fingerprint == whole.fingerprint


def test_a_table_not_in_the_database_is_refused(database: sa.Engine) -> None:
    with pytest.raises(DataError, match="no table 'people; DROP TABLE x'"):
        load_source(DatabaseTable("warehouse", "people; DROP TABLE x"), engine=database)
    assert "x" in list_tables(database)


# -- specs and settings ---------------------------------------------------------------------------


def test_specs_round_trip_and_bad_ones_are_refused() -> None:
    for spec in (FolderFile("/srv/t", "a.parquet"), DatabaseTable("w", "t"), DatabaseQuery("w", "SELECT 1")):
        assert source_from_dict(spec.to_dict()) == spec
    for bad in ({"kind": "shell", "cmd": "rm"}, {"kind": "folder_file", "folder": "/"}, {"kind": "x"}):
        with pytest.raises(DataError, match="choose the source again"):
            source_from_dict(bad)


def test_settings_from_the_config_and_the_environment(tmp_path: Path) -> None:
    table = {"data_folders": ["/srv/a"], "databases": ["warehouse"], "max_rows": 1000}
    env = {"DPCORE_DATA_FOLDERS": os.pathsep.join(["/srv/b", "/srv/a"]), "DPCORE_MAX_ROWS": "50"}
    assert SourceSettings.from_config(table, env) == SourceSettings(("/srv/a", "/srv/b"), ("warehouse",), 50)
    assert SourceSettings.from_config({}, {}) == SourceSettings()
    for bad in ({"data_folders": "/srv/a"}, {"max_rows": 0}, {"max_rows": "many"}):
        with pytest.raises(DataError, match="fix"):
            SourceSettings.from_config(bad, {})
