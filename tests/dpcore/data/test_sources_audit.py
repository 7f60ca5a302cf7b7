"""Seams a curator hits with the operator's sources that the engine tests did not cover: the batch job's
fingerprint pass over Parquet is bounded as the Data page's is (a text bomb is refused, not expanded), and a
folder whose files do not share one schema is refused by both with a message naming the odd file."""

from __future__ import annotations

import gzip
import io
import os
import resource
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

import dpcore.data.io as data_io
import dpcore.data.sources as sources
from dpcore.data import fingerprint
from dpcore.data.io import MAX_COLUMNS
from dpcore.data.sources import (
    DatabaseQuery,
    DatabaseTable,
    FolderFile,
    SourceSettings,
    list_folder_files,
    list_tables,
    load_source,
)
from dpcore.errors import DataError
from dpcore.outofcore.source import open_source
from tests.postgres_server import PostgresServer

MB = 2**20


def _text_bomb(rows: int) -> bytes:
    """One 1 MB text repeated ``rows`` times, dictionary-encoded: a few kB on disk, ``rows`` MB once read."""
    one = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * MB]))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"s": one, "n": pa.array(range(rows))}), buffer, store_schema=False)
    return buffer.getvalue()


def test_the_batch_jobs_parquet_fingerprint_pass_refuses_a_text_bomb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 64 kB file holding 48 MB of text once read, against a per-batch limit lowered to 16 MB (the same
    file at the real 256 MB limit with 1,500 rows took 7.4 GB of memory before): refused by the batch job
    with the Data page's message, a file and a folder alike, before the text is expanded."""
    monkeypatch.setattr(data_io, "MAX_BATCH_BYTES", 16 * MB)
    (tmp_path / "parts").mkdir()
    bomb = _text_bomb(48)
    assert len(bomb) < 64 * 1024
    (tmp_path / "bomb.parquet").write_bytes(bomb)
    (tmp_path / "parts" / "a.parquet").write_bytes(bomb)
    (tmp_path / "parts" / "b.parquet").write_bytes(bomb)
    for where in (tmp_path / "bomb.parquet", tmp_path / "parts"):
        with pytest.raises(DataError, match=r"MB of values in 48 rows once read.*at most 16 MB per batch"):
            open_source(where)
    with pytest.raises(DataError, match=r"MB of values in 48 rows once read.*at most 16 MB per batch"):
        load_source(FolderFile(str(tmp_path), "parts"), folders=[str(tmp_path)])


@pytest.fixture
def odd_folder(tmp_path: Path) -> Path:
    """``parts``: two files with columns a, b and one (in the middle of the path order) with a, c."""
    parts = tmp_path / "parts"
    parts.mkdir()
    pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4]}).to_parquet(parts / "p0.parquet")
    pd.DataFrame({"a": [5.0, 6.0], "c": ["x", "y"]}).to_parquet(parts / "p1.parquet")
    pd.DataFrame({"a": [7.0, 8.0], "b": [5, 6]}).to_parquet(parts / "p2.parquet")
    return tmp_path


ODD = r"p1\.parquet has the columns a, c but p0\.parquet has a, b.*same columns"


def test_a_folder_whose_files_differ_in_columns_is_refused_naming_the_odd_file(odd_folder: Path) -> None:
    """The Data page said only "the chunks of a table must have the same columns"; the batch job read the
    folder with the first file's schema (column c dropped, b empty in p1) and fingerprinted that table."""
    spec, folders = FolderFile(str(odd_folder), "parts"), [str(odd_folder)]
    for max_rows in (100, 3):
        with pytest.raises(DataError, match=ODD):
            load_source(spec, folders=folders, max_rows=max_rows)
    with pytest.raises(DataError, match=ODD):
        open_source(odd_folder / "parts")


@pytest.fixture
def widened_folder(tmp_path: Path) -> Path:
    """``parts``: one file whose column a has no missing value (written as int64) and one where it has a
    fraction and a missing value (double), as pandas writes the partitions of one column."""
    parts = tmp_path / "parts"
    parts.mkdir()
    pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]}).to_parquet(parts / "p0.parquet")
    pd.DataFrame({"a": [5.5, None], "b": [2.5, 3.5]}).to_parquet(parts / "p1.parquet")
    return tmp_path


