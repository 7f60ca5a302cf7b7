"""What every source kind's reader shares: the operator's settings, the folder checks, Parquet and CSV
reading, and the one pass that fingerprints a table while keeping its rows or a uniform sample of them.

:func:`one_pass` reads a source's chunks once: it computes the whole table's
:func:`~dpcore.data.fingerprint` (through :class:`~dpcore.data.fingerprint.FingerprintStream`) and keeps the
rows, or, above ``max_rows``, a uniform sample of ``max_rows`` rows (indices drawn without replacement), for
the diagnostics; :func:`loaded` reads the kept rows through :func:`~dpcore.data.load_table`, the upload
path, so a Parquet file gives the same table and the same fingerprint whether it is uploaded or read from a
folder. A folder file must resolve (symbolic links followed) inside one of the allow-listed folders, with
no absolute path and no ``..`` (:func:`inside_folder`); only those folders are listed (:func:`walk_folders`),
never the rest of the file system.
"""

from __future__ import annotations

import io
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from dpcore.data.fingerprint import FingerprintStream, fingerprint
from dpcore.data.io import (
    MAX_COLUMNS,
    binary_type,
    check_dates,
    check_flat,
    column_name,
    index_as_column,
    load_table,
    parquet_batches,
)
from dpcore.data.sources.registry import LoadedSource, SourceContext, SourceSpec
from dpcore.errors import DataError

DEFAULT_MAX_ROWS = 200_000
MAX_TEXT_MB = 200  # a file read whole (as an upload is): a CSV on disk and unpacked, a Parquet file's text
MAX_LISTED = 500
MAX_WALKED = 10_000
BATCH_ROWS = 65_536
FOLDERS_ENV = "DPCORE_DATA_FOLDERS"
MAX_ROWS_ENV = "DPCORE_MAX_ROWS"
DEFAULT_QUERY_TIMEOUT_S = 300.0  # a sampled read of 2M x 10 SQLite rows: 12 s
QUERY_TIMEOUT_ENV = "DPCORE_QUERY_TIMEOUT_S"
DEFAULT_SOURCE_CACHE_TTL_S = 600.0  # a database read is kept per server this long (0: read every time)
SOURCE_CACHE_TTL_ENV = "DPCORE_SOURCE_CACHE_TTL_S"
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")
SQL_COLUMNS = "Load only the columns you need (features, the user column) with SELECT a, b, ... FROM ..."
FILE_COLUMNS = "Write a copy with only the columns you need (features, the user column) and use that."


@dataclass(frozen=True)
class SourceSettings:
    """What the operator allows: data folders, database connection names, the in-memory row limit, the
    time limit of a database read on the Data page (seconds) and how long the Data page keeps a database
    read for other sessions and reloads (seconds, 0: never kept).

    Read by :meth:`from_config` from a ``[dpcore]`` table (``data_folders``, ``databases``, ``max_rows``,
    ``query_timeout_s``, ``source_cache_ttl_s``) and the environment (``DPCORE_DATA_FOLDERS``: folders
    separated by ``os.pathsep``; ``DPCORE_MAX_ROWS``; ``DPCORE_QUERY_TIMEOUT_S``;
    ``DPCORE_SOURCE_CACHE_TTL_S``).
    """

    folders: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()
    max_rows: int = DEFAULT_MAX_ROWS
    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    source_cache_ttl_s: float = DEFAULT_SOURCE_CACHE_TTL_S

    @classmethod
    def from_config(cls, table: Mapping[str, Any], environ: Mapping[str, str]) -> SourceSettings:
        folders = [str(f) for f in _strings(table.get("data_folders", ()), "data_folders")]
        folders += [f for f in environ.get(FOLDERS_ENV, "").split(os.pathsep) if f.strip()]
        databases = _strings(table.get("databases", ()), "databases")
        limit = environ.get(MAX_ROWS_ENV) or table.get("max_rows", DEFAULT_MAX_ROWS)
        try:
            max_rows = int(limit)
        except (TypeError, ValueError):
            max_rows = 0
        if max_rows < 1:
            raise DataError(f"max_rows must be a positive whole number (got {limit!r}); fix the config.")
        timeout = environ.get(QUERY_TIMEOUT_ENV) or table.get("query_timeout_s", DEFAULT_QUERY_TIMEOUT_S)
        seconds = _seconds(timeout)
        if not seconds > 0:
            raise DataError(
                f"query_timeout_s must be a positive number of seconds (got {timeout!r}), e.g. "
                f"query_timeout_s = {DEFAULT_QUERY_TIMEOUT_S:g}; fix the config."
            )
        ttl = environ.get(SOURCE_CACHE_TTL_ENV) or table.get("source_cache_ttl_s", DEFAULT_SOURCE_CACHE_TTL_S)
        kept = _seconds(ttl)
        if not kept >= 0:
            raise DataError(
                f"source_cache_ttl_s must be a number of seconds, 0 or more (got {ttl!r}), e.g. "
                f"source_cache_ttl_s = {DEFAULT_SOURCE_CACHE_TTL_S:g} (0 reads a database on every load); "
                "fix the config."
            )
        unique = tuple(dict.fromkeys(folders)), tuple(dict.fromkeys(databases))
        return cls(*unique, max_rows, seconds, kept)


