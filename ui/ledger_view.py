"""The ledger as tables a curator can read: releases newest first in words, budgets per account by dataset.

Technical identifiers (request id, dataset id, fingerprint, artifact hash, account key) come last; the
CSV export is the same table plus the release parameters (JSON) and the stored file's name (never a server
path).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePath

import pandas as pd

from dpcore.artifacts import short_id
from dpcore.ledger import Account, BudgetStatus, Ledger, ReleaseRecord, relation_factor
from dpcore.location.private_region import LABEL as PRIVATE_REGION_LABEL
from dpcore.location.private_region import MECHANISM as PRIVATE_REGION
from dpcore.plan import DOMAINS, registry
from dpcore.policy import DEFINITIONS
from dpcore.private_bounds import LABEL as PRIVATE_BOUNDS_LABEL
from dpcore.private_bounds import MECHANISM as PRIVATE_BOUNDS

__all__ = [
    "MODES",
    "accounts_frame",
    "artifact_name",
    "dataset_label",
    "definition_words",
    "fingerprints",
    "grouped",
    "mechanism_words",
    "release_labels",
    "releases_frame",
    "unbounded_notes",
]

MODES = {"secure": "release", "demo": "DEMO"}
# Account families (a budget's definition) and definitions a release may record, in words.
_FAMILIES = {
    "dp": "differential privacy (ε or (ε, δ))",
    "blowfish": "Blowfish privacy",
    "geo_ind": "geo-indistinguishability (level l within r)",
    "local_pdp": "local (ε, δ) bound, this dataset only (not DP)",
    "": "not recorded (plain account)",
}
_RELEASE_COLUMNS = [
    "time (UTC)",
    "dataset",
    "mechanism",
    "ε",
    "δ",
    "mode",
    "privacy definition",
    "neighbour relation",
    "user",
    "calibration",
    "composition",
    "request id",
    "part of request",
    "dataset id",
    "account",
    "artifact SHA-256",
    "dataset fingerprint",
]


def definition_words(code: str) -> str:
    """A privacy definition (``dpcore.policy.DEFINITIONS`` key) or an account family, in words."""
    if code in _FAMILIES:
        return _FAMILIES[code]
    return DEFINITIONS[code][0] if code in DEFINITIONS else code


def dataset_label(dataset_id: str, names: Mapping[str, str]) -> str:
    """A dataset's registered name, or its id when the ledger has no name for it."""
    return names.get(dataset_id) or f"dataset {dataset_id} (name not recorded)"


#: A release's private preparation steps (``ReleaseRecord.part_of``), in words.
_STEPS = {PRIVATE_BOUNDS: PRIVATE_BOUNDS_LABEL, PRIVATE_REGION: PRIVATE_REGION_LABEL}


def _mechanism_labels() -> dict[str, str]:
    return {key: label for domain in DOMAINS for key, label in registry(domain).labels().items()}


def mechanism_words(record: ReleaseRecord, labels: Mapping[str, str]) -> str:
    """A ledger row's mechanism in words; a preparation step says which release it is part of."""
    if record.part_of is not None:
        return f"↳ {_STEPS.get(record.mechanism, record.mechanism)} for {record.part_of}"
    return labels.get(record.mechanism, record.mechanism)


def grouped(records: list[ReleaseRecord]) -> list[ReleaseRecord]:
    """Ledger rows newest first, each release's preparation steps right under it."""
    parent = {r.request_id: r.id for r in records if r.part_of is None}
    def key(r: ReleaseRecord) -> tuple[int, bool]:
        return -parent.get(r.part_of or r.request_id, r.id), r.part_of is not None

    return sorted(records, key=key)