def test_the_batch_job_reads_a_column_typed_differently_across_files_as_the_data_page(
    widened_folder: Path,
) -> None:
    """DuckDB read the folder with the first file's int64 and rounded 5.5 to 6 under the Data page's
    fingerprint; it now widens the column to double, as the Data page does."""
    page = load_source(FolderFile(str(widened_folder), "parts"), folders=[str(widened_folder)]).table
    with open_source(widened_folder / "parts") as src:
        assert src.fingerprint == fingerprint(page)
        read = src.table.execute()
    pd.testing.assert_series_equal(read["a"], page["a"], check_dtype=False)
    assert read["a"].tolist()[:3] == [1.0, 2.0, 5.5]


@pytest.mark.spark
def test_spark_refuses_a_column_typed_differently_across_files_with_the_fix(
    widened_folder: Path, spark
) -> None:
    """Spark cannot widen int64 to double across files; it failed with a Java stack trace at the first
    pass, it now stops before with a message naming the column and the files."""
    odd = r"column 'a' is int64 in p0\.parquet but double in p1\.parquet.*--engine duckdb"
    with pytest.raises(DataError, match=odd):
        open_source(widened_folder / "parts", "spark", spark=spark)


def test_column_names_are_cleaned_alike_whole_sampled_and_in_the_batch_job(tmp_path: Path) -> None:
    """A column named ' age ' or with a byte order mark (a CSV imported with its BOM): the Data page's
    whole-table read cleans the names (as an upload), while the streamed pass (a sample, the batch job)
    kept them, so one table had two fingerprints and the batch job's table lacked the plan's columns."""
    table = pd.DataFrame({" age ": [3, 1, 2, 2], "\ufeffid": [1, 2, 3, 4], "x": [0.5, 1.5, 2.5, 3.5]})
    url = f"sqlite:///{tmp_path / 'w.db'}"
    engine = sa.create_engine(url)
    table.to_sql("t", engine, index=False)
    table.to_parquet(tmp_path / "t.parquet", index=False)
    database, folder = DatabaseTable("w", "t"), FolderFile(str(tmp_path), "t.parquet")
    batches = ({"source": url, "table": "t"}, {"source": tmp_path / "t.parquet"})
    for spec, batch in zip((database, folder), batches, strict=True):
        whole = load_source(spec, folders=[str(tmp_path)], engine=engine)
        sampled = load_source(spec, folders=[str(tmp_path)], engine=engine, max_rows=2, sample_seed=1)
        assert list(whole.table.columns) == list(sampled.table.columns) == ["age", "id", "x"]
        with open_source(**batch) as src:
            assert whole.fingerprint == sampled.fingerprint == src.fingerprint, spec
            assert src.table.columns == ("age", "id", "x")
    engine.dispose()


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[sa.Engine]:
    """A SQLite database with a table ``t`` of two rows and an empty table ``empty``."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    pd.DataFrame({"x": [1.0, 2.0]}).to_sql("t", engine, index=False)
    pd.DataFrame({"x": pd.Series([], dtype="float64")}).to_sql("empty", engine, index=False)
    yield engine
    engine.dispose()


def test_a_source_without_rows_is_refused_naming_it_not_a_parquet_upload(
    warehouse: sa.Engine, tmp_path: Path
) -> None:
    """An empty table, a SELECT that matches nothing or only empty cells, an empty Parquet file: the
    message named a made-up file ('w: empty.parquet') and told the curator to upload one."""
    (tmp_path / "files").mkdir()
    pd.DataFrame({"x": pd.Series([], dtype="float64")}).to_parquet(tmp_path / "files" / "empty.parquet")
    cases = {
        DatabaseTable("w", "empty"): r"'w: empty' has no rows; choose",
        DatabaseQuery("w", "SELECT * FROM t WHERE x > 5"): r"'w: SELECT \* FROM t WHERE x > 5' has no rows; ",
        DatabaseQuery("w", "SELECT NULL AS x FROM t"): r"no rows with a value \(2 rows, every cell empty\)",
        FolderFile(str(tmp_path), "files/empty.parquet"): r"/files/empty.parquet' has no rows; choose",
    }
    for spec, message in cases.items():
        for max_rows in (100, 1):
            with pytest.raises(DataError, match=message) as err:
                load_source(spec, folders=[str(tmp_path)], engine=warehouse, max_rows=max_rows)
            assert ".parquet'" not in str(err.value) or isinstance(spec, FolderFile), str(err.value)
            assert "Upload" not in str(err.value)


def test_a_select_the_database_refuses_says_how_to_fix_it(warehouse: sa.Engine) -> None:
    with pytest.raises(DataError, match=r"\(no such column: nosuch\); correct the SELECT"):
        load_source(DatabaseQuery("w", "SELECT nosuch FROM t"), engine=warehouse)


def test_a_folder_table_skips_hidden_and_underscore_paths_as_spark_and_arrow_do(tmp_path: Path) -> None:
    """A folder Spark is writing holds its in-progress parts under _temporary/ and staging folders and
    files starting with '.': they were read as rows of the table (by the Data page and the batch job),
    and the listing hid the '.' files while the load took them."""
    events = tmp_path / "events"
    (events / "_temporary" / "0").mkdir(parents=True)
    (events / ".spark-staging").mkdir()
    pd.DataFrame({"x": [1.0, 2.0]}).to_parquet(events / "part-0.parquet")
    pd.DataFrame({"x": [3.0]}).to_parquet(events / "part-1.parquet")
    pd.DataFrame({"x": [9.0]}).to_parquet(events / "_temporary" / "0" / "part-1.parquet")
    pd.DataFrame({"x": [8.0]}).to_parquet(events / ".spark-staging" / "part-2.parquet")
    pd.DataFrame({"x": [7.0]}).to_parquet(events / ".part-3.parquet")
    folders = [str(tmp_path)]
    listed = [s.path for s in list_folder_files(folders)]
    assert listed == ["events", "events/part-0.parquet", "events/part-1.parquet"]
    loaded = load_source(FolderFile(str(tmp_path), "events"), folders=folders)
    assert loaded.table["x"].tolist() == [1.0, 2.0, 3.0]
    with open_source(events) as src:
        assert sorted(src.table.execute()["x"]) == [1.0, 2.0, 3.0] and src.fingerprint == loaded.fingerprint


def test_duckdb_reads_a_partitioned_folder_with_the_files_columns_as_the_data_page(tmp_path: Path) -> None:
    """year=2020/ folders: DuckDB added a column 'year' from the paths, and where the files hold a column
    'year' it replaced the stored 1999.5 by the path's 2020 under the Data page's fingerprint; the Data
    page and Spark read the files' own columns."""
    for year in (2020, 2021):
        (tmp_path / "t" / f"year={year}").mkdir(parents=True)
        frame = pd.DataFrame({"year": [1999.5], "x": [float(year)]})
        frame.to_parquet(tmp_path / "t" / f"year={year}" / "p.parquet", index=False)
    page = load_source(FolderFile(str(tmp_path), "t"), folders=[str(tmp_path)]).table
    with open_source(tmp_path / "t") as src:
        read = src.table.execute()
    pd.testing.assert_frame_equal(read, page, check_dtype=False)