def _seconds(value: Any) -> float:
    """``value`` as a finite number of seconds, NaN when it is not one (a boolean, text, inf)."""
    try:
        seconds = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return math.nan
    return seconds if math.isfinite(seconds) else math.nan


def _strings(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise DataError(f"[dpcore] {name} must be a list of strings, e.g. {name} = ['...']; fix it.")
    return list(value)


# -- folders ----------------------------------------------------------------------------------------


def hidden(name: str) -> bool:
    """Names Spark, Hive and Arrow datasets skip: '.' (hidden, staging) and '_' (_temporary, _SUCCESS)."""
    return name.startswith((".", "_"))


def is_table_file(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES + TEXT_SUFFIXES) and not hidden(name)


def parquet_parts(folder: Path) -> list[Path]:
    """Every ``.parquet`` file below ``folder``, in sorted path order, skipping files and folders whose
    names start with '.' or '_' (a writer's in-progress parts, as Spark and Arrow datasets skip them)."""
    return sorted(
        p
        for p in folder.rglob("*.parquet")
        if p.is_file() and not any(hidden(part) for part in p.relative_to(folder).parts)
    )


def inside(path: Path, root: Path, shown: str) -> Path:
    real = path.resolve()
    if not real.is_relative_to(root):
        raise DataError(
            f"'{shown}' leads outside the allow-listed folder (through a symbolic link); choose a file from "
            "the list."
        )
    return real


# -- reading ----------------------------------------------------------------------------------------


def check_names(label: str, names: Sequence[object], fix: str) -> None:
    """Refuse, before any row is read, a source wider than the Data page holds (``MAX_COLUMNS``; ``fix``
    says how to narrow it) or naming two columns alike (a join's ``a.x, b.x``; names compared as
    ``load_table`` cleans them)."""
    if len(names) > MAX_COLUMNS:
        raise DataError(f"'{label}' has {len(names):,} columns; at most {MAX_COLUMNS:,} can be loaded. {fix}")
    seen: set[str] = set()
    twice = next((n for n in map(column_name, names) if n in seen or seen.add(n)), None)
    if twice is not None:
        raise DataError(
            f"'{label}' returns the column name '{twice}' more than once; give each column its own name "
            f"(in a SELECT: a.{twice} AS {twice}_a, b.{twice} AS {twice}_b)."
        )


def one_pass(
    name: str,
    chunks: Iterator[pd.DataFrame],
    total: int,
    max_rows: int,
    seed: int,
    max_bytes: int | None = None,
) -> tuple[str, int, list[pd.DataFrame], bool]:
    """One pass over ``chunks`` (``total`` rows in all): the fingerprint of the rows with a value (as
    ``load_table`` keeps them), their number, and the rows kept (all, or a uniform sample of ``max_rows``
    of the ``total`` rows, indices without replacement), refused once they take more than ``max_bytes`` in
    memory (None: no limit)."""
    sampled = total > max_rows
    picks = np.sort(np.random.default_rng(seed).choice(total, max_rows, replace=False)) if sampled else None
    kept: list[pd.DataFrame] = []
    start = held = 0
    with FingerprintStream() as stream:
        for chunk in chunks:
            if picks is None:
                kept.append(chunk)
            else:
                lo, hi = np.searchsorted(picks, [start, start + len(chunk)])
                kept.append(chunk.iloc[picks[lo:hi] - start])
            if max_bytes is not None:
                held += int(kept[-1].memory_usage(index=False, deep=True).sum())
                if held > max_bytes:
                    raise kept_error(name, max_bytes)
            start += len(chunk)
            stream.update(chunk.dropna(how="all"))
        if start != total:
            raise DataError(f"'{name}' changed while it was read ({start:,} of {total:,} rows); load again.")
        if stream.n_rows == 0:
            raise no_rows(name, total)
        return stream.hexdigest(), stream.n_rows, kept, sampled


def kept_error(name: str, max_bytes: int) -> DataError:
    return DataError(
        f"'{name}' takes more than {max_bytes / 2**20:,.0f} MB in memory, the most the Data page keeps from "
        "one database read. Select only the columns you need and shorten long texts (e.g. substr(note, 1, "
        "1000)), or ask the operator to lower [dpcore] max_rows (a smaller sample); the batch job (python -m "
        "dpcore run-plan) reads the whole table without this limit."
    )


def no_rows(name: str, total: int) -> DataError:
    empty = f" with a value ({total:,} row{'s' * (total != 1)}, every cell empty)" if total else ""
    return DataError(f"'{name}' has no rows{empty}; choose a table, file or SELECT with at least one row.")


def validated(kept: list[pd.DataFrame], name: str) -> pd.DataFrame:
    """The kept rows read back through ``load_table`` (the upload path's checks and types)."""
    frame = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()
    buffer = io.BytesIO()
    try:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    except (pa.ArrowException, TypeError, ValueError) as err:
        mixed = ", ".join(f"'{c}'" for c in frame.columns if not _one_type(frame[c])) or "?"
        raise DataError(
            f"'{name}' has a column mixing types ({mixed}: numbers and text, say, which one column cannot "
            "hold); cast it to one type and load it again."
        ) from err
    return load_table(buffer.getvalue(), filename=f"{name}.parquet", max_bytes=MAX_TEXT_MB * 2**20)


def _one_type(values: pd.Series) -> bool:
    """Whether Arrow can hold ``values`` as one column (one type)."""
    try:
        pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return True


def loaded(
    name: str, digest: str, n_rows: int, kept: list[pd.DataFrame], sampled: bool, seed: int, what: str
) -> LoadedSource:
    table = validated(kept, name)
    if not sampled:  # the table in use is the whole table: its own fingerprint, as for an upload
        return LoadedSource(table, fingerprint(table), len(table), False, None, what)
    note = f"{what}; uniform sample of {len(table):,} of {n_rows:,} rows"
    return LoadedSource(table, digest, n_rows, True, seed, note)


def _names(columns: Sequence[str], most: int = 8) -> str:
    shown = ", ".join(columns[:most])
    return f"{shown}, ... ({len(columns)} in all)" if len(columns) > most else shown


def binary_as_utf8(batch: pa.RecordBatch, label: str) -> pa.RecordBatch:
    """``batch`` with its binary columns read as text, as a whole-file read reads them when they are
    UTF-8; ``DataError`` otherwise (a whole-file read spells such a column in hexadecimal digits, which
    one batch cannot decide for the whole column)."""
    if not any(binary_type(t) for t in batch.schema.types):
        return batch
    columns, fields = [], []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if binary_type(field.type):
            try:
                column = column.cast(pa.binary()).cast(pa.string())
            except pa.ArrowInvalid as err:
                raise DataError(
                    f"'{label}': column '{field.name}' holds binary values that are not UTF-8 text; write "
                    "it as text (e.g. hexadecimal digits) or leave it out, and use that file."
                ) from err
            field = field.with_type(pa.string())
        columns.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata=batch.schema.metadata))


