"""Release bundle: manifest, downloadable files, self-contained HTML report and the stored artifact.

A release (PRODUCT.md, "Two kinds of output") leaves as

* ``<stem>.csv``: the released table, plain CSV;
* ``<stem>.json``: ``{"manifest": {...}, "data": [row, ...]}``;
* ``<stem>-manifest.json``: the manifest alone;
* ``<stem>-report.html``: title, manifest, Plotly charts and tables in one file that opens offline
  (plotly.js is inlined once; no external script).

``stem`` is ``<name>-<request id prefix>``, prefixed with ``DEMO-`` for demo-mode outputs. The manifest
records definition, eps, delta, mechanism, guarantee, calibration, bounds source, dataset fingerprint,
time, user, request id and sampling mode; demo outputs carry ``"demo": true`` and a notice, and
dataset-dependent ("local") guarantees carry a notice that they are not differential privacy.
``save_artifacts`` stores the files as one deterministic zip whose SHA-256 goes into the ledger.

:func:`make_release` is the whole release in the order that never shows an unpaid result and never
debits twice: run the mechanism once, build the files and store them in the staging folder
(``<artifacts>/.staging``, never listed as a release), ``Ledger.spend`` (the atomic budget check and debit,
recording the artifact hash and its published path), then publish the zip by an atomic rename. A process
killed before the debit commits leaves only staging junk; one killed between the debit and the rename
is completed by the next call with the same request id. The caller shows outputs only after it returns.
If the spend is refused, the staged files are deleted and nothing is returned. A request id already
in the ledger (a rerun or a double click) debits nothing: the first release's stored files are returned.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import math
import os
import re
import uuid
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpcore import __version__
from dpcore.errors import ParameterError
from dpcore.ledger import BudgetNotSet, LedgerError
from dpcore.policy import DEFINITIONS
from dpcore.safe_text import csv_bytes

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from dpcore.ledger import Ledger, ReleaseRecord
    from dpcore.plan import ReleasePlan
    from dpcore.registry import MechanismOutput

__all__ = [
    "DEMO_NOTICE",
    "LOCAL_NOTICE",
    "Release",
    "StoredPreview",
    "build_manifest",
    "file_stem",
    "html_report",
    "load_artifacts",
    "make_release",
    "plan_releases",
    "release_files",
    "rounded_output",
    "save_artifacts",
    "sha256_file",
    "short_id",
    "stored_file",
    "stored_preview",
    "stored_release",
]

DEMO_NOTICE = "DEMO - not a privacy release"
LOCAL_NOTICE = (
    "Local (dataset-dependent) guarantee: not differential privacy. The noise is calibrated on this "
    "dataset's own rows, so it can reveal information about its most extreme rows."
)
RELEASE_MODES = ("secure", "demo")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_PLAN_ID = re.compile(r"^plan-[0-9a-f]{32}(-[0-9]+)?$")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
STAGING = ".staging"  # sub-folder of the artifacts folder for files not yet paid for (kept once made:
# removing it when empty would race another release that made it and is about to write in it)


def _jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays via ``tolist``, paths as text, non-finite floats as None."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def build_manifest(
    plan: ReleasePlan,
    *,
    user: str,
    request_id: str,
    details: Mapping[str, Any] | None = None,
    time: datetime | str | None = None,
) -> dict[str, Any]:
    """The release manifest as a JSON-ready dict: the plan's fields (definition, relation, account,
    guarantee, mechanism, parameters, preparation, eps, delta, dataset, mode) plus the run's published
    ``details``, time (default now, UTC), user and request id. Demo plans add ``"demo": true`` and
    ``"notice": DEMO_NOTICE``; local guarantees add ``"local_notice"``."""
    if time is None:
        time = datetime.now(UTC)
    manifest: dict[str, Any] = {
        **plan.to_manifest(),
        "details": _jsonable(dict(details or {})),
        "demo": plan.mode == "demo",
        "is_local": not plan.spec.is_dp,
        "time": time.isoformat(timespec="seconds") if isinstance(time, datetime) else str(time),
        "user": user,
        "request_id": request_id,
        "dpcore_version": __version__,
    }
    if manifest["demo"]:
        manifest["notice"] = DEMO_NOTICE
    if manifest["is_local"]:
        manifest["local_notice"] = LOCAL_NOTICE
    return manifest


def short_id(request_id: str) -> str:
    """A request id as files and pages show it: a plan's id (``plan-<32 hex>[-<n>]``,
    ``ReleasePlan.request_id``) as ``plan-`` and 8 hex digits with its release number after the first, any
    other id as its first 8 characters.

    >>> short_id("plan-" + "ab" * 16), short_id("plan-" + "ab" * 16 + "-2"), short_id("0123456789")
    ('plan-abababab', 'plan-abababab-2', '01234567')
    """
    if _PLAN_ID.match(request_id):
        return request_id[:13] + request_id[37:]
    return request_id[:8]


def file_stem(manifest: Mapping[str, Any], name: str = "release") -> str:
    """``[DEMO-]<name>-<short request id>`` (:func:`short_id`): the prefix of every file of a release."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "release"
    prefix = "DEMO-" if manifest.get("demo") else ""
    return f"{prefix}{slug}-{short_id(str(manifest['request_id']))}"


