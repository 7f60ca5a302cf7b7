"""The ledger's tables (SQLAlchemy Core): the instance id, datasets, accounts (budgets), releases, and the
append-only budget events, approval rules, release requests and their events (triggers refuse UPDATE and
DELETE on SQLite and PostgreSQL).
"""

from __future__ import annotations

import sqlalchemy as sa

_MAX_ID = 255

_metadata = sa.MetaData()
_instance = sa.Table(
    "ledger_instance",
    _metadata,
    sa.Column("instance_id", sa.String(64), primary_key=True),
    sa.Column("created", sa.String(40), nullable=False),
)
_datasets = sa.Table(
    "datasets",
    _metadata,
    sa.Column("dataset_id", sa.String(_MAX_ID), primary_key=True),
    sa.Column("name", sa.String(_MAX_ID), nullable=False),
    sa.Column("fingerprint", sa.String(_MAX_ID)),
    sa.Column("first_seen", sa.String(40), nullable=False),
)
_budgets = sa.Table(
    "accounts",
    _metadata,
    sa.Column("account", sa.String(_MAX_ID), primary_key=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("definition", sa.String(_MAX_ID), nullable=False),
    sa.Column("relation", sa.String(_MAX_ID), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("epsilon_total", sa.Double, nullable=False),
    sa.Column("delta_total", sa.Double, nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("updated", sa.String(40), nullable=False),
)
_releases = sa.Table(
    "account_releases",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(_MAX_ID), nullable=False, unique=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("dataset_fingerprint", sa.String(_MAX_ID)),
    sa.Column("definition", sa.String(_MAX_ID), nullable=False),
    sa.Column("relation", sa.String(_MAX_ID), nullable=False),
    sa.Column("mechanism", sa.String(_MAX_ID), nullable=False),
    sa.Column("calibration", sa.String(_MAX_ID), nullable=False),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("sampling_mode", sa.String(16), nullable=False),
    sa.Column("parameters", sa.Text, nullable=False),
    sa.Column("artifact_path", sa.Text),
    sa.Column("artifact_hash", sa.String(_MAX_ID)),
    sa.Column("composition", sa.String(16), nullable=False),
    sa.Column("parallel_group", sa.String(_MAX_ID)),
    sa.Column("partition_key", sa.String(_MAX_ID)),
    sa.CheckConstraint("composition IN ('sequential', 'parallel')", name="ck_releases_composition"),
    sa.UniqueConstraint("account", "parallel_group", "partition_key", name="uq_releases_partition"),
)
#: Append-only (triggers refuse UPDATE and DELETE): every budget change, who made it, when and why.
_budget_events = sa.Table(
    "budget_events",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("epsilon_before", sa.Double),
    sa.Column("delta_before", sa.Double),
    sa.Column("epsilon_after", sa.Double, nullable=False),
    sa.Column("delta_after", sa.Double, nullable=False),
)
#: Append-only: an account's approval rule is its latest row (``dpcore.approvals``).
_approval_rules = sa.Table(
    "approval_rules",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("rule", sa.String(16), nullable=False),
    sa.Column("threshold", sa.Double),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.CheckConstraint("rule IN ('none', 'above', 'all')", name="ck_approval_rule"),
)
#: Append-only: a release request exactly as the curator made it (``dpcore.approvals``); ``request_id`` is
#: the release's (the plan's), ``ticket`` this request's (a denied plan may be requested again).
_release_requests = sa.Table(
    "release_requests",
    _metadata,
    sa.Column("ticket", sa.String(64), primary_key=True),
    sa.Column("request_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("account", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("dataset_id", sa.String(_MAX_ID), nullable=False, index=True),
    sa.Column("requester", sa.String(_MAX_ID), nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("expires", sa.String(40), nullable=False),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("plan", sa.Text, nullable=False),
    sa.Column("guarantee", sa.Text, nullable=False),
    sa.Column("expected_error", sa.Text, nullable=False),
    sa.Column("chart", sa.Text),
    sa.Column("inputs_path", sa.Text),
    sa.Column("inputs_hash", sa.String(_MAX_ID)),
    sa.Column("origin", sa.Text),
)
#: Append-only: each request's decisions and outcome, one row per state (so two approvals cannot both land).
_request_events = sa.Table(
    "request_events",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ticket", sa.String(64), nullable=False, index=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("user", sa.String(_MAX_ID), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.UniqueConstraint("ticket", "state", name="uq_request_state"),
)
#: The tables added after the first ledgers were made: an initialised ledger without them gets them (and
#: their append-only triggers) when opened (:meth:`Ledger._upgrade`).
ADDED_TABLES = (_budget_events, _approval_rules, _release_requests, _request_events)
_APPEND_ONLY_FUNCTION = sa.DDL(
    "CREATE OR REPLACE FUNCTION dpcore_append_only() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION "
    "'dpcore: ledger events are append-only (never updated or deleted)'; END $$ LANGUAGE plpgsql"
)
for _table in ADDED_TABLES:  # a past event is never rewritten or deleted, whoever connects
    for _verb in ("UPDATE", "DELETE"):
        sa.event.listen(
            _table,
            "after_create",
            sa.DDL(
                f"CREATE TRIGGER {_table.name}_no_{_verb.lower()} BEFORE {_verb} ON {_table.name} "
                f"BEGIN SELECT RAISE(ABORT, 'dpcore: {_table.name} rows are append-only'); END"
            ).execute_if(dialect="sqlite"),
        )
    sa.event.listen(_table, "after_create", _APPEND_ONLY_FUNCTION.execute_if(dialect="postgresql"))
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            f"CREATE TRIGGER {_table.name}_append_only BEFORE UPDATE OR DELETE ON {_table.name} "
            "FOR EACH ROW EXECUTE FUNCTION dpcore_append_only()"
        ).execute_if(dialect="postgresql"),
    )
_COST_COLS = (_releases.c.epsilon, _releases.c.delta, _releases.c.parallel_group)
_PART_JSON = '{"part_of": '  # how a preparation step's parameters start (json.dumps of {"part_of": id})
