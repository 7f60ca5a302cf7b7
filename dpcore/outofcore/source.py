"""A batch job's source as an Ibis table on DuckDB (embedded, the default) or Spark, with its fingerprint.

A source is a typed spec of the source registry (:mod:`dpcore.data.sources`); its kind declares what the
engines read (:meth:`~dpcore.data.sources.SourceSpec.batch`). Parquet files (a file, or a folder's files in
sorted path order) are fingerprinted in one streaming pass of record batches, each measured before its text
is expanded, as the Data page reads them (:func:`dpcore.data.sources.parquet_frames`), and read by the
engine where they lie; a table read whole (a CSV file, by the Data page's own reader: same delimiter,
encoding, type inference and size limit) or rows read once in chunks (a database table or SELECT, by the
Data page's reader :func:`dpcore.data.sources.sql_chunks`: one read-only transaction, rows in the order of
all their columns) are fingerprinted on the way and staged as a Parquet file in a temporary folder. The
fingerprint is :func:`dpcore.data.fingerprint` of the table the Data page would load. :func:`open_source`
takes the batch command's form (``--source`` with ``--table`` or ``--query``).

Parquet read in place is read twice (the fingerprint pass, then the engine's passes), so the files' (path,
size, modification time, inode) are recorded before the first read and :meth:`Source.check_unchanged`
refuses a release computed after any file was added, removed, resized or rewritten; a staged source is read
once. A file removed or made unreadable between its listing and its reads is a ``DataError`` naming it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import ibis
import ibis.expr.types as ir
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dpcore.data.fingerprint import FingerprintStream
from dpcore.data.io import column_name
from dpcore.data.sources import SourceContext, SourceSpec, from_command_line, parquet_frames, parquet_parts
from dpcore.data.sources.registry import BatchChunks, BatchFiles, BatchTable
from dpcore.errors import DataError, ParameterError
from dpcore.outofcore.features import SPILL_FOLDER

Engine = Literal["duckdb", "spark"]
#: Spark reads a list of files into partitions packed by size, not in the list's order: its Parquet source
#: carries each row's file and position in it (Spark's file metadata) so that :func:`in_table_order` can
#: put the rows back in the Data page's order. Out-of-core passes never select these columns.
SPARK_ORDER = {"__dpcore_file": "file_path", "__dpcore_row": "row_index"}
ENGINES: tuple[str, ...] = ("duckdb", "spark")
CHUNK_ROWS = 65_536
SPARK_MASTER = "local[2]"
ARROW_BATCH_ROWS = 1 << 17  # rows per Arrow batch Spark hands the kernels (its default, 10,000, is slow)


def spark_session(master: str | None = None) -> Any:
    """A Spark session (``DPCORE_SPARK_MASTER`` or local[2]; no web UI or progress bars, few shuffle
    partitions, its warehouse folder in the temporary directory rather than the working directory; its
    Python workers, which run the out-of-core kernels, on this interpreter unless ``PYSPARK_PYTHON`` names
    another)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read by the SparkContext, not from its conf
    return (
        SparkSession.builder.master(master or os.environ.get("DPCORE_SPARK_MASTER") or SPARK_MASTER)
        .appName("dpcore")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(Path(tempfile.gettempdir()) / "dpcore-spark-warehouse"))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        .getOrCreate()
    )


def connect(engine: Engine = "duckdb", spark: Any = None) -> Any:
    """An Ibis backend: an in-process DuckDB spilling to :data:`~dpcore.outofcore.features.SPILL_FOLDER`,
    or PySpark on ``spark`` (default :func:`spark_session`)."""
    if engine == "duckdb":  # spills (window sorts, caches) go to the system's temporary folder
        return ibis.duckdb.connect(temp_directory=str(SPILL_FOLDER))
    if engine == "spark":
        session = spark if spark is not None else spark_session()
        con = ibis.pyspark.connect(session)
        con.session = session  # read_parquet reads lists of files through the session itself
        return con
    raise ParameterError(f"Unknown engine {engine!r}; choose one of {', '.join(ENGINES)}.")


