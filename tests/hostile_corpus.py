"""A generated corpus of hostile table files, and the engine run every file must survive.

:func:`corpus` builds, deterministically, table pathologies (names, values, shapes) written in every
format the loader reads (CSV, TSV, semicolon CSV with BOM, gzip CSV, Excel .xlsx, Parquet), byte-level
pathologies (encodings, NUL bytes, line endings, ragged rows, quoting, truncation, wrong extensions, bombs,
JSON, which is not a supported format), Parquet-only column types, and the hand-made files of
``tests.system.test_hostile_engine.BAD_FILES``. :func:`run_case` pushes one file through
``load_table -> infer_schema -> handle_missing -> prepare`` with the defaults a curator would pick (every
usable column a feature, rows with missing values dropped, bounds from the data, min-max scaling) and
classifies the outcome: only a success or a ``DPCoreError`` is acceptable; anything else is a crash, and a
file that takes longer than ``limit`` seconds has hung.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import gzip
import io
import json
import math
import signal
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

from dpcore.data import fingerprint, handle_missing, infer_schema, load_table, prepare
from dpcore.errors import DataError, DPCoreError

FEATURE_KINDS = ("numeric", "categorical", "date", "latitude", "longitude")
MAX_FEATURES = 8
Row = list[Any]


@dataclass(frozen=True)
class Case:
    """One corpus file: a unique id, the file name it is uploaded under, its bytes."""

    id: str
    name: str
    data: bytes


@dataclass(frozen=True)
class Outcome:
    """What happened to one file: ``refused`` (a DPCoreError from loading), ``loaded`` (a table; then
    ``prepared`` or refused at preparation, ``stage``), ``crashed`` (any other exception) or ``hung``."""

    case: Case
    status: str
    stage: str
    seconds: float
    error: str = ""


# -- table pathologies: (header, rows) -------------------------------------------------------------------


def _ok_rows(n: int = 6) -> list[Row]:
    rng = np.random.default_rng(n)
    return [[i, round(float(x), 3), "xyz"[i % 3]] for i, x in enumerate(rng.normal(size=n))]


TABLES: dict[str, tuple[list[str], list[Row]]] = {
    "ordinary": (["id", "score", "group"], _ok_rows()),
    "header only": (["a", "b", "c"], []),
    "single row": (["a", "b"], [[1, 2.5]]),
    "single column": (["value"], [[1], [2], [3]]),
    "empty names": (["", "b", ""], [[1, 2, 3], [4, 5, 6]]),
    "duplicate names": (["a", "a", "b"], [[1, 2, 3], [4, 5, 6]]),
    "whitespace names": ([" ", "  a  ", "\t"], [[1, 2, 3], [4, 5, 6]]),
    "unicode names": (["名前", "🙂", "e\u0301", "\u202ertl", "Ω"], [[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]]),
    "injection names": (
        [
            '=HYPERLINK("http://evil.example/?x","click")',
            "+cmd|' /C calc'!A0",
            "<script>alert(1)</script>",
            "![t](http://127.0.0.1:8612/x.png)",
            "'; DROP TABLE accounts; --",
            "{{7*7}}",
        ],
        [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]],
    ),
    "injection values": (
        ["cmd", "n"],
        [["=1+1", 1], ["@SUM(A1)", 2], ["-2+3", 3], ["\tx", 4], ["<img src=x onerror=alert(1)>", 5]],
    ),
    "long name": (["n" * 20_000, "b"], [[1, 2], [3, 4]]),
    "numeric overflow": (
        ["big", "huge", "int70", "neg64", "digits"],
        [[1e308, "1e400", 2**70, -(2**64), "9" * 40], [1.0, "-1e400", 1, 2, "1"]],
    ),
    "nan inf text": (
        ["a", "b", "c"],
        [["nan", "inf", "NA"], ["NaN", "-Infinity", "null"], ["1", "#N/A", ""], ["2", "3", "4"]],
    ),
    "all-missing column": (["a", "empty", "b"], [[1, None, 2], [3, None, 4], [5, None, 6]]),
    "all missing": (["a", "b"], [[None, None], [None, None]]),
    "huge field": (["a", "note"], [[1, "x" * 200_000], [2, "short"]]),
    "deep quoting": (
        ["a", "q"],
        [[1, 'a""b'], [2, '"x,y"'], [3, "line\nbreak"], [4, '"' * 101], [5, "semi;colon\ttab|pipe"]],
    ),
    "mixed types": (["m", "n"], [[1, 1], ["two", 2], [3.5, 3], [None, 4], [True, 5]]),
    "bad timestamps": (
        ["date", "n"],
        [["2021-02-30", 1], ["0000-00-00", 2], ["9999-99-99", 3], ["2021-13-01", 4], ["31/12/2020", 5]],
    ),
    "extreme dates": (["when", "n"], [["0001-01-01", 1], ["9999-12-31", 2], ["1970-01-01", 3]]),
    "coordinates out of range": (["lat", "lon"], [[95.0, 200.0], [-100.0, -181.0], [10.0, 20.0]]),
    "constant column": (["a", "b"], [[5, 1], [5, 2], [5, 3]]),
    "thousands separators": (["amount", "n"], [["1,234", 1], ["12,345.5", 2], ["-7", 3]]),
    "control characters": (["a", "b"], [["\x01\x02x", 1], ["\x7f\u200by", 2], ["\u0085z", 3]]),
    "blank values": (["a", "b"], [[" ", 1], ["", 2], ["\t", 3]]),
    "leading zeros": (["zip", "phone"], [["007", "+1 555 0100"], ["010", "+44 20 7946 0000"]]),
    "emoji values": (["e", "n"], [["🙂", 1], ["👩‍👩‍👧", 2], ["\u202eabc", 3]]),
    "tiny numbers": (["t", "z"], [[5e-324, -0.0], [2.2250738585072014e-308, 0.0], [1.0, 1.0]]),
    "booleans": (["flag", "n"], [["true", 1], ["false", 2], ["TRUE", 3]]),
    "identifiers": (["user", "x"], [[f"u{i:04d}", i * 0.5] for i in range(50)]),
    "many rows": (["a", "b"], [[i % 7, (i * 31) % 11] for i in range(5_000)]),
    "600 columns": ([f"c{i}" for i in range(600)], [list(range(600)), list(range(600))]),
}


def _csv_text(header: list[str], rows: list[Row], delimiter: str = ",") -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def _xlsx_cell(value: Any) -> Any:
    if isinstance(value, str):
        return ILLEGAL_CHARACTERS_RE.sub("", value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return float(value)
    return value


def xlsx_bytes(rows: list[Row]) -> bytes:
    """A one-sheet workbook of ``rows`` (characters Excel cannot store removed)."""
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append([_xlsx_cell(v) for v in row])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def _arrow_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types, ints beyond 64 bits
        return pa.array([None if v is None else str(v) for v in values])


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _parquet_of(header: list[str], rows: list[Row]) -> bytes:
    columns = [_arrow_column([row[i] for row in rows]) for i in range(len(header))]
    return parquet_bytes(pa.Table.from_arrays(columns, names=header))


WRITERS: dict[str, tuple[str, Callable[[list[str], list[Row]], bytes]]] = {
    "csv": ("t.csv", lambda h, r: _csv_text(h, r).encode()),
    "tsv": ("t.tsv", lambda h, r: _csv_text(h, r, "\t").encode()),
    "semicolon csv with BOM": ("t.csv", lambda h, r: b"\xef\xbb\xbf" + _csv_text(h, r, ";").encode()),
    "gzip csv": ("t.csv.gz", lambda h, r: gzip.compress(_csv_text(h, r).encode(), mtime=0)),
    "xlsx": ("t.xlsx", lambda h, r: xlsx_bytes([h, *r])),
    "parquet": ("t.parquet", _parquet_of),
}


def _table_cases() -> Iterator[Case]:
    for table, (header, rows) in TABLES.items():
        for fmt, (name, write) in WRITERS.items():
            yield Case(f"{table} / {fmt}", name, write(header, rows))


# -- byte-level pathologies ------------------------------------------------------------------------------

BASE = _csv_text(*TABLES["ordinary"])
CITIES = "city,n\nZürich,1\nMünchen,2\nGenève,3\n"


def _gzip_bomb(megabytes: int) -> bytes:
    """A gzip CSV of ``megabytes`` MB of "1,2" rows (about 1 KB compressed per MB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"1,2\n" * (2**20 // 4)
    parts = [packer.compress(b"a,b\n"), *(packer.compress(block) for _ in range(megabytes)), packer.flush()]
    return b"".join(parts)


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, content in members.items():
            archive.writestr(member, content)
    return buf.getvalue()


def _byte_cases() -> Iterator[Case]:
    base, cities = BASE.encode(), CITIES
    parquet = _parquet_of(*TABLES["ordinary"])
    xlsx = xlsx_bytes([TABLES["ordinary"][0], *TABLES["ordinary"][1]])
    texts: dict[str, tuple[str, bytes]] = {
        "utf-8 BOM": ("t.csv", b"\xef\xbb\xbf" + base),
        "utf-8 BOM twice": ("t.csv", b"\xef\xbb\xbf\xef\xbb\xbf" + base),
        "utf-16 LE": ("t.csv", BASE.encode("utf-16")),
        "utf-16 BE": ("t.csv", b"\xfe\xff" + BASE.encode("utf-16-be")),
        "utf-16 without BOM": ("t.csv", BASE.encode("utf-16-le")),
        "utf-32": ("t.csv", BASE.encode("utf-32")),
        "cp1252": ("t.csv", cities.encode("cp1252")),
        "latin-1 undefined in cp1252": ("t.csv", cities.encode("latin-1") + b"x\x81y,4\n"),
        "mixed utf-8 and latin-1": ("t.csv", cities.encode()[:20] + "Genève,9\n".encode("latin-1")),
        "mixed within a line": ("t.csv", "a,b\nZürich,".encode() + "Genève\n".encode("latin-1")),
        "invalid utf-8 everywhere": ("t.csv", b"a,b\n\xc3\x28,\xa0\xa1\n\xe2\x28\xa1,\xf0\x28\x8c\xbc\n"),
        "NUL bytes in text": ("t.csv", base.replace(b",", b",\x00", 3)),
        "NUL bytes only": ("t.csv", b"\x00" * 4096),
        "CR line endings": ("t.csv", base.replace(b"\n", b"\r")),
        "CRLF line endings": ("t.csv", base.replace(b"\n", b"\r\n")),
        "mixed line endings": ("t.csv", b"a,b\r\n1,2\n3,4\r5,6\r\n"),
        "ragged short row": ("t.csv", b"a,b,c\n1,2,3\n4,5\n"),
        "ragged long row": ("t.csv", b"a,b,c\n1,2,3\n4,5,6,7\n"),
        "ragged quoted": ("t.csv", b'a,b\n"1,2",3\n"4,5\n'),
        "unbalanced quote at end": ("t.csv", base + b'"unterminated,1,2\n'),
        "quote in unquoted field": ("t.csv", b'a,b\n1,x"y\n2,z\n'),
        "only delimiters": ("t.csv", b",,,\n,,,\n,,,\n"),
        "only quotes": ("t.csv", b'"' * 100_001),
        "one huge line": ("t.csv", b"a," * 300_000 + b"b\n"),
        "many blank lines first": ("t.csv", b"\n" * 100_000 + base),
        "whitespace rows": ("t.csv", base + b"   \n\t\n \n"),
        "sep line semicolon": ("t.csv", b'"sep=;"\na;b\n1;2\n3;4\n'),
        "sep line unknown": ("t.csv", b"sep=#\na#b\n1#2\n"),
        "sep line alone": ("t.csv", b"sep=,\n"),
        "repeated header": ("t.csv", base + base),
        "header repeated only": ("t.csv", b"a,b\na,b\na,b\n"),
        "pipe separated": ("t.txt", BASE.replace(",", "|").encode()),
        "no newline at end": ("t.csv", base.rstrip(b"\n")),
        "single line no header": ("t.csv", b"1,2,3"),
        "html named csv": ("t.csv", b"<!DOCTYPE html><html><body><table><tr><td>1</td></tr></table></html>"),
        "json records": ("t.json", json.dumps([{"a": 1, "b": 2}, {"a": 3, "b": 4}]).encode()),
        "json lines": ("t.jsonl", b'{"a": 1, "b": 2}\n{"a": 3, "b": 4}\n'),
        "json nested named csv": ("t.csv", json.dumps({"a": {"b": [1, {"c": None}]}}).encode()),
        "gzip two members with header": ("t.csv.gz", gzip.compress(base, mtime=0) * 2),
        "gzip member then junk": ("t.csv.gz", gzip.compress(base, mtime=0) + b"junk"),
        "gzip of parquet": ("t.parquet.gz", gzip.compress(parquet, mtime=0)),
        "gzip of xlsx": ("t.xlsx.gz", gzip.compress(xlsx, mtime=0)),
        "gzip of utf-16": ("t.csv.gz", gzip.compress(BASE.encode("utf-16"), mtime=0)),
        "gzip bomb 60 MB": ("t.csv.gz", _gzip_bomb(60)),
        "gzip just under the limit": ("t.csv.gz", _gzip_bomb(8)),
        "zip of zip": ("t.xlsx", _zip({"inner.zip": _zip({"t.csv": base})})),
        "zip bomb of a workbook": (
            "t.xlsx",
            _zip({"xl/workbook.xml": b"<workbook/>", "xl/big.bin": b"\x00" * (60 * 2**20)}),
        ),
        "zip with a workbook entry only": ("t.xlsx", _zip({"xl/workbook.xml": b"<workbook/>"})),
        "csv named parquet": ("t.parquet", base),
        "csv named xlsx": ("t.xlsx", base),
        "csv named gz": ("t.gz", base),
        "parquet named csv": ("t.csv", parquet),
        "xlsx named csv": ("t.csv", xlsx),
        "gzip named parquet": ("t.parquet", gzip.compress(base, mtime=0)),
        "no extension": ("table", base),
    }
    for case, (name, data) in texts.items():
        yield Case(case, name, data)
    for label, data, name in (
        ("csv", base, "t.csv"),
        ("gzip csv", gzip.compress(base * 50, mtime=0), "t.csv.gz"),
        ("parquet", parquet, "t.parquet"),
        ("xlsx", xlsx, "t.xlsx"),
    ):
        for share in (0.1, 0.5, 0.9):
            yield Case(f"truncated {label} at {share:.0%}", name, data[: int(len(data) * share)])
        yield Case(f"{label} with trailing junk", name, data + bytes(range(256)))


# -- Parquet-only columns and workbook features ----------------------------------------------------------


def _parquet_cases() -> Iterator[Case]:
    stamp = pa.timestamp("us")
    tables: dict[str, pa.Table] = {
        "zero rows": pa.table({"a": pa.array([], pa.int64()), "b": pa.array([], pa.string())}),
        "zero columns": pa.table({}),
        "list column": pa.table({"l": [[1, 2], [3]], "n": [1, 2]}),
        "struct column": pa.table({"s": [{"x": 1}, {"x": 2}], "n": [1, 2]}),
        "map column": pa.table(
            {"m": pa.array([[("k", 1)], [("j", 2)]], pa.map_(pa.string(), pa.int64())), "n": [1, 2]}
        ),
        "nested list of structs": pa.table({"l": [[{"a": [1]}], []], "n": [1, 2]}),
        "timestamp year 1": pa.table({"t": pa.array([dt.datetime(1, 1, 1), None], stamp), "n": [1, 2]}),
        "timestamp year 9999": pa.table(
            {"t": pa.array([dt.datetime(9999, 12, 31), None], stamp), "n": [1, 2]}
        ),
        "timestamps with time zone": pa.table(
            {"t": pa.array([0, 10**15], pa.timestamp("us", tz="Pacific/Chatham")), "n": [1, 2]}
        ),
        "duration": pa.table({"d": pa.array([1, 10**12], pa.duration("s")), "n": [1, 2]}),
        "decimal beyond float": pa.table({"d": pa.array([10**37, -1], pa.decimal128(38, 0)), "n": [1, 2]}),
        "float16": pa.table({"h": pa.array([1.5, 2.5], pa.float16()), "n": [1, 2]}),
        "uint64 max": pa.table({"u": pa.array([2**64 - 1, 0], pa.uint64()), "n": [1, 2]}),
        "binary": pa.table({"b": [b"\x00\xff", b""], "n": [1, 2]}),
        "dictionary": pa.table({"d": pa.array(["x", "y"]).dictionary_encode(), "n": [1, 2]}),
        "null type": pa.table({"z": pa.array([None, None], pa.null()), "n": [1, 2]}),
        "duplicate names": pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"]),
        "empty name": pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["", "b"]),
        "all null rows": pa.table({"a": pa.array([None, None], pa.float64()), "b": pa.array([None, None])}),
        "nan and inf floats": pa.table({"f": [math.nan, math.inf, -math.inf, 1.0], "n": [1, 2, 3, 4]}),
        "10,000 columns": pa.table({f"c{i}": [1.0, 2.0] for i in range(10_000)}),
    }
    for case, table in tables.items():
        yield Case(f"parquet {case}", "t.parquet", parquet_bytes(table))


def _xlsx_cases() -> Iterator[Case]:
    def book(build: Callable[[Any], None]) -> bytes:
        wb = openpyxl.Workbook()
        build(wb)
        buf = io.BytesIO()
        wb.save(buf)
        return buf.getvalue()

    def empty_first(wb: Any) -> None:
        wb.create_sheet("second").append(["a", "b"])
        wb["second"].append([1, 2])

    def formulas(wb: Any) -> None:
        for row in (["a", "b"], [1, "=A2*2"], [2, "=1/0"]):
            wb.active.append(row)

    def merged(wb: Any) -> None:
        for row in (["a", "b"], [1, 2], [3, 4]):
            wb.active.append(row)
        wb.active.merge_cells("A2:B3")

    def far_cell(wb: Any) -> None:
        wb.active.append(["a", "b"])
        wb.active.append([1, 2])
        wb.active["XFD1048576"] = 1

    def dates(wb: Any) -> None:
        for row in (["when", "n"], [dt.datetime(1900, 1, 1), 1], [dt.datetime(9999, 12, 31), 2]):
            wb.active.append(row)

    for case, build in (
        ("first sheet empty", empty_first),
        ("formulas", formulas),
        ("merged cells", merged),
        ("a cell at XFD1048576", far_cell),
        ("extreme dates", dates),
    ):
        yield Case(f"xlsx {case}", "t.xlsx", book(build))


# -- issue 25's shapes, drawn from a seed ------------------------------------------------------------------

MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_DOC = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_TYPES = "application/vnd.openxmlformats-officedocument.spreadsheetml"
SHEET_PART = "xl/worksheets/sheet1.xml"
TWO_ROWS = (
    '<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c><c r="B1" t="inlineStr"><is><t>b</t></is></c>'
    '</row><row r="2"><c r="A2"><v>1</v></c><c r="B2"><v>2</v></c></row>'
)


def workbook(sheet_data: str, shared: tuple[str, ...] = (), encoding: str = "utf-8") -> bytes:
    """A minimal .xlsx whose one sheet holds ``sheet_data`` (the XML inside ``<sheetData>``), written in
    ``encoding``, with the shared texts ``shared``."""
    sheet = (
        f'<?xml version="1.0" encoding="{encoding.upper()}"?><worksheet xmlns="{MAIN_NS}"><sheetData>'
        f"{sheet_data}</sheetData></worksheet>"
    )
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/'
            '2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-'
            'package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{_TYPES}.sheet.main+xml"/>'
            f'<Override PartName="/{SHEET_PART}" ContentType="{_TYPES}.worksheet+xml"/>'
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_TYPES}.sharedStrings+xml"/></Types>'
        ).encode(),
        "_rels/.rels": (
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_RELS}"><Relationship Id="rId1" '
            f'Type="{_DOC}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
        ).encode(),
        "xl/workbook.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{MAIN_NS}" xmlns:r="{_DOC}"><sheets>'
            '<sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ).encode(),
        "xl/_rels/workbook.xml.rels": (
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_RELS}"><Relationship Id="rId1" '
            f'Type="{_DOC}/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" '
            f'Type="{_DOC}/sharedStrings" Target="sharedStrings.xml"/></Relationships>'
        ).encode(),
        "xl/sharedStrings.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{MAIN_NS}">'
            + "".join(f"<si><t>{text}</t></si>" for text in shared)
            + "</sst>"
        ).encode(),
        SHEET_PART: sheet.encode(encoding),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in parts.items():
            archive.writestr(name, body)
    return out.getvalue()


