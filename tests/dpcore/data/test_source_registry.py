"""The source registry (dpcore.data.sources): every kind is one module declaring its spec, widgets, reads and
batch arguments; what main wrote before kinds were modules (session-plan origins, a release manifest) still
loads and replays; a kind defined in a test module registers and reads without touching another file."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from dpcore.data import fingerprint
from dpcore.data.sources import (
    SOURCES,
    DatabaseQuery,
    DatabaseTable,
    Field,
    FolderFile,
    LoadedSource,
    SourceContext,
    SourceSettings,
    SourceSpec,
    batch_source,
    from_command_line,
    load_source,
    register,
    source_from_batch,
    source_from_dict,
)
from dpcore.data.sources.common import file_stamp, inside_folder, sample_rows, walk_folders
from dpcore.data.sources.registry import BatchTable
from dpcore.errors import DataError, ParameterError
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.outofcore.source import open_spec
from dpcore.plan import ReleasePlan
from tests.paths import DATA

LEGACY = DATA / "legacy_sources"


# -- a kind defined here: JSON-lines files under an allow-listed folder ----------------------------------


@dataclass(frozen=True)
class JsonLines(SourceSpec):
    """A JSON-lines file (one record a line) at ``path`` below the allow-listed ``folder``."""

    folder: str
    path: str

    kind = "test_json_lines"
    title = "JSON lines (test kind)"
    allow_list = "folders"
    fields = (Field("file", "JSON lines file", fills=("folder", "path"), empty="No .jsonl files."),)
    command_form = "a .jsonl file"

    @property
    def label(self) -> str:
        return f"{Path(self.folder).name}/{self.path}"

    @property
    def where(self) -> str:
        return self.folder

    @classmethod
    def intro(cls, settings: SourceSettings) -> str:
        return "JSON-lines files in the allow-listed folders."

    @classmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        listed = walk_folders(ctx.folders, lambda f: f.endswith(".jsonl"))
        return {f.name: {"folder": d, "path": f.as_posix()} for d, files in listed for f in files}

    def _read(self, ctx: SourceContext) -> pd.DataFrame:
        return pd.read_json(inside_folder(self.folder, self.path, ctx.folders, self.label), lines=True)

    def stamp(self, ctx: SourceContext) -> tuple[Any, ...]:
        return file_stamp([inside_folder(self.folder, self.path, ctx.folders, self.label)])

    def load(self, ctx: SourceContext, *, max_rows: int, sample_seed: int) -> LoadedSource:
        table = self._read(ctx)
        if len(table) <= max_rows:
            return LoadedSource(table, fingerprint(table), len(table), False, None, "JSON lines")
        sample = sample_rows(table, max_rows, sample_seed)
        return LoadedSource(sample, fingerprint(table), len(table), True, sample_seed, "JSON lines, sampled")

    def batch(self, ctx: SourceContext) -> BatchTable:
        return BatchTable(lambda: self._read(ctx))

    def command_line(self) -> list[str]:
        return [str(PurePosixPath(self.folder) / self.path)]

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        path = Path(source)
        if not path.name.endswith(".jsonl") or table is not None or query is not None:
            return None
        return cls(str(path.parent), path.name), SourceContext(folders=(str(path.parent),))


@pytest.fixture
def json_kind() -> Iterator[type[JsonLines]]:
    """:class:`JsonLines` registered for one test."""
    register(JsonLines)
    yield JsonLines
    SOURCES.unregister(JsonLines.kind)


def people() -> pd.DataFrame:
    return pd.read_csv(LEGACY / "people.csv")


def test_a_kind_defined_in_a_test_module_registers_lists_loads_saves_and_replays(
    json_kind: type[JsonLines], tmp_path: Path
) -> None:
    """No other file changes: the registry offers it, its saved form reads back, the batch command's form
    finds it, its fingerprint is the loaded table's in memory and out of core (staged for DuckDB)."""
    people().to_json(tmp_path / "people.jsonl", orient="records", lines=True)
    ctx = SourceContext(folders=(str(tmp_path),))
    assert SOURCES.by_title()[json_kind.title] is json_kind
    (choice,) = json_kind.options("file", ctx, {}).values()
    spec = json_kind(**choice)
    assert source_from_dict(spec.to_dict()) == spec
    assert source_from_batch(json.loads(json.dumps(batch_source(spec, ctx)))) == (spec, ctx)
    assert from_command_line(str(tmp_path / "people.jsonl")) == (spec, ctx)
    loaded = load_source(spec, folders=[str(tmp_path)], max_rows=100, sample_seed=3)
    assert loaded.sampled and len(loaded.table) == 100 and loaded.n_rows == 240
    assert loaded.fingerprint == spec.fingerprint(ctx)
    with open_spec(spec, ctx) as src:
        assert src.fingerprint == loaded.fingerprint