def parquet_frames(paths: Sequence[Path], label: str, batch_rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """The rows of the Parquet files ``paths`` (one table, in this order) as frames of at most
    ``batch_rows`` rows, column names cleaned as ``load_table`` cleans them; each batch is measured before
    its text is expanded (:func:`~dpcore.data.io.parquet_batches`). ``DataError`` for an unreadable file,
    too many or repeated column names, nested columns, timestamps pandas cannot hold, a batch too large
    once decoded, or a file whose columns differ from the first file's."""
    root = Path(os.path.commonpath([p.parent for p in paths])) if paths else Path()
    first: tuple[Path, list[str]] | None = None
    try:
        if paths:
            check_names(label, pq.read_schema(paths[0]).names, FILE_COLUMNS)
        for path in paths:
            check_flat(pq.read_schema(path), label)
            for k, batch in enumerate(parquet_batches(path, label, batch_rows)):
                frame = index_as_column(binary_as_utf8(batch, label).to_pandas(), label)
                frame = frame.rename(columns=column_name)
                check_dates(frame, label)
                columns = [str(c) for c in frame.columns]
                first = first or (path, columns)
                if k == 0 and columns != first[1]:
                    raise DataError(
                        f"'{label}': {path.relative_to(root)} has the columns {_names(columns)} but "
                        f"{first[0].relative_to(root)} has {_names(first[1])}; every file of a folder table "
                        "must have the same columns in the same order. Move the odd file out of the folder, "
                        "or write it again with the same columns."
                    )
                yield frame
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"'{label}' could not be read (damaged, or changed while it was read: {type(err).__name__}); "
            "export it again."
        ) from err


