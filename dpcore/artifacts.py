"""A release's files: named, built, stored as one deterministic zip, published and read back.

A release (PRODUCT.md, "Two kinds of output") leaves as

* ``<stem>.csv``: the released table, plain CSV;
* ``<stem>.json``: ``{"manifest": {...}, "data": [row, ...]}``;
* ``<stem>-manifest.json``: the manifest alone (:mod:`dpcore.manifest`);
* ``<stem>-report.html``: the report (:mod:`dpcore.html_report`).

``stem`` is ``<name>-<request id prefix>``, prefixed with ``DEMO-`` for demo-mode outputs.
:func:`save_artifacts` stores the files as one deterministic zip whose SHA-256 goes into the ledger; a
paid release's zip moves from the staging folder (:data:`STAGING`) to its published path by an atomic
rename (:func:`publish`), and :func:`published_zip` finds it again, checked against its ledger hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import uuid
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpcore.errors import ParameterError
from dpcore.ledger import LedgerError
from dpcore.manifest import DEMO_NOTICE, jsonable
from dpcore.safe_text import csv_bytes

if TYPE_CHECKING:
    from dpcore.ledger import ReleaseRecord

__all__ = [
    "STAGING",
    "artifacts_folder",
    "check_request_id",
    "file_stem",
    "load_artifacts",
    "publish",
    "published_zip",
    "release_files",
    "save_artifacts",
    "sha256_file",
    "short_id",
    "stored_file",
    "unwritable",
]

_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


_PLAN_ID = re.compile(r"^plan-[0-9a-f]{32}(-[0-9]+)?$")


_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


STAGING = ".staging"  # sub-folder of the artifacts folder for files not yet paid for (kept once made:
# removing it when empty would race another release that made it and is about to write in it)


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
    head = json.dumps({"manifest": jsonable(manifest)}, indent=2, ensure_ascii=False, allow_nan=False)
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
    return json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False).encode()


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
        raise unwritable(folder, err) from None
    return folder


def unwritable(folder: Path, err: OSError) -> ParameterError:
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


def stored_file(path: str | os.PathLike[str], name: str, expected_sha256: str) -> bytes:
    """One file of a stored release's zip, read when it is downloaded; ``LedgerError`` if the zip no longer
    matches its ledger hash."""
    if sha256_file(path) != expected_sha256:
        raise LedgerError(
            f"The stored release {Path(path).name} changed since it was recorded; ask the operator."
        )
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


def publish(staged: Path, path: Path) -> None:
    """Move a paid release's zip from the staging folder to its published path (atomic rename)."""
    try:
        os.replace(staged, path)
    except FileNotFoundError:  # a concurrent run of the same request with the same bytes published it
        if not path.is_file():
            raise


def published_zip(record: ReleaseRecord) -> Path:
    """The stored zip of a recorded release, published first if a run was stopped after its debit, checked
    against its ledger hash; ``LedgerError`` when it is missing or altered."""
    path = record.artifact_path
    if path is not None and not Path(path).exists():  # killed after the debit, or publishing right now
        staged = Path(path).parent / STAGING / Path(path).name
        try:
            if sha256_file(staged) == record.artifact_hash:
                publish(staged, Path(path))
        except FileNotFoundError:  # nothing staged, or the run that debited published it meanwhile
            pass
    if path is None or not Path(path).is_file() or sha256_file(path) != record.artifact_hash:
        raise LedgerError(
            f"Request {record.request_id} was already released (ledger entry {record.id}), but its "
            f"stored files ({Path(path or '').name or 'none'}) are missing or altered. Nothing new was "
            "debited; start a new request to release again."
        )
    return Path(path)
