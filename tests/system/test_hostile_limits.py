"""Hostile inputs, round 3 (issue 25): small files that expand to gigabytes or take minutes are refused in
seconds, before their values are expanded, with a message naming the limit and the fix; every refusal is
in the project's own words, never a library's.
"""

from __future__ import annotations

import gzip
import io
import time
import zipfile
import zlib

import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcore.data import MAX_NAME_CHARS, infer_schema, load_table
from dpcore.data.io import MAX_GZIP_MEMBERS, MAX_LINES
from dpcore.errors import DataError
from tests.hostile_corpus import MAIN_NS, SHEET_PART, TWO_ROWS, refusal, workbook

MB = 2**20


def far_cell(row: str, cell: str, encoding: str = "utf-8") -> bytes:
    """The two-row table and one more value, its row and cell references written as ``row`` and ``cell``
    (the attribute text, e.g. ``r='XFD1048576'``)."""
    return workbook(f"{TWO_ROWS}<row {row}><c {cell}><v>1</v></c></row>", encoding=encoding)


# -- 1. a workbook's span, read as the reader reads it ------------------------------------------------


def test_an_ordinary_minimal_workbook_loads() -> None:
    assert load_table(workbook(TWO_ROWS), filename="t.xlsx").to_dict("list") == {"a": [1], "b": [2]}


@pytest.mark.parametrize(
    ("row", "cell", "encoding"),
    [
        ("r='1048576'", "r='XFD1048576'", "utf-8"),
        ('r = "1048576"', 'r = "XFD1048576"', "utf-8"),
        ('r="1048576"', 'r="XFD1048576"', "utf-16"),
        ('r="1048576"', 'r="xfd1048576"', "utf-8"),
        ('r="1.048576e6"', 'r="XFD1"', "utf-8"),  # the row, not the cell's own reference, places it
    ],
    ids=["single quotes", "spaces around =", "UTF-16 sheet", "lower case", "row as a float"],
)
def test_a_far_cell_in_any_spelling_is_refused_at_once(row: str, cell: str, encoding: str) -> None:
    """Before: the byte pattern matched only r="..." in UTF-8, and the reader filled 17 billion cells
    (153 s to the 8 GB cap for a 4.8 KB file)."""
    data = far_cell(row, cell, encoding)
    message, seconds, _ = refusal(data, "t.xlsx")
    assert len(data) < 5_000
    assert "spans 1,048,576 rows × 16,384 columns" in message and "at most 2,000,000" in message, message
    assert "Delete the cells outside the table" in message
    assert seconds < 2, seconds


def test_cells_without_references_are_placed_as_the_reader_places_them() -> None:
    """No ``r``: a row follows the previous one and a cell the previous cell's column, as openpyxl reads
    them (the byte pattern saw no reference at all)."""
    rows = f"{TWO_ROWS}{'<row/>' * 996}<row>{'<c><v>1</v></c>' * 3_000}</row>"
    message, _, _ = refusal(workbook(rows), "t.xlsx")
    assert "spans 999 rows × 3,000 columns" in message, message


def test_a_shared_text_repeated_in_many_cells_is_refused_before_it_is_copied() -> None:
    """One 0.5 MB shared text shown in 400 cells: 200 MB once every cell holds its copy (the reader
    copies it into an Arrow string column), from a file of a few kB. Before: 2,000 such cells took 7 s."""
    cells = "".join(f'<row r="{i}"><c r="A{i}" t="s"><v>1</v></c></row>' for i in range(2, 402))
    data = workbook(f'<row r="1"><c r="A1" t="s"><v>0</v></c></row>{cells}', ("a", "x" * (MB // 2)))
    message, seconds, peak = refusal(data, "t.xlsx")
    assert len(data) < 20_000
    assert "holds 200 MB of text once read" in message and "at most 50 MB" in message, message
    assert seconds < 2 and peak < 100, (seconds, peak)


def test_damaged_workbook_parts_are_refused_in_the_project_words() -> None:
    """Before: "could not be read as an Excel workbook (list index out of range)" and "... ()"."""
    missing = workbook('<row r="1"><c r="A1" t="s"><v>7</v></c></row>', ("a",))
    message, _, _ = refusal(missing, "t.xlsx")
    assert "refers to the shared text number '7', which the workbook does not hold" in message
    broken = workbook('<row r="1"><c r="A1"><v>1</v></row>')
    message, _, _ = refusal(broken, "t.xlsx")
    assert "is not well-formed XML (line 1" in message and "Save it again from Excel" in message
    # a DTD in a UTF-16 part, which a search for the bytes "<!DOCTYPE" misses
    sheet = (
        f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE w [<!ENTITY e "x">]><worksheet xmlns="{MAIN_NS}"/>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(workbook(TWO_ROWS))) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(
                info.filename, sheet.encode("utf-16") if info.filename == SHEET_PART else src.read(info)
            )
    message, _, _ = refusal(out.getvalue(), "t.xlsx")
    assert "sheet1.xml declares a DTD, which Excel never writes" in message


# -- 2. Parquet bounded from its metadata and its dictionaries -------------------------------------------


def _repeated_text(rows: int, size: int, **write) -> bytes:
    """One text of ``size`` bytes in ``rows`` rows (dictionary-encoded: a few kB on disk)."""
    one = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * size]))
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": one, "n": pa.array(range(rows))}), buf, store_schema=False, **write)
    return buf.getvalue()