def read_text_file(path: Path, label: str) -> pd.DataFrame:
    """A CSV file (gzip-compressed or not) read whole, as an upload is read, refused above
    ``MAX_TEXT_MB`` on disk or once unpacked (Parquet is read in a streaming pass instead)."""
    limit = MAX_TEXT_MB * 2**20
    size = path.stat().st_size
    if size > limit:
        raise DataError(
            f"'{label}' is {size / 2**20:,.0f} MB; CSV files above {MAX_TEXT_MB} MB are not read into "
            "memory. Convert it to Parquet (read in a streaming pass) and use that."
        )
    return load_table(path, max_bytes=limit)


def inside_folder(folder: str, path: str, folders: Sequence[str], label: str) -> Path:
    """The file or folder ``path`` (relative, POSIX) below the allow-listed ``folder``, symbolic links
    resolved and checked to stay inside it. ``DataError`` for a folder that is not allow-listed, an
    absolute path, ``..``, a symbolic link leading out of the folder or a missing file."""
    if folder not in folders:
        raise DataError(
            f"'{folder}' is not an allow-listed data folder; choose a file from the list (the operator "
            "sets the folders in [dpcore] data_folders)."
        )
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts or "\\" in path or "\x00" in path:
        raise DataError(
            f"'{path}' is not a path inside the folder (no absolute paths, no '..'); choose a file from "
            "the list."
        )
    root = Path(folder).resolve()
    target = root.joinpath(*rel.parts)
    if not target.exists():
        raise DataError(f"'{label}' does not exist (any more); choose a file from the list.")
    return inside(target, root, path)


def walk_folders(
    folders: Sequence[str], accept: Callable[[str], bool]
) -> Iterator[tuple[str, list[PurePosixPath]]]:
    """Each allow-listed folder and the files below it whose names ``accept`` takes (relative paths in
    path order; names starting with '.' or '_' skipped, symbolic links to folders not entered), at most
    ``MAX_WALKED`` files per folder."""
    for folder in folders:
        root = Path(folder).resolve()
        if not root.is_dir():
            continue
        files: list[PurePosixPath] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not hidden(d))
            here = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
            files += [here / f for f in sorted(filenames) if not hidden(f) and accept(f)]
            if len(files) >= MAX_WALKED:
                break
        yield folder, files


def file_stamp(paths: Sequence[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, modification time, size) of each file: a kept read of them holds while these do."""
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in paths)


def sample_rows(table: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    """``max_rows`` rows of ``table`` drawn uniformly without replacement with ``seed``, in table order."""
    rows = np.sort(np.random.default_rng(seed).choice(len(table), max_rows, replace=False))
    return table.iloc[rows].reset_index(drop=True)


def load_source(
    spec: SourceSpec,
    *,
    folders: Sequence[str] = (),
    engine: sa.Engine | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    sample_seed: int | None = None,
    timeout_s: float | None = None,
) -> LoadedSource:
    """Read ``spec`` (a file needs the allow-listed ``folders``, a database spec its ``engine``); above
    ``max_rows`` rows keep a uniform sample drawn with ``sample_seed`` (new from the OS entropy source when
    None: the sample is for diagnostics, its seed is recorded to load the same rows again). A database read
    is stopped after ``timeout_s`` seconds (None: no limit), see
    :func:`~dpcore.data.sources.database.sql_chunks`, and refused once the rows it keeps take more than
    ``MAX_SQL_BYTES`` in memory."""
    if max_rows < 1:
        raise DataError(f"max_rows must be at least 1 (got {max_rows}).")
    seed = secrets.randbits(63) if sample_seed is None else int(sample_seed)
    connect = None if engine is None else (lambda name: engine)
    ctx = SourceContext(folders=tuple(folders), connect=connect, timeout_s=timeout_s)
    return spec.load(ctx, max_rows=max_rows, sample_seed=seed)
