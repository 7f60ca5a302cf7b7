"""``run-plan`` on a mechanism without out-of-core passes (DP-Lloyd + MCMC, planar Laplace, PriLocation): the
batch job reads the whole table's prepared rows into memory when they are at most ``memory_rows``, and
releases exactly what the dashboard releases on that table (same demo seed: the same files byte for byte);
above the limit it refuses in one line before any debit. The release panel on a sample offers the whole
table's release when the table is within the limit."""

from __future__ import annotations

import io
import itertools
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from dpcore import config
from dpcore.artifacts import load_artifacts
from dpcore.data import fingerprint, load_table
from dpcore.data.sources import FolderFile, load_source
from dpcore.errors import ParameterError
from dpcore.ledger import Ledger
from dpcore.location.plan_steps import LocationColumns, PublicRegion
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan
from dpcore.policy import GeoIndistinguishability
from tests.dpcore.outofcore.test_run_plan import cli, dashboard_release, imputed_plan, people_source
from tests.dpcore.outofcore.test_run_plan_locations import REGION, dashboard, location_plan, visits_source
from tests.pages.test_sources import _ok
from tests.pages.test_sources_locations import folder, locations_page  # noqa: F401 (folder: a fixture)
from tests.pages.test_whole_table import _released

GEO = GeoIndistinguishability.from_level(1.0, 1000.0)
#: The location plans (per user, at most 2 locations each) that read their rows in memory.
LOCATION_PLANS = {
    "planar_laplace": ({"radius_m": 1000.0}, GEO),
    "prilocation": ({"hs_m": 300_000.0, "n_clusters": 5, "grid_size": 10}, None),
}
MCMC = {"n_clusters": 3, "n_iter": 0, "neighbours": "unbounded", "mcmc_steps": 2000}


