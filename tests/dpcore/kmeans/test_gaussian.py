"""The Gaussian L2-ball k-means mechanisms (private LSH coreset, Gaussian DP-Lloyd): exact accounting,
sensitivities by brute force, the noise they add, an empirical distinguishing test, and utility."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.kmeans.ball import (
    ball_geometry,
    clip_to_ball,
    code_statistics,
    nearest_statistics,
    prefix_codes,
)
from dpcore.kmeans.coreset import GaussianLloydKMeans, LSHCoresetKMeans, sensitivities
from dpcore.kmeans.gaussian_accounting import accountant_epsilon, gaussian_spend
from dpcore.kmeans.mechanisms.dp_lloyd import build as dp_lloyd_build
from dpcore.ledger import Ledger
from dpcore.mechanisms import Sampler, analytic_delta, gaussian_ratio
from dpcore.outofcore.run_plan import in_memory, run_plan
from dpcore.releases import make_release
from tests.dpcore.outofcore.test_clustering import BOUNDS
from tests.dpcore.outofcore.test_run_plan import approx_plan, dashboard_release, people_source

SHARES = {"counts": (0.2, 21), "sums": (0.8, 1)}


# ---------------------------------------------------------------- accounting


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-6), (1.0, 1e-6), (2.0, 1e-9)])
def test_the_composed_spend_meets_the_budget_and_leaves_nothing(eps: float, delta: float) -> None:
    spend = gaussian_spend(eps, delta, SHARES)
    mu = spend.composed_mu
    assert math.isclose(mu, gaussian_ratio(eps, delta), rel_tol=1e-5)  # the whole budget, one mu
    assert analytic_delta(mu, eps) <= delta  # exact (GDP) accounting within the budget ...
    assert analytic_delta(mu, eps) >= delta * (1 - 1e-4)  # ... and not far below it
    assert spend.epsilon_accounted <= eps  # the PLD accountant agrees, independently
    assert accountant_epsilon(spend.queries, delta) == spend.epsilon_accounted
    assert spend.epsilon_accounted >= eps * (1 - 1e-5)
    releases, t = spend.queries["counts"]
    assert releases == 21 and math.isclose(releases * t * t / (mu * mu), 0.2, rel_tol=1e-9)
    # adding eps per round would have given each of the 22 releases eps / 22: far more noise
    assert spend.ratio("sums") > 2 * gaussian_ratio(eps / 22, delta / 22)
    details = spend.details()
    assert details["zcdp_rho"] == pytest.approx(mu * mu / 2) and details["epsilon_accounted"] <= eps


def test_spend_refuses_what_it_cannot_account() -> None:
    with pytest.raises(ParameterError, match="0 < δ < 1"):
        gaussian_spend(1.0, 0.0, SHARES)
    with pytest.raises(ParameterError, match="sum to 1"):
        gaussian_spend(1.0, 1e-6, {"a": (0.5, 1)})


# ---------------------------------------------------------------- sensitivities by brute force

GRID = np.array([p for p in itertools.product(np.linspace(-1.2, 1.2, 5), repeat=2)])  # some outside R = 1


def _statistics(y: np.ndarray, codes: np.ndarray, centres: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(counts, sums) of every level's full node set and of a Lloyd round: what any release reads."""
    out = []
    for level in range(codes.shape[1]):
        nodes = np.arange(2**level, 2 ** (level + 1), dtype=np.int64)  # every node of the level
        counts, sums = code_statistics(y, codes[:, level], nodes, with_sums=True)
        out.append((counts, sums))
    out.append(nearest_statistics(y, centres))
    return out


def test_sensitivities_by_brute_force_on_a_small_domain() -> None:
    rng = np.random.default_rng(0)
    centre, radius = ball_geometry((np.full(2, -1.0), np.full(2, 1.0)), 1.0)
    normals = rng.normal(size=(3, 2))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    offsets = rng.uniform(-0.3, 0.3, 3)
    centres = np.array([[-0.5, 0.0], [0.5, 0.2]])
    base = GRID[[0, 7, 12, 18]]
    worst = {"unbounded": [0.0, 0.0], "bounded": [0.0, 0.0]}

    def stats(rows: np.ndarray) -> list:
        y = clip_to_ball(rows, centre, radius)
        return _statistics(y, prefix_codes(y, normals, offsets), centres)

    ref = stats(base)
    for x in GRID:  # one row added (removal is the same pair seen from the other side)
        for (c0, s0), (c1, s1) in zip(ref, stats(np.vstack([base, x])), strict=True):
            worst["unbounded"][0] = max(worst["unbounded"][0], np.linalg.norm(c1 - c0))
            worst["unbounded"][1] = max(worst["unbounded"][1], np.linalg.norm(s1 - s0))
    for i, x in itertools.product(range(len(base)), GRID):  # one row's value replaced
        other = base.copy()
        other[i] = x
        for (c0, s0), (c1, s1) in zip(ref, stats(other), strict=True):
            worst["bounded"][0] = max(worst["bounded"][0], np.linalg.norm(c1 - c0))
            worst["bounded"][1] = max(worst["bounded"][1], np.linalg.norm(s1 - s0))
    for relation, (count, total) in worst.items():
        dc, ds = sensitivities(relation, radius)
        assert count <= dc + 1e-12 and total <= ds + 1e-12, relation
    assert worst["unbounded"] == pytest.approx([1.0, 1.0])  # attained: the bounds are tight
    assert worst["bounded"][0] == pytest.approx(math.sqrt(2))
    assert worst["bounded"][1] >= 1.9  # near 2R on this grid (opposite points on the circle)