def release_files(
    table: pd.DataFrame,
    manifest: Mapping[str, Any],
    *,
    name: str = "release",
    html_text: str | None = None,
    extra: Mapping[str, Callable[[pd.DataFrame], bytes]] | None = None,
) -> dict[str, bytes]:
    """File name -> content: CSV of ``table``, JSON ``{"manifest", "data"}``, manifest, HTML report, and
    ``extra`` files (name suffix -> builder from the table as written, e.g. GeoJSON)."""
    stem = file_stem(manifest, name)
    if manifest.get("demo"):  # the mark travels inside every file, not only in its name
        table = table.copy()
        table.insert(0, "notice", DEMO_NOTICE)
    # the rows as pandas writes them (one line, NaN as null), not as Python objects: a per-visit release
    # of a million rows would otherwise hold them twice over in memory
    data = table.to_json(orient="records", double_precision=15)
    head = json.dumps({"manifest": _jsonable(manifest)}, indent=2, ensure_ascii=False, allow_nan=False)
    files = {
        f"{stem}.csv": csv_bytes(table),  # formula-like text neutralised (OWASP CSV injection)
        f"{stem}.json": f'{head[:-2]},\n  "data": {data}\n}}'.encode(),
        f"{stem}-manifest.json": _dumps(manifest),
    }
    if html_text is not None:
        files[f"{stem}-report.html"] = html_text.encode()
    for suffix, build in (extra or {}).items():
        files[f"{stem}{suffix}"] = build(table)
    return files


def _dumps(obj: Any) -> bytes:
    return json.dumps(_jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False).encode()


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
    value = _jsonable(value)
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
        parts += [f"<h3>{html.escape(_SECTIONS.get(key) or _label(key))}</h3>", _value_html(manifest[key])]
    return parts


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


def _zip_bytes(files: Mapping[str, bytes]) -> bytes:
    """Deterministic zip (sorted names, fixed timestamps): the same files give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            if Path(name).name != name or name in {"", ".", ".."}:
                raise ParameterError(
                    f"Artifact file name {name!r} must be a plain file name without folders."
                )
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    return buffer.getvalue()


def check_request_id(request_id: Any) -> str:
    """``request_id`` if it can name the release's files, else ``ParameterError``."""
    if not isinstance(request_id, str) or not _SAFE_ID.match(request_id):
        raise ParameterError(
            f"request_id {request_id!r} is not a valid file name: use 1-128 letters, digits, '-' or '_'."
        )
    return request_id


def save_artifacts(
    directory: str | os.PathLike[str], request_id: str, files: Mapping[str, bytes]
) -> tuple[Path, str]:
    """Write ``files`` as ``<directory>/<request_id>-<sha12>.zip``; return its path and SHA-256 hex.

    The zip is deterministic, so the hash identifies the content (check with ``sha256sum``); the file is
    written atomically, through a temporary file of its own (two runs of one request that made the same
    bytes may write at once). Two runs of one request never overwrite each other's content (the hash is in
    the name).
    """
    check_request_id(request_id)
    if not files:
        raise ParameterError("There are no files to save; build them with release_files first.")
    payload = _zip_bytes(files)
    digest = hashlib.sha256(payload).hexdigest()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{request_id}-{digest[:12]}.zip"
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)
    return path, digest