@pytest.fixture
def people(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    return people_source(tmp_path, 1500)


@pytest.fixture
def places(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    return visits_source(tmp_path, 1500)


def location_release(tmp_path: Path, df: pd.DataFrame, path: Path, mechanism: str):
    params, policy = LOCATION_PLANS[mechanism]
    plan = location_plan(path, mechanism, params=params, policy=policy)
    return dashboard(df, plan, tmp_path)


def assert_same_release(dash, batch, ledger: Ledger, path: Path) -> None:
    """The batch release is the dashboard's: the same table and files byte for byte (only the time and the
    user differ in the manifest), one debit of the plan's cost, the table's fingerprint."""
    plan = ReleasePlan.from_manifest(dash.manifest)
    assert batch.record.request_id == dash.record.request_id and not batch.replayed
    pd.testing.assert_frame_equal(batch.table, dash.table, check_exact=True)
    files = load_artifacts(batch.record.artifact_path)
    csv = next(k for k in files if k.endswith(".csv"))
    assert files[csv] == dash.files[csv]
    ours, theirs = batch.manifest.copy(), json.loads(json.dumps(dash.manifest))
    for key in ("time", "user"):
        ours.pop(key), theirs.pop(key)
    assert json.loads(json.dumps(ours)) == theirs
    whole = fingerprint(load_table(path)) if path.is_file() else plan.fingerprint  # a folder: the plan's
    assert batch.manifest["dataset_fingerprint"] == whole == plan.fingerprint
    assert len(ledger.releases(plan.account)) == 1
    assert ledger.budget(plan.account).epsilon_spent == plan.epsilon


def batch_release(tmp_path: Path, dash, path: Path, **options: object):
    """``dash``'s plan run as a batch job on ``path`` with a ledger of its own (eps 5 on the plan's
    account), checked to be ``dash``'s release (:func:`assert_same_release`); the release and the ledger."""
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(ReleasePlan.from_manifest(dash.manifest).account, epsilon=5.0)
    batch = run_plan(
        dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch", **options
    )
    assert_same_release(dash, batch, ledger, path)
    return batch, ledger


@pytest.mark.parametrize("mechanism", list(LOCATION_PLANS))
def test_a_location_mechanism_in_memory_gives_the_dashboard_s_release(
    places, tmp_path: Path, mechanism: str
) -> None:
    df, path = places
    dash = location_release(tmp_path, df, path, mechanism)
    assert dash.manifest["details"]["max_per_user"] == 2
    stages: list[str] = []
    _, ledger = batch_release(tmp_path, dash, path, memory_rows=len(df) - 2, progress=stages.append)
    assert any(f"reading the {len(df) - 2:,} rows into memory" in s for s in stages)
    again = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert again.replayed and ledger.budget(again.record.account).epsilon_spent == 1.0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["planar_laplace"])
def test_spark_reads_the_same_rows_into_memory(places, tmp_path: Path, spark, mechanism: str) -> None:
    """Spark's rows come back in the table's order (the noise is drawn row by row): the same release."""
    df, path = places
    dash = location_release(tmp_path, df, path, mechanism)
    batch, _ = batch_release(tmp_path, dash, path, engine="spark", spark=spark)
    pd.testing.assert_frame_equal(batch.table, dash.table, check_exact=True)  # row for row


def test_dp_lloyd_mcmc_in_memory_gives_the_dashboard_s_release(people, tmp_path: Path) -> None:
    df, path = people
    _, dash = dashboard_release(
        tmp_path, df, mechanism="dp_lloyd_mcmc", params=MCMC, seed=11, request_id="dash-mcmc"
    )
    batch, _ = batch_release(tmp_path, dash, path)
    assert batch.manifest["details"]["mcmc_steps"] == MCMC["mcmc_steps"]


def test_above_the_limit_the_cli_refuses_in_one_line_and_spends_nothing(
    places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df, path = places
    dash = location_release(tmp_path, df, path, "planar_laplace")
    plan = ReleasePlan.from_manifest(dash.manifest)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dash.manifest))
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    out = tmp_path / "out"
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", out, "--user", "batch")
    rows = len(df) - 2  # after the plan's dropped rows
    for limit in ("--memory-rows", str(rows - 1)), ():
        monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "1000")  # the CLI's option overrides it
        refused = cli(*args, *limit)
        assert refused.returncode == 2 and refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        shown = f"{rows - 1:,}" if limit else "1,000"
        assert line.startswith("error: Planar Laplace (per location) reads the rows in memory")
        assert f"the table has {rows:,} rows, above a batch job's limit of {shown}" in line
        assert "runs out of core (" in line and "DPCORE_JOB_MEMORY_ROWS" in line and "--memory-rows" in line
        assert Ledger(url).budget(plan.account).epsilon_spent == 0.0
        assert not Ledger(url).releases(plan.account)
        assert not [p for p in out.rglob("*") if p.is_file()]  # no file written
    done = cli(*args, "--memory-rows", str(rows))  # at the limit: released, the dashboard's files
    assert done.returncode == 0, done.stderr
    record = Ledger(url).release_by_request(dash.record.request_id)
    files = load_artifacts(record.artifact_path)
    csv = next(k for k in files if k.endswith(".csv"))
    assert files[csv] == dash.files[csv] and Ledger(url).budget(plan.account).epsilon_spent == 1.0


def test_batch_refusal_knows_the_rows_and_the_limit(
    places, people, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path = places
    no_drop = (LocationColumns("Latitude", "Longitude", "person id"), PublicRegion.of(REGION))
    pri = location_plan(path, "prilocation", steps=no_drop, params=LOCATION_PLANS["prilocation"][0])
    grid = location_plan(path, "uniform_grid")
    monkeypatch.delenv("DPCORE_JOB_MEMORY_ROWS", raising=False)
    assert config.job_memory_rows() == 2_000_000
    assert batch_refusal(pri) is None and batch_refusal(pri, rows=2_000_000) is None
    above = batch_refusal(pri, rows=2_000_001)
    assert above is not None and "2,000,001 rows, above a batch job's limit of 2,000,000" in above
    assert batch_refusal(grid, rows=10**9) is None  # out of core: any number of rows
    monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "900")
    assert batch_refusal(pri, rows=900) is None and "limit of 900" in str(batch_refusal(pri, rows=901))
    for bad in ("lots", "0", "-5", "1.5"):
        monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", bad)
        with pytest.raises(ParameterError, match="DPCORE_JOB_MEMORY_ROWS"):
            config.job_memory_rows()
        assert "DPCORE_JOB_MEMORY_ROWS" in str(batch_refusal(pri, rows=10))
    monkeypatch.delenv("DPCORE_JOB_MEMORY_ROWS")
    with pytest.raises(ParameterError, match="--memory-rows must be a positive"):
        run_plan(
            pri.to_manifest(),
            path,
            ledger=Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}"),
            artifacts_dir=tmp_path / "out",
            user="u",
            memory_rows=0,
        )
    # data-derived preparation is still refused, whatever the rows
    df, _ = people
    derived = imputed_plan(df, "dp_lloyd_mcmc", MCMC)
    for rows in (None, 10):
        assert "read values from the data" in str(batch_refusal(derived, rows=rows))