def test_the_csv_size_limit_holds_for_gzip_and_in_the_batch_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CSV files are read into memory whole, so a folder's CSV above MAX_TEXT_MB is refused. The limit
    was on the size on disk only (a .csv.gz unpacking to more passed, held to the 50 MB upload limit
    instead), and the batch job had none: it read any CSV whole."""
    monkeypatch.setattr(sources.common, "MAX_TEXT_MB", 1)
    text = "".join(f"{k},{k % 7}.5\n" for k in range(150_000)).encode()  # 1.6 MB
    (tmp_path / "big.csv").write_bytes(b"a,b\n" + text)
    (tmp_path / "big.csv.gz").write_bytes(gzip.compress(b"a,b\n" + text))
    assert (tmp_path / "big.csv.gz").stat().st_size < 2**20
    for name in ("big.csv", "big.csv.gz"):
        with pytest.raises(DataError, match=r"more than 1 MB|above 1 MB"):
            load_source(FolderFile(str(tmp_path), name), folders=[str(tmp_path)])
        with pytest.raises(DataError, match=r"more than 1 MB|above 1 MB"):
            open_source(tmp_path / name)


def test_a_source_too_wide_is_refused_before_it_is_read_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table with more columns than the Data page holds was read in full (a scan of the whole table)
    and then refused as a made-up 'w: wide.parquet' with 'upload that table'."""
    wide = pd.DataFrame({f"c{i}": [1.0, 2.0] for i in range(MAX_COLUMNS + 1)})
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    wide.to_sql("wide", engine, index=False)
    (tmp_path / "parts").mkdir()
    for k in range(2):
        wide.to_parquet(tmp_path / "parts" / f"p{k}.parquet", index=False)
    cases = {
        DatabaseTable("w", "wide"): r"'w: wide' has 501 columns; at most 500 .* only the columns you need",
        DatabaseQuery("w", "SELECT * FROM wide"): r"'w: SELECT \* FROM wide' has 501 columns",
        FolderFile(str(tmp_path), "parts"): r"/parts' has 501 columns; at most 500",
    }

    def no_read(*args: object) -> None:
        raise AssertionError("the rows were read")

    monkeypatch.setattr(sources.common, "one_pass", no_read)
    for spec, message in cases.items():
        with pytest.raises(DataError, match=message):
            load_source(spec, folders=[str(tmp_path)], engine=engine, max_rows=1)
    engine.dispose()


