"""A hand-edited plan whose manifest would misdescribe what ran is refused by ``run-plan`` before any debit:
its "drop" step deleted (the features' filter would still drop those rows, unrecorded) or its scope
deleted (the release would protect a user while the manifest says nothing); a drop step drops what the
Data page's drop does (NaN and +-inf, also in a column that is not a feature)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import fingerprint, handle_missing, infer_schema, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.releases import make_release
from dpcore.steps import DropMissing
from tests.dpcore.outofcore.test_clustering import BOUNDS
from tests.dpcore.outofcore.test_run_plan import dashboard_release, kmeans_plan, people_source
from tests.dpcore.outofcore.test_run_plan_locations import dashboard, location_plan, visits_source


def _batch(tmp_path: Path, plan: ReleasePlan) -> tuple[Ledger, dict]:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0)
    return ledger, {"ledger": ledger, "artifacts_dir": tmp_path / "batch", "user": "batch"}


def test_a_plan_without_its_drop_step_is_refused_and_spends_nothing(tmp_path: Path) -> None:
    df, path = people_source(tmp_path, 600)
    manifest, _ = dashboard_release(tmp_path, df)
    edited = copy.deepcopy(manifest)
    edited["preparation"] = [s for s in edited["preparation"] if not s["step"].startswith("drop on")]
    plan = ReleasePlan.from_manifest(edited)
    ledger, kw = _batch(tmp_path, plan)
    with pytest.raises(ParameterError, match=r"2 row\(s\) miss a value in feature\(s\) a "):
        run_plan(edited, path, **kw)
    assert ledger.budget(plan.account).epsilon_spent == 0.0
    assert run_plan(manifest, path, **_batch(tmp_path / "ok", plan)[1]).table.shape[0] == 3


def test_a_drop_step_drops_infinite_values_as_the_data_page_does(tmp_path: Path) -> None:
    df, path = people_source(tmp_path, 600)
    df["w"] = 1.0  # not a feature, dropped on: +-inf rows go as the Data page's drop removes them
    df.loc[[20, 30], "w"] = [np.inf, -np.inf]
    df.to_parquet(path, index=False)
    cleaned = handle_missing(df, ["a", "w"], "drop")
    prep = prepare(cleaned, infer_schema(cleaned), list(BOUNDS), scaling="minmax", bounds=BOUNDS)
    steps = preparation_steps([DropMissing(("a", "w"), len(df) - len(cleaned))], prep)
    plan = kmeans_plan("dp_lloyd", fingerprint(df), steps, seed=7)
    assert prep.n_samples == 596
    ledger = _batch(tmp_path, plan)[0]
    dash = make_release(
        ledger, plan, KMeansInputs.from_prepared(prep), request_id="d", user="u", artifacts_dir=tmp_path / "d"
    )
    batch = run_plan(plan.to_manifest(), path, **_batch(tmp_path / "job", plan)[1])
    pd.testing.assert_frame_equal(batch.table, dash.table, check_exact=True)


def test_a_location_plan_without_its_scope_is_refused_and_spends_nothing(tmp_path: Path) -> None:
    df, path = visits_source(tmp_path, 400)
    plan = location_plan(path, "dp_mean", neighbours="bounded")
    dashboard(df, plan, tmp_path)
    edited = plan.to_manifest()
    edited["scope"] = ""
    edited.pop("guarantee"), edited.pop("account")
    unscoped = ReleasePlan.from_manifest(edited)
    assert unscoped.scope == ""
    ledger, kw = _batch(tmp_path, unscoped)
    with pytest.raises(ParameterError, match="does not say what it protects"):
        run_plan(edited, path, **kw)
    assert ledger.budget(unscoped.account).epsilon_spent == 0.0