def test_a_kind_must_be_a_frozen_dataclass_declaring_a_widget_per_field() -> None:
    @dataclass
    class Loose(SourceSpec):  # the abstract methods are not needed to be refused
        path: str
        kind = "test_loose"
        fields = (Field("path", "Path"),)

    @dataclass(frozen=True)
    class Undeclared(JsonLines):
        sheet: str = ""
        kind = "test_undeclared"

    with pytest.raises(ParameterError, match="frozen"):
        register(Loose)
    with pytest.raises(ParameterError, match="one Field per dataclass field"):
        register(Undeclared)
    with pytest.raises(ParameterError, match="already registered"):
        register(FolderFile)
    assert not {"test_loose", "test_undeclared"} & set(SOURCES)


# -- written before kinds were modules: main at 5d4c0e0 (tests/data/make_legacy_sources.py) ----------------


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    """The SQLite database the legacy origins were read from (people.csv written as the table people)."""
    db = tmp_path_factory.mktemp("legacy") / "people.db"
    with sqlite3.connect(db) as conn:
        people().to_sql("people", conn, index=False)
    engine = sa.create_engine(f"sqlite:///{db}")
    yield engine
    engine.dispose()


def test_session_origins_written_before_load_the_same_tables_and_samples(warehouse: sa.Engine) -> None:
    """Each origin a session plan saved (folder file, database table, SELECT; whole and a 50-row sample)
    reads back as its spec and loads the same whole-table fingerprint and the same sample rows."""
    saved = json.loads((LEGACY / "session_origins.json").read_text())
    kinds = {s["origin"]["source"]["kind"] for s in saved}
    assert kinds == {"folder_file", "database_table", "database_query"}
    for entry in saved:
        written = entry["origin"]["source"]
        spec = source_from_dict({**written, "folder": str(LEGACY)} if "folder" in written else written)
        assert spec.to_dict()["kind"] == written["kind"] and type(spec) is SOURCES[written["kind"]]
        loaded = load_source(
            spec, folders=[str(LEGACY)], engine=warehouse, max_rows=entry["max_rows"], sample_seed=11
        )
        assert (loaded.sampled, loaded.n_rows) == (entry["origin"]["sampled"], entry["origin"]["rows"])
        assert loaded.fingerprint == entry["fingerprint"], written
        assert fingerprint(loaded.table) == entry["table_fingerprint"], written


def test_a_manifest_written_before_replays_on_the_typed_spec_and_the_command_line_form(
    warehouse: sa.Engine, tmp_path: Path
) -> None:
    """The DP-Lloyd manifest main wrote on the folder file replays through the registry: from a job's typed
    spec (its saved form, as the dashboard hands it to the job) once, then from the batch command's path
    form under the same request id, which returns that release and spends nothing more."""
    manifest = json.loads((LEGACY / "people-manifest.json").read_text())
    plan = ReleasePlan.from_manifest(manifest)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    saved = batch_source(FolderFile(str(LEGACY), "people.csv"), SourceContext((str(LEGACY),)))
    spec, ctx = source_from_batch(json.loads(json.dumps(saved)))
    common = {"ledger": ledger, "artifacts_dir": tmp_path / "artifacts", "user": "batch", "request_id": "r-1"}
    first = run_plan(manifest, spec, context=ctx, **common)
    again = run_plan(manifest, LEGACY / "people.csv", **common)
    assert not first.replayed and again.replayed and first.record.request_id == again.record.request_id
    assert ledger.remaining(plan.account)[0] == pytest.approx(4.0)
    ledger.close()


def test_the_batch_command_names_each_kind_and_refuses_a_form_none_reads(tmp_path: Path) -> None:
    people().to_parquet(tmp_path / "p.parquet")
    spec, ctx = from_command_line(str(tmp_path / "p.parquet"))
    folder = str(tmp_path.resolve())
    assert spec == FolderFile(folder, "p.parquet") and ctx.folders == (folder,)
    table, ctx = from_command_line("sqlite:////x/w.db", table="people")
    assert table == DatabaseTable("sqlite:////x/w.db", "people")
    assert ctx.urls == {table.where: "sqlite:////x/w.db"}
    query, _ = from_command_line("postgresql://u:secret@h/db", query="SELECT 1")
    assert isinstance(query, DatabaseQuery) and "secret" not in query.where
    assert table.command_line() == ["<URL of the database connection sqlite:////x/w.db>", "--table", "people"]
    (tmp_path / "notes.txt.bak").write_text("x")
    with pytest.raises(ParameterError, match="names no source the batch job reads; give one of: a Parquet"):
        from_command_line(str(tmp_path / "notes.txt.bak"))
    with pytest.raises(DataError, match="Not a saved data source"):
        source_from_dict({"kind": "spreadsheet", "path": "x"})
    assert [f.name for f in dataclasses.fields(FolderFile)] == ["folder", "path"]
