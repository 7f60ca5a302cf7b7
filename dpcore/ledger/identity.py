"""Who and what a spend is debited to, and which ledger: an :class:`Account` (dataset, definition,
neighbour relation, mode), a dataset's id from the curator's name (:func:`dataset_id_for_name`), and the
data folder's record of its embedded ledger's instance id (:data:`INSTANCE_FILE`), by which a missing or
replaced ledger file is refused.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from dpcore import config
from dpcore.errors import ParameterError
from dpcore.ledger.records import _text

INSTANCE_FILE = "ledger.instance"  # the data folder's record of its embedded ledger's instance id
SAMPLING_MODES = ("secure", "demo")
_SEP = "|"


@dataclass(frozen=True)
class Account:
    """Where a release's epsilon and delta are debited: one dataset, one privacy definition, one neighbour
    relation (the unit of protection), one mode. Only spends of the same account are ever added up.

    ``definition`` is an account family: ``"dp"`` (pure and approximate DP share it: eps-DP is (eps, 0)-DP),
    ``"blowfish"``, ``"geo_ind"`` (levels within the radius named in ``relation``) or ``"local_pdp"``.
    A plain string key (notebooks, tests) is an account of its own with an empty definition.
    """

    dataset_id: str
    definition: str = ""
    relation: str = ""
    mode: str = "secure"

    def __post_init__(self) -> None:
        if self.mode not in SAMPLING_MODES:
            raise ParameterError(f"An account's mode is 'secure' or 'demo', got {self.mode!r}.")

    @property
    def key(self) -> str:
        """The account's identifier in the database (unique per dataset, definition, relation and mode)."""
        if not self.definition and not self.relation and self.mode == "secure":
            return self.dataset_id
        parts = (self.dataset_id, self.definition, self.relation)
        return _SEP.join(("demo", *parts) if self.mode == "demo" else parts)

    @classmethod
    def parse(cls, account: Account | str) -> Account:
        """``account`` itself, or the account named by a key (a plain id is an account of its own)."""
        if isinstance(account, Account):
            return account
        key = _text(account, "account")
        parts = key.split(_SEP)
        mode = "secure"
        if parts[0] == "demo" and len(parts) == 4:
            mode, parts = "demo", parts[1:]
        if len(parts) == 3:
            return cls(parts[0], parts[1], parts[2], mode)
        return cls(key)


def dataset_id_for_name(name: str) -> str:
    """The ledger id of the dataset the curator calls ``name``: 16 hex digits of the SHA-256 of the name with
    case and runs of spaces ignored, so "Customers 2024" and "customers  2024" share one budget."""
    text = _text(name, "The dataset name")
    normal = re.sub(r"\s+", " ", text).strip().casefold()
    if not normal:
        raise ParameterError("The dataset name is empty; give the dataset a name (it carries its budget).")
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:16]


def _name(acc: Account) -> str:
    """How messages name an account."""
    if not acc.definition:
        return f"Account {acc.key}"
    demo = "demo " if acc.mode == "demo" else ""
    return f"The {demo}{acc.definition} account ({acc.relation}) of dataset {acc.dataset_id}"


def _instance_marker(file: Path | None) -> Path | None:
    """The data folder's :data:`INSTANCE_FILE` when ``file`` is its default ``ledger.db``, else None."""
    if file is None or file.name != "ledger.db":
        return None
    try:
        folder = config.data_dir()
    except OSError:
        return None
    return folder / INSTANCE_FILE if file.resolve() == (folder / "ledger.db").resolve() else None


def _file_identity(file: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``file``: changes when the file is deleted or replaced; None if absent."""
    if file is None:
        return None
    try:
        st = file.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino
