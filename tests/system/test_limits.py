"""Resource limits: the comparisons stream their trials in bounded memory, and every numeric setting has
an upper limit that the engine enforces (a notebook user is refused as the pages are)."""

from __future__ import annotations

import importlib
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore.errors import ParameterError
from dpcore.kmeans import KMEANS, KMeansInputs, LeeKiferKMeans, release_centroids, sweep, true_clustering
from dpcore.kmeans.mcmc import mcmc_postprocess
from dpcore.location import LOCATIONS, Region
from dpcore.location.sweep import location_sweep
from dpcore.mechanisms import Sampler
from dpcore.registry import MechanismSpec, Param, Registry
from tests.paths import ROOT

BOX = (np.full(2, -4.0), np.full(2, 4.0))
US = Region(24.0, 50.0, -125.0, -66.0)


def _peak_mb(run: Callable[[], object]) -> float:
    """Peak memory traced while ``run()`` runs (numpy reports its buffers to tracemalloc), in MB."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _blobs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    centres = np.array([[-2.0, -2.0], [2.0, 2.0], [2.0, -2.0]])
    return np.clip(centres[labels] + 0.5 * rng.normal(size=(n, 2)), -4, 4), labels


# ---------------------------------------------------------------- bounded memory


def test_sweep_scores_trials_in_chunks_of_bounded_memory() -> None:
    """8 x the trials may not take 8 x the memory: the centre sets are scored in bounded chunks.

    Scoring all (eps, trial) centre sets at once held labels and distances of every set for every row
    (sets x rows x 16 bytes and more): memory linear in rows x trials x eps.
    """
    X, labels = _blobs(20_000)

    def run(trials: int) -> Callable[[], object]:
        return lambda: sweep(X, labels, ["white"], [0.5, 2.0], trials, 1e-5, bounds=BOX, random_state=0)

    run(2)()  # the noise shape is solved and cached once per clustering
    small, big = _peak_mb(run(50)), _peak_mb(run(400))
    assert big < 1.3 * small + 5, (small, big)
    assert big < 100, big


def test_chunked_scores_equal_unchunked_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunking changes no score: one set per chunk gives the same table as every set in one chunk."""
    module = importlib.import_module("dpcore.kmeans.sweep")  # the package exports the function as sweep
    X, labels = _blobs(3_000, seed=1)

    def run() -> object:
        return sweep(X, labels, ["white", "dp_lloyd"], [0.5, 2.0], 30, 1e-5, bounds=BOX, random_state=3)

    monkeypatch.setattr(module, "SCORE_ENTRIES", 10**9)
    whole = run()
    monkeypatch.setattr(module, "SCORE_ENTRIES", 1)
    assert whole.equals(run())


def test_mcmc_chains_run_in_groups_of_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 x the chains may not take 5 x the memory: chains step together in groups of bounded state.

    All chains stepped as one group held every chain's synthetic dataset twice (current and best):
    chains x points x (d + T + 2) numbers, e.g. 26 GB for 100 chains x 11 eps on 400k rows. A quarter of
    the rows with a quarter of the group budget keeps the groups (57 chains) and a quarter of the work.
    """
    monkeypatch.setattr(importlib.import_module("dpcore.kmeans.mcmc"), "CHAIN_ENTRIES", 2_000_000)
    X, _ = _blobs(5_000, seed=2)
    est = LeeKiferKMeans(n_clusters=3, epsilon=1.0, bounds=BOX, n_iter=3, n_steps=20, random_state=0)

    def run(chains: int) -> Callable[[], object]:
        return lambda: est.fit_trials(X, [1.0], chains)

    small, big = _peak_mb(run(40)), _peak_mb(run(200))
    assert big < 1.5 * small, (small, big)


def test_planar_lloyd_batches_are_bounded_by_the_rows_they_may_compare() -> None:
    """Batched 2-D fits (hotspots) compare a run's centres with the rows of every cell where two centres
    may be nearest, up to all n rows per run: batches sized by cells alone took 30 runs x n rows at once."""
    from dpcore.kmeans import DPLloydKMeans
    from dpcore.kmeans.lloyd import noisy_lloyd_trials

    rng = np.random.default_rng(10)
    X = rng.uniform(-4, 4, (400_000, 2))
    est = DPLloydKMeans(8, 0.05, bounds=BOX, n_iter=2, random_state=Sampler.diagnostic(0))

    def run(trials: int) -> Callable[[], object]:
        return lambda: noisy_lloyd_trials(est, X, [0.05], trials, Sampler.diagnostic(1))

    small, big = _peak_mb(run(10)), _peak_mb(run(40))
    assert big < 1.3 * small + 5, (small, big)


def test_location_sweep_draws_in_bounded_chunks() -> None:
    """Planar Laplace's radii for every (trial, eps) were drawn as one (trials x eps, visits) array."""
    rng = np.random.default_rng(4)
    lat, lon = rng.uniform(30, 45, 100_000), rng.uniform(-110, -80, 100_000)
    users = np.arange(lat.size)

    def run(trials: int) -> Callable[[], object]:
        return lambda: location_sweep(lat, lon, users, ["planar_laplace"], [0.5, 1.0, 2.0], trials, region=US)

    small, big = _peak_mb(run(5)), _peak_mb(run(40))
    assert big < 1.3 * small + 5, (small, big)


