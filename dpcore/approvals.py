"""Release approval ("four eyes"): per-account approval rules and release requests, in the ledger database.

An officer sets each account's rule (:func:`set_rule`): ``none`` (curators release within the budget),
``above`` a threshold (a release whose ε, or level l, exceeds it needs approval) or ``all``. Rules are
append-only rows: an account's rule is its latest, so every change keeps who made it, when and why.

A release that needs approval becomes a :class:`Request` (:func:`submit`): the curator's exact plan (its
manifest, from which :meth:`dpcore.plan.ReleasePlan.from_manifest` rebuilds the same plan key), the
release request id the panel would have used, the guarantee, the expected error and chart the curator
compared, and the release's inputs (stored by :func:`store_inputs` in the data folder; read back only
when their SHA-256 matches the one recorded with the request). The budget is checked when the request is
made and again, by the ledger's own spend, when it is released.

A request's state is the latest of its append-only events (``pending``, then ``approved`` or ``denied``,
then ``released`` or ``refused``); a pending request past its expiry time is ``expired``. Each state is
recorded at most once per request (a unique constraint), and :func:`decide` runs under the ledger's write
lock (SQLite ``BEGIN IMMEDIATE``; ``SELECT ... FOR UPDATE`` elsewhere), so two officers approving at once
record one approval; the release then runs under the request's release request id, which the ledger
debits once (:meth:`dpcore.ledger.Ledger.spend`), whoever runs it and however often (:func:`release`).
The approver must not be the requester. Nothing here rewrites or deletes a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from dpcore import config
from dpcore.errors import ParameterError
from dpcore.ledger import Account, BudgetNotSet, Ledger, LedgerError
from dpcore.ledger.records import _reason, _text
from dpcore.ledger.schema import _approval_rules, _release_requests, _request_events

__all__ = [
    "HISTORY_COLUMNS",
    "RULES",
    "ApprovalRule",
    "Request",
    "decide",
    "expected_error",
    "get",
    "history_frame",
    "inputs_dir",
    "load_inputs",
    "record_outcome",
    "release",
    "request_ttl",
    "requests",
    "rule",
    "set_rule",
    "store_inputs",
    "submit",
]

RULES = {
    "none": "No approval: curators release within the budget",
    "above": "Approval for releases above a threshold",
    "all": "Approval for every release",
}
FINAL_FAILED = ("denied", "refused", "expired")
DEFAULT_TTL_H = 72.0
REQUESTS = "requests"
HISTORY_COLUMNS = (
    "time (UTC)",
    "dataset",
    "account",
    "user",
    "reason",
    "ε before",
    "ε after",
    "δ before",
    "δ after",
    "dataset id",
)

if TYPE_CHECKING:
    import pandas as pd


def expected_error(frame: pd.DataFrame | None, mechanism: str, epsilon: float) -> str:
    """What the curator's comparison (a sweep table, :func:`dpcore.accuracy.tidy`) says of ``mechanism``
    near ``epsilon``: the median of each metric over the trials at the compared ε closest to it."""
    from dpcore.accuracy import tidy

    if frame is None or frame.empty:
        return "No comparison was run before this request."
    long = tidy(frame)
    rows = long[long["mechanism"] == mechanism]
    if rows.empty:
        return "The comparison did not include this mechanism."
    compared = sorted(rows["epsilon"].unique(), key=lambda e: (abs(e - epsilon), e))[0]
    at = rows[rows["epsilon"] == compared].groupby("metric")["value"]
    medians = "; ".join(f"{metric} {value:.4g}" for metric, value in at.median().items())
    trials = at.size().max()
    near = f"At the compared ε = {compared:.4g} (nearest {epsilon:.4g})"
    return f"{near}, median of {trials} trials: {medians}."


def history_frame(ledger: Ledger, dataset_id: str | None = None) -> pd.DataFrame:
    """Budget changes (of one dataset, or all), oldest first: the Ledger page's table, its
    ``budget-history.csv`` and ``python -m dpcore ledger-history``."""
    import pandas as pd

    names = ledger.dataset_names()
    events = ledger.budget_history(dataset_id=dataset_id)
    return pd.DataFrame(
        [
            (
                e.time[:19].replace("T", " "),
                names.get(e.dataset_id, e.dataset_id),
                e.account,
                e.user,
                e.reason,
                e.epsilon_before,
                e.epsilon_after,
                e.delta_before,
                e.delta_after,
                e.dataset_id,
            )
            for e in events
        ],
        columns=list(HISTORY_COLUMNS),
    )


def request_ttl() -> timedelta:
    """How long a request waits for a decision: ``DPCORE_REQUEST_TTL_H`` hours (default 72)."""
    text = os.environ.get("DPCORE_REQUEST_TTL_H") or str(DEFAULT_TTL_H)
    try:
        hours = float(text)
    except ValueError:
        hours = 0.0
    if not 0 < hours < 1e5:
        raise ParameterError(
            f"DPCORE_REQUEST_TTL_H={text!r} is not a positive number of hours; set it to e.g. 72 or unset it."
        )
    return timedelta(hours=hours)


@dataclass(frozen=True)
class ApprovalRule:
    """An account's approval rule: ``rule`` in :data:`RULES`, ``threshold`` (ε or level l) for ``above``;
    who set it, when and why (empty for the default ``none`` of an account never given a rule)."""

    account: str
    rule: str = "none"
    threshold: float | None = None
    time: str = ""
    user: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ParameterError(f"An approval rule is one of {sorted(RULES)}, got {self.rule!r}.")
        if (self.rule == "above") != (self.threshold is not None):
            raise ParameterError("The rule 'above' needs a threshold, and only that rule takes one.")
        if self.threshold is not None and not 0 <= self.threshold < float("inf"):
            raise ParameterError(f"The threshold must be a finite number >= 0, got {self.threshold!r}.")

    def needs_approval(self, epsilon: float) -> bool:
        """Whether a release costing ``epsilon`` on this account needs an officer's approval."""
        return self.rule == "all" or (self.rule == "above" and epsilon > (self.threshold or 0.0))


