"""Tests of dpcore.data: reading every supported format, rejecting bad files, schema inference, encodings,
missing values, public bounds, scaling, fingerprints and samples. Fixture files are built in memory."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest
from sklearn.cluster import KMeans

from dpcore.data import (
    SAMPLES,
    CategoricalEncoding,
    DataError,
    DateEncoding,
    PreparedData,
    column_encoding,
    fingerprint,
    handle_missing,
    infer_date_format,
    infer_schema,
    load_sample,
    load_table,
    make_blobs,
    missing_report,
    prepare,
)
from dpcore.errors import DPCoreError

CSV = "id,name,score\n1,Zoë,1.5\n2,Bob,2.5\n3,Çelik,3.0\n"
EXPECTED = pd.DataFrame({"id": [1, 2, 3], "name": ["Zoë", "Bob", "Çelik"], "score": [1.5, 2.5, 3.0]})


def _check_frame(df: pd.DataFrame) -> None:
    assert list(df.columns) == ["id", "name", "score"]
    assert df["id"].tolist() == [1, 2, 3]
    assert df["name"].tolist() == ["Zoë", "Bob", "Çelik"]
    assert df["score"].tolist() == [1.5, 2.5, 3.0]


def _xlsx_bytes(df: pd.DataFrame, **kwargs) -> bytes:
    buf = io.BytesIO()
    df.to_excel(buf, index=False, engine="openpyxl", **kwargs)
    return buf.getvalue()


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("data", "name", "source"),
    [
        (CSV.encode("utf-8"), "t.csv", "UTF-8, comma"),
        (CSV.replace(",", ";").encode("utf-8"), "t.csv", "UTF-8, semicolon"),
        (CSV.replace(",", "\t").encode("utf-8"), "t.tsv", "UTF-8, tab"),
        (b"\xef\xbb\xbf" + CSV.encode("utf-8"), "t.csv", "UTF-8 with BOM, comma"),
        (CSV.encode("latin-1"), "t.csv", "Windows-1252, comma"),
        (CSV.replace(",", ";").encode("cp1252"), "t.csv", "Windows-1252, semicolon"),
        (CSV.encode("utf-16"), "t.txt", "UTF-16, comma"),
        (gzip.compress(CSV.encode("utf-8"), mtime=0), "t.csv.gz", "UTF-8, comma"),
        (gzip.compress(CSV.replace(",", ";").encode("latin-1"), mtime=0), "blob", "Windows-1252, semicolon"),
    ],
)
def test_text_formats(data: bytes, name: str, source: str) -> None:
    df = load_table(data, filename=name)
    _check_frame(df)
    assert source in df.attrs["dpcore_source"]


def test_latin1_bytes_undefined_in_cp1252_fall_back_to_latin1() -> None:
    data = "a;b\n1;x\x81y\n".encode("latin-1")  # 0x81 is undefined in Windows-1252
    df = load_table(data)
    assert df["b"].tolist() == ["x\x81y"]
    assert "Latin-1" in df.attrs["dpcore_source"]


def test_parquet_and_xlsx_and_gzipped_parquet() -> None:
    df = load_table(_parquet_bytes(EXPECTED), filename="t.parquet")
    _check_frame(df)
    assert df.attrs["dpcore_source"] == "Parquet"
    _check_frame(load_table(gzip.compress(_parquet_bytes(EXPECTED)), filename="t.parquet.gz"))
    xdf = load_table(_xlsx_bytes(EXPECTED), filename="t.xlsx")
    _check_frame(xdf)
    assert xdf["id"].dtype.kind == "i" and xdf["score"].dtype.kind == "f"
    assert xdf.attrs["dpcore_source"].startswith("Excel .xlsx (first sheet 'Sheet1'")


def test_path_bytes_and_file_objects(tmp_path) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(CSV.encode("utf-8"))
    _check_frame(load_table(path))
    _check_frame(load_table(str(path)))
    _check_frame(load_table(bytearray(CSV.encode("utf-8"))))
    with path.open("rb") as fh:
        _check_frame(load_table(fh))

    class Uploaded(io.BytesIO):  # Streamlit's UploadedFile: a BytesIO with a .name
        name = "upload.csv.gz"

    upload = Uploaded(gzip.compress(CSV.encode("utf-8"), mtime=0))
    upload.read()  # already consumed once (e.g. by a size check): load_table rewinds
    _check_frame(load_table(upload))


def test_header_whitespace_stripped_and_quoted_delimiters() -> None:
    df = load_table(b' a ;" b b ";c\n1;"x;y";2\n\n3;z;4\n')
    assert list(df.columns) == ["a", "b b", "c"]
    assert df["b b"].tolist() == ["x;y", "z"]
    assert len(df) == 2


def test_single_column_is_accepted() -> None:
    df = load_table(b"value\n1\n2\n3\n")
    assert list(df.columns) == ["value"] and df["value"].tolist() == [1, 2, 3]


def test_european_csv_with_decimal_commas_is_semicolon_separated() -> None:
    df = load_table(b"a;b\n1,5;2\n3,25;4\n")
    assert list(df.columns) == ["a", "b"]
    assert df["b"].tolist() == [2, 4]


# ---------------------------------------------------------------- bad inputs


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.csv", CSV)
    return buf.getvalue()


BAD_INPUTS = [
    ("empty", b"", "t.csv", "is empty"),
    ("whitespace only", b"  \n\n ", "t.csv", "is empty"),
    ("header only", b"a,b,c\n", "t.csv", "no data rows"),
    ("header and blank lines", b"a;b\n\n\n", "t.csv", "no data rows"),
    (
        "binary junk",
        bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8)),
        "t.csv",
        "binary",
    ),
    ("junk without NUL", bytes(range(1, 256)) * 20, "t.csv", "looks like binary data"),
    ("nul bytes", b"a,b\n1,\x002\n", "t.csv", "binary data"),
    ("duplicate columns", b"a,b,a,c,c\n1,2,3,4,5\n", "t.csv", "duplicate column names: 'a', 'c'"),
    ("duplicates after strip", b"a, a\n1,2\n", "t.csv", "duplicate column names: 'a'"),
    (
        "ragged long line",
        b"a,b,c\n1,2,3\n4,5,6,7\n8,9,10\n",
        "t.csv",
        "line 3 has 4 fields but the header has 3",
    ),
    ("ragged short line", b"a;b;c\n1;2;3\n4;5;6\n7;8\n", "t.csv", "line 4 has 2 fields"),
    ("bad gzip", b"\x1f\x8b\x08\x00garbage", "t.csv.gz", "damaged or truncated"),
    ("gz name, not gzip", CSV.encode(), "t.csv.gz", "not gzip-compressed"),
    ("truncated parquet", _parquet_bytes(EXPECTED)[:60], "t.parquet", "not a readable Parquet file"),
    ("parquet name, csv bytes", CSV.encode(), "t.parquet", "not a valid Parquet file"),
    ("zip that is not xlsx", _zip_bytes(), "t.zip", "not an Excel .xlsx workbook"),
    ("truncated xlsx", _xlsx_bytes(EXPECTED)[:300], "t.xlsx", "damaged zip/Excel"),
    ("legacy xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "t.xls", "legacy Excel 97-2003"),
    ("unbalanced quote", b'a,b\n1,"x\n2,y\n', "t.csv", "unbalanced quote"),
    ("gzip of empty", gzip.compress(b"", mtime=0), "t.csv.gz", "decompresses to an empty file"),
]


@pytest.mark.parametrize(("label", "data", "name", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_raise_data_error_with_message(label: str, data: bytes, name: str, message: str) -> None:
    with pytest.raises(DataError) as info:
        load_table(data, filename=name)
    assert message in str(info.value)
    assert name in str(info.value) or label.startswith("empty")


def test_bad_sources() -> None:
    with pytest.raises(DataError, match="Could not open"):
        load_table("/nonexistent/dir/file.csv")
    with pytest.raises(DataError, match="Cannot read a table from a int"):
        load_table(42)
    with pytest.raises(DataError, match="text mode"):
        load_table(io.StringIO(CSV))


def test_empty_excel_sheet_and_header_only_excel() -> None:
    with pytest.raises(DataError, match="no data rows"):
        load_table(_xlsx_bytes(EXPECTED.iloc[:0]), filename="t.xlsx")
    dup = pd.DataFrame([[1, 2]], columns=["x", "x "])
    with pytest.raises(DataError, match="duplicate column names: 'x'"):
        load_table(_xlsx_bytes(dup), filename="t.xlsx")


def test_data_error_is_a_value_error() -> None:
    assert issubclass(DataError, DPCoreError) and issubclass(DataError, ValueError)


# ---------------------------------------------------------------- schema


@pytest.fixture(scope="module")
def marketing() -> pd.DataFrame:
    return load_sample("marketing_campaign")


@pytest.fixture(scope="module")
def airports() -> pd.DataFrame:
    return load_sample("us_airports")


def test_schema_marketing(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    assert marketing.shape == (2240, 29)
    assert schema.kinds["ID"] == "identifier"
    assert schema.kinds["Education"] == schema.kinds["Marital_Status"] == "categorical"
    assert schema.kinds["Dt_Customer"] == "date" and schema.date_formats["Dt_Customer"] == "%d/%m/%Y"
    others = set(marketing.columns) - {"ID", "Education", "Marital_Status", "Dt_Customer"}
    assert {schema.kinds[c] for c in others} == {"numeric"}
    assert marketing["Z_CostContact"].nunique() == 1 and marketing["Z_Revenue"].nunique() == 1


def test_schema_airports(airports: pd.DataFrame) -> None:
    kinds = infer_schema(airports).kinds
    assert kinds["iata"] == "identifier"
    assert kinds["latitude"] == "latitude" and kinds["longitude"] == "longitude"
    assert kinds["state"] == kinds["country"] == "categorical"


def test_schema_name_and_range_rules() -> None:
    df = pd.DataFrame(
        {
            "CustomerID": [10, 11, 12],
            "group_id": [1, 1, 2],
            "Lat": [10.0, 20.0, 30.0],
            "lng": [100.0, -120.0, 170.0],
            "lat_bad": [10.0, 95.0, 30.0],
            "paid": [1, 2, 3],
            "label": ["a", "b", "c"],
            "flag": [True, False, True],
            "when": pd.to_datetime(["2020-01-01", "2020-02-01", "2020-03-01"]),
            "numbers_as_text": pd.Series(["1", "2.5", "3"], dtype=object),
        }
    )
    kinds = infer_schema(df).kinds
    assert kinds == {
        "CustomerID": "identifier",
        "group_id": "numeric",
        "Lat": "latitude",
        "lng": "longitude",
        "lat_bad": "numeric",
        "paid": "numeric",
        "label": "identifier",
        "flag": "categorical",
        "when": "date",
        "numbers_as_text": "numeric",
    }


def test_schema_overrides_are_new_objects_and_validated(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    changed = schema.with_kind("Kidhome", "categorical")
    assert changed.kinds["Kidhome"] == "categorical" and schema.kinds["Kidhome"] == "numeric"
    with pytest.raises(DataError, match="Unknown column kind 'text'"):
        schema.with_kind("Kidhome", "text")
    with pytest.raises(DataError, match="'Nope' is not in the table"):
        schema.with_kind("Nope", "numeric")
    with pytest.raises(DataError, match="repeats a category"):
        schema.with_categories("Education", ["PhD", "PhD"])
    frame = schema.to_frame()
    assert frame.loc[frame["column"] == "Dt_Customer", "date format"].item() == "%d/%m/%Y"


@pytest.mark.parametrize(
    ("values", "fmt", "ambiguous"),
    [
        (["04/09/2012", "21/08/2013"], "%d/%m/%Y", False),
        (["04/09/2012", "08/21/2013"], "%m/%d/%Y", False),
        (["04/09/2012", "05/10/2013"], "%m/%d/%Y", True),
        (["2012-09-04", "2013-08-21 10:30:00"], "ISO8601", False),
        (["4.9.2012", "21.08.2013"], "%d.%m.%Y", False),
        (["Graduation", "PhD"], None, False),
        (["04/09/2012", "not a date"], None, False),
    ],
)
def test_infer_date_format(values: list[str], fmt: str | None, ambiguous: bool) -> None:
    found, note = infer_date_format(pd.Series(values))
    assert found == fmt
    assert ("ambiguous" in note) == ambiguous


def test_ambiguous_dates_are_noted_and_surface_as_prepare_warnings() -> None:
    df = pd.DataFrame({"d": ["04/09/2012", "05/10/2013", "01/01/2014"]})
    schema = infer_schema(df)
    assert schema.date_formats["d"] == "%m/%d/%Y" and "ambiguous" in schema.notes["d"]
    out = prepare(df, schema, ["d"], bounds={"d": ("2010-01-01", "2015-01-01")})
    assert out.decode(out.X[:1])["d"].iloc[0] == pd.Timestamp(2012, 4, 9)
    assert any(w.startswith("d: Day and month are ambiguous") for w in out.warnings)
    day_first = schema.with_date_format("d", "%d/%m/%Y")
    assert "d" not in day_first.notes
    out2 = prepare(df, day_first, ["d"], bounds={"d": ("01/01/2010", "01/01/2015")})
    assert out2.decode(out2.X[:1])["d"].iloc[0] == pd.Timestamp(2012, 9, 4)
    assert out2.raw_lower[0] == (pd.Timestamp(2010, 1, 1) - pd.Timestamp(1970, 1, 1)).days


def test_day_first_dates_parse_explicitly() -> None:
    df = load_table(b"d;v\n04/09/2012;1\n21/08/2013;2\n")
    schema = infer_schema(df)
    enc = column_encoding(df, schema, "d")
    assert isinstance(enc, DateEncoding) and enc.format == "%d/%m/%Y"
    days = enc.encode(df["d"])
    assert days[0] == (pd.Timestamp("2012-09-04") - pd.Timestamp("1970-01-01")).days
    decoded = enc.decode(days)
    assert decoded[0] == pd.Timestamp(2012, 9, 4) and decoded[1] == pd.Timestamp(2013, 8, 21)
    # the curator can force month-first on an ambiguous column; a value that does not fit is an error
    forced = schema.with_date_format("d", "%m/%d/%Y")
    with pytest.raises(DataError, match=r"not dates in format '%m/%d/%Y' \(e.g. '21/08/2013'\)"):
        prepare(df, forced, ["d"], bounds={"d": ("2010-01-01", "2015-01-01")})


# ---------------------------------------------------------------- encodings


def test_categorical_encoding_round_trip(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    enc = column_encoding(marketing, schema, "Education")
    assert isinstance(enc, CategoricalEncoding) and not enc.public
    assert enc.categories == ("2n Cycle", "Basic", "Graduation", "Master", "PhD")
    codes = enc.encode(marketing["Education"])
    assert codes.dtype == np.float64 and set(np.unique(codes)) == {0.0, 1.0, 2.0, 3.0, 4.0}
    assert (enc.decode(codes) == marketing["Education"].to_numpy(dtype=object)).all()
    assert enc.decode([1.4, -3, 9.0]).tolist() == ["Basic", "2n Cycle", "PhD"]
    table = enc.table()
    assert table["code"].tolist() == [0, 1, 2, 3, 4] and table["category"].iloc[4] == "PhD"
    with pytest.raises(DataError, match="outside its category list: 'Doctor'"):
        enc.encode(["PhD", "Doctor"])


def test_numeric_categories_sort_numerically_and_declared_categories() -> None:
    df = pd.DataFrame({"k": [10, 2, 2, 1], "c": ["b", "a", None, "b"]})
    schema = infer_schema(df).with_kind("k", "categorical")
    enc = column_encoding(df, schema, "k")
    assert enc.categories == (1, 2, 10) and enc.encode(df["k"]).tolist() == [2.0, 1.0, 1.0, 0.0]
    declared = schema.with_categories("c", ["b", "a", "z"])
    enc_c = column_encoding(df, declared, "c")
    assert enc_c.public and enc_c.categories == ("b", "a", "z")
    codes = enc_c.encode(df["c"])
    assert codes[0] == 0 and codes[1] == 1 and np.isnan(codes[2])


def test_date_encoding_datetime_column_and_bounds_parsing() -> None:
    enc = DateEncoding("t")
    s = pd.Series(pd.to_datetime(["1970-01-02 12:00", "2000-01-01"], format="ISO8601"))
    assert enc.encode(s).tolist() == [1.5, 10957.0]
    assert enc.to_days("1970-01-11") == 10.0 and enc.to_days(3) == 3.0
    with pytest.raises(DataError, match="is not a date"):
        enc.to_days("soon")


# ---------------------------------------------------------------- missing values


def _frame_with_missing() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "a": [1.0, np.nan, 3.0, 10.0, np.inf],
            "b": [1.0, 2.0, 3.0, 4.0, 5.0],
            "c": ["x", "y", None, "y", "x"],
        }
    )


def test_missing_report() -> None:
    rep = missing_report(_frame_with_missing())
    assert rep.loc["a", "missing"] == 1 and rep.loc["a", "infinite"] == 1
    assert rep.loc["c", "missing"] == 1 and rep.loc["c", "share"] == pytest.approx(0.2)
    assert rep.loc["b", "missing"] == 0


def test_handle_missing_strategies() -> None:
    df = _frame_with_missing()
    dropped = handle_missing(df, ["a", "c"], "drop")
    assert dropped.index.tolist() == [0, 3] and "dpcore_imputed" not in dropped.attrs
    med = handle_missing(df, ["a"], "median")
    assert med["a"].tolist() == [1.0, 3.0, 3.0, 10.0, 3.0]
    assert df["a"].isna().sum() == 1  # input untouched
    assert handle_missing(df, ["a"], "mean")["a"].iloc[1] == pytest.approx(14 / 3)
    mode = handle_missing(df, ["c"], "mode")
    assert mode["c"].tolist() == ["x", "y", "x", "y", "x"]
    assert mode.attrs["dpcore_imputed"] == {"c": "mode"}
    with pytest.raises(DataError, match="'c' is not numeric, so it has no median; use 'mode' or 'drop'"):
        handle_missing(df, ["c"], "median")
    with pytest.raises(DataError, match="Unknown missing-value strategy 'zero'"):
        handle_missing(df, ["a"], "zero")


def test_prepare_refuses_missing_without_strategy_and_records_imputation() -> None:
    df = _frame_with_missing()
    with pytest.raises(DataError) as info:
        prepare(df, infer_schema(df), ["a", "b"], data_bounds_ok=True)
    msg = str(info.value)
    assert "'a' (1 missing, 1 infinite)" in msg and "'drop'" in msg and "'b'" not in msg
    dropped = prepare(df, infer_schema(df), ["a", "b"], data_bounds_ok=True, missing="drop")
    assert dropped.n_dropped == 2 and dropped.frame.index.tolist() == [0, 2, 3]
    assert dropped.X[:, 0].tolist() == [1.0, 3.0, 10.0]
    assert not any("missing values replaced" in leak.text for leak in dropped.leaks)
    imputed = prepare(df, infer_schema(df), ["a", "b"], data_bounds_ok=True, missing="median")
    assert imputed.X[:, 0].tolist() == [1.0, 3.0, 3.0, 10.0, 3.0]
    assert any(leak.text.startswith("a: missing values replaced by the median") for leak in imputed.leaks)
    pre = handle_missing(df, ["a"], "mean")
    leaks = prepare(pre, infer_schema(pre), ["a"], data_bounds_ok=True).leaks
    assert any("mean" in leak.text for leak in leaks)


def test_prepare_categorical_missing_needs_mode() -> None:
    df = _frame_with_missing()
    schema = infer_schema(df)
    with pytest.raises(DataError, match="'c' is categorical: use missing='mode' or 'drop'"):
        prepare(df, schema, ["c"], missing="median")
    out = prepare(df, schema, ["c"], missing="mode")
    assert out.X[:, 0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]


# ---------------------------------------------------------------- bounds, scaling, validation


def test_curator_bounds_clip_and_count(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    out = prepare(
        marketing, schema, ["Year_Birth", "Recency"], bounds={"Year_Birth": (1940, 2000), "Recency": (0, 99)}
    )
    n_old = int((marketing["Year_Birth"] < 1940).sum())
    assert n_old > 0 and out.clipped == {"Year_Birth": n_old, "Recency": 0}
    assert out.X[:, 0].min() == 1940 and out.bounds_source == "curator" and out.leaks == []
    assert any(f"Year_Birth: {n_old} value(s)" in w for w in out.warnings)
    assert out.lower.tolist() == [1940, 0] and out.upper.tolist() == [2000, 99]


def test_missing_bounds_error_names_columns_and_fixes(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    with pytest.raises(DataError) as info:
        prepare(marketing, schema, ["Year_Birth", "Recency", "MntWines"], bounds={"Recency": (0, 100)})
    msg = str(info.value)
    assert "'Year_Birth', 'MntWines'" in msg and "data_bounds_ok=True" in msg and "Enter bounds" in msg


@pytest.mark.parametrize(
    ("bound", "message"),
    [
        ((5, 5), "must be smaller than the upper bound"),
        ((10, 1), "must be smaller than the upper bound"),
        ((0, np.inf), "must be finite"),
        (("low", 3), "must be numbers"),
        ((1,), "must be a pair"),
    ],
)
def test_invalid_curator_bounds(bound, message: str) -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    with pytest.raises(DataError, match=message):
        prepare(df, infer_schema(df), ["x"], bounds={"x": bound})


def test_data_derived_bounds_are_flagged(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    out = prepare(
        marketing, schema, ["Recency", "MntWines"], data_bounds_ok=True, bounds={"Recency": (0, 99)}
    )
    assert out.bounds_source == "data (leaks)"
    assert out.bound_sources == {"Recency": "curator", "MntWines": "data (leaks)"}
    assert any(leak.text.startswith("MntWines: public bounds taken from the data") for leak in out.leaks)
    assert out.upper[1] == marketing["MntWines"].max()


def test_minmax_maps_public_bounds_to_unit_box(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    bounds = {"Year_Birth": (1900, 2010), "Dt_Customer": ("2012-01-01", "2015-01-01")}
    out = prepare(
        marketing, schema, ["Year_Birth", "Dt_Customer", "Education"], scaling="minmax", bounds=bounds
    )
    assert out.lower.tolist() == [-1, -1, -1] and out.upper.tolist() == [1, 1, 1]
    assert out.X.min() >= -1 and out.X.max() <= 1
    year = np.clip(marketing["Year_Birth"].to_numpy(), 1900, 2010)
    assert np.allclose(out.X[:, 0], 2 * (year - 1900) / 110 - 1)
    assert (
        out.raw_upper[2] == 4 and out.bound_sources["Education"] == "encoding (categories from data: leaks)"
    )
    assert out.bounds_source == "data (leaks)"  # the category list came from the data
    assert np.allclose(out.inverse_transform(out.X)[:, 0], year)
    first = out.decode(out.X[:1])
    assert (
        first["Dt_Customer"].iloc[0] == pd.Timestamp(2012, 9, 4)
        and first["Education"].iloc[0] == "Graduation"
    )
    public = schema.with_categories("Education", ["Basic", "2n Cycle", "Graduation", "Master", "PhD"])
    out2 = prepare(marketing, public, ["Year_Birth", "Education"], scaling="minmax", bounds=bounds)
    assert out2.bounds_source == "curator" and out2.leaks == []
    assert out2.X[0, 1] == 0.0  # Graduation = code 2 of 0..4 -> 0 in [-1, 1]


def test_standardize_is_a_leak_and_transforms_bounds() -> None:
    df = pd.DataFrame({"x": [0.0, 2.0, 4.0, 6.0]})
    out = prepare(df, infer_schema(df), ["x"], scaling="standardize", bounds={"x": (-2, 10)})
    std = np.std([0, 2, 4, 6])
    assert np.allclose(out.X[:, 0], (df["x"] - 3) / std)
    assert out.lower[0] == pytest.approx(-5 / std) and out.upper[0] == pytest.approx(7 / std)
    # the scaled bounds depend on the data mean and std, so they are not public any more
    assert any("standardize" in leak.text for leak in out.leaks) and out.bounds_source == "data (leaks)"


def test_constant_columns_warn_and_block_standardize(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    feats = ["Recency", "Z_CostContact"]
    bounds = {"Recency": (0, 100), "Z_CostContact": (0, 10)}
    out = prepare(marketing, schema, feats, bounds=bounds, scaling="minmax")
    assert any("Z_CostContact: constant column" in w for w in out.warnings)
    with pytest.raises(
        DataError, match=r"Cannot standardise constant column\(s\) 'Z_CostContact'.*remove them"
    ):
        prepare(marketing, schema, feats, bounds=bounds, scaling="standardize")


def test_prepare_output_contract(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing)
    out = prepare(marketing, schema, ["Income", "Recency"], data_bounds_ok=True, missing="drop")
    assert isinstance(out, PreparedData)
    assert out.X.dtype == np.float64 and out.X.flags["C_CONTIGUOUS"] and np.isfinite(out.X).all()
    assert out.X.shape == (2216, 2) and len(out.frame) == 2216 and out.n_dropped == 24
    assert out.feature_names == ("Income", "Recency") and out.kinds == ("numeric", "numeric")
    assert out.fingerprint == fingerprint(marketing)
    assert np.array_equal(out.X[:, 1], out.frame["Recency"].to_numpy(dtype=float))
    with pytest.raises(AttributeError):
        out.scaling = "minmax"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"features": []}, "No features selected"),
        ({"features": ["Recency", "Recency"]}, "selected twice"),
        ({"features": ["Nope"]}, "Unknown feature\\(s\\) 'Nope'"),
        ({"features": ["ID"]}, "'ID' is an identifier and cannot be a feature"),
        ({"features": ["Recency"], "scaling": "log"}, "Unknown scaling 'log'"),
        ({"features": ["Recency"], "bounds": {"Typo": (0, 1)}}, "unknown column\\(s\\) 'Typo'"),
        ({"features": ["Education"], "bounds": {"Education": (0, 9)}}, "fixed by its encoding to \\(0, 4\\)"),
    ],
)
def test_prepare_argument_errors(marketing: pd.DataFrame, kwargs: dict, message: str) -> None:
    schema = infer_schema(marketing)
    kwargs = {"data_bounds_ok": True, **kwargs}
    with pytest.raises(DataError, match=message):
        prepare(marketing, schema, **kwargs)


def test_text_overridden_as_numeric_fails_at_prepare(marketing: pd.DataFrame) -> None:
    schema = infer_schema(marketing).with_kind("Education", "numeric")
    with pytest.raises(DataError, match=r"'Education' is marked numeric but holds text \(e.g. 'Graduation'"):
        prepare(marketing, schema, ["Education"], data_bounds_ok=True)


def test_coordinates_out_of_range_and_default_domain(airports: pd.DataFrame) -> None:
    schema = infer_schema(airports)
    out = prepare(airports, schema, ["longitude", "latitude"], scaling="minmax")
    assert out.raw_lower.tolist() == [-180, -90] and out.bounds_source == "curator" and out.leaks == []
    assert out.bound_sources["latitude"] == "domain (public)"
    swapped = schema.with_kind("longitude", "latitude")
    with pytest.raises(DataError, match=r"'longitude' is marked latitude but .* outside \[-90, 90\]"):
        prepare(airports, swapped, ["longitude"])
    with pytest.raises(DataError, match="must lie within"):
        prepare(airports, schema, ["latitude"], bounds={"latitude": (0, 100)})


def test_too_few_rows() -> None:
    df = pd.DataFrame({"x": [1.0, np.nan]})
    with pytest.raises(DataError, match="Only 1 row\\(s\\) left"):
        prepare(df, infer_schema(df), ["x"], bounds={"x": (0, 2)}, missing="drop")


# ---------------------------------------------------------------- fingerprint


def test_fingerprint_stability_and_sensitivity(marketing: pd.DataFrame) -> None:
    fp = fingerprint(marketing)
    assert len(fp) == 64 and fp == fingerprint(marketing.copy())
    changed = marketing.copy()
    changed.loc[100, "Recency"] += 1
    assert fingerprint(changed) != fp
    assert fingerprint(marketing.iloc[::-1].reset_index(drop=True)) != fp  # row order matters
    renamed = marketing.rename(columns={"Recency": "recency"})
    assert fingerprint(renamed) != fp


def test_fingerprint_independent_of_equivalent_reading() -> None:
    df = pd.DataFrame(
        {
            "i": [1, 2, 3],
            "f": [0.5, np.nan, 2.0],
            "s": ["a", None, "c"],
            "t": pd.to_datetime(["2020-01-01"] * 3),
        }
    )
    csv_df = load_table(df.to_csv(index=False).encode(), filename="t.csv")
    csv_df["t"] = pd.to_datetime(csv_df["t"])
    pq_df = load_table(_parquet_bytes(df), filename="t.parquet")
    assert fingerprint(csv_df) == fingerprint(pq_df) == fingerprint(df)
    as_float = df.assign(i=df["i"].astype(float))
    nullable = df.assign(i=df["i"].astype("Int64"))
    assert fingerprint(as_float) == fingerprint(nullable) == fingerprint(df)
    assert fingerprint(df.assign(i=[1, 2, 4])) != fingerprint(df)


def test_fingerprint_same_in_another_process() -> None:
    code = (
        "import pandas as pd; from dpcore.data import fingerprint; "
        "print(fingerprint(pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == fingerprint(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))


# ---------------------------------------------------------------- samples


def test_samples_load() -> None:
    assert set(SAMPLES) == {"marketing_campaign", "us_airports", "road_trips"}
    for name, (filename, description, provenance) in SAMPLES.items():
        df = load_sample(name)
        assert filename.endswith(".csv") and description and provenance
        assert len(df) in (2240, 3376, 9685)
    with pytest.raises(DataError, match="Unknown sample 'iris'"):
        load_sample("iris")


def test_make_blobs() -> None:
    df = make_blobs(n_samples=300, n_features=3, centers=5, seed=1)
    assert df.shape == (300, 3) and list(df.columns) == ["x1", "x2", "x3"]
    assert df.equals(make_blobs(n_samples=300, n_features=3, centers=5, seed=1))
    assert set(infer_schema(df).kinds.values()) == {"numeric"}
    assert not df.equals(make_blobs(n_samples=300, n_features=3, centers=5, seed=2))
    tight = make_blobs(n_samples=600, n_features=2, centers=3, cluster_std=0.1, seed=3).to_numpy()
    km = KMeans(n_clusters=3, n_init=4, random_state=0).fit(tight)
    assert km.inertia_ / 600 == pytest.approx(2 * 0.1**2, rel=0.25)  # E||noise||^2 = d * std^2
    assert sorted(np.bincount(km.labels_)) == [200, 200, 200]
    with pytest.raises(DataError, match="n_samples >= 2"):
        make_blobs(n_samples=1)


@pytest.mark.parametrize("scaling", ["none", "minmax", "standardize"])
def test_bounds_wider_than_a_float_are_refused(scaling: str) -> None:
    df = pd.DataFrame({"a": [1e308, -1e308, 0.0], "b": [1.0, 2.0, 3.0]})
    with pytest.raises(DataError, match="span more than the largest float"):
        prepare(df, infer_schema(df), ["a", "b"], scaling=scaling, data_bounds_ok=True)
