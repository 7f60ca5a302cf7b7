"""A release's report: one self-contained HTML page (``<stem>-report.html``) that opens offline.

Title, the manifest as tables (known fields in reading order, then any others; parameters, policy,
preparation and details as nested tables; demo and local notices as banners), Plotly charts (plotly.js
inlined once, nothing fetched) and the released tables in scrolling boxes (at most :data:`REPORT_ROWS`
rows; the CSV and JSON files hold them all).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpcore.manifest import DEMO_NOTICE, LOCAL_NOTICE, jsonable
from dpcore.policy import DEFINITIONS

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["REPORT_ROWS", "html_report"]

_CSS = """
*,*::before,*::after{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:1.5rem 1rem 3rem;
max-width:1100px;color:#1d2733;line-height:1.45}
h1{font-size:1.6rem;margin:.5rem 0 1rem}h2{font-size:1.25rem;margin:2rem 0 .5rem}
h3{font-size:1.05rem;margin:1.25rem 0 .4rem}
table{border-collapse:collapse;margin:.25rem 0 1rem}
td,th{border:1px solid #ccd5df;padding:.3rem .55rem;text-align:left;vertical-align:top}
thead th{background:#eef2f6;position:sticky;top:0;z-index:1}
table.kv{width:100%;table-layout:fixed}table.kv>tbody>tr>th{width:14rem;background:#f5f7fa;font-weight:600}
table.kv table{margin:0;width:100%}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;word-break:break-all}
.scroll{max-width:100%;overflow:auto;max-height:75vh;margin:.25rem 0 1rem;border:1px solid #ccd5df}
.scroll table{margin:0;border:0;min-width:100%}.scroll td,.scroll th{border-width:0 1px 1px 0}
.note{color:#5a6877;font-size:.9rem}
.figure{max-width:100%;overflow-x:auto}
.banner{padding:.75rem 1rem;margin:1rem 0;border-radius:6px;font-weight:600}
.demo{background:#fde7c2;border:1px solid #e0a030}.local{background:#fbd6d6;border:1px solid #c44}
@media (max-width:640px){table.kv>tbody>tr>th{width:8rem}body{padding:1rem .5rem}}
@media print{.scroll{max-height:none;overflow:visible}thead th{position:static}}
"""


REPORT_ROWS = 1_000  # rows of a released table shown in the report (the CSV and JSON hold them all)


_LIST_ITEMS = 24  # values of a list shown inline before "... (n values)"
# Manifest fields in reading order, with their labels; technical identifiers last. Mappings and lists of
# records get their own section; notices become banners; any field not named here follows the known ones.


# Manifest fields in reading order, with their labels; technical identifiers last. Mappings and lists of
# records get their own section; notices become banners; any field not named here follows the known ones.
_SUMMARY: dict[str, str] = {
    "mechanism_label": "Mechanism",
    "guarantee": "Guarantee",
    "definition": "Privacy definition",
    "relation": "Neighbour relation",
    "epsilon": "ε (spent)",
    "delta": "δ (spent)",
    "sampling_mode": "Sampling mode",
    "seed": "Demo seed",
    "scope": "Protects",
    "dataset_name": "Dataset",
    "time": "Time (UTC)",
    "user": "User",
    "citation": "Source",
    "mechanism": "Mechanism key",
    "domain": "Domain",
    "account": "Ledger account",
    "dataset_id": "Dataset id",
    "request_id": "Request id",
    "plan_version": "Plan version",
    "dpcore_version": "dpcore version",
    "dataset_fingerprint": "Dataset fingerprint (SHA-256)",
}


_SECTIONS: dict[str, str] = {
    "parameters": "Parameters",
    "policy": "Privacy policy",
    "preparation": "Preparation (and its privacy effect)",
    "details": "Published details",
}


_NUM = ' class="num"'


_NESTED = {"epsilon": "ε", "delta": "δ", "definition": "privacy definition"}


_BANNERS = {"demo", "is_local", "notice", "local_notice"}


_CODE = {"account", "dataset_id", "request_id", "dataset_fingerprint", "mechanism"}


_TECHNICAL = ("mechanism", "domain", "account", "dataset_id", "request_id", "plan_version", "dpcore_version")


_MODES = {
    "secure": "release (secure sampling, OS entropy)",
    "demo": "DEMO (fixed seed): not a privacy release",
}


def _number(value: float | int) -> str:
    """Integers in full; other numbers to 7 significant digits (the CSV and JSON keep full precision)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{float(value):.7g}" if math.isfinite(value) else str(value)


def _label(key: str, top: bool = False) -> str:
    """A field's label: the summary's own at the top level, else the key in words (ε and δ as symbols)."""
    return (_SUMMARY if top else _NESTED).get(key) or key.replace("_", " ")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _value_html(value: Any, key: str = "") -> str:
    """One manifest value as HTML: nested key/value tables for mappings, tables for lists of records or
    rows of numbers, comma-separated lists, formatted numbers and escaped text."""
    value = jsonable(value)
    if isinstance(value, Mapping):
        return _kv_table(value) if value else '<span class="note">none</span>'
    if isinstance(value, list):
        if not value:
            return '<span class="note">none</span>'
        if all(isinstance(v, Mapping) for v in value):
            columns = list(dict.fromkeys(k for v in value for k in v))
            return _grid([_label(c) for c in columns], [[v.get(c) for c in columns] for v in value])
        if all(isinstance(v, list) and all(_is_scalar(x) for x in v) for v in value):
            return _grid([], value)
        if all(_is_scalar(v) for v in value):
            shown = ", ".join(_scalar_html(v) for v in value[:_LIST_ITEMS])
            more = len(value) - _LIST_ITEMS
            return shown + (f' <span class="note">... ({len(value)} values)</span>' if more > 0 else "")
        return "<br>".join(_value_html(v) for v in value)
    if key == "definition" and value in DEFINITIONS:
        return html.escape(DEFINITIONS[value][0])
    if key == "sampling_mode" and value in _MODES:
        return html.escape(_MODES[value])
    if key in _CODE:
        return f"<code>{html.escape(str(value))}</code>"
    return _scalar_html(value)


def _scalar_html(value: Any) -> str:
    if value is None:
        return '<span class="note">none</span>'
    if isinstance(value, int | float):
        return _number(value)
    return html.escape(str(value))


def _kv_table(items: Mapping[str, Any], top: bool = False) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(_label(str(k), top))}</th><td>{_value_html(v, str(k))}</td></tr>"
        for k, v in items.items()
    )
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def _cell(value: Any, numeric: bool) -> str:
    """A table cell: numbers right-aligned and formatted, missing values empty, anything else as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td></td>"
    return f"<td{_NUM}>{_number(value)}</td>" if numeric else f"<td>{_value_html(value)}</td>"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _grid(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A small table of records or rows of numbers."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(f"<tr>{''.join(_cell(v, _is_number(v)) for v in row)}</tr>" for row in rows)
    return f"<table>{f'<thead><tr>{head}</tr></thead>' if head else ''}<tbody>{body}</tbody></table>"


def _manifest_html(manifest: Mapping[str, Any]) -> list[str]:
    """The manifest as a summary table (known fields in reading order, then any others) and one
    section per nested field."""
    known = [k for k in _SUMMARY if k in manifest and not (k in {"seed", "scope"} and not manifest[k])]
    extra = [
        k
        for k, v in manifest.items()
        if k not in _SUMMARY and k not in _SECTIONS and k not in _BANNERS and not isinstance(v, Mapping)
    ]
    technical = [k for k in known if k in _TECHNICAL or k == "dataset_fingerprint"]
    order = [*(k for k in known if k not in technical), *extra, *technical]
    parts = ["<h2>Release</h2>", _kv_table({k: manifest[k] for k in order}, top=True)]
    nested = [k for k in _SECTIONS if k in manifest]
    nested += [k for k, v in manifest.items() if isinstance(v, Mapping) and k not in _SECTIONS]
    for key in nested:
        value = _shown_steps(manifest[key]) if key == "preparation" else manifest[key]
        parts += [f"<h3>{html.escape(_SECTIONS.get(key) or _label(key))}</h3>", _value_html(value)]
    return parts


def _shown_steps(steps: Any) -> Any:
    """Each preparation step as its words and privacy effect (its typed fields stay in the JSON files)."""
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        return steps
    return [{"step": s.get("step"), "data_derived": s.get("data_derived")} for s in steps]


def _frame_html(frame: pd.DataFrame) -> str:
    """A released table in a scrolling box (wide or long tables stay inside the page), numbers
    right-aligned to 7 significant digits; at most ``REPORT_ROWS`` rows."""
    shown = frame.head(REPORT_ROWS)
    numeric = [pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) for t in shown.dtypes]
    head = "".join(
        f"<th{_NUM if num else ''}>{html.escape(str(c))}</th>"
        for c, num in zip(shown.columns, numeric, strict=True)
    )
    rows = [
        f"<tr>{''.join(_cell(v, num) for v, num in zip(row, numeric, strict=True))}</tr>"
        for row in shown.itertuples(index=False)
    ]
    size = f"{len(frame):,} rows × {frame.shape[1]} columns"
    if len(frame) > REPORT_ROWS:
        size = f"{size}; the first {REPORT_ROWS:,} are shown, the CSV and JSON files hold them all"
    note = f'<p class="note">{size}.</p>'
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'{note}<div class="scroll">{table}</div>'


def html_report(
    title: str,
    manifest: Mapping[str, Any],
    figures: Sequence[go.Figure] = (),
    tables: Sequence[tuple[str, pd.DataFrame]] = (),
) -> str:
    """A self-contained HTML page that fits any screen: the manifest as tables (parameters, policy,
    preparation and details as nested tables), figures (plotly.js inlined once, nothing fetched), then
    the tables in horizontally scrolling boxes."""
    from plotly.offline import get_plotlyjs

    heading = f"{DEMO_NOTICE}: {title}" if manifest.get("demo") else title
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(heading)}</title><style>{_CSS}</style>",
    ]
    if figures:
        parts.append(f'<script type="text/javascript">{get_plotlyjs()}</script>')
    parts += ["</head><body>", f"<h1>{html.escape(heading)}</h1>"]
    if manifest.get("demo"):
        parts.append(
            f'<div class="banner demo">{html.escape(DEMO_NOTICE)}: made with a fixed seed; anyone with '
            "the seed can reproduce and remove the noise.</div>"
        )
    if manifest.get("is_local"):
        parts.append(f'<div class="banner local">{html.escape(LOCAL_NOTICE)}</div>')
    parts += _manifest_html(manifest)
    for fig in figures:
        chart = fig.to_html(
            full_html=False, include_plotlyjs=False, include_mathjax=False, config={"responsive": True}
        )
        parts.append(f'<div class="figure">{chart}</div>')
    for caption, frame in tables:
        parts += [f"<h2>{html.escape(caption)}</h2>", _frame_html(frame)]
    parts.append("</body></html>")
    return "\n".join(parts)