@dataclass(frozen=True)
class Request:
    """A release request as stored, with its current ``state`` and the latest decision (who, when, why)."""

    ticket: str
    request_id: str
    account: str
    dataset_id: str
    requester: str
    created: str
    expires: str
    epsilon: float
    delta: float
    plan: dict[str, Any]
    guarantee: str
    expected_error: str
    chart: str | None
    inputs_path: str | None
    inputs_hash: str | None
    origin: dict[str, Any] | None
    state: str
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str = ""
    approved_by: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def set_rule(
    ledger: Ledger,
    account: Account | str,
    rule_name: str,
    threshold: float | None = None,
    *,
    user: str,
    reason: str,
) -> ApprovalRule:
    """Record ``account``'s new approval rule (an append-only row) and return it."""
    acc = Account.parse(account)
    new = ApprovalRule(acc.key, rule_name, None if threshold is None else float(threshold))
    values = {
        "account": acc.key,
        "rule": new.rule,
        "threshold": new.threshold,
        "time": _now().isoformat(timespec="microseconds"),
        "user": _text(user, "user"),
        "reason": _reason(reason),
    }
    with ledger._tx(write=True) as conn:
        conn.execute(_approval_rules.insert().values(**values))
    return ApprovalRule(**values)


def rule(ledger: Ledger, account: Account | str) -> ApprovalRule:
    """``account``'s current approval rule (``none`` when no officer ever set one)."""
    key = Account.parse(account).key
    query = (
        sa.select(_approval_rules)
        .where(_approval_rules.c.account == key)
        .order_by(_approval_rules.c.id.desc())
    )
    with ledger._tx() as conn:
        row = conn.execute(query.limit(1)).mappings().first()
    if row is None:
        return ApprovalRule(key)
    return ApprovalRule(**{k: row[k] for k in ("account", "rule", "threshold", "time", "user", "reason")})


def inputs_dir() -> Path:
    """Folder of the requests' stored inputs: ``<DPCORE_DATA_DIR>/requests``."""
    return config.data_dir() / REQUESTS


def store_inputs(inputs: Any, folder: str | os.PathLike[str]) -> tuple[str, str]:
    """Write a release's ``inputs`` (pickled, under a random name) into ``folder``; (path, SHA-256) to
    record with the request."""
    data = pickle.dumps(inputs, protocol=pickle.HIGHEST_PROTOCOL)
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{uuid.uuid4().hex}.pickle"
    staged = path.with_suffix(".partial")
    staged.write_bytes(data)
    staged.replace(path)
    return str(path), hashlib.sha256(data).hexdigest()


def load_inputs(request: Request) -> Any:
    """The request's stored inputs, unpickled only when the file's SHA-256 is the one in the ledger (this
    server wrote it), else ``LedgerError``."""
    path = Path(request.inputs_path or "")
    data = path.read_bytes() if request.inputs_path and path.is_file() else None
    if data is None or hashlib.sha256(data).hexdigest() != request.inputs_hash:
        raise LedgerError(
            f"The data of request {request.request_id} is missing or does not match the hash recorded with "
            "it, so it cannot be released as planned. Deny it and ask the curator to request it again."
        )
    return pickle.loads(data)


