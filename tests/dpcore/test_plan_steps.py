"""Typed plan steps (dpcore.steps): each step is validated on creation, carried typed in the plan and the
manifest, its words derived from its fields; the digest follows every field; a batch job replays from the
fields whatever the column names; manifests written before the steps were typed (tests/data/manifests_v1,
written by main at 5d4c0e0) still load, show their steps as written, and replay."""

from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import fingerprint, load_table
from dpcore.errors import DataError, DPCoreError, ParameterError
from dpcore.html_report import html_report
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region
from dpcore.location.plan_steps import LocationColumns, PublicRegion
from dpcore.location.registry import LocationInputs
from dpcore.manifest import changed_fields, load_manifest, v1_step
from dpcore.outofcore.run_plan import batch_refusal, run_plan
from dpcore.plan import ReleasePlan
from dpcore.policy import LocalPDP, PureDP
from dpcore.private_bounds import BoundsStep
from dpcore.releases import make_release
from dpcore.steps import (
    BoundsFromData,
    CategoriesFromData,
    DropMissing,
    Features,
    Impute,
    ImputedFeature,
    Standardize,
    Unreadable,
    step_from_dict,
)
from dpcore.trajectory.plan_steps import PublicTripLimits, TrajectoryColumns
from tests.paths import DATA

OLD = DATA / "manifests_v1"
TABLES = {"kmeans": "people", "kmeans-private-bounds": "people", "location": "visits"}
REGION = Region(24.396308, 49.384358, -124.848974, -66.885444)
X, Y, SKIP = "x; y [cm]", "z], w[0", "note; [not read]"  # names the words of a step cannot be read back from
LAT, LON, USER = "lat; [deg]", "lon], e", 'id; ["u"]'


def _csv(release) -> bytes:
    return next(v for k, v in release.files.items() if k.endswith(".csv"))


def _ledger(tmp_path: Path, plan: ReleasePlan, name: str = "ledger") -> Ledger:
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / f'{name}.db'}")
    ledger.set_budget(plan.account, epsilon=10.0)
    return ledger


@pytest.mark.parametrize("stem", [*TABLES, "kmeans-demo-imputed"])
def test_an_old_manifest_loads_with_its_steps_typed_and_shows_them_as_written(stem: str) -> None:
    manifest = load_manifest(OLD / f"{stem}-manifest.json")
    assert manifest["plan_version"] == 1
    plan = ReleasePlan.from_manifest(manifest)
    old = [(s["step"], s["data_derived"]) for s in manifest["preparation"]]
    assert [(s.text, s.data_derived) for s in plan.preparation] == old
    assert not [s for s in plan.preparation if isinstance(s, Unreadable)]
    assert plan.guarantee == manifest["guarantee"] and plan.account.key == manifest["account"]
    shown = [v for k, v in plan.summary_rows() if k == "Preparation"]
    assert shown == [w + " (data-derived)" * d for w, d in old]
    page = html_report("old release", plan.to_manifest())
    assert all(html.escape(w) in page for w, _ in old)
    assert changed_fields(manifest, plan) == []  # its first release is this plan: a rerun spends nothing
    again = ReleasePlan.from_manifest(json.loads(json.dumps(plan.to_manifest())))
    assert again == plan and again.key == plan.key and plan.to_manifest()["plan_version"] == 2


@pytest.mark.parametrize("stem", list(TABLES))
def test_an_old_manifest_replays_on_its_table(tmp_path: Path, stem: str) -> None:
    manifest = load_manifest(OLD / f"{stem}-manifest.json")
    plan = ReleasePlan.from_manifest(manifest)
    ledger = _ledger(tmp_path, plan)
    kw = {"ledger": ledger, "artifacts_dir": tmp_path / "out", "user": "batch"}
    first = run_plan(manifest, OLD / f"{TABLES[stem]}.parquet", **kw)
    assert first.record.request_id == manifest["request_id"] and not first.replayed
    assert ledger.budget(plan.account).epsilon_spent == pytest.approx(plan.cost[0])
    assert first.manifest["preparation"] == plan.to_manifest()["preparation"]
    assert run_plan(manifest, OLD / f"{TABLES[stem]}.parquet", **kw).replayed  # debited once


def test_an_old_data_derived_manifest_is_refused_by_a_batch_job_naming_its_steps() -> None:
    plan = ReleasePlan.from_manifest(load_manifest(OLD / "kmeans-demo-imputed-manifest.json"))
    assert [type(s) for s in plan.preparation if s.data_derived] == [
        ImputedFeature,
        BoundsFromData,
        Standardize,
    ]
    refusal = batch_refusal(plan)
    assert refusal is not None and "c: missing values replaced by the mean of the data" in refusal


