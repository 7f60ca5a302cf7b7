"""Tables the operator configures, one module per source kind, dispatched through one registry.

A source is named by a spec that holds no data and no secret (a database is named by its connection name,
the URL stays in the operator's config), so a session plan can store it and load the table again. Each kind
is one module of this package (:mod:`~dpcore.data.sources.folder_file`: a Parquet or CSV file, or a folder
of Parquet files, under an allow-listed folder; :mod:`~dpcore.data.sources.database_table` and
:mod:`~dpcore.data.sources.database_query`: a table or one read-only SELECT of a configured database;
:mod:`~dpcore.data.sources.duckdb_file`: a table of a DuckDB database file under an allow-listed folder,
opened read-only) registering its spec in :data:`~dpcore.data.sources.registry.SOURCES`, which the Data
page, the batch command and the dashboard's batch jobs go through (:mod:`~dpcore.data.sources.registry`).
A new kind is one new module and its import line below.

:func:`load_source` reads a source in one streaming pass: it computes the whole table's
:func:`~dpcore.data.fingerprint` and keeps the rows, or, above ``max_rows``, a uniform sample of
``max_rows`` rows, for the diagnostics (:mod:`~dpcore.data.sources.common`).
"""

from dpcore.data.sources.common import (
    DEFAULT_MAX_ROWS,
    DEFAULT_QUERY_TIMEOUT_S,
    DEFAULT_SOURCE_CACHE_TTL_S,
    MAX_ROWS_ENV,
    PARQUET_SUFFIXES,
    TEXT_SUFFIXES,
    SourceSettings,
    load_source,
    parquet_frames,
    parquet_parts,
    read_text_file,
)
from dpcore.data.sources.database import (
    LEDGER_TABLES,
    is_url,
    list_tables,
    refuse_ledger_database,
    same_database,
    sql_chunks,
    validate_select,
)
from dpcore.data.sources.registry import (
    SOURCES,
    Field,
    LoadedSource,
    SourceContext,
    SourceSpec,
    batch_source,
    from_command_line,
    register,
    source_from_batch,
    source_from_dict,
)

# The source kinds, in the Data page's order: one import line each.
from dpcore.data.sources.folder_file import FolderFile, list_folder_files, resolve_folder_file  # isort: skip
from dpcore.data.sources.database_table import DatabaseTable  # isort: skip
from dpcore.data.sources.database_query import DatabaseQuery  # isort: skip
from dpcore.data.sources.duckdb_file import DuckDBFile as DuckDBFile  # isort: skip

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_QUERY_TIMEOUT_S",
    "DEFAULT_SOURCE_CACHE_TTL_S",
    "LEDGER_TABLES",
    "MAX_ROWS_ENV",
    "PARQUET_SUFFIXES",
    "SOURCES",
    "TEXT_SUFFIXES",
    "DatabaseQuery",
    "DatabaseTable",
    "Field",
    "FolderFile",
    "LoadedSource",
    "SourceContext",
    "SourceSettings",
    "SourceSpec",
    "batch_source",
    "from_command_line",
    "is_url",
    "list_folder_files",
    "list_tables",
    "load_source",
    "parquet_frames",
    "parquet_parts",
    "read_text_file",
    "refuse_ledger_database",
    "register",
    "resolve_folder_file",
    "same_database",
    "source_from_batch",
    "source_from_dict",
    "sql_chunks",
    "validate_select",
]