@pytest.fixture
def postgres_engine(postgres_server: PostgresServer) -> Iterator[sa.Engine]:
    """A fresh database on the test PostgreSQL server with a table ``t``."""
    name = f"w_{uuid.uuid4().hex}"
    postgres_server.admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
    engine = sa.create_engine(postgres_server.url(name))
    pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [1, 2, 3]}).to_sql("t", engine, index=False)
    yield engine
    engine.dispose()
    postgres_server.admin(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_select_repeating_a_column_name_is_refused_with_the_fix(postgres_engine: sa.Engine) -> None:
    """PostgreSQL returns a join's 'SELECT a.x, b.x' with the name x twice: the Data page and the batch
    job failed with pandas' "The truth value of a Series is ambiguous" (a stack trace)."""
    spec = DatabaseQuery("w", "SELECT a.x, b.x FROM t a JOIN t b ON a.y = b.y")
    for max_rows in (100, 1):
        with pytest.raises(DataError, match=r"returns the column name 'x' more than once.*AS"):
            load_source(spec, engine=postgres_engine, max_rows=max_rows)
    with pytest.raises(DataError, match=r"returns the column name 'x' more than once"):
        open_source(postgres_engine.url.render_as_string(hide_password=False), query=spec.sql)


def test_columns_whose_names_clash_once_cleaned_are_refused_before_they_are_read(
    warehouse: sa.Engine, tmp_path: Path
) -> None:
    """Columns 'x' and ' x' (one name once cleaned) crashed the streamed read with pandas' "truth value
    of a Series is ambiguous", in a database table and in a Parquet file alike."""
    with warehouse.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE clash ("x" REAL, " x" REAL)')
        conn.exec_driver_sql("INSERT INTO clash VALUES (1, 2)")
    with pytest.raises(DataError, match=r"'w: clash' returns the column name 'x' more than once"):
        load_source(DatabaseTable("w", "clash"), engine=warehouse)
    (tmp_path / "files").mkdir()
    pd.DataFrame({"x": [1.0, 2.0], " x": [3.0, 4.0]}).to_parquet(tmp_path / "files" / "clash.parquet")
    spec = FolderFile(str(tmp_path), "files/clash.parquet")
    for max_rows in (100, 1):
        with pytest.raises(DataError, match=r"clash.parquet' returns the column name 'x' more than once"):
            load_source(spec, folders=[str(tmp_path)], max_rows=max_rows)
    with pytest.raises(DataError, match=r"returns the column name 'x' more than once"):
        open_source(tmp_path / "files" / "clash.parquet")


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("json", "'{\"a\": 1}'", r"ordering operator for type json\).*SELECT that casts that column to text"),
        ("int[]", "'{1,2}'", r"column 'v' holds list values.*cast it to a plain type"),
        ("bytea", "'\\xdeadbeef'", r"column 'v' holds bytes values.*cast it to a plain type"),
        ("inet", "'10.0.0.1'", r"column 'v' holds IPv4Address values.*cast it to a plain type"),
        ("timestamp", "'9999-12-31'", r"column 'v' has 2 timestamp\(s\) outside 1677-09-22 to 2262-04-11"),
    ],
)
def test_database_columns_without_a_plain_value_are_refused_alike_whole_sampled_and_batch(
    postgres_engine: sa.Engine, column: str, value: str, message: str
) -> None:
    """PostgreSQL types pandas returns as Python objects: an array crashed the read ("truth value of an
    array ... is ambiguous"), bytea crashed the batch job (UnicodeDecodeError), inet loaded as a sample but
    not whole, json (which cannot be ordered) raised pandas' own DatabaseError, and a timestamp
    9999-12-31 crashed with OutOfBoundsDatetime."""
    with postgres_engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE odd (k int, v {column})")
        conn.exec_driver_sql(f"INSERT INTO odd VALUES (1, {value}), (2, NULL), (3, {value})")
    query = DatabaseQuery("w", "SELECT * FROM odd")
    for max_rows in (100, 1):
        with pytest.raises(DataError, match=message):
            load_source(query, engine=postgres_engine, max_rows=max_rows)
    with pytest.raises(DataError, match=message):
        open_source(postgres_engine.url.render_as_string(hide_password=False), table="odd")


