"""Editing the Data page's preparation table in an AppTest, as a curator does: change cells, press Apply."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streamlit.testing.v1 import AppTest


def edit_table(
    at: AppTest,
    *,
    features: Iterable[str] | None = None,
    bounds: Mapping[str, tuple[str, str]] | None = None,
    kinds: Mapping[str, str] | None = None,
    units: Mapping[str, str] | None = None,
    missing: Mapping[str, str] | None = None,
) -> AppTest:
    """Set cells of the preparation table and press Apply (one run). ``features``, when given, is the whole
    list of features (every other column's tick is cleared)."""
    ds = at.session_state["dp_dataset"]
    editor = next(e for e in at.data_editor if str(e.key).startswith(f"data_table_{ds.dataset_id}_"))
    columns = [str(c) for c in editor.value["column"]]
    rows: dict[int, dict[str, object]] = {}

    def cell(column: str, field: str, value: object) -> None:
        rows.setdefault(columns.index(column), {})[field] = value

    if features is not None:
        chosen = set(features)
        for column in columns:
            cell(column, "feature", column in chosen)
    for column, (lower, upper) in (bounds or {}).items():
        cell(column, "lower", lower)
        cell(column, "upper", upper)
    for field, values in (("kind", kinds), ("unit", units), ("missing", missing)):
        for column, value in (values or {}).items():
            cell(column, field, value)
    at.session_state[editor.key] = {"edited_rows": rows, "added_rows": [], "deleted_rows": []}
    return at.button(key="data_apply_table").click().run()


def table_cells(at: AppTest, column: str) -> dict[str, object]:
    """The row of ``column`` in the preparation table as drawn (applied values)."""
    ds = at.session_state["dp_dataset"]
    editor = next(e for e in at.data_editor if str(e.key).startswith(f"data_table_{ds.dataset_id}_"))
    frame = editor.value.set_index("column")
    return frame.loc[column].to_dict()