def test_old_words_of_names_with_separators_stay_words_and_are_not_replayed() -> None:
    """What could not be read back before the change still cannot (it is shown, never guessed)."""
    words = f"features and public bounds: {X} [0.0, 1.0]; b [0.0, 2.0]; scaling: minmax"
    step = v1_step(words, False, {})
    assert step == Unreadable(words, False) and step.text == words
    assert v1_step("drop on a, b (3 rows removed)", False, {}) == DropMissing(("a", "b"), 3)
    assert v1_step("drop on a (3 rows removed)", True, {}) == Unreadable("drop on a (3 rows removed)", True)


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    rng = np.random.default_rng(2)
    centres = rng.uniform(-0.6, 0.6, (3, 2))
    df = pd.DataFrame(centres[rng.integers(0, 3, 400)] + rng.normal(0, 0.1, (400, 2)), columns=[X, Y])
    df[SKIP] = rng.normal(0, 1, 400)
    df.loc[[3, 8], X] = np.nan
    df.loc[[5], SKIP] = np.nan
    path = tmp_path_factory.mktemp("odd") / "odd.parquet"
    df.to_parquet(path, index=False)
    return df, path


def _kmeans_plan(fp: str, steps: tuple) -> ReleasePlan:
    return ReleasePlan(
        "kmeans",
        "dp_lloyd",
        1.0,
        PureDP(1.0),
        "odd",
        fp,
        params={"n_clusters": 3},
        preparation=steps,
        mode="demo",
        seed=5,
    )


def test_a_column_named_with_separators_round_trips_and_replays(odd_names, tmp_path: Path) -> None:
    from dpcore.data import infer_schema, prepare
    from dpcore.plan import preparation_steps

    df, path = odd_names
    clean = df.dropna(subset=[X])
    bounds = {X: (-1.0, 1.0), Y: (-1.0, 1.0)}
    prep = prepare(clean, infer_schema(clean), [X, Y], scaling="minmax", bounds=bounds)
    cleaning = [DropMissing((X,), 2), Impute("median", (SKIP,))]
    steps = preparation_steps(cleaning, prep, used=prep.feature_names)
    assert steps == (
        DropMissing((X,), 2),
        Impute("median", (SKIP,), effect=False),
        Features((X, Y), ((-1.0, 1.0),) * 2, "minmax"),
    )
    plan = _kmeans_plan(fingerprint(load_table(path)), steps)
    manifest = json.loads(json.dumps(plan.to_manifest()))
    assert ReleasePlan.from_manifest(manifest) == plan and ReleasePlan.from_manifest(manifest).key == plan.key
    dash = make_release(
        _ledger(tmp_path, plan, "dash"),
        plan,
        KMeansInputs.from_prepared(prep),
        request_id="dash",
        user="u",
        artifacts_dir=tmp_path / "dash",
    )
    batch = run_plan(
        dash.manifest, path, ledger=_ledger(tmp_path, plan), artifacts_dir=tmp_path / "b", user="b"
    )
    assert _csv(batch) == _csv(dash)  # the same rows dropped, bounds and scaling: the same release