@pytest.mark.slow
def test_the_locations_page_releases_planar_laplace_on_the_whole_table(
    folder: Path,  # noqa: F811
    downloads: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "899")
    at, ds = locations_page(folder, "planar_laplace", GEO)
    (release,) = [b for b in at.button if str(b.label).startswith("Release on the whole table (900 rows")]
    assert release.disabled
    (refusal,) = [w.value for w in at.warning if "A release must use the whole table" in w.value]
    assert "the table has 900 rows, above a batch job's limit of 899" in refusal
    assert not [n for n in downloads if n.startswith("plan-")]
    monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "900")
    _ok(at.run())
    (release,) = [b for b in at.button if str(b.label).startswith("Release on the whole table (900 rows")]
    assert not release.disabled and not any("A release must use" in w.value for w in at.warning)
    (name,) = [n for n in downloads if n.startswith("plan-")]
    plan = ReleasePlan.from_manifest(json.loads(downloads[name]))
    assert plan.mechanism == "planar_laplace" and plan.fingerprint == ds.fingerprint
    release.click().run()
    _released(at)  # polled as a browser's progress fragment would
    ledger = Ledger(config.ledger_url())
    (record,) = ledger.releases(dataset_id=ds.dataset_id)
    assert record.mechanism == "planar_laplace" and record.request_id == f"plan-{plan.key[:32]}"
    assert record.dataset_fingerprint == ds.fingerprint and ledger.budget(plan.account).epsilon_spent == 1.0
    files = load_artifacts(record.artifact_path)
    released = pd.read_csv(io.BytesIO(next(v for k, v in files.items() if k.endswith(".csv"))))
    whole = pd.read_parquet(folder / "visits.parquet")
    assert len(released) == whole.groupby("user").size().clip(upper=3).sum() > ds.n_rows  # not the sample
    ledger.close()


@pytest.mark.parametrize(
    "engine", ["duckdb", pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]
)
def test_a_folder_of_parts_is_read_in_the_data_page_s_row_order(
    tmp_path: Path, request: pytest.FixtureRequest, engine: str
) -> None:
    """Planar Laplace draws its noise row by row: a job on a folder of uneven Parquet parts (eleven, so
    their names sort part-0, part-1, part-10, part-2, ...) reads the rows in the Data page's order and gives
    the dashboard's release on that folder, with the same demo seed."""
    df, _ = visits_source(tmp_path, 1500)
    parts = tmp_path / "visits"
    parts.mkdir()
    cuts = [0, 7, 60, 61, 300, 420, 700, 701, 980, 1200, 1490, 1500]
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        df.iloc[lo:hi].to_parquet(parts / f"part-{i}.parquet", index=False)
    read = load_source(FolderFile(str(tmp_path), "visits"), folders=(str(tmp_path),), max_rows=10**6)
    assert not read.sampled and read.table["person id"].tolist() != df["person id"].tolist()  # part order
    params, policy = LOCATION_PLANS["planar_laplace"]
    plan = location_plan(tmp_path / "visits.parquet", "planar_laplace", params=params, policy=policy)
    plan = replace(plan, fingerprint=read.fingerprint)  # the folder's, as the Data page read it
    dash = dashboard(read.table, plan, tmp_path)
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    batch, _ = batch_release(tmp_path, dash, parts, engine=engine, spark=spark)
    pd.testing.assert_frame_equal(batch.table, dash.table, check_exact=True)  # row for row