def read_parquet(con: Any, files: list[str]) -> ir.Table:
    """The Parquet ``files`` as one table of the backend ``con``, with the files' own columns (no columns
    from year=2020/ folder names, as the Data page reads them). DuckDB widens a column stored with
    different types in different files (int64 in one, double in another) as pandas does; Spark reads the
    list as one frame and cannot, so such files are refused for it with the fix."""
    if con.name == "pyspark":
        _same_types(files)
        frame = con.session.read.parquet(*files)
        frame = frame.select("*", *(frame[f"_metadata.{m}"].alias(c) for c, m in SPARK_ORDER.items()))
        name = f"dpcore_source_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(name)
        return con.table(name)
    return con.read_parquet(files, union_by_name=True, hive_partitioning=False)


def in_table_order(table: ir.Table, *columns: str) -> pd.DataFrame:
    """``columns`` of ``table`` as pandas, rows in the source's order: the files' sorted path order, then
    each file's own order (as the Data page reads a folder; DuckDB keeps it, Spark's rows are sorted back
    by :data:`SPARK_ORDER`)."""
    order = [c for c in SPARK_ORDER if c in table.columns]
    frame = table.select(*columns, *order).to_pandas()
    if not order:
        return frame
    file, row = order
    paths = {u: Path(unquote(urlparse(u).path)) for u in frame[file].unique()}
    rank = {u: i for i, u in enumerate(sorted(paths, key=paths.__getitem__))}
    frame = frame.assign(**{file: frame[file].map(rank)}).sort_values([file, row], kind="stable")
    return frame.drop(columns=order).reset_index(drop=True)


def _same_types(files: list[str]) -> None:
    """``DataError`` when a column's stored type differs between two of ``files``."""
    first = pq.read_schema(files[0])
    root = Path(os.path.commonpath([Path(f).parent for f in files]))
    for other in files[1:]:
        for column in pq.read_schema(other):
            if column.name in first.names and column.type != (was := first.field(column.name).type):
                a, b = Path(files[0]).relative_to(root), Path(other).relative_to(root)
                raise DataError(
                    f"The column '{column.name}' is {was} in {a} but {column.type} in {b}; "
                    "Spark cannot read one column stored with two types. Run with --engine duckdb (which "
                    "widens it), or write the files again with one type for the column."
                )


@dataclass(frozen=True)
class FileStamp:
    """A file as ``os.stat`` saw it: a rewrite changes its size, modification time or inode."""

    path: Path
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileStamp:
        st = path.stat()
        return cls(path, st.st_size, st.st_mtime_ns, st.st_ino)


def stamp_files(root: Path) -> tuple[FileStamp, ...]:
    """The stamps of the Parquet files at ``root`` (:func:`parquet_files`) in path order; ``DataError``
    naming a file removed or made unreadable while they are listed."""
    try:
        return tuple(FileStamp.of(f) for f in parquet_files(root))
    except OSError as err:
        raise _unreadable(Path(err.filename) if err.filename else root, err) from None


def _unreadable(path: Path, err: OSError) -> DataError:
    return DataError(
        f"The source file {path} cannot be read ({err.strerror or err}): it was removed or made unreadable "
        "after the batch job listed it; nothing was released or debited. Run the job again when the table "
        "is not being written."
    )


def check_unchanged(root: Path, stamps: tuple[FileStamp, ...]) -> None:
    """``DataError`` naming the first file added, removed, resized or rewritten at ``root`` since ``stamps``
    were taken: the engine may have read other rows than the fingerprinted ones."""
    try:
        now = stamp_files(root)
    except DataError:
        now = ()
    before = {s.path: s for s in stamps}
    after = {s.path: s for s in now}
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        first = changed[0]
        what = "removed" if first not in after else "added" if first not in before else "rewritten"
        raise DataError(
            f"The source file {first} was {what} while the batch job read it, so the release may "
            "not be of the fingerprinted table; nothing was released or debited. Run the job again when "
            "the table is not being written."
        )