def _state(events: list[Mapping[str, Any]], expires: str, now: datetime) -> dict[str, Any]:
    last = events[-1]
    state = last["state"]
    if state == "pending" and now >= datetime.fromisoformat(expires):
        state = "expired"
    decided = last if last["state"] != "pending" else None
    approved = next((e["user"] for e in events if e["state"] == "approved"), None)
    return {
        "state": state,
        "decided_by": None if decided is None else decided["user"],
        "decided_at": None if decided is None else decided["time"],
        "reason": "" if decided is None else decided["reason"],
        "approved_by": approved,
    }


def _read(conn: sa.Connection, query: sa.Select[Any]) -> list[Request]:
    rows = conn.execute(query).mappings().all()
    tickets = [r["ticket"] for r in rows]
    events: dict[str, list[Mapping[str, Any]]] = {t: [] for t in tickets}
    if tickets:
        found = sa.select(_request_events).where(_request_events.c.ticket.in_(tickets))
        for e in conn.execute(found.order_by(_request_events.c.id)).mappings():
            events[e["ticket"]].append(e)
    now = _now()
    out = []
    for r in rows:
        values = {k: r[k] for k in r.keys()}
        values["plan"] = json.loads(values["plan"])
        values["origin"] = None if values["origin"] is None else json.loads(values["origin"])
        out.append(Request(**values, **_state(events[r["ticket"]], r["expires"], now)))
    return out


def get(ledger: Ledger, ticket: str) -> Request | None:
    """The request ``ticket``, or None."""
    with ledger._tx() as conn:
        found = _read(conn, sa.select(_release_requests).where(_release_requests.c.ticket == ticket))
    return found[0] if found else None


def requests(
    ledger: Ledger,
    *,
    request_id: str | None = None,
    requester: str | None = None,
    dataset_id: str | None = None,
) -> list[Request]:
    """Requests (of one release request id, one requester, one dataset, or all), newest first."""
    query = sa.select(_release_requests)
    for column, value in (("request_id", request_id), ("requester", requester), ("dataset_id", dataset_id)):
        if value is not None:
            query = query.where(_release_requests.c[column] == value)
    order = (_release_requests.c.created.desc(), _release_requests.c.ticket.desc())
    with ledger._tx() as conn:
        return _read(conn, query.order_by(*order))


def submit(
    ledger: Ledger,
    *,
    request_id: str,
    account: Account | str,
    manifest: Mapping[str, Any],
    epsilon: float,
    delta: float,
    requester: str,
    guarantee: str,
    expected_error: str = "",
    chart: str | None = None,
    inputs: tuple[str, str] | None = None,
    origin: Mapping[str, Any] | None = None,
    ttl: timedelta | None = None,
) -> Request:
    """Store a release request (its ``pending`` event in the same transaction) and return it; a pending or
    approved request of ``request_id`` is returned as it is (a double click or a retry asks once).

    The budget is checked now: an account without a budget, or with less left than ``epsilon``/``delta``,
    refuses the request (``BudgetNotSet``, ``LedgerError``)."""
    acc = Account.parse(account)
    status = ledger.budget(acc)
    if status is None:
        raise BudgetNotSet(f"This account ({acc.key}) has no budget: the officer sets one first.")
    if epsilon > status.epsilon_left or delta > status.delta_left:
        raise LedgerError(
            f"This release costs ε = {epsilon:g}, δ = {delta:g}, more than the budget left "
            f"(ε = {status.epsilon_left:g}, δ = {status.delta_left:g}); nothing was requested."
        )
    created = _now()
    row = {
        "request_id": _text(request_id, "request_id"),
        "account": acc.key,
        "dataset_id": acc.dataset_id,
        "requester": _text(requester, "requester"),
        "created": created.isoformat(timespec="microseconds"),
        "expires": (created + (request_ttl() if ttl is None else ttl)).isoformat(timespec="microseconds"),
        "epsilon": float(epsilon),
        "delta": float(delta),
        "plan": json.dumps(dict(manifest), sort_keys=True),
        "guarantee": str(guarantee),
        "expected_error": str(expected_error),
        "chart": chart,
        "inputs_path": None if inputs is None else inputs[0],
        "inputs_hash": None if inputs is None else inputs[1],
        "origin": None if origin is None else json.dumps(dict(origin), sort_keys=True),
    }
    for attempt in (1, 2):
        try:
            with ledger._tx(write=True) as conn:
                same = sa.select(_release_requests).where(_release_requests.c.request_id == row["request_id"])
                earlier = _read(conn, same)
                live = [r for r in earlier if r.state not in FINAL_FAILED]
                if live:
                    return live[0]
                ticket = f"{row['request_id']}.{len(earlier) + 1}"
                conn.execute(_release_requests.insert().values(ticket=ticket, **row))
                conn.execute(
                    _request_events.insert().values(
                        ticket=ticket, state="pending", time=row["created"], user=row["requester"], reason=""
                    )
                )
            break
        except sa.exc.IntegrityError:  # the same request made at the same moment elsewhere: read it back
            if attempt == 2:
                raise
    found = get(ledger, ticket)
    assert found is not None
    return found


