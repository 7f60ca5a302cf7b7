"""A batch job never debits a release computed on source files rewritten after they were fingerprinted:
the engine reads Parquet files again for the release passes, so the files are stamped before the
fingerprint pass and checked once the mechanism ran, before anything is written or spent. A database
source is read once and staged, so later writes to it do not touch the release."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from dpcore.errors import DataError
from dpcore.ledger import Ledger
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan
from tests.dpcore.outofcore.test_run_plan import dashboard_release, people_source, people_table
from tests.dpcore.outofcore.test_run_plan_query import QUERY, sampled_plan

FIX = "Run the job again when the table is not being written"


def during_release(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> list[int]:
    """Run ``change`` once, as the mechanism's passes start reading the source; the calls so far."""
    calls: list[int] = []
    fit = TableFeatures.fit_lloyd

    def hooked(self: TableFeatures, estimator):  # type: ignore[no-untyped-def]
        if not calls:
            change()
        calls.append(1)
        return fit(self, estimator)

    monkeypatch.setattr(TableFeatures, "fit_lloyd", hooked)
    return calls


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def batch_ledger(tmp_path: Path, plan: ReleasePlan) -> Ledger:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    return ledger


def test_a_file_rewritten_while_the_release_passes_run_is_refused_and_nothing_is_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df, path = people_source(tmp_path, 2000)
    manifest, _ = dashboard_release(tmp_path, df)
    plan = ReleasePlan.from_manifest(manifest)
    ledger = batch_ledger(tmp_path, plan)
    out = tmp_path / "out"
    other = df.assign(b=df["b"] + 3.0)  # the same rows count, other values
    calls = during_release(monkeypatch, lambda: other.to_parquet(path, index=False))
    with pytest.raises(DataError) as err:
        run_plan(manifest, path, ledger=ledger, artifacts_dir=out, user="batch")
    assert calls, "the mechanism's passes ran on the rewritten file"
    assert f"The source file {path} was rewritten" in str(err.value) and FIX in str(err.value)
    assert "nothing was released or debited" in str(err.value)
    assert ledger.budget(plan.account).epsilon_spent == 0.0
    assert ledger.release_by_request("dash-1") is None and files_under(out) == []
    # the table written again as it was: the job runs again and releases as before
    monkeypatch.undo()
    df.to_parquet(path, index=False)
    rel = run_plan(manifest, path, ledger=ledger, artifacts_dir=out, user="batch")
    assert not rel.replayed and len(rel.table) == 3
    assert ledger.budget(plan.account).epsilon_spent == 1.0


def test_a_part_added_to_the_folder_while_the_job_reads_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df, folder = people_source(tmp_path, 2000, parts=True)
    manifest, _ = dashboard_release(tmp_path, df)
    plan = ReleasePlan.from_manifest(manifest)
    ledger = batch_ledger(tmp_path, plan)
    added = folder / "part-2.parquet"
    during_release(monkeypatch, lambda: df.iloc[:10].to_parquet(added, index=False))
    with pytest.raises(DataError, match=f"The source file {added} was added") as err:
        run_plan(manifest, folder, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert FIX in str(err.value) and ledger.budget(plan.account).epsilon_spent == 0.0
    assert files_under(tmp_path / "out") == []


def test_a_database_source_is_staged_once_and_writes_after_it_do_not_matter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    df = people_table(600)
    engine = sa.create_engine(url)
    df.to_sql("people", engine, index=False)
    plan, whole = sampled_plan(url)
    ledger = batch_ledger(tmp_path, plan)

    def rewrite() -> None:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE people SET b = b + 3"))

    calls = during_release(monkeypatch, rewrite)
    try:
        rel = run_plan(
            plan.to_manifest(),
            url,
            query=QUERY,
            ledger=ledger,
            artifacts_dir=tmp_path / "out",
            user="batch",
            request_id="db-1",
        )
        assert calls and pd.read_sql("SELECT b FROM people", engine)["b"].iloc[0] == df["b"].iloc[0] + 3
    finally:
        engine.dispose()
    assert not rel.replayed and len(rel.table) == 3 and len(whole) > 0
    assert ledger.budget(plan.account).epsilon_spent == 1.0
