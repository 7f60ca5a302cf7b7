"""Source kind: a table (or view) of a database the operator configured, read whole in a read-only
transaction (:mod:`dpcore.data.sources.database`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dpcore.data.sources.common import SQL_COLUMNS, check_names
from dpcore.data.sources.database import DatabaseSource, list_tables, row_check
from dpcore.data.sources.registry import Field, SourceContext, SourceSpec, register
from dpcore.errors import DataError

__all__ = ["DatabaseTable"]


@register
@dataclass(frozen=True)
class DatabaseTable(DatabaseSource):
    """A table of the database the operator configured under the connection name ``connection``."""

    connection: str
    table: str

    kind = "database_table"
    title = "Database table"
    fields = (
        Field("connection", "Database", help="The connections the operator configured ([dpcore] databases)."),
        Field(
            "table",
            "Table",
            help="Tables and views of the database, read whole in a read-only transaction.",
            empty="The database '{connection}' has no tables.",
        ),
    )
    refused_fix = "check the connection's access to it"
    command_form = "a SQLAlchemy URL with --table NAME"

    def __post_init__(self) -> None:
        if not (isinstance(self.connection, str) and isinstance(self.table, str) and self.table):
            raise DataError("A database table is named by its connection and table; choose it from the list.")

    @property
    def label(self) -> str:
        return f"{self.connection}: {self.table}"

    @classmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        return cls.connections(ctx) if name == "connection" else cls.tables(ctx, chosen["connection"])

    def selects(self, conn: sa.Connection) -> tuple[Any, Any]:
        if self.table not in list_tables(conn):
            raise DataError(f"The database has no table '{self.table}'; choose one from the list.")
        table = sa.Table(self.table, sa.MetaData(), autoload_with=conn)
        check_names(self.label, [c.name for c in table.columns], SQL_COLUMNS)
        rows = sa.select(table).order_by(*table.columns)
        check = row_check(conn, conn.dialect.identifier_preparer.quote(self.table))
        rows = rows.where(sa.text(check)) if check else rows
        return sa.select(sa.func.count()).select_from(table), rows

    def command_line(self) -> list[str]:
        return [*super().command_line(), "--table", self.table]

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        found = cls.url_form(source, table, query)
        if found is None or table is None:
            return None
        name, ctx = found
        return cls(name, table), ctx