def test_a_parquet_file_of_900_mb_of_one_text_is_refused_at_once() -> None:
    """Before: under the 1 GB decoded limit, it loaded in 78 s and 5.2 GB (issue 25)."""
    data = _repeated_text(900, MB)
    message, seconds, peak = refusal(data, "t.parquet")
    assert len(data) < 100_000
    assert "holds 900 MB of text once read" in message and "at most 50 MB" in message, message
    assert seconds < 2 and peak < 50, (seconds, peak)


def test_parquet_values_are_bounded_from_the_metadata_before_reading() -> None:
    """Numbers that compress to nothing, and plain-encoded text: refused from the row count and the pages'
    uncompressed sizes, before a value is read."""
    zeros = io.BytesIO()
    pq.write_table(pa.table({f"c{i}": pa.array([0] * 7_000_000, pa.int64()) for i in range(4)}), zeros)
    plain = io.BytesIO()
    pq.write_table(pa.table({"s": ["y" * MB] * 250}), plain, use_dictionary=False, compression="zstd")
    for data, size in ((zeros.getvalue(), "213.6 MB"), (plain.getvalue(), "250 MB")):
        message, seconds, peak = refusal(data, "t.parquet")
        assert f"holds {size} of values once read" in message and "at most 200 MB" in message, message
        assert seconds < 2 and peak < 50, (seconds, peak)


def test_parquet_text_just_under_the_limit_loads() -> None:
    table = load_table(_repeated_text(40, MB), filename="t.parquet")
    assert table.shape == (40, 2) and table["s"].str.len().eq(MB).all()


