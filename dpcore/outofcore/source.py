"""A batch job's source as an Ibis table on DuckDB (embedded, the default) or Spark, with its fingerprint.

Sources: a Parquet file, a folder of Parquet files (read in sorted path order), a CSV file, or a SQLAlchemy
URL with a table name or one read-only SELECT. Parquet is fingerprinted in one streaming pass of record
batches and read by the engine where it lies; a database table or SELECT is read once in chunks by the Data
page's own reader (:func:`dpcore.data.sources.sql_chunks`: one read-only transaction, rows in the order of
all their columns, a query checked by :func:`~dpcore.data.sources.validate_select`), fingerprinted on the
way and staged as a Parquet file in a temporary folder; a CSV file is read by the Data page's own reader
(``dpcore.data.load_table``: same delimiter, encoding and type inference, so the same fingerprint), whole.
The fingerprint is :func:`dpcore.data.fingerprint` of the table the Data page would load.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ibis
import ibis.expr.types as ir
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from dpcore.data.fingerprint import FingerprintStream
from dpcore.data.sources import PARQUET_SUFFIXES, TEXT_SUFFIXES, DatabaseQuery, DatabaseTable, sql_chunks
from dpcore.errors import DataError, ParameterError

Engine = Literal["duckdb", "spark"]
ENGINES: tuple[str, ...] = ("duckdb", "spark")
CHUNK_ROWS = 65_536
SPARK_MASTER = "local[2]"


def spark_session(master: str | None = None) -> Any:
    """A Spark session (``DPCORE_SPARK_MASTER`` or local[2]; no web UI, few shuffle partitions, its
    warehouse folder in the temporary directory rather than the working directory)."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master or os.environ.get("DPCORE_SPARK_MASTER") or SPARK_MASTER)
        .appName("dpcore")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(Path(tempfile.gettempdir()) / "dpcore-spark-warehouse"))
        .getOrCreate()
    )


def connect(engine: Engine = "duckdb", spark: Any = None) -> Any:
    """An Ibis backend: an in-process DuckDB, or PySpark on ``spark`` (default :func:`spark_session`)."""
    if engine == "duckdb":
        return ibis.duckdb.connect()
    if engine == "spark":
        session = spark if spark is not None else spark_session()
        con = ibis.pyspark.connect(session)
        con.session = session  # read_parquet reads lists of files through the session itself
        return con
    raise ParameterError(f"Unknown engine {engine!r}; choose one of {', '.join(ENGINES)}.")


def read_parquet(con: Any, files: list[str]) -> ir.Table:
    """The Parquet ``files`` as one table of the backend ``con`` (Spark reads the list as one frame)."""
    if con.name == "pyspark":
        frame = con.session.read.parquet(*files)
        name = f"dpcore_source_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(name)
        return con.table(name)
    return con.read_parquet(files)


@dataclass
class Source:
    """An opened source: the Ibis ``table``, its ``fingerprint``, and the staging folder (if any), removed
    by :meth:`close` (or on leaving a ``with`` block)."""

    table: ir.Table
    fingerprint: str
    _staging: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._staging is not None:
            self._staging.cleanup()
            self._staging = None


def is_url(source: str) -> bool:
    """True for a SQLAlchemy URL (``dialect[+driver]://...``), False for a file path."""
    head = source.split("://", 1)[0]
    return "://" in source and head.replace("+", "").isalnum() and head != "file"


