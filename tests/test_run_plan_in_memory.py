"""``run-plan`` on a mechanism without out-of-core passes (DP-Lloyd + MCMC, planar Laplace, PriLocation): the
batch job reads the whole table's prepared rows into memory when they are at most ``memory_rows``, and
releases exactly what the dashboard releases on that table (same demo seed: the same files byte for byte);
above the limit it refuses in one line before any debit. The release panel on a sample offers the whole
table's release when the table is within the limit."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore import config
from dpcore.data import fingerprint, infer_schema, load_table, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan, policy_account, preparation_steps
from dpcore.policy import GeoIndistinguishability, PureDP
from dpcore.report import load_artifacts, make_release
from tests.test_app_sources import _folder_secrets, _load_folder_file, _ok, _open
from tests.test_app_sources_locations import folder  # noqa: F401 (the 900-row visits fixture)
from tests.test_app_whole_table import _released
from tests.test_outofcore import BOUNDS, table
from tests.test_run_plan import cli
from tests.test_run_plan_locations import dashboard, location_plan, visits
from ui.state import POLICY_KEY

GEO = GeoIndistinguishability.from_level(1.0, 1000.0)
#: The location plans (per user, at most 2 locations each) that read their rows in memory.
LOCATION_PLANS = {
    "planar_laplace": ({"radius_m": 1000.0}, GEO),
    "prilocation": ({"hs_m": 300_000.0, "n_clusters": 5, "grid_size": 10}, None),
}
MCMC = {"n_clusters": 3, "n_iter": 0, "neighbours": "unbounded", "mcmc_steps": 2000}


@pytest.fixture
def people(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    df = table(1500)
    df.loc[[4, 9], "a"] = np.nan  # dropped by the plan's drop step
    path = tmp_path / "people.parquet"
    df.to_parquet(path, index=False)
    return df, path


@pytest.fixture
def places(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    df = visits(1500).rename(columns={"lat": "Latitude", "lon": "Longitude", "user": "person id"})
    df.loc[[3, 11], "Latitude"] = np.nan  # dropped by the plan's drop step
    path = tmp_path / "visits.parquet"
    df.to_parquet(path, index=False)
    return df, path


def mcmc_release(tmp_path: Path, df: pd.DataFrame):
    """DP-Lloyd + MCMC released as the dashboard releases it (in memory, demo seed) on its own ledger."""
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    plan = ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd_mcmc", epsilon=1.0, policy=PureDP(1.0), dataset_name="people",
        fingerprint=prep.fingerprint, params=MCMC,
        preparation=preparation_steps([f"drop on a ({int(df['a'].isna().sum())} rows removed)"], prep),
        mode="demo", seed=11,
    )
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dashboard.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    return make_release(
        ledger, plan, KMeansInputs.from_prepared(prep), request_id="dash-mcmc", user="u",
        artifacts_dir=tmp_path / "dash-artifacts", name="kmeans",
    )


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
    assert batch.manifest["dataset_fingerprint"] == fingerprint(load_table(path)) == plan.fingerprint
    assert len(ledger.releases(plan.account)) == 1
    assert ledger.budget(plan.account).epsilon_spent == plan.epsilon


@pytest.mark.parametrize("mechanism", list(LOCATION_PLANS))
def test_a_location_mechanism_in_memory_gives_the_dashboard_s_release(
    places, tmp_path: Path, mechanism: str
) -> None:
    df, path = places
    dash = location_release(tmp_path, df, path, mechanism)
    assert dash.manifest["details"]["max_per_user"] == 2
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(ReleasePlan.from_manifest(dash.manifest).account, epsilon=5.0)
    stages: list[str] = []
    batch = run_plan(
        dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch",
        memory_rows=len(df) - 2, progress=stages.append,
    )
    assert_same_release(dash, batch, ledger, path)
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
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(ReleasePlan.from_manifest(dash.manifest).account, epsilon=5.0)
    batch = run_plan(
        dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch", engine="spark",
        spark=spark,
    )
    assert_same_release(dash, batch, ledger, path)


def test_dp_lloyd_mcmc_in_memory_gives_the_dashboard_s_release(people, tmp_path: Path) -> None:
    df, path = people
    dash = mcmc_release(tmp_path, df)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(ReleasePlan.from_manifest(dash.manifest).account, epsilon=5.0)
    batch = run_plan(dash.manifest, path, ledger=ledger, artifacts_dir=tmp_path / "out", user="batch")
    assert_same_release(dash, batch, ledger, path)
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
    pri = location_plan(path, "prilocation", params=LOCATION_PLANS["prilocation"][0])
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
        run_plan(pri.to_manifest(), path, ledger=Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}"),
                 artifacts_dir=tmp_path / "out", user="u", memory_rows=0)
    # data-derived preparation is still refused, whatever the rows
    df, _ = people
    imputed = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="median")
    derived = ReleasePlan(
        domain="kmeans", mechanism="dp_lloyd_mcmc", epsilon=1.0, policy=PureDP(1.0), dataset_name="people",
        fingerprint=imputed.fingerprint, params=MCMC, preparation=preparation_steps([], imputed),
        mode="demo", seed=1,
    )
    for rows in (None, 10):
        assert "read values from the data" in str(batch_refusal(derived, rows=rows))


def _planar_laplace_page(folder: Path):  # noqa: F811
    """The 900-row visits table loaded as a 300-row sample, a geo-indistinguishability budget, planar Laplace
    per user (at most 3 locations each) on the Locations page."""
    at = _open(_folder_secrets(folder, max_rows=300))
    _load_folder_file(at, "tables/visits.parquet")
    ds = at.session_state["dp_dataset"]
    at.session_state[POLICY_KEY] = GEO  # set on the Privacy policy page
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(ds.dataset_id, GEO), 5.0)
    ledger.close()
    at.switch_page("pages/locations.py").run()
    at.selectbox(key="loc_user").set_value("user").run()
    at.selectbox(key=f"loc_region_{ds.dataset_id}").set_value("Contiguous US (24, 50, -125, -66)").run()
    at.selectbox(key="loc_rel_mech").set_value("planar_laplace").run()
    at.number_input(key="loc_max_per_user").set_value(3).run()
    return _ok(at), ds


@pytest.mark.slow
def test_the_locations_page_releases_planar_laplace_on_the_whole_table(
    folder: Path, downloads: dict[str, bytes], monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("DPCORE_JOB_MEMORY_ROWS", "899")
    at, ds = _planar_laplace_page(folder)
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