def test_location_sweep_chunked_draws_are_the_same_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawing the radii one (trial, eps) row at a time gives the same table as drawing them all at once."""
    module = importlib.import_module("dpcore.location.trial_data")
    rng = np.random.default_rng(5)
    lat, lon = rng.uniform(30, 45, 2_000), rng.uniform(-110, -80, 2_000)
    users = rng.integers(0, 500, lat.size)
    mechs = ["planar_laplace", "dp_hotspots"]

    def run() -> object:
        return location_sweep(lat, lon, users, mechs, [0.5, 1.0], 3, region=US, random_state=7)

    monkeypatch.setattr(module, "DRAW_ENTRIES", 10**9)
    whole = run()
    monkeypatch.setattr(module, "DRAW_ENTRIES", 1)
    assert whole.equals(run())


# ---------------------------------------------------------------- upper limits


@pytest.mark.parametrize("registry", [KMEANS, LOCATIONS], ids=["kmeans", "location"])
def test_every_numeric_parameter_of_every_mechanism_has_an_upper_limit(registry: Registry) -> None:
    for spec in registry.values():
        for p in spec.params:
            if p.choices is None and p.kind in (int, float):
                assert p.low is not None and p.high is not None and p.low <= p.default <= p.high, (
                    spec.key,
                    p.name,
                )


def test_a_mechanism_with_an_unbounded_numeric_parameter_cannot_register() -> None:
    spec = MechanismSpec(
        domain="toy",
        key="toy",
        label="Toy",
        definition="pure_dp",
        summary="",
        formula="",
        citation="",
        release=lambda *a, **k: None,  # type: ignore[arg-type,return-value]
        params=(Param("rounds", "Rounds", int, 3, low=1),),
    )
    with pytest.raises(ParameterError, match=r"rounds.*explicit range"):
        Registry("toy").register(spec)


def _assert_refused(match: str, run: Callable[[], object]) -> None:
    """``run()`` raises a ParameterError matching ``match`` within a second (before any work)."""
    start = time.perf_counter()
    with pytest.raises(ParameterError, match=match):
        run()
    assert time.perf_counter() - start < 1.0


def test_kmeans_engine_refuses_settings_beyond_their_limits() -> None:
    X, labels = _blobs(300, seed=6)
    args = (X, labels)
    _assert_refused(
        "trials must be a whole number from 1 to 500", lambda: sweep(*args, ["white"], [1.0], 501)
    )
    many_eps = list(np.linspace(0.1, 10, 26))
    _assert_refused("at most 25", lambda: sweep(*args, ["white"], many_eps, 2))
    _assert_refused(
        "MCMC chain length must lie in \\[1, 100000\\]",
        lambda: sweep(*args, ["dp_lloyd_mcmc"], [1.0], 1, 0.0, bounds=BOX, mcmc_steps=1_000_000),
    )
    _assert_refused(
        "at most 100 diagnostic chains",
        lambda: sweep(*args, ["dp_lloyd_mcmc"], [1.0], 101, 0.0, bounds=BOX, mcmc_steps=10),
    )
    _assert_refused(
        "Lloyd rounds must lie in \\[0, 20\\]",
        lambda: sweep(*args, ["dp_lloyd"], [1.0], 1, 0.0, bounds=BOX, n_iter=1000),
    )
    _assert_refused("K must lie in \\[1, 100\\]", lambda: true_clustering(X, 101))
    _assert_refused(
        "K must lie in \\[1, 100\\]",
        lambda: release_centroids(
            "dp_lloyd", KMeansInputs(X, None, *BOX), epsilon=1.0, params={"n_clusters": 101}
        ),
    )


def test_mcmc_estimator_refuses_chains_beyond_the_step_limit() -> None:
    X, _ = _blobs(300, seed=7)
    est = LeeKiferKMeans(n_clusters=3, epsilon=1.0, bounds=BOX, n_steps=1_000_000, random_state=0)
    _assert_refused("from 0 to 100,000", lambda: est.fit(X))
    _assert_refused("from 0 to 100,000", lambda: est.fit_trials(X, [1.0], 2))
    release = LeeKiferKMeans(n_clusters=3, epsilon=1.0, bounds=BOX, n_steps=10, random_state=0).fit(X)
    _assert_refused(
        "from 0 to 100,000", lambda: mcmc_postprocess(release.released_state(), n_steps=1_000_000)
    )


def test_location_engine_refuses_settings_beyond_their_limits() -> None:
    rng = np.random.default_rng(8)
    lat, lon = rng.uniform(30, 45, 200), rng.uniform(-110, -80, 200)
    users = np.arange(200)

    def run(mechs: list[str], eps: list[float], trials: int, **kw: object) -> Callable[[], object]:
        return lambda: location_sweep(lat, lon, users, mechs, eps, trials, region=US, **kw)

    _assert_refused("from 1 to 50", run(["dp_mean"], [1.0], 51))
    _assert_refused("1 to 25 epsilon values", run(["dp_mean"], list(np.linspace(0.1, 5, 26)), 1))
    hot = {"dp_hotspots": {"hotspot_k": 31}}
    _assert_refused("Number of hotspots K must lie in \\[1, 30\\]", run(["dp_hotspots"], [1], 1, params=hot))
    pri = {"prilocation": {"n_clusters": 10_001}}
    _assert_refused("Clusters must lie", run(["prilocation"], [1.0], 1, params=pri))
    pri = {"prilocation": {"grid_size": 5_000}}
    _assert_refused("cells per side must lie", run(["prilocation"], [1.0], 1, params=pri))
    _assert_refused(
        "n_queries must be a whole number from 1 to 1000", run(["uniform_grid"], [1.0], 1, n_queries=10**6)
    )


# ---------------------------------------------------------------- the pages' widgets

APP = str(ROOT / "app.py")


def _kmeans_page(**kept: object) -> AppTest:
    """The K-means page on 90 rows with public bounds, with ``kept`` values in the session."""
    from dpcore.data import fingerprint, infer_schema, prepare
    from ui.state import Dataset

    X, _ = _blobs(90, seed=9)
    raw = pd.DataFrame({"x": X[:, 0], "y": X[:, 1]})
    schema = infer_schema(raw)
    prepared = prepare(raw, schema, features=["x", "y"], bounds={"x": (-4, 4), "y": (-4, 4)})
    ds = Dataset(name="blobs", raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw))
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["dp_dataset"] = replace(ds, prepared=prepared)
    for key, value in kept.items():
        at.session_state[key] = value
    at.run()
    at.switch_page("pages/kmeans.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_kmeans_page_widgets_carry_the_engine_limits() -> None:
    """K, trials, MCMC chains and chain length stop at the engine's limits; a kept value beyond a limit
    (an old session, an edited URL) falls back to the default instead of running or failing."""
    at = _kmeans_page(km_mcmc_steps=1_000_000, km_trials=10_000, km_mech_dp_lloyd_mcmc=True)
    limits = {key: at.number_input(key=key).max for key in ("km_k", "km_trials")}
    limits.update({key: at.number_input(key=key).max for key in ("km_mcmc_chains", "km_mcmc_steps")})
    assert limits == {"km_k": 100, "km_trials": 500, "km_mcmc_chains": 100, "km_mcmc_steps": 100_000}
    assert at.number_input(key="km_mcmc_steps").value == 30_000
    assert at.number_input(key="km_trials").value == 20


def test_locations_page_widgets_carry_the_registry_limits() -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["loc_n_clusters"] = 10**9  # a kept value beyond the limit falls back to the default
    at.run()
    at.switch_page("pages/locations.py").run()
    at.button(key="loc_load_airports").click().run()
    assert not at.exception, [e.value for e in at.exception]
    limits = {
        key: at.number_input(key=key).max
        for key in ("loc_n_clusters", "loc_grid_size", "loc_theta_m", "loc_trials")
    }
    assert limits == {"loc_n_clusters": 10_000, "loc_grid_size": 1024, "loc_theta_m": 2.0e7, "loc_trials": 50}
    assert at.number_input(key="loc_n_clusters").value == 20