@dataclass
class Source:
    """An opened source: the Ibis ``table``, its ``fingerprint``, the staging folder (if any), removed
    by :meth:`close` (or on leaving a ``with`` block), and, for files read where they lie, the ``root``
    file or folder with its files' ``stamps`` taken before the fingerprint pass."""

    table: ir.Table
    fingerprint: str
    _staging: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)
    root: Path | None = None
    stamps: tuple[FileStamp, ...] = ()

    def check_unchanged(self) -> None:
        """:func:`check_unchanged` on ``root`` (a file or folder read where it lies)."""
        if self.root is not None:
            check_unchanged(self.root, self.stamps)

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._staging is not None:
            self._staging.cleanup()
            self._staging = None


def parquet_files(path: Path) -> list[Path]:
    """The Parquet file itself, or the ``.parquet`` files below the folder (partitioned layouts such as
    year=2020/...) as the Data page reads a folder (:func:`dpcore.data.sources.parquet_parts`)."""
    if not path.is_dir():  # a file (its stamp says whether it is still there)
        return [path]
    files = parquet_parts(path)
    if not files:
        raise DataError(f"The folder {path} holds no .parquet files; point --source at Parquet files.")
    return files


def stream_fingerprint(frames: Iterator[pd.DataFrame]) -> str:
    """:func:`dpcore.data.fingerprint` of the concatenated frames, with memory bounded by one frame."""
    with FingerprintStream() as stream:
        for df in frames:
            stream.update(df)
        if stream.n_rows == 0:
            raise DataError("The source has no rows; point --source at a non-empty table.")
        return stream.hexdigest()


def open_source(
    source: str | os.PathLike[str],
    engine: Engine = "duckdb",
    *,
    table: str | None = None,
    query: str | None = None,
    spark: Any = None,
) -> Source:
    """The source the batch command names (``--source`` with ``--table`` or ``--query``: the kind that
    reads that form, :func:`dpcore.data.sources.from_command_line`) as an Ibis table on ``engine`` with its
    fingerprint (:func:`open_spec`)."""
    spec, ctx = from_command_line(os.fspath(source), table, query)
    return open_spec(spec, ctx, engine, spark=spark)


def open_spec(
    spec: SourceSpec, ctx: SourceContext, engine: Engine = "duckdb", *, spark: Any = None
) -> Source:
    """``spec`` (read with ``ctx``) as an Ibis table on ``engine`` with its fingerprint, from the batch
    arguments the kind declares (:meth:`~dpcore.data.sources.SourceSpec.batch`): Parquet files read where
    they lie, a table read whole and staged, or chunks fingerprinted and staged (see the module docstring)."""
    batch = spec.batch(ctx)
    con = connect(engine, spark)
    if isinstance(batch, BatchFiles):
        return _read_in_place(con, batch.root)
    if isinstance(batch, BatchTable):
        from dpcore.data import fingerprint

        try:
            df = batch.read()
        except OSError as err:  # removed or made unreadable since it was found
            raise _unreadable(Path(err.filename) if err.filename else Path(spec.where), err) from None
        staging = tempfile.TemporaryDirectory(prefix="dpcore-source-")
        staged = Path(staging.name) / "table.parquet"
        df.to_parquet(staged, index=False)
        return Source(read_parquet(con, [str(staged)]), fingerprint(df), staging)
    return _stage_chunks(con, batch)


def _read_in_place(con: Any, path: Path) -> Source:
    """The Parquet file or folder ``path`` read by the engine where it lies, fingerprinted first."""
    stamps = stamp_files(path)  # before the first read: the engine reads the files again
    files = [s.path for s in stamps]
    frames = (f.dropna(how="all") for f in parquet_frames(files, path.name, CHUNK_ROWS))
    try:
        digest = stream_fingerprint(frames)  # batches bounded once decoded, as the Data page reads them
        table = read_parquet(con, [str(f) for f in files])
    except Exception as err:  # a file removed or rewritten since it was listed: name it and the fix
        check_unchanged(path, stamps)
        if isinstance(err, OSError):
            raise _unreadable(Path(err.filename) if err.filename else path, err) from None
        raise
    renamed = {column_name(c): c for c in table.columns if column_name(c) != c}  # as the Data page
    return Source(table.rename(renamed) if renamed else table, digest, root=path, stamps=stamps)


