"""The k-means mechanism contract, like scikit-learn's ``check_estimator``: every registered spec, and a toy
one defined here (white noise with Laplace, registered for this module only), with its declared
parameters on tiny data: releases, compares (its diagnostic trial), plots every declared metric, plans
(the guarantee wording from the spec), records a ledger row, replays from the manifest as a batch job and,
where the spec declares it, releases out of core. The toy also appears in the K-means page's comparison
and release panel. Adding the toy touched this file only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.kmeans import KMEANS, KMeansInputs, release_centroids, sweep, true_clustering
from dpcore.kmeans.registry import METRICS, N_CLUSTERS, centroid_output, check_release_sampler
from dpcore.ledger import Ledger
from dpcore.mechanisms import Sampler
from dpcore.outofcore.features import TableFeatures
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.plots.kmeans import loss_vs_eps
from dpcore.policy import ApproxDP, Blowfish, PartitionGraph, PureDP
from dpcore.registry import Calibration, MechanismSpec, calibration_name, guarantee_name
from dpcore.releases import make_release
from dpcore.steps import DropMissing
from tests.dpcore.outofcore.test_clustering import BOUNDS
from tests.dpcore.outofcore.test_run_plan import people_source

TOY = "toy_laplace_white"
K = 3
SEED = 7


def _toy_noise(inputs: KMeansInputs, epsilon: float, k: int) -> tuple[np.ndarray, float]:
    """True centres of the clustering (k-means++ seed 0 when none is given) and the Laplace scale for a
    local ε bound: Δ₁ = the largest L1 shift of a centroid when one of its rows is removed."""
    labels = inputs.labels if inputs.labels is not None else true_clustering(inputs.X, k, random_state=0)[0]
    centres = KMeansInputs(inputs.X, labels).true_centers()
    counts = np.bincount(labels, minlength=k).astype(float)
    shifts = np.abs(inputs.X - centres[labels]).sum(axis=1) / np.maximum(counts[labels] - 1.0, 1.0)
    return centres, float(shifts.max()) / epsilon


def toy_release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, random_state: object
) -> object:
    """True centres + Lap(Δ₁ / ε) per coordinate, once."""
    sampler = check_release_sampler(random_state)
    centres, scale = _toy_noise(inputs, epsilon, params["n_clusters"])
    noisy = centres + sampler.laplace(centres.shape, scale)
    return centroid_output(TOY, inputs, noisy, {"n_clusters": params["n_clusters"]})


def toy_trial(
    inputs: KMeansInputs,
    eps_grid: np.ndarray,
    trials: int,
    *,
    params: dict,
    random_state: Sampler,
    **_: object,
) -> np.ndarray:
    """Diagnostic centres (E, trials, K, d)."""
    out = []
    for eps in eps_grid:
        centres, scale = _toy_noise(inputs, float(eps), params["n_clusters"])
        out.append(centres + random_state.laplace((trials, *centres.shape), scale))
    return np.asarray(out)


TOY_SPEC = MechanismSpec(
    domain="kmeans",
    key=TOY,
    label="Toy white Laplace",
    definition="local_pdp",
    summary="Adds random noise of one size to each true cluster centre (a test's own mechanism).",
    formula="c_k + Lap(Δ₁ / ε) per coordinate, Δ₁ = max_p ‖x_p − c_k‖₁ / (n_k − 1).",
    citation="Dwork, McSherry, Nissim & Smith 2006",
    release=toy_release,
    params=(N_CLUSTERS,),
    trial=toy_trial,
    metrics=METRICS,
    calibration=lambda params: Calibration(
        "laplace", "an ε indistinguishability bound (Laplace calibration)"
    ),
    color="#123456",
)


@pytest.fixture(scope="module", autouse=True)
def toy() -> Iterator[MechanismSpec]:
    """The toy registered for this module only (unregistered after it: other tests see the registry as is)."""
    KMEANS.register(TOY_SPEC)
    yield TOY_SPEC
    KMEANS.unregister(TOY)


def _keys() -> list[str]:
    return [*KMEANS, TOY]


def _params(spec: MechanismSpec) -> dict:
    """Declared defaults, K = 3, short chains, and what follows a (Blowfish) policy."""
    values: dict = {"n_clusters": K}
    if spec.param("mcmc_steps") is not None:
        values["mcmc_steps"] = 300
    for p in spec.params:
        if p.from_policy is not None:
            values[p.name] = p.from_policy(_policy(spec))
    return spec.validate_params(values)


def _policy(spec: MechanismSpec) -> object:
    if spec.definition == "blowfish":
        return Blowfish(1.0, PartitionGraph(1.0))
    return ApproxDP(1.0, 1e-6) if spec.needs_delta else PureDP(1.0)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path, object, tuple]:
    """A 300-row table on disk (two rows with a missing value, dropped), prepared as the dashboard does."""
    tmp = tmp_path_factory.mktemp("contract")
    df, path = people_source(tmp, 300)
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    steps = preparation_steps([DropMissing(("a",), int(df["a"].isna().sum()))], prep)
    return df, path, prep, steps


@pytest.fixture(scope="module")
def clustering(source) -> np.ndarray:
    return true_clustering(source[2].X, K, random_state=0)[0]


@pytest.mark.parametrize("key", _keys())
def test_release_compare_and_plot(key: str, source, clustering) -> None:
    spec = KMEANS[key]
    prep = source[2]
    inputs = KMeansInputs.from_prepared(prep, clustering)
    delta = 1e-6 if spec.needs_delta else 0.0
    params = _params(spec)
    out = release_centroids(key, inputs, epsilon=1.0, delta=delta, random_state=SEED, params=params)
    assert len(out.table) == K and out.table.columns[0] == "cluster"
    assert spec.trial is not None and spec.metrics and spec.color and spec.color.startswith("#")
    bounds = (prep.lower, prep.upper)
    frame = sweep(
        prep.X, clustering, [key], [0.5, 2.0], 2, 1e-6, bounds=bounds, random_state=0, params=params
    )
    assert set(frame["mechanism"]) == {key} and len(frame) == 2 * 2
    for metric in spec.metrics:
        assert metric.name in frame.columns
        fig = loss_vs_eps(frame, metric.name)
        assert fig.layout.yaxis.title.text == metric.title
        assert spec.label in {t.name for t in fig.data}


@pytest.mark.parametrize("key", _keys())
def test_plan_record_and_replay(key: str, source, tmp_path: Path) -> None:
    spec = KMEANS[key]
    _, path, prep, steps = source
    params = _params(spec)
    plan = ReleasePlan(
        domain="kmeans",
        mechanism=key,
        epsilon=1.0,
        delta=1e-6 if spec.needs_delta else 0.0,
        policy=_policy(spec),
        dataset_name="people",
        fingerprint=prep.fingerprint,
        params=params,
        preparation=steps,
        mode="demo",
        seed=SEED,
    )
    manifest = plan.to_manifest()
    assert manifest["mechanism"] == key and manifest["mechanism_label"] == spec.label
    assert guarantee_name(spec, plan.params)[1:] in plan.guarantee  # capitalised at the start
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    ledger.set_budget(plan.account, epsilon=5.0, delta=1e-5)
    labels = true_clustering(prep.X, K, random_state=0)[0] if not spec.is_dp else None
    dash = make_release(
        ledger,
        plan,
        KMeansInputs.from_prepared(prep, labels),
        request_id="dash-1",
        user="u",
        artifacts_dir=tmp_path / "dash",
        name="kmeans",
    )
    (row,) = ledger.releases(plan.account)
    assert row.mechanism == key and row.calibration == calibration_name(spec, plan.params)
    batch_ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    batch_ledger.set_budget(plan.account, epsilon=5.0, delta=1e-5)
    batch = run_plan(dash.manifest, path, ledger=batch_ledger, artifacts_dir=tmp_path / "out", user="batch")
    (batch_row,) = batch_ledger.releases(plan.account)
    assert batch_row.mechanism == key and len(batch.table) == K
    if spec.out_of_core is None or spec.is_dp:  # in memory, or the Lloyd passes: the same noise draws
        pd.testing.assert_frame_equal(batch.table, dash.table, check_exact=False, rtol=1e-9)


@pytest.mark.parametrize("key", [k for k in KMEANS if KMEANS[k].out_of_core is not None])
def test_out_of_core_release(key: str, source) -> None:
    import ibis

    spec = KMEANS[key]
    table = ibis.duckdb.connect().read_parquet(str(source[1]))
    features = TableFeatures.from_bounds(table.filter(table["a"].notnull()), BOUNDS)
    delta = 1e-6 if spec.needs_delta else 0.0
    out = spec.run(features, epsilon=1.0, delta=delta, params=_params(spec), random_state=Sampler(SEED))
    assert len(out.table) == K


def test_a_former_key_still_loads_its_manifest_plan_and_ledger_row(source, tmp_path: Path) -> None:
    """Manifests, plans and ledger rows written before Blowfish k-means was renamed keep loading."""
    (spec,) = [s for s in KMEANS.values() if s.aliases]
    former = spec.aliases[0]
    prep, steps = source[2], source[3]
    plan = ReleasePlan(
        "kmeans",
        former,
        1.0,
        _policy(spec),
        "people",
        prep.fingerprint,
        params=_params(spec),
        preparation=steps,
    )
    again = ReleasePlan.from_manifest(json.loads(json.dumps(plan.to_manifest())))
    assert again.spec is spec and again.key == plan.key and again.mechanism == former
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'old.db'}")
    demo = plan.with_mode("demo", SEED)
    ledger.set_budget(demo.account, epsilon=5.0)
    rel = make_release(
        ledger,
        demo,
        KMeansInputs.from_prepared(prep),
        request_id="old-1",
        user="u",
        artifacts_dir=tmp_path / "old",
    )
    assert rel.record.mechanism == former
    from ui.ledger_view import releases_frame

    (shown,) = releases_frame(ledger)["mechanism"]
    assert shown == spec.label


def test_the_toy_appears_in_the_page_comparison_and_release_panel(source) -> None:
    """Ticked by default, compared (every declared metric in the picker), the detailed view still draws
    the others' ellipses though the toy has no covariance, and the release panel plans it with its own
    guarantee wording."""
    from tests.pages.test_kmeans import _dataset, _errors, _page

    df = source[0]
    at = _page(_dataset(df, "people", features=list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop"))
    assert not at.exception, [e.value for e in at.exception]
    assert at.checkbox(key=f"km_mech_{TOY}").value is True
    at.checkbox(key="km_mech_colored").check()
    at.select_slider(key="km_eps_range").set_value((0.5, 1.0))
    at.number_input(key="km_trials").set_value(2)
    at.button(key="km_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert TOY in set(at.session_state["km_sweep"].frame["mechanism"])
    assert at.selectbox(key="km_metric").options == [m.title for m in TOY_SPEC.metrics]  # none left off
    at.selectbox(key="km_view_mech").set_value(TOY).run()
    assert not at.exception
    embedding = [
        c
        for c in at.get("plotly_chart")
        if "embedding" in json.loads(c.proto.spec)["layout"]["title"]["text"]
    ]
    names = {t.get("name", "") for t in json.loads(embedding[0].proto.spec)["data"]}
    assert "Colored Gaussian (optimal): 1σ noise" in names and "Toy white Laplace centres (ε = 0.7)" in names
    at.selectbox(key="km_rel_mech").set_value(TOY).run()
    assert not at.exception
    shown = " ".join(str(t.value) for t in at.table) + " ".join(w.value for w in at.warning)
    assert "Toy white Laplace" in shown and "Laplace calibration" in shown