def test_a_parquet_list_column_is_refused_on_every_path_with_the_uploads_message(tmp_path: Path) -> None:
    """A list column was refused by the whole-file read (as an upload) but crashed the streamed read (a
    sample, a folder of parts, the batch job) with "truth value of an array ... is ambiguous"."""
    table = pa.table({"k": [1, 2, 3], "v": pa.array([[1, 2], None, [3]], pa.list_(pa.int64()))})
    (tmp_path / "parts").mkdir()
    for path in ("n.parquet", "parts/a.parquet", "parts/b.parquet"):
        pq.write_table(table, tmp_path / path)
    nested = r"has nested columns .*'v' \(list<element: int64>\)\. Flatten them"
    for path, max_rows in (("n.parquet", 100), ("n.parquet", 1), ("parts", 100)):
        with pytest.raises(DataError, match=nested):
            load_source(FolderFile(str(tmp_path), path), folders=[str(tmp_path)], max_rows=max_rows)
    for path in ("n.parquet", "parts"):
        with pytest.raises(DataError, match=nested):
            open_source(tmp_path / path)


def test_a_binary_text_column_has_one_fingerprint_whole_sampled_and_in_the_batch_job(tmp_path: Path) -> None:
    """Parquet writers such as Impala and older Hive store text as plain binary. The whole-file read
    decodes it as text (as an upload), the streamed read hashed Python bytes: one table, two fingerprints.
    Bytes that are not UTF-8 (read whole as hexadecimal digits) are refused by the streamed read, which
    cannot know the whole column."""
    root = tmp_path / "t"
    root.mkdir()
    text = pa.array([b"Oslo", b"Bergen", None, b"Troms\xc3\xb8"], pa.binary())
    pq.write_table(pa.table({"city": text, "n": [1.0, 2.0, 3.0, 4.0]}), root / "text.parquet")
    blob = pa.array([b"\xff\x00", b"ok", None, b"\x80"], pa.binary())
    pq.write_table(pa.table({"blob": blob, "n": [1.0, 2.0, 3.0, 4.0]}), root / "blob.parquet")
    folders = [str(root)]
    whole = load_source(FolderFile(str(root), "text.parquet"), folders=folders)
    assert whole.table["city"].tolist()[:2] == ["Oslo", "Bergen"]
    sampled = load_source(FolderFile(str(root), "text.parquet"), folders=folders, max_rows=2, sample_seed=1)
    with open_source(root / "text.parquet") as src:
        assert whole.fingerprint == sampled.fingerprint == src.fingerprint
    assert load_source(FolderFile(str(root), "blob.parquet"), folders=folders).table["blob"][0] == "ff00"
    not_text = r"column 'blob' holds binary values that are not UTF-8 text"
    with pytest.raises(DataError, match=not_text):
        load_source(FolderFile(str(root), "blob.parquet"), folders=folders, max_rows=2)
    with pytest.raises(DataError, match=not_text):
        open_source(root / "blob.parquet")


def test_a_stored_pandas_index_is_a_column_whole_sampled_and_in_the_batch_fingerprint(tmp_path: Path) -> None:
    """df[mask].to_parquet(path) stores the index as a column; the whole-file read keeps it as a column
    'index' (as an upload), the streamed read dropped it: one file, two fingerprints."""
    pd.DataFrame({"n": [1.0, 2.0, 3.0, 4.0]}, index=[5, 7, 9, 11]).to_parquet(tmp_path / "f.parquet")
    spec, folders = FolderFile(str(tmp_path), "f.parquet"), [str(tmp_path)]
    whole = load_source(spec, folders=folders)
    sampled = load_source(spec, folders=folders, max_rows=2, sample_seed=1)
    assert list(whole.table.columns) == list(sampled.table.columns) == ["index", "n"]
    with open_source(tmp_path / "f.parquet") as src:
        assert whole.fingerprint == sampled.fingerprint == src.fingerprint