def parquet_files(path: Path) -> list[Path]:
    """The Parquet file itself, or every ``.parquet`` file below the folder (partitioned layouts such as
    year=2020/...) in sorted path order, as the Data page reads a folder."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
    if not files:
        raise DataError(f"The folder {path} holds no .parquet files; point --source at Parquet files.")
    return files


def _frames(batches: Iterator[pa.RecordBatch]) -> Iterator[pd.DataFrame]:
    """Record batches as the Data page's reader shapes a table: names stripped, empty rows dropped."""
    for batch in batches:
        yield batch.to_pandas().rename(columns=lambda c: str(c).strip()).dropna(how="all")


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
    """The source as an Ibis table on ``engine`` with its fingerprint (see the module docstring); a
    database URL needs exactly one of ``table`` and ``query``, a file neither."""
    text = os.fspath(source)
    if is_url(text):
        if (table is None) == (query is None):
            raise ParameterError(
                "A database source needs --table NAME or --query 'SELECT ...' (one of them: the table or "
                "the SELECT the plan was made on)."
            )
        return _stage_sql(connect(engine, spark), text, table=table, query=query)
    if table is not None or query is not None:
        raise ParameterError(
            f"--{'table' if table is not None else 'query'} is for a database source; give a SQLAlchemy URL "
            "as --source, or leave it out for a file."
        )
    path = Path(text).expanduser()
    if not path.exists():
        raise DataError(f"No file or folder at {path}; give a Parquet file or folder, a CSV file or a URL.")
    con = connect(engine, spark)
    suffixes = "".join(path.suffixes).lower()
    if path.is_dir() or suffixes.endswith(PARQUET_SUFFIXES):
        files = [str(f) for f in parquet_files(path)]
        batches = pads.dataset(files, format="parquet").to_batches(batch_size=CHUNK_ROWS)
        return Source(read_parquet(con, files), stream_fingerprint(_frames(batches)))
    if suffixes.endswith(TEXT_SUFFIXES):
        from dpcore.data import fingerprint, load_table

        df = load_table(path)
        staging = tempfile.TemporaryDirectory(prefix="dpcore-source-")
        staged = Path(staging.name) / "table.parquet"
        df.to_parquet(staged, index=False)
        return Source(read_parquet(con, [str(staged)]), fingerprint(df), staging)
    raise DataError(f"{path.name}: give a Parquet file or folder, a CSV file or a database URL (--table).")


def _stable_types(chunk: pd.DataFrame) -> pd.DataFrame:
    """One staging type per column whatever a chunk holds (a chunk's missing values turn integers into
    floats and bools into objects): numbers and bools as float64, dates as they are, the rest as text."""
    out = {}
    for name in chunk.columns:
        s = chunk[name]
        if pd.api.types.is_datetime64_any_dtype(s):
            out[name] = s
        elif pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            out[name] = s.astype("float64")
        elif s.map(lambda v: isinstance(v, bool | int | float) or v is None).all():
            out[name] = pd.to_numeric(s, errors="coerce").astype("float64")
        else:
            out[name] = s.astype("string")
    return pd.DataFrame(out)


def _stage_sql(con: Any, url: str, *, table: str | None, query: str | None) -> Source:
    """Read ``table`` or ``query`` at ``url`` once, as the Data page reads it (:func:`sql_chunks`):
    fingerprint the rows and stage them as Parquet for the engine."""
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(url)
    except (sa.exc.SQLAlchemyError, ImportError) as err:  # a malformed URL, an unknown or absent driver
        raise DataError(
            f"Cannot open the database URL ({err}); give a SQLAlchemy URL such as "
            "postgresql+psycopg://user@host/db whose driver is installed."
        ) from err
    shown = engine.url.render_as_string(hide_password=True)
    spec = DatabaseTable(shown, table) if table is not None else DatabaseQuery(shown, str(query))
    staging = tempfile.TemporaryDirectory(prefix="dpcore-source-")
    staged = Path(staging.name) / "table.parquet"
    writer: pq.ParquetWriter | None = None

    def frames(total: int, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        nonlocal writer
        seen = 0
        for chunk in chunks:
            seen += len(chunk)
            chunk = chunk.dropna(how="all")
            arrow = pa.Table.from_pandas(_stable_types(chunk), preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(staged, arrow.schema)
            writer.write_table(arrow.cast(writer.schema))
            yield chunk
        if seen != total:
            raise DataError(f"'{spec.label}' changed while it was read ({seen:,} of {total:,} rows); rerun.")

    try:
        try:
            with sql_chunks(spec, engine, CHUNK_ROWS) as (total, chunks):
                digest = stream_fingerprint(frames(total, chunks))
        finally:
            if writer is not None:
                writer.close()
            engine.dispose()
    except BaseException:
        staging.cleanup()
        raise
    return Source(read_parquet(con, [str(staged)]), digest, staging)
