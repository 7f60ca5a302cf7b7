"""Source kind: a table (or view) of a DuckDB database file under an allow-listed folder, opened read-only.

The file is opened with ``read_only=True`` and external access off (``enable_external_access = false``,
configuration locked), so neither the read nor a view stored in the file can write, attach another
database or read another file of the server. Rows are read in the order of all their columns (``ORDER BY
ALL``) as Arrow record batches, checked and named as a Parquet file's are, so the fingerprint does not
depend on the file's storage order; the batch engines get the same chunks, staged as Parquet. A Data page
read stops at the operator's time limit (``query_timeout_s``: DuckDB's ``interrupt()``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    import duckdb

from dpcore.data.io import check_dates, check_flat, column_name
from dpcore.data.sources import common
from dpcore.data.sources.common import (
    BATCH_ROWS,
    FILE_COLUMNS,
    SourceSettings,
    binary_as_utf8,
    check_names,
    file_stamp,
    inside_folder,
    walk_folders,
)
from dpcore.data.sources.registry import (
    BatchChunks,
    Field,
    LoadedSource,
    SourceContext,
    SourceSpec,
    register,
)
from dpcore.errors import DataError, ParameterError

__all__ = ["DUCKDB_SUFFIXES", "DuckDBFile"]

DUCKDB_SUFFIXES = (".duckdb", ".ddb")
_LISTED = (
    "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
    "AND table_schema = current_schema() ORDER BY table_name"
)


def _is_duckdb(name: str) -> bool:
    return name.lower().endswith(DUCKDB_SUFFIXES)


@register
@dataclass(frozen=True)
class DuckDBFile(SourceSpec):
    """The table ``table`` of the DuckDB database file at ``path`` (relative, POSIX) below the allow-listed
    ``folder``."""

    folder: str
    path: str
    table: str

    kind = "duckdb_file"
    title = "DuckDB database file"
    allow_list = "folders"
    fields = (
        Field(
            "file",
            "DuckDB file",
            fills=("folder", "path"),
            help="DuckDB database files below the allow-listed folders, opened read-only.",
            empty="The allow-listed folders hold no DuckDB database files (.duckdb, .ddb).",
        ),
        Field(
            "table",
            "Table",
            help="Tables and views of the file.",
            empty="The DuckDB file '{path}' has no tables.",
        ),
    )
    command_form = "a DuckDB database file (.duckdb) with --table NAME"

    def __post_init__(self) -> None:
        if not all(isinstance(v, str) for v in (self.folder, self.path, self.table)) or not self.table:
            raise DataError("A DuckDB table is named by its folder, file and table; choose it from the list.")
        if not _is_duckdb(self.path):
            raise DataError(
                f"'{self.path}' is not a DuckDB database file (.duckdb, .ddb); choose one from the list."
            )

    @property
    def label(self) -> str:
        return f"{Path(self.folder).name}/{self.path}: {self.table}"

    @property
    def where(self) -> str:
        return self.folder

    @classmethod
    def intro(cls, settings: SourceSettings) -> str:
        return (
            "Tables of DuckDB database files in the folders the operator allow-listed, opened read-only "
            "(a view cannot read other files)."
        )

    @classmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        if name == "table":
            path = _file(chosen["folder"], chosen["path"], ctx.folders)
            with _opened(path) as con:
                return {t: {"table": t} for (t,) in con.execute(_LISTED).fetchall()}
        found: dict[str, dict[str, str]] = {}
        for folder, files in walk_folders(ctx.folders, _is_duckdb):
            for rel in files:
                try:
                    inside_folder(folder, rel.as_posix(), ctx.folders, rel.as_posix())
                except DataError:
                    continue
                found[f"{Path(folder).name}/{rel.as_posix()}"] = {"folder": folder, "path": rel.as_posix()}
        return found

    def stamp(self, ctx: SourceContext) -> tuple[Any, ...]:
        return file_stamp([_file(self.folder, self.path, ctx.folders)])

    def load(self, ctx: SourceContext, *, max_rows: int, sample_seed: int) -> LoadedSource:
        limit = common.MAX_TEXT_MB * 2**20
        with self._rows(ctx, BATCH_ROWS) as (total, chunks):
            result = common.one_pass(self.label, chunks, total, max_rows, sample_seed, limit)
        return common.loaded(self.label, *result, sample_seed, "DuckDB file in an allow-listed folder")

    def batch(self, ctx: SourceContext) -> BatchChunks:
        return BatchChunks(self.label, lambda: self._rows(ctx, BATCH_ROWS))

    @contextmanager
    def _rows(self, ctx: SourceContext, chunk_rows: int) -> Iterator[tuple[int, Iterator[pd.DataFrame]]]:
        """(number of rows, the rows in the order of all their columns as frames of ``chunk_rows``)."""
        import duckdb  # loaded on first read: the Data page's start does not wait for the engine

        path = _file(self.folder, self.path, ctx.folders)
        with _opened(path) as con, _deadline(con, ctx.timeout_s, self.label):
            try:
                if self.table not in {t for (t,) in con.execute(_LISTED).fetchall()}:
                    raise DataError(f"The DuckDB file has no table '{self.table}'; choose one from the list.")
                name = '"' + self.table.replace('"', '""') + '"'
                columns = [row[0] for row in con.execute(f"DESCRIBE {name}").fetchall()]
                check_names(self.label, columns, FILE_COLUMNS)
                total = int(con.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0])
                reader = con.execute(f"SELECT * FROM {name} ORDER BY ALL").to_arrow_reader(chunk_rows)
                check_flat(reader.schema, self.label)
            except duckdb.Error as err:
                raise _refused(self.label, err) from err
            yield total, self._frames(reader)

    def _frames(self, reader: Any) -> Iterator[pd.DataFrame]:
        import duckdb

        try:
            for batch in reader:
                frame = binary_as_utf8(batch, self.label).to_pandas().rename(columns=column_name)
                check_dates(frame, self.label)
                yield frame
        except duckdb.Error as err:
            raise _refused(self.label, err) from err

    def command_line(self) -> list[str]:
        return [str(PurePosixPath(self.folder) / self.path), "--table", self.table]

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        """A path ending in .duckdb or .ddb, with --table."""
        path = Path(source).expanduser()
        if "://" in source or not _is_duckdb(path.name):
            return None
        if table is None:
            raise ParameterError(
                f"{path.name} is a DuckDB database file: give --table NAME (the table the plan was made on); "
                "--query is not read from a DuckDB file."
            )
        if not path.is_file():
            raise DataError(
                f"No DuckDB database file at {path}; point --source at the file the plan was made on."
            )
        real = path.resolve()
        return cls(str(real.parent), real.name, table), SourceContext(folders=(str(real.parent),))


def _file(folder: str, path: str, folders: tuple[str, ...]) -> Path:
    """The DuckDB file ``path`` below the allow-listed ``folder`` (:func:`inside_folder`)."""
    real = inside_folder(folder, path, folders, f"{Path(folder).name}/{path}")
    if not (real.is_file() and _is_duckdb(real.name)):
        raise DataError(f"'{path}' is not a DuckDB database file (.duckdb, .ddb); choose one from the list.")
    return real


@contextmanager
def _opened(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """``path`` opened read-only, with no access to other files or databases; closed on leaving."""
    import duckdb

    config = {"enable_external_access": "false", "lock_configuration": "true", "threads": "1"}
    try:
        con = duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.Error as err:
        raise DataError(
            f"'{path.name}' could not be opened as a DuckDB database ({str(err).splitlines()[0]}); check "
            "that it is a DuckDB file written by this DuckDB version or an older one, and not being written."
        ) from err
    try:
        yield con
    finally:
        con.close()


@contextmanager
def _deadline(con: duckdb.DuckDBPyConnection, timeout_s: float | None, label: str) -> Iterator[None]:
    """Interrupt ``con``'s work ``timeout_s`` seconds from now (None: never), with the time limit's error."""
    if timeout_s is None:
        yield
        return
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    except DataError as err:
        if fired.is_set():
            raise DataError(
                f"The read of '{label}' was stopped after the time limit of {timeout_s:g} s. Ask the "
                "operator to raise [dpcore] query_timeout_s; the batch job (python -m dpcore run-plan) reads "
                "a whole table without this limit."
            ) from err
        raise
    finally:
        timer.cancel()


def _refused(label: str, err: BaseException) -> DataError:
    return DataError(
        f"DuckDB refused the read of '{label}' ({str(err).splitlines()[0]}); check the table in the file and "
        "load it again."
    )
