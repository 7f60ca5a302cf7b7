"""The release transaction (:func:`make_release`) and the releases a ledger records.

:func:`make_release` is the whole release in the order that never shows an unpaid result and never
debits twice: run the mechanism once, build the files and store them in the staging folder
(``<artifacts>/.staging``, never listed as a release), ``Ledger.spend`` (the atomic budget check and debit,
recording the artifact hash and its published path), then publish the zip by an atomic rename. A process
killed before the debit commits leaves only staging junk; one killed between the debit and the rename
is completed by the next call with the same request id. The caller shows outputs only after it returns.
If the spend is refused, the staged files are deleted and nothing is returned. A request id already
in the ledger (a rerun or a double click) debits nothing: the first release's stored files are returned.
:func:`stored_release`, :func:`stored_preview` and :func:`plan_releases` read recorded releases back.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpcore.artifacts import (
    STAGING,
    artifacts_folder,
    check_request_id,
    load_artifacts,
    publish,
    published_zip,
    release_files,
    save_artifacts,
    unwritable,
)
from dpcore.errors import ParameterError
from dpcore.html_report import html_report
from dpcore.ledger import BudgetNotSet, LedgerError
from dpcore.manifest import build_manifest, changed_fields
from dpcore.registry import calibration_name

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from dpcore.ledger import Ledger, ReleaseRecord
    from dpcore.plan import ReleasePlan
    from dpcore.registry import MechanismOutput

__all__ = [
    "Release",
    "StoredPreview",
    "make_release",
    "plan_releases",
    "rounded_output",
    "stored_preview",
    "stored_release",
]


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


def replay(record: ReleaseRecord) -> Release:
    files = load_artifacts(published_zip(record))
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
    return None if record is None else replay(record)


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
    path = published_zip(record)
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
        first = replay(previous)
        changed = changed_fields(first.manifest, plan)
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
    out = plan.spec.run(
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
        raise unwritable(folder, err) from None
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
            calibration=calibration_name(plan.spec, plan.params),
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
        return replay(record)
    try:
        publish(staged, path)
    except OSError as err:  # debited: say so, and how the same request publishes the staged files
        delta = f", δ = {plan.delta:g}" if plan.delta else ""
        raise LedgerError(
            f"Request {request_id} is recorded in the ledger (ε = {plan.epsilon:g}{delta} spent), but its "
            f"files could not be moved from {staged} to {path} ({err.strerror or err}). Fix the folder and "
            "run the same request again: it publishes them and debits nothing."
        ) from None
    return Release(record=record, manifest=manifest, files=files, table=out.table, figures=tuple(out.figures))