def test_parquet_text_that_is_not_utf8_is_refused_not_a_crash_later() -> None:
    """Before: loaded, then infer_schema failed with an Arrow error ("Something went wrong")."""
    raw = pa.array([b"ok", b"\xff\xfe bad", b"x"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": text, "n": [1, 2, 3]}), buf)
    with pytest.raises(
        DataError, match=r"column 's' is typed as text but holds bytes that are not valid UTF-8"
    ):
        infer_schema(load_table(buf.getvalue(), filename="t.parquet"))


# -- 3. gzip members ----------------------------------------------------------------------------------


def test_many_gzip_members_are_refused_in_linear_time() -> None:
    """Before: quadratic (160k empty members 45 s; 2.4 million, 46 MB, past 240 s)."""
    empty = gzip.compress(b"", mtime=0)
    data = gzip.compress(b"a,b\n1,2\n", mtime=0) + empty * 400_000
    message, seconds, _ = refusal(data, "t.csv.gz")
    assert f"more than {MAX_GZIP_MEMBERS:,} gzip members" in message and "gunzip -c" in message
    assert seconds < 2, seconds


def test_gzip_members_up_to_the_limit_load_and_are_read_linearly() -> None:
    member = gzip.compress(b"a,b\n1,2\n", mtime=0)
    start = time.perf_counter()
    table = load_table(member * MAX_GZIP_MEMBERS + b"\x00" * 100, filename="t.csv.gz")
    assert table.shape == (MAX_GZIP_MEMBERS, 2) and time.perf_counter() - start < 5
    with pytest.raises(
        DataError, match=r"damaged or truncated \(its compressed data ends early in member 2\)"
    ):
        load_table(member + member[:-9], filename="t.csv.gz")


# -- 4. blank lines -----------------------------------------------------------------------------------


def _newlines(megabytes: int, head: bytes = b"a,b\n", tail: bytes = b"1,2\n") -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = [packer.compress(b"\n" * MB) for _ in range(megabytes)]
    return packer.compress(head) + b"".join(body) + packer.compress(tail) + packer.flush()


def test_a_gzip_of_newlines_is_refused_in_seconds() -> None:
    """Before: blank lines were checked one by one in Python, about 3 s per MB (170 s for 49 KB)."""
    data = _newlines(49)
    message, seconds, _ = refusal(data, "t.csv.gz")
    assert len(data) < 60_000
    assert f"at most {MAX_LINES:,} are read from a CSV file (blank lines included" in message, message
    assert seconds < 2, seconds


@pytest.mark.parametrize("quote", [b"", b'"a",b\n'], ids=["plain", "quoted"])
def test_blank_lines_under_the_limit_are_skipped_at_c_speed(quote: bytes) -> None:
    data = (quote or b"a,b\n") + b"  \n\n" * 2_000_000 + b"1,2\n"
    start = time.perf_counter()
    assert load_table(data, filename="t.csv").to_dict("list") == {"a": [1], "b": [2]}
    assert time.perf_counter() - start < 4


# -- 9. refusals in the project's own words ---------------------------------------------------------------


def test_lone_carriage_returns_end_lines_or_are_named() -> None:
    """Before: "new-line character seen in unquoted field - do you need to open the file in
    universal-newline mode?" (Python's csv module, naming a Python API)."""
    assert load_table(b"a,b\r\n1,2\n3,4\r5,6\r\n", filename="t.csv").to_dict("list") == {
        "a": [1, 3, 5],
        "b": [2, 4, 6],
    }
    with pytest.raises(DataError) as refused:
        load_table(b'a,"b"\n1,2\r3,4\n', filename="t.csv")
    message = str(refused.value)
    assert "line 2: a lone carriage return (CR, an old Mac line ending) outside quotes" in message
    assert "universal-newline" not in message and "new-line character" not in message


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("", r"The file name is empty; rename the file and upload it again"),
        ("   ", r"The file name is empty"),
        ("x" * (MAX_NAME_CHARS + 1) + ".csv", r"The file name has 260 characters; at most 255 are allowed"),
        ("a\nb.csv", r"The file name contains control characters"),
    ],
    ids=["empty", "blank", "too long", "control characters"],
)
def test_a_file_name_that_cannot_name_a_dataset_is_refused(name: str, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        load_table(b"a,b\n1,2\n", filename=name)


def test_a_vml_part_that_is_not_well_formed_does_not_refuse_the_workbook() -> None:
    """Legacy drawings (comments' boxes) are VML, which Excel may write as HTML-like text; the reader skips
    them, so only the parts it reads must be well-formed XML."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(workbook(TWO_ROWS))) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        dst.writestr("xl/drawings/vmlDrawing1.vml", b"<xml><o:shapelayout v:ext='edit'><br></xml>")
    assert load_table(out.getvalue(), filename="t.xlsx").to_dict("list") == {"a": [1], "b": [2]}


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"a,b\n1," + b"x" * (2 * MB) + b"\n2,y\n", "t.csv"),
        (b"x" * (2 * MB) + b"\tb\n1\t2\n", "t.tsv"),
        (gzip.compress(b"a,b\n1,2\n3," + b"x" * (2 * MB)), "t.csv.gz"),
    ],
    ids=["a field", "the header", "the last field, gzip"],
)
def test_a_csv_value_longer_than_a_cell_limit_is_refused(data: bytes, name: str) -> None:
    message, seconds, _ = refusal(data, name)
    assert "holds a value of 2 MB; at most 1 MB per cell" in message and seconds < 2, message


def test_a_parquet_value_longer_than_a_cell_limit_is_refused_from_its_dictionary() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": ["y" * (2 * MB), "z"], "n": [1, 2]}), buf)
    message, _, peak = refusal(buf.getvalue(), "t.parquet")
    assert "holds a value of 2 MB; at most 1 MB per cell" in message and peak < 20, (message, peak)
    assert load_table(_repeated_text(3, MB - 1), filename="t.parquet").shape == (3, 2)


def test_parquet_text_columns_sharing_a_name_are_refused_as_duplicates() -> None:
    """Before: Arrow's "Invalid column index to set field" (the columns were looked up by name)."""
    names = ["a", "a"]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays([pa.array(["x", "y"]), pa.array(["z", "w"])], names=names), buf)
    with pytest.raises(DataError, match=r"duplicate column names: 'a'"):
        load_table(buf.getvalue(), filename="t.parquet")


def test_only_the_first_sheet_is_read() -> None:
    """Each sheet may span up to the cell limit; all of them were read (six such sheets: 10 s or more)
    though only the first is used."""
    book = openpyxl.Workbook()
    book.active.append(["a", "b"])
    book.active.append([1, 2])
    for k in range(6):  # 1,999 rows x 1,000 columns, under the limit, each row filled by the reader
        sheet = book.create_sheet(f"s{k}")
        for row in range(1, 2_000):
            sheet.cell(row=row, column=1_000, value=1)
    buf = io.BytesIO()
    book.save(buf)
    start = time.perf_counter()
    table = load_table(buf.getvalue(), filename="t.xlsx")
    assert table.to_dict("list") == {"a": [1], "b": [2]} and time.perf_counter() - start < 3
    assert table.attrs["dpcore_source"] == "Excel .xlsx (first sheet 'Sheet' of 7)"
