"""Reading a curator's table: CSV/TSV (sniffed delimiter; UTF-8, BOM, Windows-1252, Latin-1), gzip,
Parquet and Excel .xlsx.

The format is decided by the file's magic bytes (gzip ``1f 8b``, Parquet ``PAR1``, zip ``PK``); the name only
serves as a hint for error messages. Every failure raises :class:`~dpcore.errors.DataError` whose message
names the problem and the fix; the readers' own exceptions never escape.

Limits, so that a small hostile file cannot exhaust the server, each checked before the values are expanded
and on the structure the reader uses: a gzip stream is inflated in steps and refused once it exceeds
``max_bytes`` (default :data:`MAX_TABLE_BYTES`, 50 MB, the app's upload limit) or holds more than
:data:`MAX_GZIP_MEMBERS` members; a CSV file with more than :data:`MAX_LINES` lines (blank ones included), or
a CSV or Parquet value longer than :data:`MAX_CELL_BYTES`, is refused; a workbook is refused when its parts'
uncompressed sizes add up to more than ``max_bytes``, when one of its XML parts holds more than
:data:`MAX_XML_RUN` bytes between two elements (a huge comment or attribute: the XML parser's cost grows with
the square of such a run; Excel writes at most 32,767 characters in a cell) or more than
:data:`MAX_XLSX_ELEMENTS` XML elements in all (workbooks are parsed element by element, about 100,000 a
second), when a sheet spans more than :data:`MAX_XLSX_CELLS` cells from A1 to its farthest cell (the reader
fills that rectangle: one stray cell at XFD1048576 means 17 billion), or when its shared texts, copied into
every cell that shows them, add up to more than ``max_bytes`` (parts are parsed with an XML parser, as the
reader parses them); a Parquet file is refused when its cells or pages (from its metadata) or its values once
read exceed :func:`decoded_limit`, or its text, once every cell has its copy, exceeds ``max_bytes``; a table
with more than ``max_columns`` columns (default :data:`MAX_COLUMNS`) is refused before it is parsed.

Nothing is changed silently: what loading had to interpret is said in ``df.attrs["dpcore_notes"]`` (shown
on the Data page) - gzip members read one after the other, lines repeating the header (files joined end to
end) dropped, Excel's ``sep=;`` first line taken as the delimiter, lines not in UTF-8 in an otherwise UTF-8
file, numbers with thousands separators ("1,234") read as numbers or, when they could be decimal commas,
kept as text.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple
from xml.parsers import expat

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpcore.errors import DataError

__all__ = [
    "MAX_CELL_BYTES",
    "MAX_COLUMNS",
    "MAX_GZIP_MEMBERS",
    "MAX_LINES",
    "MAX_NAME_CHARS",
    "MAX_TABLE_BYTES",
    "MAX_XLSX_CELLS",
    "MAX_XLSX_ELEMENTS",
    "MAX_XML_RUN",
    "NOTES_ATTR",
    "load_table",
    "table_name",
]

MAX_TABLE_BYTES = 50 * 2**20
MAX_COLUMNS = 500
MAX_XML_RUN = 2**20
MAX_XLSX_ELEMENTS = 1_000_000
MAX_XLSX_CELLS = 2_000_000
MAX_GZIP_MEMBERS = 10_000
MAX_LINES = 10_000_000
MAX_CELL_BYTES = 2**20  # one value's text (Excel writes at most 32,767 characters in a cell)
MAX_NAME_CHARS = 255  # a file system's limit on a file name; the ledger's on a dataset name
MAX_BATCH_BYTES = 2**28  # one streamed batch of a large Parquet file, once decoded
NOTES_ATTR = "dpcore_notes"

_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
_SNIFF_CHARS = 65536
_SNIFF_ROWS = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_MAX_CONTROL_SHARE = 0.01
_MIN_CONTROL = 8
_LONE_CR = re.compile(r"\r(?!\n)")
_SEP_LINE = re.compile(r'\A\ufeff?"?sep=(.?)"?[ \t]*\r?(?:\n|\Z)', re.IGNORECASE)
_UTF8_MULTIBYTE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")
_LEGACY = tuple(bytes([b]).decode("cp1252", errors="ignore") or chr(b) for b in range(256))
_GROUPED = r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?"
_NUMBER = rf"{_GROUPED}|[+-]?\d+(?:\.\d+)?"
_FORMATS_HELP = (
    "Supported formats: CSV/TSV (comma, semicolon or tab), gzip-compressed CSV, Parquet, Excel .xlsx."
)

_INT64 = (-(2**63), 2**63 - 1)
_XML_SUFFIXES = (".xml", ".rels", ".vml")
_SCAN_SLICE = 4 * 2**20
_GZIP_SLICE = 2**16  # compressed bytes fed to an inflater at once
_NOT_ZERO = re.compile(rb"[^\x00]")
_ROWS_SLICE = 2**20  # bytes of CSV lines whose fields are counted at once (index arrays of about 15 MB)
_SPACE = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)  # what bytes.strip() removes
_NOT_ELEMENT = np.frombuffer(b"/!?", dtype=np.uint8)  # after "<": end tag, comment or declaration, PI
_TOKENS = ((b"<!--", b"-->"), (b"<?", b"?>"), (b"<![CDATA[", b"]]>"))
_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"  # the only one openpyxl reads
_ROW_TAG, _CELL_TAG, _VALUE_TAG = f"{_MAIN_NS} row", f"{_MAIN_NS} c", f"{_MAIN_NS} v"
_SHARED_TAG, _TEXT_TAG, _SHEET_TAG = f"{_MAIN_NS} si", f"{_MAIN_NS} t", f"{_MAIN_NS} sheet"

Source = str | PathLike[str] | bytes | bytearray | memoryview | BinaryIO


class _Limits(NamedTuple):
    max_bytes: int
    max_columns: int


def load_table(
    source: Source | Any,
    *,
    filename: str | None = None,
    max_bytes: int = MAX_TABLE_BYTES,
    max_columns: int = MAX_COLUMNS,
) -> pd.DataFrame:
    """Read a table from a path, raw bytes or a binary file object (e.g. Streamlit's ``UploadedFile``).

    Returns a DataFrame with whitespace-stripped, unique column names and at least one row; raises
    ``DataError`` for empty files, header-only files, binary junk, ragged rows (naming the line), duplicate
    column names, unreadable Parquet/Excel/gzip content, a gzip file or workbook that inflates beyond
    ``max_bytes``, more than ``max_columns`` columns, and column types no mechanism can use (nested
    Parquet columns, timestamps outside 1677-2262). ``df.attrs["dpcore_source"]`` describes what was
    detected (format, encoding, delimiter) and ``df.attrs["dpcore_notes"]`` lists, in words, what loading
    interpreted (empty for an ordinary file), for display.
    """
    data, name = _read_bytes(source, None if filename is None else table_name(filename, "The file name"))
    return _parse(data, name, 0, _Limits(int(max_bytes), int(max_columns)), [])


def table_name(name: object, what: str = "The dataset name") -> str:
    """``name`` without surrounding white space, if it can name a table, and so the dataset loaded from it
    (whose name carries its privacy budget in the ledger): text of 1 to :data:`MAX_NAME_CHARS` characters,
    none of them a control character. ``DataError`` naming the problem and the fix otherwise; ``what``
    names it in the message ("The file name", "The dataset name")."""
    fix = "rename the file and upload it again" if what == "The file name" else "give it another name"
    if not isinstance(name, str):
        raise DataError(f"{what} is not text ({type(name).__name__}); {fix}.")
    text = name.strip()
    if not text:
        raise DataError(f"{what} is empty; {fix} (the dataset carries its privacy budget under its name).")
    if len(text) > MAX_NAME_CHARS:
        raise DataError(
            f"{what} has {len(text):,} characters; at most {MAX_NAME_CHARS} are allowed (a file system's "
            f"limit on a file name; the dataset carries its privacy budget under its name): {fix}."
        )
    if not text.isprintable():
        raise DataError(f"{what} contains control characters (tabs, line breaks); {fix} without them.")
    return text


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
            raise DataError(
                f"Could not read '{name}' (the upload was interrupted or closed: {type(err).__name__}). "
                "Upload the file again."
            ) from err
        if isinstance(data, str):
            raise DataError(f"'{name}' was opened in text mode; open it in binary mode ('rb') and try again.")
        return bytes(data), Path(name).name
    raise DataError(
        f"Cannot read a table from a {type(source).__name__}; pass a path, bytes or a binary file."
    )


def _parse(data: bytes, name: str, depth: int, limits: _Limits, notes: list[str]) -> pd.DataFrame:
    lower = name.lower()
    if not data.strip():
        raise DataError(f"'{name}' is empty. Upload a file with a header row and at least one data row.")
    if data[:2] == b"\x1f\x8b":
        if depth:
            raise DataError(
                f"'{name}' is compressed twice with gzip; decompress it once and upload the result."
            )
        inner = name[:-3] if lower.endswith(".gz") else name  # the file inside, named as uploaded
        unpacked, members = _gunzip(data, name, limits.max_bytes)
        if members > 1:
            notes.append(
                f"'{name}' holds {members} gzip members (files compressed separately and joined end to end); "
                "they were read one after the other as one file, as gunzip does."
            )
        return _parse(unpacked, inner, depth + 1, limits, notes)
    if lower.endswith(".gz") and not depth:
        raise DataError(
            f"'{name}' is named .gz but is not gzip-compressed. Rename it or compress it with gzip."
        )
    if data[:4] == b"PAR1":
        return _read_parquet(data, name, limits, notes)
    if data[:4] == b"PK\x03\x04":
        return _read_xlsx(data, name, limits, notes)
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
    return _read_text(data, name, limits, notes)


def _megabytes(n: int) -> str:
    return f"{n / 2**20:,.4g} MB"


def _too_big(name: str, what: str, max_bytes: int) -> DataError:
    return DataError(
        f"'{name}' {what} more than {_megabytes(max_bytes)}, the limit on a table's uncompressed size (it "
        "keeps a small compressed file from exhausting the server's memory). Upload a sample of the rows "
        "or only the columns you need; an operator can raise the limit with load_table(max_bytes=...)."
    )


def _gunzip(data: bytes, name: str, max_bytes: int) -> tuple[bytes, int]:
    """Inflate every gzip member in steps of at most ``max_bytes + 1`` output bytes; refuse beyond, and
    beyond :data:`MAX_GZIP_MEMBERS` members. Input is fed in slices of :data:`_GZIP_SLICE` bytes, so the
    data left after a member (``unused_data``, a copy) is never the whole rest of the file: linear in the
    number of members. Returns the bytes and the number of members."""
    out = bytearray()
    view = memoryview(data)
    at, members = 0, 0
    try:
        while at < len(data):
            members += 1
            if members > MAX_GZIP_MEMBERS:
                raise _too_many_members(name)
            inflater = zlib.decompressobj(wbits=31)
            while not inflater.eof:
                if at >= len(data):  # all input used, no end marker
                    raise EOFError
                fed = view[at : at + _GZIP_SLICE]
                pending = fed
                while pending and not inflater.eof:
                    out += inflater.decompress(pending, max_bytes + 1 - len(out))
                    if len(out) > max_bytes:
                        raise _too_big(name, "decompresses to", max_bytes)
                    pending = inflater.unconsumed_tail
                at += len(fed) - len(inflater.unused_data if inflater.eof else pending)
            padding = _NOT_ZERO.search(data, at)  # gzip tolerates zero padding after a member
            at = len(data) if padding is None else padding.start()
    except (EOFError, zlib.error) as err:
        raise DataError(
            f"'{name}' looks gzip-compressed but is damaged or truncated (its compressed data "
            f"{'ends early' if isinstance(err, EOFError) else 'is not valid'} in member {members:,}). "
            "Upload it again, or compress the file again with gzip."
        ) from err
    if not out.strip():
        raise DataError(f"'{name}' decompresses to an empty file. Upload a file with a header and data rows.")
    return bytes(out), members


def _too_many_members(name: str) -> DataError:
    return DataError(
        f"'{name}' holds more than {MAX_GZIP_MEMBERS:,} gzip members (files compressed separately and joined "
        f"end to end); at most {MAX_GZIP_MEMBERS:,} are read (tools such as bgzip write one per 64 KB, some "
        "800 for the 50 MB limit). Decompress it and compress it again as one stream "
        "(gunzip -c file.csv.gz | gzip > whole.csv.gz), and upload that."
    )


def _decode(data: bytes, name: str, notes: list[str]) -> tuple[str, str]:
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
        codec = _bomless_utf16(body)
        binary = DataError(f"'{name}' contains binary data, not text. {_FORMATS_HELP}")
        if codec is None:
            raise binary
        try:
            text = body.decode(codec)
        except UnicodeDecodeError as err:
            raise binary from err
        label = f"UTF-16 {codec[-2:].upper()}"
        notes.append(
            f"'{name}' has no byte order mark, but every other byte is zero: it was read as {label} text. "
            "Check the text; if it looks wrong, save the file as UTF-8 and upload it again."
        )
        return text, f"{label} without byte order mark"
    try:
        return body.decode("utf-8"), "UTF-8 with BOM" if bom else "UTF-8"
    except UnicodeDecodeError:
        pass
    if _UTF8_MULTIBYTE.search(body):
        return _decode_mixed(body, name, notes), "UTF-8 mixed with Windows-1252"
    try:
        return body.decode("cp1252"), "Windows-1252"
    except UnicodeDecodeError:
        return body.decode("latin-1"), "Latin-1"


def _bomless_utf16(body: bytes) -> str | None:
    """'utf-16-le' or 'utf-16-be' when the zero bytes of the first 64 KB sit at odd or at even positions
    (ASCII-range text in UTF-16 without a byte order mark), else None."""
    sample = np.frombuffer(body[: _SNIFF_CHARS - _SNIFF_CHARS % 2], dtype=np.uint8)
    if len(body) % 2 or sample.size < 4:
        return None
    even, odd = np.mean(sample[0::2] == 0), np.mean(sample[1::2] == 0)
    if odd >= 0.9 and even <= 0.1:
        return "utf-16-le"
    if even >= 0.9 and odd <= 0.1:
        return "utf-16-be"
    return None


def _legacy_bytes(err: UnicodeError) -> tuple[str, int]:
    """Codec error handler: the bytes that are not UTF-8 read as Windows-1252 (Latin-1 where it has none)."""
    assert isinstance(err, UnicodeDecodeError)
    return "".join(_LEGACY[b] for b in err.object[err.start : err.end]), err.end


codecs.register_error("dpcore-legacy", _legacy_bytes)


def _decode_mixed(body: bytes, name: str, notes: list[str]) -> str:
    """A file that is UTF-8 except for some lines (rows appended by another program): each line's UTF-8
    sequences read as UTF-8 and its other bytes as Windows-1252; the lines concerned are named."""
    lines = body.split(b"\n")
    bad: list[int] = []
    for i, line in enumerate(lines):
        try:
            lines[i] = line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i + 1)
            lines[i] = line.decode("utf-8", errors="dpcore-legacy")
    first = f"line {bad[0]:,}"
    which = f"1 line ({first}) is" if len(bad) == 1 else f"{len(bad):,} lines (first: {first}) are"
    notes.append(
        f"'{name}' mixes encodings: {which} not valid UTF-8 while the rest of the file is. Their bytes "
        "outside UTF-8 were read as Windows-1252 (Latin-1), the rest as UTF-8. Check the text in those "
        "lines, or save the file as UTF-8 and upload it again."
    )
    return "\n".join(lines)  # type: ignore[arg-type]


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


def _slice_widths(raw: bytes, start: int, stop: int, delim: str) -> tuple[np.ndarray, np.ndarray]:
    """Line numbers (from 1 within the slice) and field counts of the non-blank lines of ``raw[start:stop]``,
    a slice of whole lines."""
    buf = np.frombuffer(raw, dtype=np.uint8, count=stop - start, offset=start)
    breaks = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [buf.size]))
    if buf.size and buf[-1] == ord("\n"):  # no line starts after the slice's last line break
        starts, ends = starts[:-1], ends[:-1]
    seps = np.flatnonzero(buf == ord(delim))
    widths = np.searchsorted(seps, ends) - np.searchsorted(seps, starts) + 1
    filled = np.concatenate(([0], np.cumsum(~np.isin(buf, _SPACE), dtype=np.int64)))
    keep = (widths > 1) | (filled[ends] > filled[starts])  # a blank line: one field, only white space
    return np.flatnonzero(keep) + 1, widths[keep]


class _Records(NamedTuple):
    """The non-blank records: how many, the first one's field count (the header's), and how many differ
    from it, with the first of those (its line number and field count)."""

    count: int
    width: int
    bad: int
    bad_line: int
    bad_width: int


def _records(text: str, raw: bytes, delim: str, name: str) -> _Records:
    """Count the fields of every non-blank record and compare them with the header's."""
    count = width = bad = bad_line = bad_width = 0
    for lines, widths in _record_widths(text, raw, delim, name):
        if not lines.size:
            continue
        if not count:
            width = int(widths[0])
        off = np.flatnonzero(widths != width)
        if off.size and not bad:
            bad_line, bad_width = int(lines[off[0]]), int(widths[off[0]])
        bad += off.size
        count += lines.size
    return _Records(count, width, bad, bad_line, bad_width)