def _stable_types(chunk: pd.DataFrame) -> pa.Table:
    """A chunk with one staging type per column whatever it holds (a chunk's missing values turn integers
    into floats and bools into objects): numbers and bools as float64, dates as they are, the rest as
    text, and a column missing in every row of the chunk as Arrow's null type (its type comes from
    other chunks)."""
    out = {}
    for name in chunk.columns:
        s = chunk[name]
        if s.isna().all():
            out[name] = pd.Series([None] * len(s), index=s.index, dtype=object)
        elif pd.api.types.is_datetime64_any_dtype(s):
            out[name] = s
        elif pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            out[name] = s.astype("float64")
        elif s.map(lambda v: isinstance(v, bool | int | float) or v is None).all():
            out[name] = pd.to_numeric(s, errors="coerce").astype("float64")
        else:
            out[name] = s.astype("string")
    return pa.Table.from_pandas(pd.DataFrame(out, index=chunk.index), preserve_index=False)


#: The staging types (:func:`_stable_types`), by kind: a chunk of another kind in a column is refused.
_KINDS = (
    pa.types.is_floating,
    pa.types.is_timestamp,
    lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
)


class _Staging:
    """Chunks written to one Parquet file. A column missing in every row so far is staged as float64 nulls
    until a chunk gives it a type, which rewrites what is staged (in batches); a column with numbers in
    one chunk and text in another is refused, as the Data page refuses it."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.writer: pq.ParquetWriter | None = None
        self.missing: set[str] = set()  # columns missing in every row so far

    def write(self, chunk: pa.Table) -> None:
        if self.writer is None:
            self.missing = {f.name for f in chunk.schema if pa.types.is_null(f.type)}
            first = [f.with_type(pa.float64()) if f.name in self.missing else f for f in chunk.schema]
            self.writer = pq.ParquetWriter(self.path, pa.schema(first))
        typed = {f.name: f.type for f in chunk.schema if not pa.types.is_null(f.type)}
        for name, staged in zip(self.writer.schema.names, self.writer.schema.types, strict=True):
            new = typed.get(name)
            if new is not None and name not in self.missing and not any(k(staged) and k(new) for k in _KINDS):
                raise DataError(
                    f"'{self.label}' has a column mixing types ({name!r}: {staged} and {new}); cast it to "
                    "one type in the query and run again."
                )
        if self.missing & typed.keys():
            self._rewrite(pa.schema([f.with_type(typed.get(f.name, f.type)) for f in self.writer.schema]))
            self.missing -= typed.keys()
        self.writer.write_table(chunk.cast(self.writer.schema))

    def _rewrite(self, schema: pa.Schema) -> None:
        """Stage again what is staged under ``schema`` (the columns still missing as nulls of their type)."""
        assert self.writer is not None
        self.writer.close()
        old = self.path.with_suffix(".old")
        self.path.rename(old)
        self.writer = pq.ParquetWriter(self.path, schema)
        for batch in pq.ParquetFile(old).iter_batches(batch_size=CHUNK_ROWS):
            columns = [
                pa.nulls(batch.num_rows, f.type) if f.name in self.missing else batch[f.name].cast(f.type)
                for f in schema
            ]
            self.writer.write_table(pa.Table.from_arrays(columns, schema=schema))
        old.unlink()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _stage_chunks(con: Any, batch: BatchChunks) -> Source:
    """Read ``batch``'s rows once, as the Data page reads them: fingerprint them and stage them as Parquet
    for the engine."""
    staging = tempfile.TemporaryDirectory(prefix="dpcore-source-")
    staged = Path(staging.name) / "table.parquet"
    writer = _Staging(staged, batch.label)

    def frames(total: int, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        seen = 0
        for chunk in chunks:
            seen += len(chunk)
            chunk = chunk.dropna(how="all")
            writer.write(_stable_types(chunk))
            yield chunk
        if seen != total:
            raise DataError(f"'{batch.label}' changed while it was read ({seen:,} of {total:,} rows); rerun.")

    try:
        try:
            with batch.read() as (total, chunks):
                digest = stream_fingerprint(frames(total, chunks))
        finally:
            writer.close()
    except BaseException:
        staging.cleanup()
        raise
    return Source(read_parquet(con, [str(staged)]), digest, staging)