def _locked(conn: sa.Connection, ticket: str) -> Request | None:
    query = sa.select(_release_requests).where(_release_requests.c.ticket == ticket)
    if conn.dialect.name != "sqlite":  # SQLite: the write transaction already holds the database lock
        query = query.with_for_update()
    found = _read(conn, query)
    return found[0] if found else None


def decide(ledger: Ledger, ticket: str, *, approve: bool, user: str, reason: str) -> Request:
    """Approve or deny a pending request, as ``user`` (never its requester); returns the request after.

    An approval of a request already approved (by anyone) returns it unchanged: two officers approving at
    once record one approval. Any other decision on a request that is not pending (denied, expired,
    released, refused) raises ``LedgerError`` naming its state."""
    user, why = _text(user, "user"), _reason(reason)
    if not approve and not why:
        raise ParameterError("Give a reason for denying the request: the curator reads it.")
    state = "approved" if approve else "denied"
    try:
        with ledger._tx(write=True) as conn:
            request = _locked(conn, ticket)
            if request is None:
                raise LedgerError(f"There is no release request {ticket!r}; it may have been made elsewhere.")
            if request.requester == user:
                raise LedgerError(
                    f"{user} made this request, and a request needs a second person's approval: another "
                    "officer decides it. Nothing was changed."
                )
            if approve and request.state in ("approved", "released"):
                return request
            if request.state != "pending":
                raise LedgerError(
                    f"Request {request.request_id} is {request.state}"
                    + (f" ({request.reason})" if request.reason else "")
                    + "; only a pending request can be approved or denied. Nothing was changed."
                )
            conn.execute(
                _request_events.insert().values(
                    ticket=ticket,
                    state=state,
                    time=_now().isoformat(timespec="microseconds"),
                    user=user,
                    reason=why,
                )
            )
    except sa.exc.IntegrityError:  # the other approval landed first (a server database without the lock)
        pass
    found = get(ledger, ticket)
    assert found is not None
    return found


def record_outcome(ledger: Ledger, ticket: str, state: str, *, user: str, reason: str = "") -> None:
    """Record that an approved request was ``released`` or ``refused`` (with the reason); recorded once."""
    if state not in ("released", "refused"):
        raise ParameterError(f"An outcome is 'released' or 'refused', got {state!r}.")
    try:
        with ledger._tx(write=True) as conn:
            conn.execute(
                _request_events.insert().values(
                    ticket=ticket,
                    state=state,
                    time=_now().isoformat(timespec="microseconds"),
                    user=_text(user, "user"),
                    reason=_reason(reason[:2000]),
                )
            )
    except sa.exc.IntegrityError:  # already recorded by the other officer's run
        pass


def release(ledger: Ledger, request: Request, *, user: str, artifacts_dir: str | os.PathLike[str]) -> Any:
    """Run an approved request's plan exactly as requested, under its release request id, and record the
    outcome; returns the :class:`dpcore.releases.Release`. The ledger debits the request id once, so a
    second approver's run or the curator's retry returns the same release. A refusal at release time
    (budget lowered or spent meanwhile, files changed) is recorded as ``refused`` with the reason and
    raised."""
    from dpcore.plan import ReleasePlan
    from dpcore.releases import make_release

    if request.state not in ("approved", "released"):
        raise LedgerError(
            f"Request {request.request_id} is {request.state}; only an approved one is released."
        )
    plan = ReleasePlan.from_manifest(request.plan)
    try:
        if plan.account.key != request.account:
            raise LedgerError(
                f"Request {request.request_id}'s plan no longer names its account; not released."
            )
        result = make_release(
            ledger,
            plan,
            load_inputs(request),
            request_id=request.request_id,
            user=request.requester,
            artifacts_dir=artifacts_dir,
            name=str((request.origin or {}).get("name", plan.domain)),
        )
    except LedgerError as err:
        record_outcome(ledger, request.ticket, "refused", user=user, reason=str(err))
        raise
    record_outcome(ledger, request.ticket, "released", user=user)
    return result
