"""Source kind: one read-only SELECT on a database the operator configured (checked by
:func:`~dpcore.data.sources.database.validate_select`), its whole result read in a read-only transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dpcore.data.sources.common import SQL_COLUMNS, check_names
from dpcore.data.sources.database import DatabaseSource, ledger_error, row_check, validate_select
from dpcore.data.sources.registry import Field, SourceContext, SourceSpec, register
from dpcore.errors import DataError

__all__ = ["DatabaseQuery"]


@register
@dataclass(frozen=True)
class DatabaseQuery(DatabaseSource):
    """One read-only SELECT on the database configured under ``connection``."""

    connection: str
    sql: str

    kind = "database_query"
    title = "Database query (one SELECT)"
    fields = (
        Field("connection", "Database", help="The connections the operator configured ([dpcore] databases)."),
        Field(
            "sql",
            "SELECT query",
            widget="text",
            help="Exactly one SELECT (UNION and WITH allowed), run in a read-only transaction.",
            placeholder="SELECT ...",
        ),
    )
    refused_fix = "correct the SELECT"
    command_form = "a SQLAlchemy URL with --query 'SELECT ...'"

    def __post_init__(self) -> None:
        if not (isinstance(self.connection, str) and isinstance(self.sql, str)):
            raise DataError("A database query is named by its connection and SELECT text; type it again.")

    @property
    def label(self) -> str:
        text = " ".join(self.sql.split())
        return f"{self.connection}: {text[:60]}{'...' if len(text) > 60 else ''}"

    @classmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        return cls.connections(ctx)

    def selects(self, conn: sa.Connection) -> tuple[Any, Any]:
        if sa.inspect(conn).has_table("ledger_instance"):
            raise ledger_error()
        sql = validate_select(self.sql, conn.dialect.name)
        inner = f"({sql}\n) AS dpcore_q"  # a line break: a trailing -- comment ends before the parenthesis
        names = list(conn.execute(sa.text(f"SELECT * FROM {inner} WHERE 1 = 0")).keys())
        check_names(self.label, names, SQL_COLUMNS)
        order = ", ".join(str(i + 1) for i in range(len(names)))
        check = row_check(conn, "dpcore_q")
        where = f" WHERE {check}" if check else ""
        return sa.text(f"SELECT COUNT(*) FROM {inner}"), sa.text(
            f"SELECT * FROM {inner}{where} ORDER BY {order}"
        )

    def command_line(self) -> list[str]:
        return [*super().command_line(), "--query", self.sql]

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        found = cls.url_form(source, table, query)
        if found is None or query is None:
            return None
        name, ctx = found
        return cls(name, query), ctx
