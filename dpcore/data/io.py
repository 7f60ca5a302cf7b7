"""Reading a curator's table: CSV/TSV (sniffed delimiter; UTF-8, BOM, Windows-1252, Latin-1), gzip,
Parquet and Excel .xlsx.

The format is decided by the file's magic bytes (gzip ``1f 8b``, Parquet ``PAR1``, zip ``PK``); the name only
serves as a hint for error messages. Every failure raises :class:`~dpcore.errors.DataError` whose message
names the problem and the fix; the readers' own exceptions never escape.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from dpcore.errors import DataError

__all__ = ["load_table"]

_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
_SNIFF_CHARS = 65536
_SNIFF_ROWS = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_MAX_CONTROL_SHARE = 0.01
_MIN_CONTROL = 8
_FORMATS_HELP = (
    "Supported formats: CSV/TSV (comma, semicolon or tab), gzip-compressed CSV, Parquet, Excel .xlsx."
)

Source = str | PathLike[str] | bytes | bytearray | memoryview | BinaryIO


def load_table(source: Source | Any, *, filename: str | None = None) -> pd.DataFrame:
    """Read a table from a path, raw bytes or a binary file object (e.g. Streamlit's ``UploadedFile``).

    Returns a DataFrame with whitespace-stripped, unique column names and at least one row; raises
    ``DataError`` for empty files, header-only files, binary junk, ragged rows (naming the line), duplicate
    column names and unreadable Parquet/Excel/gzip content. ``df.attrs["dpcore_source"]`` describes what was
    detected (format, encoding, delimiter), for display.
    """
    data, name = _read_bytes(source, filename)
    return _parse(data, name, depth=0)


def _read_bytes(source: Any, filename: str | None) -> tuple[bytes, str]:
    if isinstance(source, str | PathLike):
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise DataError(
                f"Could not open '{path}': {err.strerror or err}. Check the path and permissions."
            ) from err
        return data, filename or path.name
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source), filename or "uploaded data"
    if hasattr(source, "read"):
        name = filename or str(getattr(source, "name", "") or "uploaded file")
        try:
            if hasattr(source, "seek"):
                source.seek(0)
            data = source.read()
        except (OSError, ValueError) as err:
            raise DataError(f"Could not read '{name}': {err}. Upload the file again.") from err
        if isinstance(data, str):
            raise DataError(f"'{name}' was opened in text mode; open it in binary mode ('rb') and try again.")
        return bytes(data), Path(name).name
    raise DataError(
        f"Cannot read a table from a {type(source).__name__}; pass a path, bytes or a binary file."
    )


def _parse(data: bytes, name: str, depth: int) -> pd.DataFrame:
    lower = name.lower()
    if not data.strip():
        raise DataError(f"'{name}' is empty. Upload a file with a header row and at least one data row.")
    if data[:2] == b"\x1f\x8b":
        if depth:
            raise DataError(
                f"'{name}' is compressed twice with gzip; decompress it once and upload the result."
            )
        inner = lower[:-3] if lower.endswith(".gz") else lower
        return _parse(_gunzip(data, name), inner, depth + 1)
    if lower.endswith(".gz") and not depth:
        raise DataError(
            f"'{name}' is named .gz but is not gzip-compressed. Rename it or compress it with gzip."
        )
    if data[:4] == b"PAR1":
        return _read_parquet(data, name)
    if data[:4] == b"PK\x03\x04":
        return _read_xlsx(data, name)
    if data[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        raise DataError(
            f"'{name}' is a legacy Excel 97-2003 (.xls) or password-protected workbook. "
            "Save it as .xlsx (without a password) or CSV and upload that."
        )
    for ext, kind in (
        (".parquet", "Parquet"),
        (".pq", "Parquet"),
        (".xlsx", "Excel .xlsx"),
        (".xls", "Excel"),
    ):
        if lower.endswith(ext):
            raise DataError(f"'{name}' is named {ext} but is not a valid {kind} file. Export it again.")
    return _read_text(data, name)


def _gunzip(data: bytes, name: str) -> bytes:
    try:
        out = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(
            f"'{name}' looks gzip-compressed but is damaged or truncated ({err}). Upload it again."
        ) from err
    if not out.strip():
        raise DataError(f"'{name}' decompresses to an empty file. Upload a file with a header and data rows.")
    return out


def _decode(data: bytes, name: str) -> tuple[str, str]:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16"), "UTF-16"
        except UnicodeDecodeError as err:
            raise DataError(
                f"'{name}' starts like UTF-16 text but is not valid UTF-16; save it as UTF-8."
            ) from err
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    if b"\x00" in body:
        raise DataError(f"'{name}' contains binary data, not text. {_FORMATS_HELP}")
    for codec, label in (("utf-8", "UTF-8 with BOM" if bom else "UTF-8"), ("cp1252", "Windows-1252")):
        try:
            return body.decode(codec), label
        except UnicodeDecodeError:
            continue
    return body.decode("latin-1"), "Latin-1"


def _sniff_delimiter(text: str, name: str) -> str:
    sample = text[:_SNIFF_CHARS]
    if len(text) > _SNIFF_CHARS and "\n" in sample:
        sample = sample[: sample.rfind("\n")]
    best, best_score = ",", (0.0, 1)
    for delim in _DELIMITERS:
        try:
            rows = [
                r
                for _, r in zip(
                    range(_SNIFF_ROWS), csv.reader(io.StringIO(sample), delimiter=delim), strict=False
                )
                if r
            ]
        except csv.Error:
            continue
        if not rows or len(rows[0]) < 2:
            continue
        width = len(rows[0])
        score = (sum(len(r) == width for r in rows) / len(rows), width)
        if score > best_score:
            best, best_score = delim, score
    if best_score[1] == 1 and name.lower().endswith((".tsv", ".tab")):
        return "\t"
    return best


def _is_blank(row: list[str]) -> bool:
    return not row or (len(row) == 1 and not row[0].strip())


def _record_widths(text: str, raw: bytes, delim: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Line number and field count of every non-blank record.

    Without quote characters a record is a line, and the fields are counted vectorised from the positions
    of the delimiters and newlines; otherwise ``csv.reader`` (strict quoting) splits the records.
    """
    if b'"' not in raw:
        buf = np.frombuffer(raw, dtype=np.uint8)
        breaks = np.flatnonzero(buf == ord("\n"))
        starts = np.concatenate(([0], breaks + 1))
        ends = np.concatenate((breaks, [buf.size]))
        seps = np.flatnonzero(buf == ord(delim))
        widths = np.searchsorted(seps, ends) - np.searchsorted(seps, starts) + 1
        keep = np.ones(widths.size, dtype=bool)
        for i in np.flatnonzero(widths == 1):
            keep[i] = bool(raw[starts[i] : ends[i]].strip())
        return np.flatnonzero(keep) + 1, widths[keep]
    reader = csv.reader(io.StringIO(text), delimiter=delim, strict=True)
    lines: list[int] = []
    widths_list: list[int] = []
    try:
        for row in reader:
            if not _is_blank(row):
                lines.append(reader.line_num)
                widths_list.append(len(row))
    except csv.Error as err:
        raise DataError(
            f"'{name}' is not valid CSV near line {reader.line_num}: {err}. Check for an unbalanced quote."
        ) from err
    return np.asarray(lines, dtype=np.int64), np.asarray(widths_list, dtype=np.int64)


def _lines(text: str) -> Iterator[str]:
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _check_rows(text: str, raw: bytes, delim: str, name: str) -> list[str]:
    """Return the header fields; raise naming the first line whose field count differs from the header's."""
    lines, widths = _record_widths(text, raw, delim, name)
    if lines.size == 0:
        raise DataError(
            f"'{name}' contains no rows. Upload a file with a header row and at least one data row."
        )
    try:
        header = next(row for row in csv.reader(_lines(text), delimiter=delim) if not _is_blank(row))
    except csv.Error as err:
        raise DataError(
            f"'{name}' could not be parsed as {_DELIMITER_NAMES[delim]}-separated text ({err}). "
            "Check for stray line breaks or unbalanced quotes, or save the file again as CSV."
        ) from err
    bad = np.flatnonzero(widths[1:] != widths[0]) + 1
    if bad.size:
        sep = _DELIMITER_NAMES[delim]
        raise DataError(
            f"'{name}': line {lines[bad[0]]} has {widths[bad[0]]} fields but the header has {widths[0]} "
            f"({sep}-separated; {bad.size} line(s) affected). Fix the missing or extra {sep} on that line, "
            f"or quote values that contain a {sep}."
        )
    if lines.size == 1:
        raise DataError(f"'{name}' has a header but no data rows. Upload a file with at least one data row.")
    return header


def _read_text(data: bytes, name: str) -> pd.DataFrame:
    text, encoding = _decode(data, name)
    head = text[:_SNIFF_CHARS]
    if len(_CONTROL.findall(head)) > max(_MIN_CONTROL, _MAX_CONTROL_SHARE * len(head)):
        raise DataError(f"'{name}' looks like binary data, not a text table. {_FORMATS_HELP}")
    if "\n" not in text:
        text = text.replace("\r", "\n")
    delim = _sniff_delimiter(text, name)
    raw = text.encode("utf-8")
    header = _check_rows(text, raw, delim, name)
    try:
        df = pd.read_csv(
            io.BytesIO(raw), encoding="utf-8", sep=delim, header=0, skip_blank_lines=True, low_memory=False
        )
    except (ValueError, csv.Error, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DataError(
            f"'{name}' could not be parsed as a {_DELIMITER_NAMES[delim]}-separated table: {err}"
        ) from err
    if df.shape[1] != len(header):
        raise DataError(
            f"'{name}': the header has {len(header)} fields but {df.shape[1]} columns were read. "
            "Check the quoting of the header row."
        )
    source = f"CSV ({encoding}, {_DELIMITER_NAMES[delim]}-separated)"
    return _finish(df, header, name, source)


def _read_parquet(data: bytes, name: str) -> pd.DataFrame:
    try:
        df = pd.read_parquet(io.BytesIO(data))
    # pyarrow raises many types (ArrowInvalid, OSError, ...) for damaged files
    except Exception as err:
        raise DataError(f"'{name}' is not a readable Parquet file ({err}). Export it again.") from err
    if not isinstance(df.index, pd.RangeIndex):
        df = df.reset_index()
    return _finish(df, [str(c) for c in df.columns], name, "Parquet")


def _read_xlsx(data: bytes, name: str) -> pd.DataFrame:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise DataError(f"'{name}' is a damaged zip/Excel file ({err}). Save the workbook again.") from err
    if "xl/workbook.xml" not in members:
        raise DataError(
            f"'{name}' is a zip archive but not an Excel .xlsx workbook. Unzip it and upload the table."
        )
    try:
        sheets = pd.read_excel(io.BytesIO(data), sheet_name=None, header=None, engine="openpyxl")
    # openpyxl raises KeyError, InvalidFileException, ValueError, ... on bad workbooks
    except Exception as err:
        raise DataError(
            f"'{name}' could not be read as an Excel workbook ({err}). Save it again as .xlsx."
        ) from err
    if not sheets:
        raise DataError(f"'{name}' has no worksheets. Put the table on the first sheet.")
    sheet, raw = next(iter(sheets.items()))
    raw = raw.dropna(how="all").dropna(axis=1, how="all")
    if raw.empty:
        raise DataError(
            f"The first sheet ('{sheet}') of '{name}' is empty. Put the table on the first sheet."
        )
    header = ["" if pd.isna(v) else str(v) for v in raw.iloc[0]]
    body = raw.iloc[1:].reset_index(drop=True).infer_objects()
    body.columns = range(body.shape[1])
    more = f" of {len(sheets)}" if len(sheets) > 1 else ""
    return _finish(body, header, name, f"Excel .xlsx (first sheet '{sheet}'{more})")


def _finish(df: pd.DataFrame, header: list[str], name: str, source: str) -> pd.DataFrame:
    names = [str(h).strip() for h in header]
    keep = [bool(n) or not df.iloc[:, i].isna().all() for i, n in enumerate(names)]
    df = df.iloc[:, [i for i, k in enumerate(keep) if k]].copy()
    names = [n or f"Unnamed: {i}" for i, (n, k) in enumerate(zip(names, keep, strict=True)) if k]
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})
    if dupes:
        listed = ", ".join(f"'{d}'" for d in dupes)
        raise DataError(
            f"'{name}' has duplicate column names: {listed}. Rename the columns so each is unique."
        )
    if not names:
        raise DataError(f"'{name}' has no columns. Upload a file with a header row.")
    df.columns = names
    df = df.dropna(how="all").reset_index(drop=True)
    if df.empty:
        raise DataError(f"'{name}' has a header but no data rows. Upload a file with at least one data row.")
    df.attrs["dpcore_source"] = source
    return df