# ---------------------------------------------------------------- the noise each release adds


class _Recorder(Sampler):
    """A demo sampler that records the noise scale of every Gaussian release."""

    def __init__(self) -> None:
        super().__init__(seed=5)
        self.scales: list[tuple[float, int]] = []

    def privatize(self, value, kind, scale):  # type: ignore[no-untyped-def,override]
        assert kind == "gaussian"
        self.scales.append((float(scale), np.asarray(value).size))
        return super().privatize(value, kind, scale)


def _blobs(n: int = 600, d: int = 5, k: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-0.6, 0.6, (k, d))
    return np.clip(np.repeat(centres, n // k, axis=0) + rng.normal(0, 0.03, (n, d)), -1, 1)


@pytest.mark.parametrize("neighbours", ["unbounded", "bounded"])
@pytest.mark.parametrize("cls", [LSHCoresetKMeans, GaussianLloydKMeans])
def test_every_release_is_noised_as_accounted(cls: type, neighbours: str) -> None:
    X = _blobs()
    random_state = _Recorder()
    est = cls(
        3, 1.0, 1e-6, bounds=(-1, 1), radius=1.5, depth=6, neighbours=neighbours, random_state=random_state
    )
    est.fit(X)
    dc, ds = sensitivities(neighbours, 1.5)
    spend = est.spend_
    scale_of = {spend.sigma(q, dc if "counts" in q else ds): q for q in spend.queries}
    calls: dict[str, int] = {}
    for scale, _ in random_state.scales:  # every release is noised at the scale of a query it belongs to
        calls[scale_of[scale]] = calls.get(scale_of[scale], 0) + 1
    # at most the accounted releases: tree levels stop early; leaf sums of several levels are one release
    # of sensitivity Delta (disjoint leaves), Lloyd rounds are all released
    assert 1 <= calls["tree counts"] <= spend.queries["tree counts"][0] and calls["leaf sums"] >= 1
    for q in ("round counts", "round sums"):
        assert calls.get(q, 0) == (spend.queries[q][0] if q in spend.queries else 0)
    assert math.isclose(spend.composed_mu, gaussian_ratio(1.0, 1e-6), rel_tol=1e-6)
    assert np.linalg.norm(est.cluster_centers_, axis=1).max() <= 1.5 + 1e-9  # inside the ball


def test_estimators_refuse_bad_parameters() -> None:
    X = _blobs(60)
    cases = [
        (LSHCoresetKMeans(3, 1.0, 0.0, bounds=(-1, 1)), "δ"),
        (LSHCoresetKMeans(3, 1.0, 1e-6, bounds=None), "bounds"),
        (LSHCoresetKMeans(3, 1.0, 1e-6, bounds=(-1, 1), radius=-1.0), "radius"),
        (LSHCoresetKMeans(3, 1.0, 1e-6, bounds=(-1, 1), depth=99), "tree depth"),
        (GaussianLloydKMeans(3, 1.0, 1e-6, bounds=(-1, 1), n_iter=0), "n_iter"),
        (LSHCoresetKMeans(3, 1.0, 1e-6, bounds=(-1, 1), neighbours="swap"), "neighbours"),
    ]
    for est, message in cases:
        with pytest.raises(ParameterError, match=message):
            est.fit(X)


# ---------------------------------------------------------------- empirical distinguishing test


def test_an_attacker_cannot_tell_neighbours_apart_beyond_the_bound() -> None:
    """X: 40 rows at -0.9; X': the same plus one row at +1 (the far side of the ball). The attacker
    guesses X' when the released centre exceeds a threshold; eps-DP bounds the gap between the two
    probabilities (plus delta and sampling slack); the true count moves it most at this small n."""
    eps, delta, runs = 0.5, 1e-6, 1000
    X = np.full((40, 1), -0.9)
    Xn = np.vstack([X, [[1.0]]])
    random_state = Sampler.diagnostic(11)

    def centre(data: np.ndarray) -> float:
        est = LSHCoresetKMeans(1, eps, delta, bounds=(-1, 1), radius=1.0, depth=2, random_state=random_state)
        return float(est.fit(data).cluster_centers_[0, 0])

    a = np.array([centre(X) for _ in range(runs)])
    b = np.array([centre(Xn) for _ in range(runs)])
    slack = 3 * math.sqrt(0.25 / runs) * 2
    for threshold in np.quantile(np.concatenate([a, b]), [0.1, 0.3, 0.5, 0.7, 0.9]):
        p, q = float(np.mean(a > threshold)), float(np.mean(b > threshold))
        assert q <= math.exp(eps) * p + delta + slack and p <= math.exp(eps) * q + delta + slack


# ---------------------------------------------------------------- utility


def _google_like(n: int, d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Tight clusters (sd 1 / (100 sqrt d)) around k centres uniform in the ball of radius 0.99."""
    g = rng.normal(size=(k, d))
    centres = g / np.linalg.norm(g, axis=1, keepdims=True) * 0.99 * rng.random((k, 1)) ** (1 / d)
    x = np.repeat(centres, n // k, axis=0) + rng.normal(0, 1 / (100 * math.sqrt(d)), (n, d))
    return x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))


def test_both_beat_box_dp_lloyd_in_many_dimensions() -> None:
    rng = np.random.default_rng(3)
    X = _google_like(4000, 40, 8, rng)

    def loss(c: np.ndarray) -> float:
        return float(((X[:, None] - c[None]) ** 2).sum(-1).min(1).mean())

    bounds = (np.full(40, -1.0), np.full(40, 1.0))
    params = {"n_clusters": 8, "n_iter": 0, "neighbours": "unbounded"}
    box = np.mean(
        [loss(dp_lloyd_build(1.0, bounds, params, Sampler(seed=s)).fit(X).cluster_centers_) for s in range(3)]
    )
    for cls in (LSHCoresetKMeans, GaussianLloydKMeans):
        ours = np.mean(
            [
                loss(cls(8, 1.0, 1e-6, bounds=bounds, radius=1.0, random_state=s).fit(X).cluster_centers_)
                for s in range(3)
            ]
        )
        assert ours < box / 5, (cls.__name__, ours, box)


# ---------------------------------------------------------------- plan, ledger and run-plan


def test_run_plan_releases_a_gaussian_plan_out_of_core_as_the_dashboard_does(tmp_path: Path) -> None:
    df, path = people_source(tmp_path, 600)
    manifest, _ = dashboard_release(tmp_path, df)
    plan = approx_plan(manifest, "lsh_coreset")
    assert plan.definition == "approx_dp" and "δ = 1e-06" in plan.guarantee and not in_memory(plan)
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    dash = Ledger.initialise(f"sqlite:///{tmp_path / 'dash.db'}")
    dash.set_budget(plan.account, epsilon=5.0, delta=1e-3)
    kw = {"user": "u", "name": "kmeans", "request_id": "dash-2"}
    memory = make_release(dash, plan, KMeansInputs.from_prepared(prep), artifacts_dir=tmp_path / "m", **kw)
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'batch.db'}")
    ledger.set_budget(plan.account, epsilon=5.0, delta=1e-3)
    rel = run_plan(plan.to_manifest(), path, ledger=ledger, artifacts_dir=tmp_path / "out", user="u")
    assert len(rel.table) == 3 and not rel.manifest["is_local"]
    pd.testing.assert_frame_equal(rel.table, memory.table, check_exact=False, rtol=1e-9)
    accounting = rel.manifest["details"]["gaussian_accounting"]
    assert accounting["epsilon_accounted"] <= 1.0 and accounting["delta"] == 1e-6
    status = ledger.budget(plan.account)
    assert status.epsilon_spent == 1.0 and status.delta_spent == 1e-6


@pytest.mark.parametrize("cls", [LSHCoresetKMeans, GaussianLloydKMeans])
def test_passes_over_a_feed_of_blocks_give_the_in_memory_release(cls: type, monkeypatch) -> None:
    from dpcore.outofcore import kernel

    monkeypatch.setattr(kernel, "BLOCK_ROWS", 97)  # many uneven blocks
    X = _blobs(900)
    kw = {"bounds": (-1, 1), "radius": 1.5, "depth": 8}
    whole = cls(3, 1.0, 1e-6, random_state=4, **kw).fit(X)
    fed = cls(3, 1.0, 1e-6, random_state=4, **kw).fit_feed(kernel.MemoryFeed(X), np.asarray, 5)
    np.testing.assert_allclose(fed.cluster_centers_, whole.cluster_centers_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(fed.coreset_weights_, whole.coreset_weights_)
