"""Source kind: a Parquet or CSV file, or a folder of Parquet files, under an allow-listed folder.

Parquet is read in one streaming pass of record batches, each measured before its text is expanded
(:func:`~dpcore.data.sources.common.parquet_frames`); the batch engines read the files where they lie. A
CSV file is read whole, as an upload is (at most ``MAX_TEXT_MB``), and staged for the engines. A file
exactly as an upload would be read gives the upload's table and fingerprint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpcore.data.fingerprint import fingerprint
from dpcore.data.io import load_table
from dpcore.data.sources import common
from dpcore.data.sources.common import (
    FILE_COLUMNS,
    MAX_LISTED,
    PARQUET_SUFFIXES,
    SourceSettings,
    check_names,
    file_stamp,
    inside,
    inside_folder,
    is_table_file,
    no_rows,
    parquet_frames,
    parquet_parts,
    read_text_file,
    sample_rows,
    walk_folders,
)
from dpcore.data.sources.registry import (
    Batch,
    BatchFiles,
    BatchTable,
    Field,
    LoadedSource,
    SourceContext,
    SourceSpec,
    register,
)
from dpcore.errors import DataError, ParameterError

__all__ = ["FolderFile", "list_folder_files", "resolve_folder_file"]


@register
@dataclass(frozen=True)
class FolderFile(SourceSpec):
    """A Parquet or CSV file, or a folder of Parquet files, at ``path`` (relative, POSIX) below the
    allow-listed ``folder`` (as the operator configured it)."""

    folder: str
    path: str

    kind = "folder_file"
    title = "File in a data folder"
    allow_list = "folders"
    fields = (
        Field(
            "file",
            "File",
            fills=("folder", "path"),
            help="Parquet and CSV files below the allow-listed folders, and folders of Parquet files (one "
            "table: every file, in path order).",
            empty="The allow-listed folders hold no Parquet or CSV files.",
        ),
    )
    command_form = "a Parquet file or folder, or a CSV file (its path)"

    def __post_init__(self) -> None:
        if not (isinstance(self.folder, str) and isinstance(self.path, str)):
            raise DataError("A folder file is named by its folder and path (text); choose it from the list.")

    @property
    def label(self) -> str:
        return f"{Path(self.folder).name}/{self.path}"

    @property
    def where(self) -> str:
        return self.folder

    @classmethod
    def intro(cls, settings: SourceSettings) -> str:
        return (
            "Parquet and CSV files in the folders the operator allow-listed (nothing else on the server is "
            "listed)."
        )

    @classmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """The files by display label (the full path when two labels clash)."""
        files = list_folder_files(ctx.folders)
        labels = [spec.label for spec in files]
        return {
            (s.label if labels.count(s.label) == 1 else f"{s.folder}/{s.path}"): {
                "folder": s.folder,
                "path": s.path,
            }
            for s in files
        }

    def stamp(self, ctx: SourceContext) -> tuple[Any, ...]:
        return file_stamp(resolve_folder_file(self, ctx.folders))

    def load(self, ctx: SourceContext, *, max_rows: int, sample_seed: int) -> LoadedSource:
        paths = resolve_folder_file(self, ctx.folders)
        if len(paths) == 1 and not paths[0].name.lower().endswith(PARQUET_SUFFIXES):
            return _load_text_file(self, paths[0], max_rows, sample_seed)
        return _load_parquet(self, paths, max_rows, sample_seed)

    def batch(self, ctx: SourceContext) -> Batch:
        paths = resolve_folder_file(self, ctx.folders)
        root = Path(self.folder).resolve().joinpath(*PurePosixPath(self.path).parts)
        if len(paths) == 1 and not paths[0].name.lower().endswith(PARQUET_SUFFIXES):
            return BatchTable(lambda: read_text_file(paths[0], paths[0].name))
        return BatchFiles(root)

    def command_line(self) -> list[str]:
        return [str(PurePosixPath(self.folder) / self.path)]

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        """A path that is not a URL: a Parquet file or folder, or a CSV file (no --table, no --query)."""
        if "://" in source:
            return None
        path = Path(source).expanduser()
        if not path.exists():
            if table is None and query is None:
                raise DataError(
                    f"No file or folder at {path}; give a Parquet file or folder, a CSV file or a URL."
                )
            return None
        if not (path.is_dir() or is_table_file(path.name)):
            return None
        if table is not None or query is not None:
            raise ParameterError(
                f"--{'table' if table is not None else 'query'} is for a database source; give a SQLAlchemy "
                f"URL as --source, or leave it out for {path.name}."
            )
        real = path.resolve()
        return cls(str(real.parent), real.name), SourceContext(folders=(str(real.parent),))


def resolve_folder_file(spec: FolderFile, folders: Sequence[str]) -> list[Path]:
    """The file(s) ``spec`` names, each checked to lie inside its allow-listed folder after resolving
    symbolic links: one file, or the ``.parquet`` files below a folder (:func:`parquet_parts`).

    Raises ``DataError`` for a folder that is not allow-listed, an absolute path, ``..``, a symbolic link
    leading out of the folder, a missing file or an unsupported file type.
    """
    real = inside_folder(spec.folder, spec.path, folders, spec.label)
    root = Path(spec.folder).resolve()
    if real.is_dir():  # its .parquet parts, as the batch command reads them
        parts = parquet_parts(real)
        if not parts:
            raise DataError(f"'{spec.label}' holds no .parquet files; choose a file from the list.")
        return [inside(p, root, f"{spec.path}/{p.name}") for p in parts]
    if not is_table_file(real.name):
        raise DataError(
            f"'{spec.label}' is not a Parquet or CSV file (.parquet, .pq, .csv, .tsv, .txt, .csv.gz); choose "
            "a file from the list."
        )
    return [real]


def list_folder_files(folders: Sequence[str]) -> list[FolderFile]:
    """Parquet and CSV files below the allow-listed folders (names starting with '.' or '_' and symbolic
    links leading out excluded), and each sub-folder with two or more Parquet files below it (one table:
    all of them, as in a partitioned data set), in path order; at most ``MAX_LISTED`` of the first
    ``MAX_WALKED`` files."""
    found: list[FolderFile] = []
    for folder, files in walk_folders(folders, is_table_file):
        below = Counter(d for f in files if f.name.lower().endswith(".parquet") for d in f.parents if d.parts)
        candidates = sorted([*files, *(d for d, n in below.items() if n > 1)], key=lambda p: p.parts)
        for rel in candidates:
            spec = FolderFile(folder, rel.as_posix())
            try:
                resolve_folder_file(spec, folders)
            except DataError:
                continue
            found.append(spec)
            if len(found) >= MAX_LISTED:
                return found
    return found


def _load_parquet(spec: FolderFile, paths: list[Path], max_rows: int, seed: int) -> LoadedSource:
    try:  # one file open at a time: a folder may hold more parts than a process may open
        total = sum(pq.read_metadata(p).num_rows for p in paths)
        names = pq.read_schema(paths[0]).names
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"'{spec.label}' is not readable Parquet (damaged, or written in a way pyarrow cannot read: "
            f"{type(err).__name__}); export it again."
        ) from err
    if total == 0:
        raise no_rows(spec.label, 0)
    check_names(spec.label, names, FILE_COLUMNS)
    what = f"Parquet, {len(paths)} file{'s' * (len(paths) > 1)} in an allow-listed folder"
    if total <= max_rows and len(paths) == 1:  # exactly an upload of this file
        table = load_table(paths[0], max_bytes=common.MAX_TEXT_MB * 2**20)
        return LoadedSource(table, fingerprint(table), len(table), False, None, what)
    chunks = parquet_frames(paths, spec.label)
    return common.loaded(spec.label, *common.one_pass(spec.label, chunks, total, max_rows, seed), seed, what)


def _load_text_file(spec: FolderFile, path: Path, max_rows: int, seed: int) -> LoadedSource:
    table = read_text_file(path, spec.label)
    digest = fingerprint(table)
    if len(table) <= max_rows:
        return LoadedSource(table, digest, len(table), False, None, "CSV in an allow-listed folder")
    note = f"CSV in an allow-listed folder; uniform sample of {max_rows:,} of {len(table):,} rows"
    return LoadedSource(sample_rows(table, max_rows, seed), digest, len(table), True, seed, note)