def artifacts_folder(directory: str | os.PathLike[str]) -> Path:
    """``directory`` as an absolute path (the ledger records where the files are, whatever the working
    directory of a later reader), created if missing; ``ParameterError`` if it cannot be made."""
    folder = Path(directory).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _unwritable(folder, err) from None
    return folder


def _unwritable(folder: Path, err: OSError) -> ParameterError:
    return ParameterError(
        f"The release files cannot be written in {folder} ({err.strerror or err}); nothing was released "
        "or debited. Give an artifacts folder this process may write to."
    )


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex of a file's bytes (to check an artifact against the ledger's hash)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_artifacts(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """The files stored by :func:`save_artifacts`, name -> content."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@dataclass(frozen=True)
class Release:
    """A paid release: its ledger record, manifest, files (name -> bytes), released table and figures.

    ``replayed`` is True when the request id was already in the ledger: nothing was debited, and
    ``files``/``table`` are the first release's stored ones (``figures`` is then empty).
    """

    record: ReleaseRecord
    manifest: dict[str, Any]
    files: dict[str, bytes]
    table: pd.DataFrame
    figures: tuple[go.Figure, ...] = field(default=())
    replayed: bool = False


def _publish(staged: Path, path: Path) -> None:
    """Move a paid release's zip from the staging folder to its published path (atomic rename)."""
    try:
        os.replace(staged, path)
    except FileNotFoundError:  # a concurrent run of the same request with the same bytes published it
        if not path.is_file():
            raise


def _published(record: ReleaseRecord) -> Path:
    """The stored zip of a recorded release, published first if a run was stopped after its debit, checked
    against its ledger hash; ``LedgerError`` when it is missing or altered."""
    path = record.artifact_path
    if path is not None and not Path(path).exists():  # killed after the debit, or publishing right now
        staged = Path(path).parent / STAGING / Path(path).name
        try:
            if sha256_file(staged) == record.artifact_hash:
                _publish(staged, Path(path))
        except FileNotFoundError:  # nothing staged, or the run that debited published it meanwhile
            pass
    if path is None or not Path(path).is_file() or sha256_file(path) != record.artifact_hash:
        raise LedgerError(
            f"Request {record.request_id} was already released (ledger entry {record.id}), but its "
            f"stored files ({Path(path or '').name or 'none'}) are missing or altered. Nothing new was "
            "debited; start a new request to release again."
        )
    return Path(path)


def _replay(record: ReleaseRecord) -> Release:
    files = load_artifacts(_published(record))
    bundle = next(
        json.loads(v) for k, v in files.items() if k.endswith(".json") and not k.endswith("-manifest.json")
    )
    table = pd.DataFrame(bundle["data"])
    return Release(record=record, manifest=bundle["manifest"], files=files, table=table, replayed=True)


def stored_release(ledger: Ledger, request_id: str) -> Release | None:
    """The release recorded under ``request_id`` rebuilt from its stored files (``replayed``: nothing is
    debited; a batch job's release, shown once the job is done), or None when the ledger has no such
    request; ``LedgerError`` when its files are missing or altered."""
    record = ledger.release_by_request(request_id)
    return None if record is None else _replay(record)


@dataclass(frozen=True)
class StoredPreview:
    """A recorded release as a page shows it without reading it whole: its ``release`` with the first rows
    of its table (read from its CSV file, as downloaded) and no file contents, the table's ``n_rows``, and
    the verified zip at ``path`` whose members :func:`stored_file` reads one at a time."""

    release: Release
    n_rows: int
    path: Path
    names: tuple[str, ...]


def stored_preview(ledger: Ledger, request_id: str, rows: int) -> StoredPreview | None:
    """The release recorded under ``request_id`` with at most ``rows`` rows of its table read (a per-visit
    release may hold millions), or None when the ledger has no such request; ``LedgerError`` when its
    files are missing or altered."""
    record = ledger.release_by_request(request_id)
    if record is None:
        return None
    path = _published(record)
    with zipfile.ZipFile(path) as archive:
        names = tuple(archive.namelist())
        manifest = json.loads(archive.read(next(n for n in names if n.endswith("-manifest.json"))))
        csv = next(n for n in names if n.endswith(".csv"))
        with archive.open(csv) as text:
            table = pd.read_csv(text, nrows=rows)
        with archive.open(csv) as text:
            n_rows = sum(len(chunk) for chunk in pd.read_csv(text, usecols=[0], chunksize=1_000_000))
    release = Release(record=record, manifest=manifest, files={}, table=table, replayed=True)
    return StoredPreview(release, n_rows, path, names)


def plan_releases(ledger: Ledger, plan: ReleasePlan) -> list[ReleaseRecord]:
    """The releases made of ``plan``, in order: the records of ``plan.request_id(1)``, ``(2)``, ... up to the
    first number the ledger does not hold (a release number is used once, in order)."""
    found: list[ReleaseRecord] = []
    while (record := ledger.release_by_request(plan.request_id(len(found) + 1))) is not None:
        found.append(record)
    return found


def stored_file(path: str | os.PathLike[str], name: str, expected_sha256: str) -> bytes:
    """One file of a stored release's zip, read when it is downloaded; ``LedgerError`` if the zip no longer
    matches its ledger hash."""
    if sha256_file(path) != expected_sha256:
        raise LedgerError(
            f"The stored release {Path(path).name} changed since it was recorded; ask the operator."
        )
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


#: The manifest fields that make a plan (:meth:`dpcore.plan.ReleasePlan.from_manifest`), not its labels.
_PLAN_FIELDS = (
    "domain", "mechanism", "epsilon", "delta", "policy", "dataset_fingerprint", "parameters", "preparation",
    "sampling_mode", "seed", "scope", "epsilon_source", "private_bounds",
)


def _changed_fields(first: Mapping[str, Any], plan: ReleasePlan) -> list[str]:
    """The plan fields in which ``plan`` differs from the manifest of a request's first release (a field
    that manifest does not record, being older, is not compared)."""
    from dpcore.plan import to_json

    new = plan.to_manifest()
    return [k for k in _PLAN_FIELDS if k in first and to_json(first[k]) != to_json(new.get(k))]


def rounded_output(out: MechanismOutput, epsilon: float) -> MechanismOutput:
    """``out`` with every released number rounded (``dpcore.postprocess``: the mechanism's own decimals
    from ``details["rounding"]``, else the rules of ``ROUNDING_RULE``), its charts' numbers too, and the
    rule and each column's decimal places in ``details["rounding"]`` (the manifest)."""
    from dpcore.postprocess import FIGURE_DECIMALS, ROUNDING_RULE, release_decimals, round_figure, round_table

    given = (out.details.get("rounding") or {}).get("decimals")
    decimals = release_decimals(out.table, epsilon, given)
    rounding = {"rule": ROUNDING_RULE, "decimals": decimals, "chart_decimals": FIGURE_DECIMALS}
    return replace(
        out,
        table=round_table(out.table, decimals),
        figures=tuple(round_figure(f) for f in out.figures),
        details={**out.details, "rounding": rounding},
    )


def make_release(
    ledger: Ledger,
    plan: ReleasePlan,
    inputs: Any,
    *,
    request_id: str,
    user: str,
    artifacts_dir: str | os.PathLike[str],
    name: str = "release",
    verify: Callable[[], None] | None = None,
) -> Release:
    """Run ``plan`` once on ``inputs``, stage the files, debit the plan's account, then publish the files
    in ``artifacts_dir``; return the release.

    ``verify`` is called once the mechanism ran, before any file is written or anything is debited: it
    raises to discard the output (a batch job's source files that changed while they were read).

    The sampler follows the plan (OS entropy, or the demo seed). Raises the ledger's ``BudgetExceeded`` /
    ``BudgetNotSet`` / ``LedgerBusy`` (staged files deleted, nothing published or returned) and whatever
    the mechanism raises (nothing stored, nothing debited). A ``request_id`` already in the ledger returns
    the first release, debiting nothing.
    """
    from dpcore.mechanisms import check_random_state

    folder = artifacts_folder(artifacts_dir)
    previous = ledger.release_by_request(check_request_id(request_id))  # never a step's "<id>/<step>" row
    if previous is not None:
        if previous.account != plan.account.key:
            raise LedgerError(
                f"Request {request_id} was already used for another release (account {previous.account}); "
                "start a new request."
            )
        first = _replay(previous)
        changed = _changed_fields(first.manifest, plan)
        if changed:
            raise LedgerError(
                f"Request {request_id} was released with another plan (its {', '.join(changed)} differ from "
                "this one's): the plan was changed since. Nothing was debited. Run the plan as it was "
                "released, or release the changed plan under a new request id."
            )
        return first
    account = plan.account
    if ledger.budget(account) is None:
        raise BudgetNotSet(
            f"No budget is set for {plan.definition_label} ({plan.relation}"
            f"{', demo' if plan.mode == 'demo' else ''}) on dataset {plan.dataset_name}, so nothing can be "
            "released. Set it on the Privacy policy page (Ledger.set_budget)."
        )
    random_state = check_random_state(None if plan.mode == "secure" else plan.seed)
    step, estimated = plan.bounds_step, None
    if step is not None:  # private preparation first: bounds estimated with OpenDP (its own OS entropy)
        inputs, estimated = step.apply(inputs)
    out = plan.spec.release(
        inputs, epsilon=plan.epsilon, delta=plan.delta, params=dict(plan.params), random_state=random_state
    )
    if out.scope is not None and plan.scope and out.scope != plan.scope:
        raise ParameterError(
            f"The mechanism protected '{out.scope}', but the plan says '{plan.scope}'; nothing was released."
        )
    if verify is not None:
        verify()
    out = rounded_output(out, plan.epsilon)
    manifest = build_manifest(plan, user=user, request_id=request_id, details=out.details)
    if estimated is not None:  # ε_b-DP outputs: the clip box the mechanism used
        manifest["estimated_region" if plan.domain == "location" else "estimated_bounds"] = estimated
    earlier = {r.dataset_fingerprint for r in ledger.releases(dataset_id=plan.dataset_id)}
    if earlier - {plan.fingerprint, None}:  # the name carries the budget; the table changed under it
        manifest["earlier_fingerprints"] = sorted(earlier - {plan.fingerprint, None})
    title = f"{plan.spec.label}: released output"
    report = html_report(title, manifest, list(out.figures), [("Released table", out.table)])
    files = release_files(out.table, manifest, name=name, html_text=report, extra=out.files)
    try:
        staged, digest = save_artifacts(folder / STAGING, request_id, files)
    except OSError as err:
        raise _unwritable(folder, err) from None
    path = folder / staged.name
    try:
        ledger.register_dataset(plan.dataset_id, plan.dataset_name, plan.fingerprint)
        record = ledger.spend(
            account,
            plan.epsilon,
            plan.delta,
            plan.mechanism,
            request_id,
            user=user,
            fingerprint=plan.fingerprint,
            definition=plan.definition,
            calibration=str(plan.params.get("calibration", "")),
            parameters={"plan_key": plan.key, **manifest["parameters"]},
            artifact_path=path,
            artifact_hash=digest,
            preparation=() if step is None else ((step.mechanism, step.epsilon),),
        )
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    if not record.inserted:  # a concurrent run of the same request was recorded first
        if record.artifact_hash != digest:  # else these staged bytes are the ones it publishes
            staged.unlink(missing_ok=True)
        return _replay(record)
    try:
        _publish(staged, path)
    except OSError as err:  # debited: say so, and how the same request publishes the staged files
        delta = f", δ = {plan.delta:g}" if plan.delta else ""
        raise LedgerError(
            f"Request {request_id} is recorded in the ledger (ε = {plan.epsilon:g}{delta} spent), but its "
            f"files could not be moved from {staged} to {path} ({err.strerror or err}). Fix the folder and "
            "run the same request again: it publishes them and debits nothing."
        ) from None
    return Release(record=record, manifest=manifest, files=files, table=out.table, figures=tuple(out.figures))