def test_location_columns_named_with_separators_replay(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    df = pd.DataFrame({LAT: rng.uniform(30, 45, 300), LON: rng.uniform(-110, -80, 300)})
    df[USER] = [f"u{i}" for i in rng.integers(0, 60, 300)]
    df.loc[[2, 7], LAT] = np.nan
    path = tmp_path / "spots.parquet"
    df.to_parquet(path, index=False)
    steps = (DropMissing((LAT,), 2), LocationColumns(LAT, LON, USER), PublicRegion.of(REGION))
    plan = ReleasePlan(
        "location",
        "uniform_grid",
        1.0,
        PureDP(1.0),
        "spots",
        fingerprint(load_table(path)),
        params={"neighbours": "unbounded", "max_per_user": 2},
        preparation=steps,
        mode="demo",
        seed=4,
        scope=scope_sentence(True, 2),
    )
    clean = df.dropna(subset=[LAT])
    inputs = LocationInputs(clean[LAT].to_numpy(), clean[LON].to_numpy(), clean[USER].to_numpy(), REGION)
    dash = make_release(
        _ledger(tmp_path, plan, "dash"),
        plan,
        inputs,
        request_id="dash",
        user="u",
        artifacts_dir=tmp_path / "d",
    )
    batch = run_plan(
        dash.manifest, path, ledger=_ledger(tmp_path, plan), artifacts_dir=tmp_path / "b", user="b"
    )
    assert _csv(batch) == _csv(dash)


STEPS = (
    DropMissing(("a", "b"), 3),
    Impute("median", ("d",), effect=False),
    Features(("a", "b", "c"), ((-10.0, 10.0), (0.0, 10.0), "private"), "minmax"),
    BoundsStep(("c",), 0.5),
)
CHANGES = [
    (0, {"columns": ("a",)}),
    (0, {"removed": 4}),
    (1, {"columns": ("e",)}),
    (1, {"strategy": "mean"}),
    (2, {"bounds": ((-10.0, 10.5), (0.0, 10.0), "private")}),
    (2, {"scaling": "none"}),
    (3, {"alpha": 0.05}),
    (3, {"epsilon": 0.25}),
]


def _private_plan(steps: tuple) -> ReleasePlan:
    bounds = next(s for s in steps if isinstance(s, BoundsStep))
    return ReleasePlan(
        "kmeans",
        "dp_lloyd",
        1.0,
        PureDP(1.0),
        "people",
        "0" * 64,
        params={"n_clusters": 3},
        preparation=steps,
        private_bounds=bounds.fields(),
    )


@pytest.mark.parametrize(("index", "change"), CHANGES)
def test_the_digest_changes_with_every_field_of_every_step(index: int, change: dict) -> None:
    plan = _private_plan(STEPS)
    steps = list(STEPS)
    steps[index] = replace(steps[index], **change)
    changed = _private_plan(tuple(steps))
    assert changed.key != plan.key and changed.digest != plan.digest
    assert [r for r in changed.summary_rows() if r[0] == "Preparation"] != [
        r for r in plan.summary_rows() if r[0] == "Preparation"
    ]  # what is shown changed with it


def test_a_manifest_step_altered_or_in_words_is_refused() -> None:
    manifest = _private_plan(STEPS).to_manifest()
    features = manifest["preparation"][2]
    altered = [
        {**features, "step": features["step"].replace("10.0]", "20.0]")},  # the words only
        {**features, "bounds": [[-10.0, 20.0], [0.0, 10.0], "private"]},  # the fields only
        {**features, "data_derived": True},
        {**features, "kind": "sorcery"},
        {"step": features["step"], "data_derived": False},  # words without a kind, in a version 2 plan
    ]
    for step in altered:
        with pytest.raises(ParameterError):
            ReleasePlan.from_manifest({**manifest, "preparation": [*manifest["preparation"][:2], step]})
    with pytest.raises(DPCoreError, match="not the one the plan's preparation lists"):
        replace(_private_plan(STEPS), private_bounds=BoundsStep(("c",), 0.4).fields())


def test_every_kind_round_trips_through_its_manifest_entry() -> None:
    steps = [
        *STEPS,
        ImputedFeature("a; b", "mode"),
        CategoriesFromData("kind [x]", 4),
        BoundsFromData("c"),
        Standardize(),
        LocationColumns(LAT, LON, None),
        PublicRegion.of(REGION),
        TrajectoryColumns("who", "when; [utc]", LAT, LON, None, "Europe/Paris"),
        PublicTripLimits.of(REGION, 1200.0, 70.5),
        Unreadable("a step of an old plan", True),
    ]
    for step in steps:
        entry = json.loads(json.dumps(step.to_dict()))
        assert step_from_dict(entry) == step and entry["step"] == step.text and entry["kind"] == step.kind


@pytest.mark.parametrize(
    "make",
    [
        lambda: DropMissing((), 1),
        lambda: DropMissing("a", 1),
        lambda: DropMissing(("a", "a"), 1),
        lambda: DropMissing(("a",), -1),
        lambda: Impute("zero", ("a",)),
        lambda: Features(("a",), ((1.0, 0.0),), "minmax"),
        lambda: Features(("a", "b"), ((0.0, 1.0),), "minmax"),
        lambda: Features(("a",), ((0.0, float("inf")),), "minmax"),
        lambda: Features(("a",), ("guess",), "minmax"),
        lambda: Features(("a",), ((0.0, 1.0),), "robust"),
        lambda: CategoriesFromData("a", 0),
        lambda: LocationColumns("", "lon"),
        lambda: PublicRegion(10.0, 5.0, 0.0, 1.0),
        lambda: PublicTripLimits.of(REGION, 0.0, 70.0),
        lambda: BoundsStep(("c",), 0.5, alpha=0.7),
    ],
)
def test_a_step_refuses_invalid_fields_on_creation(make) -> None:
    with pytest.raises(ParameterError):
        make()


def test_a_plan_refuses_steps_given_as_words() -> None:
    with pytest.raises(ParameterError, match="typed step"):
        _kmeans_plan("0" * 64, ("drop on a (1 rows removed)",))
    with pytest.raises(DataError):
        load_manifest(OLD / "people.parquet")


def test_an_old_classic_calibrated_manifest_loads_with_its_wrong_word_corrected() -> None:
    """Version 1 called the classic Gaussian calibration "analytic" in a local release's guarantee; such a
    manifest still loads (the word corrected), and any other change to the guarantee is still refused."""
    plan = ReleasePlan(
        "kmeans", "white", 0.5, LocalPDP(0.5, 1e-6), "people", "f" * 64, delta=1e-6,
        params={"n_clusters": 3, "calibration": "classic"}, preparation=(DropMissing(("x",), 2),),
    )
    now = plan.to_manifest()
    assert "(classic Gaussian calibration;" in now["guarantee"]
    old = {
        **now,
        "plan_version": 1,
        "preparation": [{"step": s.text, "data_derived": s.data_derived} for s in plan.preparation],
        "guarantee": now["guarantee"].replace("(classic Gaussian", "(analytic Gaussian"),
    }
    again = ReleasePlan.from_manifest(old)
    assert again == plan and again.key == plan.key
    with pytest.raises(DPCoreError, match="guarantee does not follow"):
        altered = old["guarantee"].replace("this dataset", "any dataset")
        ReleasePlan.from_manifest({**old, "guarantee": altered})
