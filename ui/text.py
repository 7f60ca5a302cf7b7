"""User text (file, column, category, dataset and user names, error messages quoting them) for Streamlit's
Markdown: ``st.markdown``, ``st.caption``, alerts, widget labels, radio options and ``st.table`` cells.

:func:`md` makes such text literal: a file named ``![t](http://host/x.png).csv`` shows as that name, not
as an image the browser fetches; a column named ``<a href=...>`` shows as text.
"""

from __future__ import annotations

import re

__all__ = ["md"]

# Backslash-escaped everywhere: links and images ([ ]), raw HTML and autolinks (<), entities (&), code
# spans (`), emphasis and strikethrough (* ~), LaTeX ($), and the backslash itself.
_ALWAYS = re.compile(r"([\\`*\[\]<&$~])")
# "_" opens emphasis only next to a non-alphanumeric character: one inside a word (block_width) stays.
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# GitHub's literal autolinks (http://..., www....) are found in the text after escapes are removed, so a
# backslash cannot stop them: a word joiner (U+2060, invisible) breaks the pattern instead.
_AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=www)(?=\.)")
# A block marker at the start (heading, quote, list item, rule, setext underline) is escaped; "-3.2" and
# "0.5" are not markers and stay as they are.
_BLOCK_START = re.compile(r"^(\s*)(#{1,6}(?=\s|$)|>|[-+=](?=[-+=\s]|$)|\d{1,9}[.)](?=\s|$))")


def md(text: object) -> str:
    """``text`` shown literally by Streamlit's Markdown: one line, every active character escaped."""
    line = " ".join(str(text).splitlines())
    line = _UNDERSCORE.sub(r"\\_", _ALWAYS.sub(r"\\\1", line))
    line = _AUTOLINK.sub("\u2060", line)
    return _BLOCK_START.sub(_escape_marker, line)


def _escape_marker(match: re.Match[str]) -> str:
    indent, marker = match.groups()
    if marker[0].isdigit():  # "1." or "1)": escape the delimiter
        return f"{indent}{marker[:-1]}\\{marker[-1]}"
    return f"{indent}\\{marker}"
