"""dpcore.data.dictionary and dpcore.data.saved: the preparation table is checked row by row and applied
whole; a data dictionary CSV names what it refuses; prepared settings are kept per dataset name."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpcore.data import infer_schema
from dpcore.data.dictionary import (
    Dictionary,
    DictionaryError,
    check_dictionary,
    dictionary_frame,
    merge_dictionary,
    read_dictionary_csv,
)
from dpcore.data.saved import find_preparation, save_preparation
from dpcore.errors import DataError

TABLE = pd.DataFrame(
    {
        "age": [34, 51, 29],
        "city": ["Oslo", "Bergen", "Oslo"],
        "joined": ["2020-01-03", "2021-05-06", "2019-12-31"],
        "lat": [59.9, 60.4, 59.9],
        "id": ["a", "b", "c"],
    }
)


def _frame() -> pd.DataFrame:
    return dictionary_frame(infer_schema(TABLE))


def test_the_table_round_trips_through_csv_and_a_partial_dictionary_keeps_the_other_cells() -> None:
    frame = _frame()
    assert list(frame["kind"]) == ["numeric", "categorical", "date", "latitude", "identifier"]
    csv = b"column,lower,upper,unit\nage,18,100,years\njoined,2010-01-01,2030-12-31,\n"
    merged, problems = merge_dictionary(frame, read_dictionary_csv(csv))
    dic = check_dictionary(merged, TABLE, problems=problems)
    assert dic.features == ("age", "joined")  # no feature header: a row with both bounds is a feature
    assert dic.bounds == {"age": ("18", "100"), "joined": ("2010-01-01", "2030-12-31")}
    assert dic.units == {"age": "years"} and dic.kinds["city"] == "categorical"
    again = check_dictionary(read_dictionary_csv(dic.to_csv()), TABLE)
    assert again == dic and Dictionary.from_dict(dic.to_dict()) == dic


def test_every_refused_row_is_named_with_its_reason_and_nothing_is_returned() -> None:
    csv = (
        b"column,kind,feature,lower,upper,missing\n"
        b"age,numeric,yes,100,18,\n"  # lower >= upper
        b"city,numeric,no,,,\n"  # a kind that does not fit
        b"joined,date,yes,soon,2030-01-01,\n"  # not a date
        b"lat,latitude,yes,0,95,\n"  # outside the latitude domain
        b"id,identifier,yes,,,\n"  # an identifier as a feature
        b"height,numeric,yes,0,3,\n"  # no such column
        b"age,numeric,yes,1,2,\n"  # listed twice
    )
    merged, problems = merge_dictionary(_frame(), read_dictionary_csv(csv))
    with pytest.raises(DictionaryError) as refused:
        check_dictionary(merged, TABLE, problems=problems)
    reasons = refused.value.problems
    assert "row 6 ('height'): no such column in the table" in reasons
    assert "row 7 ('age'): the column is listed twice" in reasons
    text = " ".join(reasons)
    for expected in (
        "lower 100 is not below upper 18",
        "kind numeric does not fit: it holds text",
        "bound 'soon' is not a date such as 2012-01-01",
        "latitude bounds must lie within -90..90",
        "an identifier cannot be a feature",
    ):
        assert expected in text, (expected, reasons)
    assert str(refused.value).startswith("7 of 5 rows of the preparation table were refused, so nothing")


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        ({"lower": "x", "upper": "3"}, "bound 'x' is not a finite number"),
        ({"lower": "1"}, "give both a lower and an upper bound"),
        ({"kind": "weight"}, "unknown kind 'weight'"),
        ({"feature": "maybe"}, "feature must be true or false"),
        ({"missing": "zero"}, "missing-value step 'zero' is not one of"),
        ({"unit": "u" * 41}, "the unit must be at most 40 printable characters"),
    ],
)
def test_each_kind_of_bad_cell_is_refused(cells: dict[str, str], reason: str) -> None:
    frame = _frame().astype(object)
    for key, value in cells.items():
        frame.loc[0, key] = value
    with pytest.raises(DictionaryError, match="row 1 \\('age'\\): " + reason.replace("(", "\\(")):
        check_dictionary(frame, TABLE)


def test_a_file_that_is_not_a_dictionary_is_refused_with_the_expected_headers() -> None:
    with pytest.raises(DataError, match="no 'column' header"):
        read_dictionary_csv(b"name,low\nage,1\n")
    with pytest.raises(DataError, match="unknown header\\(s\\) 'minimum'"):
        read_dictionary_csv(b"column,minimum\nage,1\n")
    with pytest.raises(DataError, match="could not be read as CSV"):
        read_dictionary_csv(b"\xff\xfe\x00bad")


def test_missing_steps_drop_first_and_the_schema_takes_the_kinds() -> None:
    frame = _frame()
    frame.loc[1, "missing"] = "mode"
    frame.loc[0, "missing"] = "drop"
    frame.loc[3, "kind"] = "numeric"
    dic = check_dictionary(frame, TABLE)
    assert dic.steps() == [("drop", ("age",)), ("mode", ("city",))]
    assert dic.schema(infer_schema(TABLE)).kinds["lat"] == "numeric"


def test_saved_settings_are_found_by_name_then_by_fingerprint_never_for_another_table(tmp_path: Path) -> None:
    assert find_preparation(tmp_path, "aa11", "f" * 64) is None
    save_preparation(tmp_path, "aa11", "People", "f" * 64, {"table": {"features": ["age"]}})
    own = find_preparation(tmp_path, "aa11", "0" * 64)  # the same name, another table: offered, checked later
    assert own is not None and own.name == "People" and own.when.endswith(" UTC")
    renamed = find_preparation(tmp_path, "bb22", "f" * 64)  # the same table under another name
    assert renamed is not None and renamed.dataset_id == "aa11"
    assert find_preparation(tmp_path, "bb22", "0" * 64) is None  # another name and table: nothing
    (tmp_path / "preparations" / "aa11.json").write_text("{not json")
    assert find_preparation(tmp_path, "aa11", "f" * 64) is None  # an altered file is not offered
    with pytest.raises(DataError):
        save_preparation(tmp_path, "../x", "x", "f" * 64, {})