def releases_frame(ledger: Ledger, dataset_id: str | None = None, *, for_csv: bool = False) -> pd.DataFrame:
    """Releases (of one dataset, or all), newest first, one readable column per fact, identifiers last;
    a release's preparation steps (e.g. bounds estimated privately, its own ε) on rows right under it, with
    its request id in "part of request".

    ``for_csv`` adds the release parameters (JSON), the stored zip's file name (its folder is the server's
    business) and the parallel-composition group and partition, for an audit trail that needs nothing else.
    """
    records = grouped(ledger.releases(dataset_id=dataset_id))
    names = ledger.dataset_names()
    labels = _mechanism_labels()
    frame = pd.DataFrame(
        {
            "time (UTC)": [r.time[:19].replace("T", " ") for r in records],
            "dataset": [dataset_label(r.dataset_id, names) for r in records],
            "mechanism": [mechanism_words(r, labels) for r in records],
            "privacy definition": [definition_words(r.definition) for r in records],
            "neighbour relation": [r.relation for r in records],
            "ε": [r.epsilon for r in records],
            "δ": [r.delta for r in records],
            "mode": [MODES.get(r.sampling_mode, r.sampling_mode) for r in records],
            "user": [r.user for r in records],
            "calibration": [r.calibration for r in records],
            "composition": [r.composition for r in records],
            "request id": [r.request_id for r in records],
            "part of request": [r.part_of for r in records],
            "dataset id": [r.dataset_id for r in records],
            "account": [r.account for r in records],
            "artifact SHA-256": [r.artifact_hash for r in records],
            "dataset fingerprint": [r.dataset_fingerprint for r in records],
        },
        columns=_RELEASE_COLUMNS,
    )
    if for_csv:
        parameters = [json.dumps(r.parameters, sort_keys=True) for r in records]
        frame.insert(frame.columns.get_loc("request id"), "parameters", parameters)
        frame["artifact file"] = [artifact_name(r.artifact_path) for r in records]
        frame["parallel group"] = [r.parallel_group for r in records]
        frame["partition"] = [r.partition_key for r in records]
    return frame


def fingerprints(ledger: Ledger) -> dict[str, list[str]]:
    """Dataset id -> the distinct table fingerprints its releases were made on, oldest first (more than
    one: the name, which carries the budget, was used for different tables)."""
    out: dict[str, list[str]] = {}
    for r in ledger.all_releases():
        seen = out.setdefault(r.dataset_id, [])
        if r.dataset_fingerprint and r.dataset_fingerprint not in seen:
            seen.append(r.dataset_fingerprint)
    return out


def artifact_name(path: str | None) -> str | None:
    """A stored release file's name without its server folder."""
    return None if path is None else PurePath(path).name


def release_labels(frame: pd.DataFrame) -> dict[str, str]:
    """Request id -> a one-line label (time, dataset, mechanism, ε, DEMO mark), in the frame's order."""
    facts = frame[["request id", "time (UTC)", "dataset", "mechanism", "ε", "mode"]]
    labels = {}
    for rid, time, name, mechanism, eps, mode in facts.itertuples(index=False):
        demo = ["DEMO"] if mode == "DEMO" else []
        labels[rid] = " · ".join([time, name, mechanism, f"ε {eps:.4g}", *demo, short_id(rid)])
    return labels


def accounts_frame(statuses: list[BudgetStatus]) -> pd.DataFrame:
    """One row per budget account: definition and relation in words, mode, budget left and total; real
    accounts before demo ones."""
    statuses = sorted(statuses, key=lambda s: (s.mode != "secure", s.definition, s.relation))
    return pd.DataFrame(
        {
            "privacy definition": [definition_words(s.definition) for s in statuses],
            "neighbour relation": [s.relation or "not recorded" for s in statuses],
            "mode": [MODES.get(s.mode, s.mode) for s in statuses],
            "ε left": [s.epsilon_left for s in statuses],
            "ε total": [s.epsilon_total for s in statuses],
            "δ left": [s.delta_left for s in statuses],
            "δ total": [s.delta_total for s in statuses],
            "releases": [s.n_releases for s in statuses],
            "account": [s.account for s in statuses],
            "charged from related accounts": [s.n_charged for s in statuses],
        }
    )


def unbounded_notes(statuses: list[BudgetStatus]) -> list[str]:
    """One sentence per account of a dataset (same mode) that releases of some other account are not
    charged to, because no conversion bounds them under its relation (:func:`dpcore.ledger.relation_factor`):
    a person's total across those accounts is not bounded."""
    notes = []
    for target in statuses:
        acc = Account.parse(target.account)
        peers = [s for s in statuses if s is not target and s.mode == target.mode]
        apart = [
            f"{definition_words(s.definition)} ({s.relation})"
            for s in peers
            if relation_factor(Account.parse(s.account), acc) is None
        ]
        if apart and target.definition:
            demo = " (demo)" if target.mode == "demo" else ""
            notes.append(
                f"Not bounded together: releases on {'; '.join(apart)} are not charged to the "
                f"{definition_words(target.definition)} account{demo} ({target.relation}), because nothing "
                "bounds what they reveal under its relation; a person's total across these accounts is not "
                "bounded."
            )
    return notes