def test_a_timestamp_pandas_cannot_hold_is_refused_on_every_path_with_the_uploads_message(
    tmp_path: Path,
) -> None:
    """A placeholder date 9999-12-31: refused by the whole-file read (as an upload), but the streamed
    read (a sample, the batch job) crashed with pandas' OutOfBoundsDatetime."""
    import datetime as dt

    stamps = pa.array([dt.datetime(2020, 1, 1), dt.datetime(9999, 12, 31), None], pa.timestamp("us"))
    pq.write_table(pa.table({"t": stamps, "n": [1.0, 2.0, 3.0]}), tmp_path / "t.parquet")
    outside = r"column 't' has 1 timestamp\(s\) outside 1677-09-22 to 2262-04-11.*Replace them"
    for max_rows in (100, 1):
        with pytest.raises(DataError, match=outside):
            load_source(FolderFile(str(tmp_path), "t.parquet"), folders=[str(tmp_path)], max_rows=max_rows)
    with pytest.raises(DataError, match=outside):
        open_source(tmp_path / "t.parquet")


def test_unsigned_integers_beyond_int64_have_one_fingerprint_whole_and_streamed(tmp_path: Path) -> None:
    """A uint64 column holding 2**64 - 1 (an id or a hash): the streamed fingerprint cast it to int64
    (-1) where the whole-table fingerprint hashes it as a float, so one file had two fingerprints."""
    column = pa.array([0, 2**64 - 1, 5, 7], pa.uint64())
    pq.write_table(pa.table({"u": column, "n": [1.0, 2.0, 3.0, 4.0]}), tmp_path / "u.parquet")
    spec, folders = FolderFile(str(tmp_path), "u.parquet"), [str(tmp_path)]
    whole = load_source(spec, folders=folders)
    sampled = load_source(spec, folders=folders, max_rows=1)
    with open_source(tmp_path / "u.parquet") as src:
        assert whole.fingerprint == sampled.fingerprint == src.fingerprint


def test_a_folder_of_more_parts_than_open_files_allowed_loads(tmp_path: Path) -> None:
    """Every part was kept open to count the rows: a Spark output of 2,000 parts on a server allowing
    1,024 open files was refused as 'not readable Parquet (Too many open files)'."""
    (tmp_path / "many").mkdir()
    for k in range(60):
        pd.DataFrame({"x": [float(k)]}).to_parquet(tmp_path / "many" / f"part-{k:05d}.parquet", index=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
    try:
        loaded = load_source(FolderFile(str(tmp_path), "many"), folders=[str(tmp_path)], max_rows=10)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert loaded.n_rows == 60 and len(loaded.table) == 10


RUNAWAY = (  # a SELECT that would count for minutes (SQLite: about 2.6 million rows a second)
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
    "SELECT COUNT(*) AS n FROM c"
)
STOPPED = r"stopped after the database time limit of {} s.*WHERE.*query_timeout_s"


def test_a_runaway_sqlite_select_is_stopped_at_the_time_limit(warehouse: sa.Engine) -> None:
    """A SELECT with no end (a cross join, a COUNT over a huge table) held the Data page for as long as the
    database took: now SQLite interrupts it at the deadline, and the pooled connection reads on unlimited."""
    for spec in (DatabaseQuery("w", RUNAWAY), DatabaseQuery("w", f"SELECT x FROM t, ({RUNAWAY}) AS r")):
        start = time.monotonic()
        with pytest.raises(DataError, match=STOPPED.format("0.5")):
            load_source(spec, engine=warehouse, timeout_s=0.5)
        assert time.monotonic() - start < 3
    longer = RUNAWAY.replace("1000000000", "1500000")  # about 0.6 s for each of its two statements
    start = time.monotonic()  # the same pooled connection again, no limit: the interrupt was removed
    loaded = load_source(DatabaseQuery("w", longer), engine=warehouse)
    assert loaded.table["n"].tolist() == [1_500_000] and time.monotonic() - start > 0.5
    assert load_source(DatabaseTable("w", "t"), engine=warehouse, timeout_s=0.5).n_rows == 2


def test_a_runaway_postgresql_select_is_stopped_by_the_servers_statement_timeout(
    postgres_engine: sa.Engine,
) -> None:
    """PostgreSQL cancels the statement itself (``SET LOCAL statement_timeout``, inside the read-only
    transaction: the pooled connection keeps no limit), in the count, and in the rows with the time the
    count left (3 rows of 0.4 s: the count takes 1.2 s of 2, the rows would end at 2.4 s)."""
    slow = {"SELECT pg_sleep(30)::text AS s": 1, "SELECT y, (pg_sleep(0.4) IS NULL) AS s FROM t": 2}
    for sql, limit in slow.items():
        start = time.monotonic()
        with pytest.raises(DataError, match=STOPPED.format(limit)):
            load_source(DatabaseQuery("w", sql), engine=postgres_engine, timeout_s=limit)
        assert limit <= time.monotonic() - start < limit + 1
    with postgres_engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == "0"
    assert load_source(DatabaseTable("w", "t"), engine=postgres_engine, timeout_s=1).n_rows == 3


def test_the_time_limit_is_configured_by_the_operator() -> None:
    assert SourceSettings.from_config({}, {}).query_timeout_s == sources.DEFAULT_QUERY_TIMEOUT_S == 300
    assert SourceSettings.from_config({"query_timeout_s": 5}, {}).query_timeout_s == 5
    environ = {"DPCORE_QUERY_TIMEOUT_S": "2.5"}
    assert SourceSettings.from_config({"query_timeout_s": 5}, environ).query_timeout_s == 2.5
    for bad in (0, -1, "soon", float("inf"), True):
        with pytest.raises(DataError, match=r"query_timeout_s must be a positive number of seconds"):
            SourceSettings.from_config({"query_timeout_s": bad}, {})


def test_the_batch_job_reads_without_the_dashboards_time_limit(
    warehouse: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run-plan --query`` is the operator's own job: the dashboard's limit (config or environment) does
    not apply to it, so a SELECT that takes longer than that limit is read whole."""
    monkeypatch.setenv("DPCORE_QUERY_TIMEOUT_S", "0.01")
    quick = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 100000) SELECT * FROM c"
    start = time.monotonic()
    with open_source(warehouse.url.render_as_string(hide_password=False), query=quick) as source:
        assert source.table.count().execute() == 100_000
    assert time.monotonic() - start > 0.01


def slow_catalog(monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    """A catalog slow to answer: listing the tables first runs ``sql`` on the inspector's connection."""
    from sqlalchemy.engine.reflection import Inspector

    listed = Inspector.get_table_names

    def slow(self: Inspector, *args: object, **kw: object) -> list[str]:
        with self._operation_context() as conn:
            conn.exec_driver_sql(sql)
        return listed(self, *args, **kw)

    monkeypatch.setattr(Inspector, "get_table_names", slow)


def test_the_data_pages_table_list_is_stopped_at_the_time_limit(
    warehouse: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Data page's cached table list waited on the database with no time limit; now it stops at the
    operator's ``query_timeout_s`` as the reads do, and the pooled connection lists on unlimited."""
    import ui.datasets

    monkeypatch.setattr(ui.datasets, "database_engine", lambda name: warehouse)
    settings = SourceSettings(databases=("w",), query_timeout_s=0.5)
    slow_catalog(monkeypatch, RUNAWAY)
    start = time.monotonic()
    with pytest.raises(DataError, match=r"tables was stopped after the time limit of 0.5 s.*query_timeout_s"):
        table = DatabaseTable.fields[1]
        ui.datasets.source_options(DatabaseTable, table, {"connection": f"w-{uuid.uuid4().hex}"}, settings)
    assert time.monotonic() - start < 3
    monkeypatch.undo()
    slow_catalog(monkeypatch, RUNAWAY.replace("1000000000", "3000000"))  # about 1 s, above the limit
    start = time.monotonic()  # the same pooled connection, no limit: the interrupt was removed
    assert list_tables(warehouse) == ["empty", "t"] and time.monotonic() - start > 0.5
    monkeypatch.undo()
    assert list_tables(warehouse, timeout_s=0.5) == ["empty", "t"]


def test_a_postgresql_table_list_is_stopped_by_the_servers_statement_timeout(
    postgres_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_catalog(monkeypatch, "SELECT pg_sleep(30)")
    start = time.monotonic()
    with pytest.raises(DataError, match=r"stopped after the time limit of 1 s"):
        list_tables(postgres_engine, timeout_s=1)
    assert 1 <= time.monotonic() - start < 2
    monkeypatch.undo()
    with postgres_engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == "0"
    assert list_tables(postgres_engine, timeout_s=1) == ["t"]
