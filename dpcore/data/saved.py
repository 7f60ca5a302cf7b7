"""Prepared settings kept on the server per dataset, offered (never applied) when the same table is loaded.

One JSON file per dataset name (its ledger id, ``dpcore.ledger.dataset_id_for_name``) under
``<data folder>/preparations``: the name, the table's fingerprint, when it was saved (UTC) and the
curator's choices (kinds, missing-value steps, the preparation table, features, bounds, scaling). A load
of the same name or of the same fingerprint under another name finds it (:func:`find_preparation`); the
page offers "use the settings from <date>" and applies them only when asked, checked against the table.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpcore.errors import DataError

__all__ = ["SavedPreparation", "find_preparation", "save_preparation"]

FOLDER = "preparations"


@dataclass(frozen=True)
class SavedPreparation:
    """Settings saved for ``dataset_id`` (named ``name``) on the table ``fingerprint`` at ``saved``."""

    dataset_id: str
    name: str
    fingerprint: str
    saved: str
    choices: dict[str, Any]

    @property
    def when(self) -> str:
        """The save time for a sentence, e.g. "2026-11-27 21:40 UTC"."""
        return self.saved[:16].replace("T", " ") + " UTC"


def _path(folder: Path, dataset_id: str) -> Path:
    if not dataset_id.isalnum():
        raise DataError(f"Not a dataset id: {dataset_id!r}.")
    return folder / FOLDER / f"{dataset_id}.json"


def save_preparation(
    folder: str | os.PathLike[str], dataset_id: str, name: str, fingerprint: str, choices: dict[str, Any]
) -> SavedPreparation:
    """Write ``choices`` (JSON types) for the dataset, replacing what was saved for it before (atomic)."""
    saved = SavedPreparation(
        dataset_id, name, fingerprint, datetime.now(UTC).isoformat(timespec="seconds"), choices
    )
    path = _path(Path(folder), dataset_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_suffix(f".{secrets.token_hex(4)}.part")
    partial.write_text(json.dumps(saved.__dict__))  # key order kept: column order matters
    partial.replace(path)
    return saved


def _read(path: Path) -> SavedPreparation | None:
    try:
        data = json.loads(path.read_text())
        return SavedPreparation(
            str(data["dataset_id"]),
            str(data["name"]),
            str(data["fingerprint"]),
            str(data["saved"]),
            dict(data["choices"]),
        )
    except (OSError, ValueError, KeyError, TypeError):  # unreadable or altered: not offered
        return None


def find_preparation(
    folder: str | os.PathLike[str], dataset_id: str, fingerprint: str
) -> SavedPreparation | None:
    """What was saved under this dataset's name, else the newest save of the same table (fingerprint) under
    another name, else None."""
    root = Path(folder) / FOLDER
    own = _read(_path(Path(folder), dataset_id))
    if own is not None:
        return own
    if not root.is_dir():
        return None
    same = [s for p in root.glob("*.json") if (s := _read(p)) is not None and s.fingerprint == fingerprint]
    return max(same, key=lambda s: s.saved, default=None)