def _letters(column: int) -> str:
    out = ""
    while column:
        column, rest = divmod(column - 1, 26)
        out = chr(ord("A") + rest) + out
    return out


_SPELLINGS = ("r='{}'", 'r = "{}"', 'r="{}"', "r\t=\t'{}'", 'r="{}" ')


def _far_cells(rng: np.random.Generator) -> Iterator[Case]:
    """A stray cell far right and down (over the span limit) or near (under it), its references in
    any spelling, case and encoding openpyxl reads; sometimes the row placed by count, not by r."""
    for i in range(8):
        near = i % 4 == 3
        rows = int(rng.integers(3, 1_000)) if near else int(rng.integers(2_000, 1_048_577))
        cols = int(rng.integers(3, 600)) if near else int(rng.integers(2_000, 16_385))
        spell = str(rng.choice(_SPELLINGS))
        ref = _letters(cols) + str(rows)
        ref = ref.lower() if rng.random() < 0.3 else ref
        encoding = "utf-16" if rng.random() < 0.3 else "utf-8"
        if rng.random() < 0.3 and rows < 3_000:  # rows counted: empty rows, then the cell's
            data = TWO_ROWS + "<row/>" * (rows - 3) + f"<row><c {spell.format(ref)}><v>1</v></c></row>"
        else:
            data = f"{TWO_ROWS}<row {spell.format(rows)}><c {spell.format(ref)}><v>1</v></c></row>"
        yield Case(
            f"seeded xlsx cell {ref} ({spell.format('')}, {encoding})", "t.xlsx", workbook(data, (), encoding)
        )