def _record_widths(text: str, raw: bytes, delim: str, name: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Line numbers and field counts of the non-blank records, in parts.

    Without quote characters a record is a line, and the fields are counted vectorised from the positions
    of the delimiters and newlines, in slices of whole lines (about 15 MB of index arrays at a time, not
    15 times the file); otherwise ``csv.reader`` (strict quoting) splits the records.
    """
    if b'"' not in raw:
        start, done = 0, 0  # byte offset of the slice, lines before it
        while start < len(raw):
            stop = raw.find(b"\n", min(start + _ROWS_SLICE, len(raw)))
            stop = len(raw) if stop < 0 else stop + 1
            line_nums, widths = _slice_widths(raw, start, stop, delim)
            yield line_nums + done, widths
            done += raw.count(b"\n", start, stop)
            start = stop
        return
    reader = csv.reader(io.StringIO(text), delimiter=delim, strict=True)
    lines: list[int] = []
    widths_list: list[int] = []
    try:
        for row in filter(None, reader):  # empty lines are skipped without a Python step each
            if not _is_blank(row):
                lines.append(reader.line_num)
                widths_list.append(len(row))
    except csv.Error as err:
        raise DataError(
            f"'{name}' is not valid CSV near line {reader.line_num}: {_csv_problem(err)}. Fix the quoting or "
            "the line endings there, or save the file again as CSV, and upload it again."
        ) from err
    yield np.asarray(lines, dtype=np.int64), np.asarray(widths_list, dtype=np.int64)


def _csv_problem(err: csv.Error) -> str:
    """What Python's csv module objected to, in the project's words (its own text names a Python API)."""
    text = str(err)
    if "new-line character" in text:
        return (
            "a lone carriage return (CR, an old Mac line ending) outside quotes, where the other lines end "
            "with a line feed (LF)"
        )
    if "unexpected end of data" in text:
        return "an unbalanced quote (opened and never closed)"
    if "expected after" in text:
        return "a quoted value is followed by more characters before the next delimiter"
    if "field limit" in text:
        return f"a value longer than {csv.field_size_limit():,} characters, the most a line is checked with"
    if "NUL" in text:
        return "a NUL byte (binary data)"
    return "an unbalanced quote"


def _lines(text: str, start: int = 0) -> Iterator[str]:
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _first_filled(text: str) -> int:
    """Where the first line holding more than white space starts (the length of ``text`` if none): found
    at C speed, not line by line (a file of millions of blank lines)."""
    first = len(text) - len(text.lstrip())
    return text.rfind("\n", 0, first) + 1 if first < len(text) else len(text)


def _longest_field(raw: bytes, delim: str) -> int:
    """The bytes of the longest field of a file without quotes: the largest gap between two delimiters or
    line breaks (numpy, in slices)."""
    longest, last = 0, -1
    for offset in range(0, len(raw), _SCAN_SLICE):
        part = np.frombuffer(raw, dtype=np.uint8, count=min(_SCAN_SLICE, len(raw) - offset), offset=offset)
        ends = np.flatnonzero((part == ord(delim)) | (part == ord("\n"))) + offset
        if ends.size:
            longest = max(longest, int(ends[0]) - last - 1, int(np.diff(ends).max(initial=1)) - 1)
            last = int(ends[-1])
    return max(longest, len(raw) - last - 1)


def _too_long_cell(name: str, size: int) -> DataError:
    return DataError(
        f"'{name}' holds a value of {_megabytes(size)}; at most {_megabytes(MAX_CELL_BYTES)} per cell is "
        "read (Excel writes at most 32,767 characters in a cell; a longer text is neither a number nor a "
        "category a release can use). Shorten it or leave its column out, and upload the file again."
    )


def _check_rows(text: str, raw: bytes, delim: str, name: str) -> list[str]:
    """Return the header fields; raise naming the first line whose field count differs from the header's."""
    records = _records(text, raw, delim, name)
    if b'"' not in raw and (longest := _longest_field(raw, delim)) > MAX_CELL_BYTES:
        raise _too_long_cell(name, longest)  # a quoted field is bounded by csv.field_size_limit()
    if records.count == 0:
        raise DataError(
            f"'{name}' contains no rows. Upload a file with a header row and at least one data row."
        )
    try:
        lines = _lines(text, _first_filled(text))
        header = next(row for row in csv.reader(lines, delimiter=delim) if not _is_blank(row))
    except csv.Error as err:
        raise DataError(
            f"'{name}' could not be parsed as {_DELIMITER_NAMES[delim]}-separated text ({_csv_problem(err)} "
            "in the header). Check for stray line breaks or unbalanced quotes, or save the file again as CSV."
        ) from err
    if records.bad:
        sep = _DELIMITER_NAMES[delim]
        raise DataError(
            f"'{name}': line {records.bad_line} has {records.bad_width} fields but the header has "
            f"{records.width} ({sep}-separated; {records.bad} line(s) affected). Fix the missing or extra "
            f"{sep} on that line, or quote values that contain a {sep}."
        )
    if records.count == 1:
        raise DataError(f"'{name}' has a header but no data rows. Upload a file with at least one data row.")
    return header


def _check_width(n_columns: int, name: str, max_columns: int) -> None:
    if n_columns > max_columns:
        raise DataError(
            f"'{name}' has {n_columns:,} columns; at most {max_columns:,} can be loaded (with more, every "
            "step of the Data page becomes slow). Keep only the columns you need (features, the user "
            "column) and upload that table."
        )


def _big_ints(s: pd.Series) -> bool:
    """True when an object column holds whole numbers outside int64 (Arrow, and so the page, cannot hold
    them; the check runs only where pandas reports integers)."""
    if s.dtype != object or "integer" not in pd.api.types.infer_dtype(s, skipna=True):
        return False
    low, high = _INT64
    return any(isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high for v in s)


def _sep_line(text: str, name: str, notes: list[str]) -> tuple[str, str | None]:
    """Excel's ``sep=;`` first line: its delimiter, the line blanked (line numbers stay those of the file)."""
    match = _SEP_LINE.match(text)
    if match is None:
        return text, None
    delim = match.group(1)
    if delim not in _DELIMITER_NAMES:
        raise DataError(
            f"'{name}': the first line 'sep={delim}' declares '{delim}' as the delimiter; comma, semicolon, "
            "tab or pipe can be read. Save the file again with one of those."
        )
    notes.append(
        f"'{name}': the first line 'sep={delim}' (Excel's delimiter hint) was read as the delimiter "
        f"({_DELIMITER_NAMES[delim]}) and skipped; the header is the line after it."
    )
    return "\n" + text[match.end() :], delim


def _drop_repeated_header(text: str, name: str, notes: list[str]) -> str:
    """Blank the later lines identical to the header line (files joined end to end, e.g. gzip members or
    ``cat a.csv b.csv``): read as data they would turn every column to text."""
    begin = _first_filled(text)
    stop = text.find("\n", begin)
    stop = len(text) if stop < 0 else stop
    if begin == len(text):
        return text
    needle = "\n" + text[begin:stop].rstrip("\r")
    pieces, start, found = [], stop, 0
    at = text.find(needle, start)
    while at >= 0:
        end = at + len(needle)
        end += text.startswith("\r", end)
        if end == len(text) or text[end] == "\n":  # the whole line, not a prefix of a longer one
            found = found or text.count("\n", 0, at) + 2
            pieces.append(text[start : at + 1])  # keep the line break: line numbers stay the file's
            start = end
        at = text.find(needle, end)
    if not found:
        return text
    count = len(pieces)
    more = f" ({count:,} such lines in all)" if count > 1 else ""
    notes.append(
        f"'{name}': line {found:,} repeats the header{more}, as where files are joined end to end; it was "
        "dropped, not read as data."
    )
    return text[:stop] + "".join(pieces) + text[start:]


def _grouped_numbers(df: pd.DataFrame, delim: str, name: str, notes: list[str]) -> None:
    """Read text columns of numbers with thousands separators ("1,234", "12,345.5") as numbers; in a
    semicolon-separated file, where "1,234" may be a decimal comma, keep them as text unless some value
    can only be a thousands separator ("1,234,567", "1,234.5"). Either way, say so."""
    for column in df.columns:
        s = df[column]
        if not (s.dtype == object or isinstance(s.dtype, pd.StringDtype)):
            continue
        values = s.dropna().astype(str).str.strip()
        commas = values.str.contains(",", regex=False)
        if not commas.any() or not values.str.fullmatch(_NUMBER).all():
            continue
        example = values[commas].iloc[0]
        only_grouping = values[commas].str.count(",").gt(1) | values.str.contains(".", regex=False)
        if delim == ";" and not only_grouping.any():
            notes.append(
                f"'{name}': column '{column}' holds values such as '{example}', which read either as "
                "thousands separators (1234) or as decimal commas (1.234); they were kept as text. Save the "
                "file with plain numbers (1234 or 1.234) and upload it again to use them as numbers."
            )
            continue
        digits = values.str.replace(",", "", regex=False)
        numbers = digits.astype(float) if digits.str.contains(".", regex=False).any() else digits.map(int)
        df[column] = numbers.reindex(s.index).infer_objects()
        notes.append(
            f"'{name}': column '{column}' holds numbers with thousands separators (such as '{example}'); the "
            "separators were removed and the values read as numbers."
        )


def _leading_zeros(df: pd.DataFrame, raw: bytes, delim: str, name: str, notes: list[str]) -> None:
    """Keep numeric columns with values such as "007" (postcodes, codes) as text, as typed: a number would
    drop the zeros. Read again, as text, only when such a field occurs at all."""
    numeric = [
        i
        for i, c in enumerate(df.columns)
        if pd.api.types.is_numeric_dtype(df[c].dtype) and not pd.api.types.is_bool_dtype(df[c].dtype)
    ]
    pattern = rb"(?:^|" + re.escape(delim.encode()) + rb')[ "]*[+-]?0[0-9]'
    if not numeric or re.search(pattern, raw, re.MULTILINE) is None:
        return
    typed = pd.read_csv(
        io.BytesIO(raw),
        encoding="utf-8",
        sep=delim,
        header=0,
        skip_blank_lines=True,
        usecols=numeric,
        dtype=str,
        low_memory=False,
    )
    for j, i in enumerate(numeric):
        values = typed.iloc[:, j]
        zeros = values.str.strip().str.match(r"[+-]?0\d", na=False)
        if zeros.any():
            column = df.columns[i]
            df[column] = values.to_numpy()
            example = values[zeros].iloc[0]
            notes.append(
                f"'{name}': column '{column}' has numbers with leading zeros (such as '{example}'); it was "
                "kept as text, as typed (a number would drop the zeros, as in codes and postcodes). If they "
                "are quantities, remove the zeros in the file and upload it again."
            )


def _not_a_table(text: str, name: str) -> None:
    """Refuse JSON and HTML/XML documents, which a CSV reader would turn into nonsense columns."""
    line = next(_lines(text, _first_filled(text)), "").strip()
    if line.lower().startswith(("<!doctype", "<html", "<?xml")):
        kind = "an HTML or XML document"
    elif line in ("[", "{") or (line.startswith(('{"', '[{"', "[[")) and _json_value(line)):
        kind = "JSON"
    else:
        return
    raise DataError(
        f"'{name}' is {kind}, not a table of rows and columns. Export the table as CSV (or Parquet, "
        "Excel .xlsx) and upload that."
    )


def _json_value(line: str) -> bool:
    """Whether a line is a JSON object or array (a long line: whether it starts like one)."""
    if len(line) > _SNIFF_CHARS:
        return True
    try:
        return isinstance(json.loads(line), dict | list)
    except ValueError:
        return False


def _read_text(data: bytes, name: str, limits: _Limits, notes: list[str]) -> pd.DataFrame:
    text, encoding = _decode(data, name, notes)
    head = text[:_SNIFF_CHARS]
    if len(_CONTROL.findall(head)) > max(_MIN_CONTROL, _MAX_CONTROL_SHARE * len(head)):
        raise DataError(f"'{name}' looks like binary data, not a text table. {_FORMATS_HELP}")
    if "\n" not in text:
        text = text.replace("\r", "\n")
    elif '"' not in text and "\r" in text:  # no quotes, so no CR inside a value: a lone CR ends a line
        text = _LONE_CR.sub("\n", text)
    lines = text.count("\n") + 1
    if lines > MAX_LINES:
        raise DataError(
            f"'{name}' has {lines:,} lines; at most {MAX_LINES:,} are read from a CSV file (blank lines "
            "included; each line is checked). Remove blank lines, or save the table as Parquet (which has no "
            "lines), and upload that."
        )
    _not_a_table(text, name)
    text, declared = _sep_line(text, name, notes)
    text = _drop_repeated_header(text, name, notes)
    delim = declared or _sniff_delimiter(text, name)
    raw = text.encode("utf-8")
    header = _check_rows(text, raw, delim, name)
    _check_width(len(header), name, limits.max_columns)
    try:
        df = pd.read_csv(
            io.BytesIO(raw), encoding="utf-8", sep=delim, header=0, skip_blank_lines=True, low_memory=False
        )
    except (ValueError, csv.Error, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DataError(
            f"'{name}' could not be parsed as a {_DELIMITER_NAMES[delim]}-separated table, though each "
            "line has as many fields as the header (a quote or line ending the reader takes otherwise). "
            "Save the file again as CSV, or as Parquet, and upload that."
        ) from err
    if df.shape[1] != len(header):
        raise DataError(
            f"'{name}': the header has {len(header)} fields but {df.shape[1]} columns were read. "
            "Check the quoting of the header row."
        )
    _grouped_numbers(df, delim, name, notes)
    _leading_zeros(df, raw, delim, name, notes)
    for column in [c for c in df.columns if _big_ints(df[c])]:
        # digits beyond int64 (an account number, say): kept exactly, as text
        df[column] = df[column].astype(str).where(df[column].notna())
    source = f"CSV ({encoding}, {_DELIMITER_NAMES[delim]}-separated)"
    return _finish(df, header, name, source, notes)


def _nested(kind: pa.DataType) -> bool:
    return pa.types.is_nested(kind) or (pa.types.is_dictionary(kind) and pa.types.is_nested(kind.value_type))


def check_flat(schema: pa.Schema, name: str) -> None:
    """``DataError`` when a Parquet schema has nested columns (lists, maps, structs: values per cell)."""
    nested = [f"'{field.name}' ({field.type})" for field in schema if _nested(field.type)]
    if nested:
        raise DataError(
            f"'{name}' has nested columns (lists, maps or structs), which hold several values per cell: "
            f"{', '.join(nested[:5])}. Flatten them into one column per value, or leave them out, and "
            "export the file again."
        )


def _half_float(kind: pa.DataType) -> bool:
    return pa.types.is_float16(kind) or (
        pa.types.is_dictionary(kind) and pa.types.is_float16(kind.value_type)
    )


def _outside_ns(column: pa.ChunkedArray) -> int:
    """How many timestamps of a column pandas cannot hold in nanoseconds (outside about 1677-2262)."""
    unit = column.type.unit
    if unit == "ns":
        return 0
    per = {"s": 10**9, "ms": 10**6, "us": 10**3}[unit]
    ticks = pc.cast(column, pa.timestamp(unit)).cast(pa.int64())
    limit = (2**63 - 1) // per
    return int(pc.sum(pc.or_(pc.less(ticks, -limit), pc.greater(ticks, limit))).as_py() or 0)


def binary_type(t: pa.DataType) -> bool:
    """True for Arrow's binary types (text some Parquet writers store without its UTF-8 annotation)."""
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _binary_as_text(column: pa.ChunkedArray, label: str, notes: list[str]) -> pa.ChunkedArray:
    """A binary column as text: UTF-8 where every value is, else every value as hexadecimal digits."""
    try:
        text = column.cast(pa.binary()).cast(pa.string())
        notes.append(f"{label} holds binary values; they are valid UTF-8 and were read as text.")
    except pa.ArrowInvalid:
        text = pa.chunked_array([pa.array([None if v is None else v.hex() for v in column.to_pylist()])])
        notes.append(
            f"{label} holds binary values that are not text; they were read as hexadecimal digits (a cell "
            "b'\\xff\\x00' reads 'ff00')."
        )
    return text


def _outside_dates(name: str, column: str, count: int) -> DataError:
    return DataError(
        f"'{name}': column '{column}' has {count:,} timestamp(s) outside 1677-09-22 to 2262-04-11 (such as "
        "0001-01-01 or 9999-12-31, often placeholders for an unknown date), which pandas cannot hold. "
        "Replace them with empty cells (or real dates) and save the file again."
    )


def _arrow_table(data: bytes, name: str, limits: _Limits, notes: list[str]) -> pa.Table:
    """The Parquet file as an Arrow table of flat columns pandas and the mechanisms can hold.

    Bounded before the values are expanded: from the file's metadata, its cells (8 bytes each once read)
    and its pages' uncompressed sizes, at most :func:`decoded_limit`; then, with text columns read as
    dictionaries (each distinct text once), the text they hold once every cell has its copy, at most
    ``max_bytes`` (as a CSV file's), and all values at most the decoded limit.
    """
    unreadable = f"'{name}' is not a readable Parquet file (damaged, or written in a way pyarrow cannot read)"
    try:
        file = pq.ParquetFile(pa.BufferReader(data))  # read by Arrow's threads without Python's lock
        schema = file.schema_arrow
        meta = file.metadata
        pages = sum(
            meta.row_group(g).column(c).total_uncompressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        )
    # pyarrow raises many types (ArrowInvalid, OSError, ...) for damaged files
    except Exception as err:
        raise DataError(f"{unreadable}. Export it again.") from err
    _check_width(len(schema), name, limits.max_columns)
    check_flat(schema, name)
    limit = decoded_limit(limits.max_bytes)
    expected = max(meta.num_rows * max(len(schema), 1) * 8, pages)
    if expected > limit:
        raise _too_large_decoded(name, len(data), expected, limit)
    text = [f.name for f in schema if text_type(f.type)]  # read as dictionaries: measured, then decoded
    try:
        table = pq.ParquetFile(pa.BufferReader(data), read_dictionary=text).read() if text else file.read()
    except Exception as err:
        raise DataError(f"{unreadable}. Export it again.") from err
    texts = [table.column(i) for i, f in enumerate(schema) if f.name in text]
    longest = max(map(_longest_value, texts), default=0)
    if longest > MAX_CELL_BYTES:
        raise _too_long_cell(name, longest)
    sizes = [decoded_bytes(col) for col in table.columns]
    chars = sum(sizes[i] - 8 * table.num_rows for i, f in enumerate(schema) if f.name in text)  # 8 a cell
    if chars > limits.max_bytes:
        raise _too_much_text(name, chars, limits.max_bytes)
    if sum(sizes) > limit:
        raise _too_large_decoded(name, len(data), sum(sizes), limit)
    for i, field in enumerate(schema):  # by position: two columns may share a name
        if field.name in text:  # back to the file's own type, as a plain read gives it
            check_utf8(table.column(i), field, f"'{name}'")
            table = table.set_column(i, field, table.column(i).cast(field.type))
    for i, field in enumerate(table.schema):
        if _half_float(field.type):  # pandas has no float16 index (category codes): exact as float64
            table = table.set_column(
                i, pa.field(field.name, pa.float64()), table.column(i).cast(pa.float64())
            )
        elif pa.types.is_timestamp(field.type) and (count := _outside_ns(table.column(i))):
            raise _outside_dates(name, field.name, count)
        elif binary_type(field.type):  # bytes that are not UTF-8 break every text operation
            text = _binary_as_text(table.column(i), f"'{name}': column '{field.name}'", notes)
            table = table.set_column(i, pa.field(field.name, pa.string()), text)
    return table


def text_type(t: pa.DataType) -> bool:
    """True for Arrow string and binary types (the ones dictionary encoding can inflate)."""
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return any(kind(t) for kind in kinds)


def _longest_value(col: pa.ChunkedArray) -> int:
    """The bytes of the longest value of a text column (of its dictionaries, if read as such)."""
    longest = 0
    for chunk in col.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        longest = max(longest, int(pc.max(pc.binary_length(values)).as_py() or 0))
    return longest


def decoded_bytes(col: pa.Array | pa.ChunkedArray) -> int:
    """Bytes of ``col`` once its dictionaries are expanded (sum of the value lengths the indices pick)."""
    total = 0
    for chunk in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
        if pa.types.is_dictionary(chunk.type) and text_type(chunk.type.value_type):
            picked = pc.take(pc.binary_length(chunk.dictionary), chunk.indices)
            total += int(pc.sum(picked).as_py() or 0) + 8 * len(chunk)
        else:
            total += chunk.nbytes
    return total


def _too_much_text(name: str, size: int, limit: int) -> DataError:
    return DataError(
        f"'{name}' holds {_megabytes(size)} of text once read (a long text shown in many cells is stored "
        f"once in the file); at most {_megabytes(limit)}, the limit on a table's uncompressed size, can be "
        "loaded. Shorten the long text values or leave their column out, and upload the file again."
    )


def decoded_limit(max_bytes: int) -> int:
    """The most bytes of values a Parquet file may hold once read, for a table limit of ``max_bytes``:
    four times it, as much as the largest CSV file the limit allows ("1,1,...": 8 bytes a cell once read
    for 2 in the file)."""
    return 4 * max_bytes


def _too_large_decoded(name: str, size: int, decoded: int, limit: int) -> DataError:
    return DataError(
        f"'{name}' ({size / 2**20:,.1f} MB on disk) holds {_megabytes(decoded)} of values once read "
        f"(repeated values compress to almost nothing); at most {_megabytes(limit)} (four times the limit "
        "on a table's uncompressed size) can be loaded. Keep only the rows or columns you need, or shorten "
        "the long text values, and export it again."
    )


def check_utf8(column: pa.ChunkedArray, field: pa.Field, label: str) -> None:
    """``DataError`` when a text column (its dictionaries, if read as such) holds bytes that are not UTF-8:
    Arrow does not check them on reading, and pandas fails on them later."""
    if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
        return
    for chunk in column.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        try:
            values.validate(full=True)
        except pa.ArrowInvalid as err:
            raise DataError(
                f"{label}: column '{field.name}' is typed as text but holds bytes that are not valid UTF-8 "
                "(the program that wrote the file did not encode it). Write the column again as UTF-8 text, "
                "or as binary, and export the file again."
            ) from err


def parquet_batches(path: str | PathLike[str], name: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The record batches of a Parquet file, each measured before its text is expanded (text columns
    are read as dictionaries, then decoded to the file's own types): a batch holding more than
    ``MAX_BATCH_BYTES`` of values once read raises ``DataError`` before it is allocated."""
    file = pq.ParquetFile(path)
    schema = file.schema_arrow
    text = {f.name for f in schema if text_type(f.type)}
    reader = pq.ParquetFile(path, read_dictionary=sorted(text)) if text else file
    for batch in reader.iter_batches(batch_size=batch_rows):
        size = sum(decoded_bytes(col) for col in batch.columns)
        if size > MAX_BATCH_BYTES:
            raise DataError(
                f"'{name}' holds {size / 2**20:,.0f} MB of values in {batch.num_rows:,} rows once read "
                f"(repeated long texts compress to almost nothing); at most {MAX_BATCH_BYTES // 2**20} MB "
                "per batch can be read. Keep only the columns you need, or shorten the long text values."
            )
        if text:
            for col, f in zip(batch.columns, schema, strict=True):
                check_utf8(pa.chunked_array([col]), f, f"'{name}'")
            columns = [
                col.cast(schema.field(f.name).type) if f.name in text else col
                for col, f in zip(batch.columns, batch.schema, strict=True)
            ]
            batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        yield batch


def index_as_column(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """``df`` read from Parquet with the pandas index its file stores (all but a plain row range) as a
    column, as ``df.reset_index()`` gives it."""
    if isinstance(df.index, pd.RangeIndex):
        return df
    try:
        return df.reset_index()
    except ValueError as err:  # an index named like a column: "cannot insert a, already exists"
        index = ", ".join(f"'{n}'" for n in df.index.names if n is not None)
        raise DataError(
            f"'{name}' stores a pandas index with the same name as a column ({index}). Rename the index "
            "or drop it (df.reset_index(drop=True)) before saving, and export the file again."
        ) from err


def _read_parquet(data: bytes, name: str, limits: _Limits, notes: list[str]) -> pd.DataFrame:
    table = _arrow_table(data, name, limits, notes)
    try:
        df = table.to_pandas()
    except Exception as err:
        raise DataError(
            f"'{name}' is not a readable Parquet file: its values cannot be converted to a table "
            f"({type(err).__name__}). Export it again."
        ) from err
    df = index_as_column(df, name)
    return _finish(df, [str(c) for c in df.columns], name, "Parquet", notes)


def _scan_xml(xml: bytes) -> tuple[int, int]:
    """The longest run of an XML part that the parser must hold as one token, and its number of elements.

    Outside comments, processing instructions and CDATA sections, a tag holds no ``<`` and text is parsed
    piecewise, so the run is bounded by the largest gap between two ``<`` (numpy, in 4 MB slices); those
    three constructs are measured from their opening to their closing marker. Linear, at C speed.
    """
    longest, elements, last = 0, 0, 0
    for offset in range(0, len(xml), _SCAN_SLICE):
        part = np.frombuffer(xml, dtype=np.uint8, count=min(_SCAN_SLICE, len(xml) - offset), offset=offset)
        opens = np.flatnonzero(part == ord("<"))
        if opens.size:
            starts = np.concatenate(([last], opens[:-1] + offset))
            longest = max(longest, int((opens + offset - starts).max()))
            last = int(opens[-1]) + offset
            after = np.frombuffer(xml, dtype=np.uint8)[np.minimum(opens + offset + 1, len(xml) - 1)]
            elements += int(np.count_nonzero(~np.isin(after, _NOT_ELEMENT)))
    longest = max(longest, len(xml) - last)
    for opener, closer in _TOKENS:
        start = xml.find(opener)
        while start >= 0:
            end = xml.find(closer, start + len(opener))
            end = len(xml) if end < 0 else end + len(closer)
            longest = max(longest, end - start)
            start = xml.find(opener, end)
    return longest, elements


def _check_workbook(data: bytes, name: str, max_bytes: int) -> list[str]:
    """Refuse a zip that is not a workbook, that unzips to more than ``max_bytes``, whose XML parts are
    damaged, declare a DTD or hold a run of more than ``MAX_XML_RUN`` bytes between two elements, that
    holds more than ``MAX_XLSX_ELEMENTS`` XML elements in all, or a part whose cells span more than
    ``MAX_XLSX_CELLS``, or more shared text than ``max_bytes`` once copied into its cells. Each part is
    parsed with an XML parser (:class:`_Workbook`: expat, in the encoding the part declares), as the reader
    parses it, once the byte scan has bounded its size. Returns the names of its sheets, in order."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if "xl/workbook.xml" not in {info.filename for info in infos}:
                raise DataError(
                    f"'{name}' is a zip archive but not an Excel .xlsx workbook. Unzip it and upload "
                    "the table."
                )
            # zipfile never inflates a member beyond the size its directory declares (a CRC error instead)
            if sum(info.file_size for info in infos) > max_bytes:
                raise _too_big(name, "unzips to", max_bytes)
            elements, book = 0, _Workbook(name)
            for info in infos:
                if not info.filename.lower().endswith(_XML_SUFFIXES):
                    continue
                xml = archive.read(info)
                run, count = _scan_xml(xml)
                elements += count
                if run > MAX_XML_RUN:
                    raise DataError(
                        f"'{name}': the part {info.filename} holds {_megabytes(run)} between two elements "
                        f"(a huge comment, tag or cell; the limit is {_megabytes(MAX_XML_RUN)}, and Excel "
                        "writes at most 32,767 characters in a cell). Save the workbook again from Excel, "
                        "or export the sheet as CSV, and upload that."
                    )
                if elements > MAX_XLSX_ELEMENTS:
                    raise DataError(
                        f"'{name}' holds at least {elements:,} XML elements (rows, cells, values); at most "
                        f"{MAX_XLSX_ELEMENTS:,} (some 400,000 cells) are read from a workbook, which is "
                        "parsed element by element (about 100,000 a second). Save the sheet as CSV (or "
                        "Parquet), which is read much faster, and upload that."
                    )
                book.parse(xml, info.filename)
            book.check_text(max_bytes)
            return book.sheets
    except DataError:
        raise
    # damaged archive, encrypted or unknown compression, CRC/size mismatch
    except (
        zipfile.BadZipFile,
        OSError,
        ValueError,
        EOFError,
        zlib.error,
        RuntimeError,
        NotImplementedError,
    ) as err:
        raise DataError(
            f"'{name}' is a damaged zip/Excel file (the archive cannot be unpacked). "
            "Save the workbook again from Excel, or export the sheet as CSV, and upload that."
        ) from err


class _Workbook:
    """A workbook's XML parts parsed as the reader (openpyxl) parses them, for its refusals: a DTD, XML
    that is not well-formed, cells spanning more than ``MAX_XLSX_CELLS`` from A1 to the farthest one, and
    more text than the table limit once every cell showing a shared text holds its own copy.

    Rows and cells are placed as openpyxl places them: a ``row`` at its ``r`` (a whole number, possibly
    written as a float) or after the previous row, a ``c`` at its ``r`` reference (any spelling openpyxl
    accepts: quotes, spaces, lower case) or right of the previous cell; the reader fills the rectangle up
    to the farthest row and column, so one stray cell at XFD1048576 means 17 billion cells. A shared text
    (``sharedStrings.xml``) is stored once and copied into every cell that refers to it.
    """

    def __init__(self, name: str) -> None:
        self.name, self.part = name, ""
        self.shared: list[int] = []  # length of each shared text
        self.used: Counter[str] = Counter()  # shared-text numbers the cells refer to
        self.text: list[str] | None = None  # the character data being collected
        self.in_shared = self.shared_cell = False  # inside a shared text (si), a cell showing one
        self.sheets: list[str] = []  # the workbook's sheet names, in order

    def parse(self, xml: bytes, part: str) -> None:
        """Parse one part; refuse it as above (the shared texts are counted by :meth:`check_text`)."""
        self.part, self.row, self.column, self.rows, self.columns = part, 0, 0, 0, 0
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.buffer_text = True
        parser.StartDoctypeDeclHandler = self._doctype
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._data
        try:
            parser.Parse(xml, True)
        except expat.ExpatError as err:
            if part.lower().endswith(".vml") or part.startswith("customXml/"):  # parts the reader skips
                return
            raise DataError(
                f"'{self.name}': the part {part} is not well-formed XML (line {err.lineno}, column "
                f"{err.offset}), so the workbook cannot be read. Save it again from Excel, or export the "
                "sheet as CSV, and upload that."
            ) from err
        if self.rows * self.columns > MAX_XLSX_CELLS:
            raise DataError(
                f"'{self.name}': the sheet {part} spans {self.rows:,} rows × {self.columns:,} columns "
                f"({self.rows * self.columns:,} cells from A1 to its farthest cell); at most "
                f"{MAX_XLSX_CELLS:,} are read, since the reader fills that whole rectangle. Delete the cells "
                "outside the table (or save the sheet as CSV) and upload it again."
            )

    def check_text(self, max_bytes: int) -> None:
        """Refuse more than ``max_bytes`` of shared text once copied into the cells that show it."""
        total = 0
        for number, count in self.used.items():
            try:
                total += self.shared[int(number)] * count
            except (ValueError, IndexError) as err:
                raise DataError(
                    f"'{self.name}': a cell refers to the shared text number {number.strip()[:20]!r}, which "
                    "the workbook does not hold. Save it again from Excel, or export the sheet as CSV, and "
                    "upload that."
                ) from err
        if total > max_bytes:
            raise _too_much_text(self.name, total, max_bytes)

    def _doctype(self, *_args: Any) -> None:  # Excel never writes one; entity definitions could expand
        raise DataError(
            f"'{self.name}': the part {self.part} declares a DTD, which Excel never writes. Save the "
            "workbook again from Excel, or export the sheet as CSV, and upload that."
        )

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == _CELL_TAG:
            ref = attrs.get("r")
            if ref:
                row, self.column = self._place(_cell_position, ref, "cell reference")
                self.rows = max(self.rows, row)
            else:
                self.column += 1
            self.columns = max(self.columns, self.column)
            self.shared_cell = attrs.get("t") == "s"
        elif tag == _ROW_TAG:
            ref = attrs.get("r")
            self.row = self.row + 1 if ref is None else self._place(_row_number, ref, "row number")
            self.column = 0
            self.rows = max(self.rows, self.row)
        elif tag == _SHEET_TAG:
            self.sheets.append(attrs.get("name", ""))
        elif tag == _SHARED_TAG:
            self.shared.append(0)
            self.in_shared = True
        elif (tag == _VALUE_TAG and self.shared_cell) or (tag == _TEXT_TAG and self.in_shared):
            self.text = []

    def _end(self, tag: str) -> None:
        if tag == _CELL_TAG:
            self.shared_cell = False
        elif tag == _SHARED_TAG:
            self.in_shared = False
        elif self.text is not None and tag == _VALUE_TAG:
            self.used["".join(self.text)] += 1
            self.text = None
        elif self.text is not None and tag == _TEXT_TAG:
            self.shared[-1] += sum(map(len, self.text))
            self.text = None

    def _data(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)

    def _place(self, read: Any, ref: str, what: str) -> Any:
        try:
            return read(ref)
        except (ValueError, TypeError, IndexError, OverflowError) as err:
            raise DataError(
                f"'{self.name}': the sheet {self.part} has the {what} {ref[:20]!r}, which the reader cannot "
                "place. Save the workbook again from Excel, or export the sheet as CSV, and upload that."
            ) from err


def _cell_position(ref: str) -> tuple[int, int]:
    """(row, column) of a cell reference, as openpyxl reads it."""
    from openpyxl.utils.cell import coordinate_to_tuple  # the reader's own parsing; loaded with workbooks

    return coordinate_to_tuple(ref)


def _row_number(ref: str) -> int:
    """A row's ``r``, as openpyxl reads it: a whole number, or a float with a whole value."""
    try:
        return int(ref)
    except ValueError:
        value = float(ref)
        if not value.is_integer():
            raise
        return int(value)


def _read_xlsx(data: bytes, name: str, limits: _Limits, notes: list[str]) -> pd.DataFrame:
    sheets = _check_workbook(data, name, limits.max_bytes)
    if not sheets:
        raise DataError(f"'{name}' has no worksheets. Put the table on the first sheet.")
    try:  # the first sheet only: the others are not used (each may span the cell limit)
        raw = pd.read_excel(io.BytesIO(data), sheet_name=0, header=None, engine="openpyxl")
    # openpyxl raises KeyError, InvalidFileException, ValueError, ... on bad workbooks
    except Exception as err:
        raise DataError(
            f"'{name}' could not be read as an Excel workbook: a part of it is damaged or holds what Excel "
            f"does not write (the reader stopped with {type(err).__name__}). Save it again from Excel as "
            ".xlsx, or export the sheet as CSV, and upload that."
        ) from err
    sheet = sheets[0]
    raw = raw.dropna(how="all").dropna(axis=1, how="all")
    if raw.empty:
        raise DataError(
            f"The first sheet ('{sheet}') of '{name}' is empty. Put the table on the first sheet."
        )
    _check_width(raw.shape[1], name, limits.max_columns)
    header = ["" if pd.isna(v) else str(v) for v in raw.iloc[0]]
    body = raw.iloc[1:].reset_index(drop=True).infer_objects()
    body.columns = range(body.shape[1])
    for column in [c for c in body.columns if _big_ints(body[c])]:
        # Excel stores numbers as doubles; the reader turns whole ones such as 1e308 into exact ints
        body[column] = body[column].map(lambda v: float(v) if isinstance(v, int) else v).infer_objects()
    more = f" of {len(sheets)}" if len(sheets) > 1 else ""
    return _finish(body, header, name, f"Excel .xlsx (first sheet '{sheet}'{more})", notes)


def check_dates(df: pd.DataFrame, name: str) -> None:
    """Refuse timestamps pandas cannot hold in nanoseconds (a workbook's 9999-12-31, say)."""
    for column in df.columns:
        if pd.api.types.is_datetime64_any_dtype(df[column]):
            count = _outside_ns(pa.chunked_array([pa.array(df[column], from_pandas=True)]))
            if count:
                raise _outside_dates(name, column, count)


def _mixed_as_text(df: pd.DataFrame, name: str, notes: list[str]) -> None:
    """Columns that mix types (a workbook column of numbers and words) as text, as a CSV reads them: the
    page and the session store need one type per column."""
    for column in df.columns:
        s = df[column]
        if s.dtype != object:
            continue
        try:
            pa.array(s, from_pandas=True)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            df[column] = s.astype(str).where(s.notna())
            notes.append(f"'{name}': column '{column}' mixes numbers and text; it was read as text.")


def column_name(header: object) -> str:
    """A column's name as every reader gives it: text without byte order marks (a CSV's, or one kept by
    a tool that imported it) and surrounding whitespace."""
    return str(header).replace("\ufeff", "").strip()


def _finish(df: pd.DataFrame, header: list[str], name: str, source: str, notes: list[str]) -> pd.DataFrame:
    names = [column_name(h) for h in header]
    keep = [bool(n) or not df.iloc[:, i].isna().all() for i, n in enumerate(names)]
    df = df.iloc[:, [i for i, k in enumerate(keep) if k]]  # copy-on-write: the caller's frame is kept
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
    check_dates(df, name)
    _mixed_as_text(df, name, notes)
    df = df.dropna(how="all").reset_index(drop=True)
    if df.empty:
        raise DataError(f"'{name}' has a header but no data rows. Upload a file with at least one data row.")
    df.attrs["dpcore_source"] = source
    df.attrs[NOTES_ATTR] = notes
    return df
