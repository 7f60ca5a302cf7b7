"""User text (file, column, category, dataset and user names) made inert where files and charts show it.

* :func:`csv_bytes`: every CSV the project writes. A text cell or header starting with ``=``, ``+``,
  ``-``, ``@``, tab or carriage return is a formula to a spreadsheet (``=HYPERLINK(...)`` leaks data when
  clicked, ``+cmd|...`` runs a program); it is prefixed with a single quote, the OWASP "CSV injection"
  rule. Numbers stay numbers: only strings are changed, so a stored -3.2 is written as -3.2.
* :func:`plot_text`: text placed in a Plotly figure (titles, axis and tick labels, legend, hover, table
  cells). Plotly renders a subset of HTML in text (``<a href>``, ``<b>``, ``<br>``), so ``&``, ``<`` and
  ``>`` are written as entities, which Plotly shows as the characters themselves.
"""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["FORMULA_STARTS", "csv_bytes", "neutralise_cell", "plot_text"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: object) -> object:
    """``"'" + value`` for a string starting with a formula character; anything else unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _text_column(column: pd.Series) -> pd.Series:
    """A column with its formula-like strings neutralised; numeric, boolean and date columns as they are."""
    if not (
        pd.api.types.is_object_dtype(column.dtype)
        or pd.api.types.is_string_dtype(column.dtype)
        or isinstance(column.dtype, pd.CategoricalDtype)
    ):
        return column
    return column.astype(object).map(neutralise_cell)


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as UTF-8 CSV without its index, with formula-like headers and text cells neutralised.

    Lines end with CRLF (RFC 4180), so a cell holding a carriage return is quoted: unquoted, it would
    start a new row whose first cell a spreadsheet reads as a formula.
    """
    safe = pd.DataFrame({i: _text_column(frame.iloc[:, i]) for i in range(frame.shape[1])}, index=frame.index)
    safe.columns = [neutralise_cell(c) for c in frame.columns]
    return safe.to_csv(index=False, lineterminator="\r\n").encode()


def plot_text(text: object) -> str:
    """``text`` for a Plotly figure: ``&``, ``<`` and ``>`` as entities, so no markup in it is rendered."""
    return html.escape(str(text), quote=False)