def _shared_text(rng: np.random.Generator) -> Iterator[Case]:
    """One long shared text shown in many cells (stored once, copied into each when read)."""
    for _ in range(3):
        size, cells = int(rng.integers(100_000, 1_000_000)), int(rng.integers(60, 1_500))
        rows = "".join(f'<row r="{i}"><c r="A{i}" t="s"><v>1</v></c></row>' for i in range(2, cells + 2))
        data = workbook(f'<row r="1"><c r="A1" t="s"><v>0</v></c></row>{rows}', ("a", "x" * size))
        yield Case(f"seeded xlsx shared text {size:,} B x {cells:,}", "t.xlsx", data)


def _repeated_text(rng: np.random.Generator) -> Iterator[Case]:
    """Parquet files of one text repeated (dictionary-encoded, a few kB), or written plain and compressed
    in row groups of 8 MB (built without holding the whole column)."""
    for i in range(4):
        size, rows = int(rng.integers(2**18, 2**21)), int(rng.integers(20, 2_000))
        buf = io.BytesIO()
        if i % 2 == 0:
            one = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * size]))
            pq.write_table(pa.table({"s": one, "n": pa.array(range(rows))}), buf, store_schema=False)
        else:
            group = max(1, 8 * 2**20 // size)
            part = pa.table({"s": ["y" * size] * group})
            with pq.ParquetWriter(buf, part.schema, use_dictionary=False, compression="zstd") as writer:
                for _ in range(max(1, rows // group)):
                    writer.write_table(part)
        kind = "dictionary" if i % 2 == 0 else "plain zstd"
        yield Case(f"seeded parquet text {size:,} B x {rows:,} ({kind})", "t.parquet", buf.getvalue())


def _gzip_members(rng: np.random.Generator) -> Iterator[Case]:
    """gzip files of many members: empty ones after the table, the table split across members, padding."""
    empty = gzip.compress(b"", mtime=0)
    for _ in range(3):
        count = int(rng.integers(10_001, 300_000))
        data = gzip.compress(BASE.encode(), mtime=0) + empty * count + b"\x00" * int(rng.integers(0, 64))
        yield Case(f"seeded gzip of {count:,} members", "t.csv.gz", data)
    count = int(rng.integers(50, 5_000))
    lines = [gzip.compress(f"{i},{i % 7},x\n".encode(), mtime=0) for i in range(count)]
    yield Case(
        f"seeded gzip of {count + 1:,} one-line members",
        "t.csv.gz",
        gzip.compress(b"id,score,group\n") + b"".join(lines),
    )


def _blank_lines(rng: np.random.Generator) -> Iterator[Case]:
    """gzip CSV files of millions of blank lines (mixed white space), with a header or a quoted one."""
    for quoted in (False, True, False):
        megabytes = int(rng.integers(4, 49))
        filler = bytes(rng.choice([b"\n", b" \n", b"\r\n", b"\t\n"]))
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        head = b'"a",b\n' if quoted else b"a,b\n"
        block = filler * (2**20 // len(filler))
        body = [packer.compress(head), *(packer.compress(block) for _ in range(megabytes))]
        data = b"".join([*body, packer.compress(b"1,2\n"), packer.flush()])
        yield Case(
            f"seeded gzip of {megabytes} MB of {filler!r} lines{' (quoted)' * quoted}", "t.csv.gz", data
        )


def _line_endings(rng: np.random.Generator) -> Iterator[Case]:
    """CSV files whose lines end with LF, CRLF or a lone CR at random, with or without quoted values."""
    for i in range(4):
        rows = [
            ["id", "score", "group"],
            *([k, round(float(rng.normal()), 3), "xyz"[k % 3]] for k in range(30)),
        ]
        quote = i % 2 == 1
        ends = rng.choice(["\n", "\r\n", "\r"], size=len(rows), p=[0.5, 0.3, 0.2])
        text = "".join(
            ",".join(f'"{v}"' if quote else str(v) for v in row) + end
            for row, end in zip(rows, ends, strict=True)
        )
        yield Case(f"seeded csv with lone CRs {i}{' (quoted)' * quote}", "t.csv", text.encode())


def _invalid_utf8(rng: np.random.Generator) -> Iterator[Case]:
    """Parquet text columns (string or large string, dictionary or plain) holding bytes that are not UTF-8."""
    for kind, dictionary in ((pa.string(), True), (pa.large_string(), False), (pa.string(), False)):
        values = [f"v{k}".encode() for k in range(50)]
        for k in rng.choice(50, size=int(rng.integers(1, 5)), replace=False):
            values[k] = bytes(rng.integers(0x80, 0x100, size=3, dtype=np.uint8))
        raw = pa.array(values, pa.binary() if kind == pa.string() else pa.large_binary())
        text = pa.Array.from_buffers(kind, len(raw), raw.buffers())
        buf = io.BytesIO()
        pq.write_table(pa.table({"s": text, "n": range(50)}), buf, use_dictionary=dictionary)
        yield Case(
            f"seeded parquet invalid utf-8 ({kind}, dictionary {dictionary})", "t.parquet", buf.getvalue()
        )


def _long_values(rng: np.random.Generator) -> Iterator[Case]:
    """One long value (around the per-cell limit) in a CSV file, quoted or not, and in a Parquet file;
    Parquet text columns sharing a name."""
    for quote in (b"", b'"'):
        size = int(rng.integers(2**19, 3 * 2**20))
        data = b"a,b\n1," + quote + b"x" * size + quote + b"\n2,y\n"
        yield Case(f"seeded csv value of {size:,} B{' (quoted)' * bool(quote)}", "t.csv", data)
    size = int(rng.integers(2**19, 3 * 2**20))
    yield Case(
        f"seeded parquet value of {size:,} B", "t.parquet", parquet_bytes(pa.table({"s": ["y" * size, "z"]}))
    )
    twins = pa.Table.from_arrays([pa.array(["x", "y"]), pa.array(["z", "w"])], names=["a", "a"])
    yield Case("seeded parquet text columns sharing a name", "t.parquet", parquet_bytes(twins))


def _many_sheets(rng: np.random.Generator) -> Iterator[Case]:
    """A small table on the first sheet, then sheets that each span nearly the cell limit."""
    book = openpyxl.Workbook()
    for row in TABLES["ordinary"][1][:3]:
        book.active.append(row)
    sheets, rows = int(rng.integers(3, 9)), int(rng.integers(1_000, 2_000))
    for k in range(sheets):
        sheet = book.create_sheet(f"s{k}")
        for row in range(1, rows):
            sheet.cell(row=row, column=2_000_000 // rows, value=1)
    buf = io.BytesIO()
    book.save(buf)
    yield Case(f"seeded xlsx with {sheets} more sheets of {rows:,} full rows", "t.xlsx", buf.getvalue())


def _mutations(rng: np.random.Generator) -> Iterator[Case]:
    """Ordinary files of every format with a few random bytes changed."""
    header, rows = TABLES["ordinary"]
    for fmt, (name, write) in WRITERS.items():
        data = write(header, rows)
        for k in range(4):
            mutated = bytearray(data)
            for at in rng.integers(0, len(data), size=int(rng.integers(1, 9))):
                mutated[at] = int(rng.integers(0, 256))
            yield Case(f"seeded {fmt} with bytes changed {k}", name, bytes(mutated))


def seeded_cases(seed: int) -> Iterator[Case]:
    """Issue 25's hostile shapes with sizes, positions and spellings drawn from ``seed``: far workbook
    cells, shared texts, repeated Parquet text, many gzip members, blank lines, lone CRs, text that is not
    UTF-8, long values, and ordinary files with random bytes changed."""
    rng = np.random.default_rng(seed)
    for shape in (_far_cells, _shared_text, _repeated_text, _gzip_members, _blank_lines, _line_endings):
        yield from shape(rng)
    yield from _invalid_utf8(rng)
    yield from _long_values(rng)
    yield from _many_sheets(rng)
    yield from _mutations(rng)


@functools.cache
def corpus(seed: int = 0) -> tuple[Case, ...]:
    """Every generated case (issue 25's drawn from ``seed``), then ``BAD_FILES`` of the engine tests (built
    once per process and seed)."""
    from tests.system.test_hostile_engine import BAD_FILES

    cases = [*_table_cases(), *_byte_cases(), *_parquet_cases(), *_xlsx_cases(), *seeded_cases(seed)]
    cases += [Case(f"bad file: {case}", name, data) for case, data, name, _ in BAD_FILES]
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return tuple(cases)


# -- running one file ------------------------------------------------------------------------------------


class _Hung(BaseException):
    """Raised by the alarm; a BaseException, so no ``except Exception`` in the engine swallows it."""


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread, Unix); elsewhere, time it only."""
    try:
        previous = signal.signal(signal.SIGALRM, _raise_hung)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _raise_hung(signum: int, frame: Any) -> None:
    raise _Hung


def engine_run(data: bytes, name: str) -> str:
    """Load, type and prepare one file with a curator's defaults; the stage reached ("refused at load",
    "refused at prepare", "loaded" when no column can be a feature, "prepared"). DPCoreError escapes only
    from loading; anything else escapes."""
    table = load_table(data, filename=name)
    pa.Table.from_pandas(table)  # what the page and the session store need
    schema = infer_schema(table)
    fingerprint(table)
    features = schema.columns(*FEATURE_KINDS)[:MAX_FEATURES]
    if not features:
        return "loaded"
    try:
        rows = handle_missing(table, features, "drop")
        prepare(rows, schema, features, scaling="minmax", data_bounds_ok=True)
    except DPCoreError:
        return "refused at prepare"
    return "prepared"


def run_case(case: Case, limit: float) -> Outcome:
    """Run :func:`engine_run` on ``case`` within ``limit`` seconds and classify the outcome."""
    start = time.perf_counter()
    try:
        with _alarm(limit):
            stage = engine_run(case.data, case.name)
        status, error = "loaded", ""
    except _Hung:
        stage, status, error = "", "hung", f"still running after {limit} s"
    except DPCoreError as err:
        stage, status, error = "refused at load", "refused", str(err)
    except Exception as err:  # the corpus exists to find these
        stage, status, error = "", "crashed", f"{type(err).__name__}: {err}"[:500]
    seconds = time.perf_counter() - start
    if seconds > limit:
        status = "hung"
    return Outcome(case, status, stage, seconds, error)


def refusal(data: bytes, name: str) -> tuple[str, float, float]:
    """Load ``data`` as the file ``name``, which must be refused: the DataError's message, the seconds
    taken and the peak traced memory (MB)."""
    import pytest

    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(DataError) as refused:
            load_table(data, filename=name)
        return str(refused.value), time.perf_counter() - start, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
