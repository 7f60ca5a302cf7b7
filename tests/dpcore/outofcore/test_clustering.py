"""Out-of-core engine: the kernels fed by DuckDB (in memory or streamed, and Spark local) give the in-memory
releases bit for bit."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import ibis
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from scipy import stats

from dpcore.data import fingerprint, infer_schema, load_table, prepare
from dpcore.data.sources import DatabaseTable, FolderFile, load_source
from dpcore.errors import DataError, ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.cells import cluster_statistics
from dpcore.kmeans.covariance import colored_noise_covariance, solve_cluster
from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.kmeans.mcmc import LeeKiferKMeans
from dpcore.kmeans.registry import release_centroids
from dpcore.mechanisms import Sampler
from dpcore.metrics import nearest_sets
from dpcore.outofcore import TableFeatures, clustering, colored, features, kernel, white
from dpcore.outofcore.source import open_source
from dpcore.policy import DistanceThresholdGraph, FullDomainGraph

BOUNDS = {"a": (-10.0, 10.0), "b": (0.0, 10.0), "c": (0.0, 99.0)}


def table(n: int = 3000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centres = np.array([[-5.0, 2.0, 20.0], [4.0, 8.0, 70.0], [0.0, 5.0, 50.0]])
    rows = centres[rng.integers(0, 3, n)] + rng.normal(0, [1.5, 1.0, 8.0], (n, 3))
    df = pd.DataFrame(rows, columns=list("abc"))
    df["c"] = np.clip(np.round(df["c"]), -5, 120).astype(int)  # some values outside the public bounds
    df["note"] = [f"row {i}" for i in range(n)]  # a column that is not a feature
    return df


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    df = table()
    path = tmp_path_factory.mktemp("oc") / "t.parquet"
    df.to_parquet(path, index=False)
    return df, path


def in_memory(df: pd.DataFrame, scaling: str = "minmax") -> KMeansInputs:
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling=scaling, bounds=BOUNDS)
    return KMeansInputs.from_prepared(prep)


def duckdb_features(path: Path, scaling: str = "minmax") -> TableFeatures:
    return TableFeatures.from_bounds(ibis.duckdb.connect().read_parquet(str(path)), BOUNDS, scaling)  # type: ignore[arg-type]


@pytest.mark.parametrize("scaling", ["minmax", "none"])
def test_scaled_rows_are_prepare_s_bit_for_bit(data, scaling: str) -> None:
    df, path = data
    feat, inputs = duckdb_features(path, scaling), in_memory(df, scaling)
    rows = feat.scaling_map(feat.raw().to_pandas().to_numpy())
    assert np.array_equal(rows, inputs.X)
    assert np.array_equal(feat.lower, inputs.lower) and np.array_equal(feat.upper, inputs.upper)
    back = feat.inverse_transform(inputs.X[:5]).to_numpy()
    assert np.array_equal(back, inputs.inverse_transform(inputs.X[:5]).to_numpy())


def test_nearest_statistics_are_the_in_memory_ones_and_ties_go_to_the_lowest_index(data) -> None:
    df, path = data
    feat, inputs = duckdb_features(path), in_memory(df)
    mid = (inputs.lower + inputs.upper) / 2
    Xc = np.clip(inputs.X, inputs.lower, inputs.upper) - mid
    rng = np.random.default_rng(0)
    centres = rng.uniform(-0.8, 0.8, (2, 4, 3))
    centres[1, 2] = centres[1, 0]  # a duplicate centre: every row it could win goes to index 0
    with feat.feed() as feed:
        assert isinstance(feed, kernel.MemoryFeed) and feed.n == len(df)
        counts, sums = feat.nearest_statistics(centres, feed)
    want_n, want_s = cluster_statistics(Xc, nearest_sets(Xc, centres)[0], 4)
    assert np.array_equal(counts, want_n)
    assert counts[1, 2] == 0 and counts.sum() == 2 * len(df)
    assert np.allclose(sums, want_s, rtol=1e-13, atol=1e-12)
    mem_n, mem_s = kernel.lloyd_statistics(Xc, centres)  # the in-memory release's statistics
    assert np.array_equal(counts, mem_n) and np.array_equal(sums, mem_s)


@pytest.mark.parametrize(
    "params",
    [
        {"n_clusters": 3},  # unbounded, automatic rounds: the noisy row count comes first
        {"n_clusters": 4, "n_iter": 5, "neighbours": "bounded"},
    ],
)
@pytest.mark.parametrize("seed", [7, 11])
def test_dp_lloyd_release_is_identical_in_memory_and_on_duckdb(data, params: dict, seed: int) -> None:
    df, path = data
    a = release_centroids("dp_lloyd", in_memory(df), epsilon=1.0, random_state=Sampler(seed), params=params)
    feat = duckdb_features(path)
    b = release_centroids("dp_lloyd", feat, epsilon=1.0, random_state=Sampler(seed), params=params)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    assert a.details == b.details
    assert math.fsum(e for _, e in b.details["budget_log"]) == 1.0  # the whole eps, exactly


def test_estimator_state_is_identical_and_spends_exactly_epsilon(data) -> None:
    df, path = data
    inputs, feat = in_memory(df), duckdb_features(path)
    kw = {"n_clusters": 3, "epsilon": 0.7, "bounds": inputs.bounds, "random_state": 5}
    mem = DPLloydKMeans(**kw).fit(inputs.X)
    ooc = feat.fit_lloyd(DPLloydKMeans(**kw))
    for name in ("noisy_counts_", "noisy_sums_", "centers_history_", "cluster_centers_", "noisy_n_"):
        assert np.array_equal(getattr(mem, name), getattr(ooc, name)), name
    assert ooc.budget_log_ == mem.budget_log_ and ooc.budget_spent_ == 0.7
    assert ooc.n_features_in_ == 3


@pytest.mark.parametrize("graph", [FullDomainGraph(), DistanceThresholdGraph(0.3, "l1")])
def test_blowfish_release_is_identical_in_memory_and_on_duckdb(data, graph) -> None:
    df, path = data
    inputs, feat = in_memory(df), duckdb_features(path)
    kw = {"n_clusters": 3, "epsilon": 1.0, "bounds": inputs.bounds, "graph": graph, "random_state": 3}
    mem = BlowfishKMeans(**kw).fit(inputs.X)
    ooc = feat.fit_lloyd(BlowfishKMeans(**kw))
    assert np.array_equal(mem.cluster_centers_, ooc.cluster_centers_)
    assert np.array_equal(mem.sum_sensitivity_, ooc.sum_sensitivity_)
    assert np.array_equal(mem.sensitivity_gain_, ooc.sensitivity_gain_)
    params = {"n_clusters": 3, "graph": graph.to_dict()}  # the registered mechanism, as a plan runs it
    a = release_centroids("blowfish", inputs, epsilon=1.0, random_state=9, params=params)
    b = release_centroids("blowfish", feat, epsilon=1.0, random_state=9, params=params)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    assert a.details == b.details


def test_refuses_what_it_cannot_compute_out_of_core(data) -> None:
    df, path = data
    t = ibis.duckdb.connect().read_parquet(str(path))
    with pytest.raises(ParameterError, match="does not run out of core"):
        duckdb_features(path).fit_lloyd(LeeKiferKMeans(3, 1.0, bounds=in_memory(df).bounds, random_state=1))
    with pytest.raises(DataError, match="not numeric"):
        TableFeatures.from_bounds(t, {"note": (0.0, 1.0)})
    with pytest.raises(DataError, match="no column"):
        TableFeatures.from_bounds(t, {"zzz": (0.0, 1.0)})
    with pytest.raises(ParameterError, match="reads the data"):
        TableFeatures.from_bounds(t, BOUNDS, "standardize")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="lower < upper"):
        TableFeatures.from_bounds(t, {"a": (1.0, 1.0)})


def test_rows_missing_a_feature_are_dropped_as_prepare_drops_them(tmp_path: Path) -> None:
    df = table(500)
    df.loc[[3, 10, 77], "a"] = np.nan
    df.loc[[5], "b"] = np.inf
    path = tmp_path / "m.parquet"
    df.to_parquet(path, index=False)
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    feat = duckdb_features(path)
    assert feat.n_rows() == prep.n_samples == 496
    a = release_centroids("dp_lloyd", KMeansInputs.from_prepared(prep), epsilon=2.0, random_state=1)
    b = release_centroids("dp_lloyd", feat, epsilon=2.0, random_state=1)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)


@pytest.mark.spark
def test_spark_drops_infinite_features_as_duckdb_and_memory_do(tmp_path: Path, spark) -> None:
    """Ibis compiles ``isinf`` to FALSE on Spark: +-inf rows were kept (clipped) there and DP-Lloyd released
    another result than the dashboard's with the same demo seed."""
    df = table(400).drop(columns="note")
    df.loc[[5, 9], "b"] = [np.inf, -np.inf]
    df.loc[[12], "a"] = -np.inf
    path = tmp_path / "inf.parquet"
    df.to_parquet(path, index=False)
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    params = {"n_clusters": 3, "n_iter": 3}
    a = release_centroids(
        "dp_lloyd", KMeansInputs.from_prepared(prep), epsilon=2.0, random_state=1, params=params
    )
    with open_source(path, "spark", spark=spark) as src:
        feat = TableFeatures.from_bounds(src.table, BOUNDS)
        assert feat.n_rows() == prep.n_samples == 397
        b = release_centroids("dp_lloyd", feat, epsilon=2.0, random_state=1, params=params)
    c = release_centroids("dp_lloyd", duckdb_features(path), epsilon=2.0, random_state=1, params=params)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.table, c.table, check_exact=True)


def test_parquet_fingerprint_is_streamed_and_is_the_data_page_s(data, tmp_path: Path) -> None:
    df, path = data
    with open_source(path) as src:
        assert src.fingerprint == fingerprint(load_table(path))
        assert src.table.count().execute() == len(df)
    folder = tmp_path / "parts"
    (folder / "year=2020").mkdir(parents=True)
    (folder / "year=2021").mkdir()
    df.iloc[:1000].to_parquet(folder / "year=2020" / "part-0.parquet", index=False)
    df.iloc[1000:].to_parquet(folder / "year=2021" / "part-0.parquet", index=False)
    spec = FolderFile(str(tmp_path), "parts")
    with open_source(folder) as src:
        assert src.fingerprint == fingerprint(df)
        assert src.fingerprint == load_source(spec, folders=[str(tmp_path)], max_rows=10).fingerprint
    with pytest.raises(DataError, match="No file or folder"):
        open_source(tmp_path / "absent.parquet")


def test_database_and_csv_sources_fingerprint_as_the_data_page(data, tmp_path: Path) -> None:
    df, _ = data
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = sa.create_engine(url)
    df.to_sql("people", engine, index=False)
    loaded = load_source(DatabaseTable("db", "people"), engine=engine, max_rows=100, sample_seed=1)
    engine.dispose()
    with open_source(url, table="people") as src:
        staging = Path(src._staging.name)  # type: ignore[union-attr]
        assert src.fingerprint == loaded.fingerprint
        assert src.table.count().execute() == len(df)
    assert not staging.exists()  # the staged copy is removed
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False)
    with open_source(csv) as src:
        assert src.fingerprint == fingerprint(load_table(csv))
    with pytest.raises(ParameterError, match="--table"):
        open_source(url)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_release_is_identical_to_in_memory_and_duckdb(data, spark) -> None:
    df, path = data
    small = df.iloc[:800]
    part = path.parent / "small.parquet"
    small.to_parquet(part, index=False)
    with open_source(part, "spark", spark=spark) as src:
        assert src.fingerprint == fingerprint(small)
        feat = TableFeatures.from_bounds(src.table, BOUNDS)
        params = {"n_clusters": 3, "n_iter": 3}
        b = release_centroids("dp_lloyd", feat, epsilon=1.0, random_state=2, params=params)
        run = colored.colored_release(
            feat, 3, key="colored", epsilon=1.0, delta=1e-6, random_state=2, sample_rows=300
        )
    a = release_centroids("dp_lloyd", in_memory(small), epsilon=1.0, random_state=2, params=params)
    c = release_centroids("dp_lloyd", duckdb_features(part), epsilon=1.0, random_state=2, params=params)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.table, c.table, check_exact=True)
    # the colored passes on Spark: every row's constraint holds under the clustering it used
    X = in_memory(small).X
    labels = nearest_sets(X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(X, labels) <= 1.0 and run.covariance.gap <= 1e-5
    # ... and DuckDB draws the same sample, so the same seed gives the same clustering and release
    duck = colored.colored_release(
        duckdb_features(part), 3, key="colored", epsilon=1.0, delta=1e-6, random_state=2, sample_rows=300
    )
    assert np.array_equal(duck.centres, run.centres)
    pd.testing.assert_frame_equal(duck.output.table, run.output.table, check_exact=False, rtol=1e-12)


def colored_case(tmp_path: Path, constant: bool = False) -> tuple[TableFeatures, KMeansInputs]:
    df = table(6000, seed=5).drop(columns="note")
    if constant:
        df["c"] = 40  # one feature constant in every cluster: released without noise along it
    path = tmp_path / "colored.parquet"
    df.to_parquet(path, index=False)
    return duckdb_features(path), in_memory(df)


@pytest.mark.parametrize("sample_rows", [1500, 40])
def test_colored_out_of_core_holds_every_row_s_constraint_and_is_the_optimum(
    tmp_path: Path, sample_rows: int
) -> None:
    # from a 40-row sample the certificate passes must find the binding rows of the table themselves
    feat, inputs = colored_case(tmp_path)
    random_state = Sampler(4)
    run = colored.colored_release(
        feat, 3, key="colored", epsilon=1.0, delta=1e-6, random_state=random_state, sample_rows=sample_rows
    )
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0
    mem = colored_noise_covariance(inputs.X, labels, 1.0, 1e-6)
    np.testing.assert_allclose(run.covariance.centers, mem.centers, rtol=0, atol=1e-12)
    assert run.covariance.gap <= 1e-5 and abs(run.covariance.trace / mem.trace - 1) <= 1e-5
    assert run.passes <= 4
    assert list(run.output.table.columns) == [
        "cluster",
        "a [original units]",
        "b [original units]",
        "c [original units]",
    ]


def test_colored_out_of_core_rank_deficient_cluster_and_refusals(tmp_path: Path) -> None:
    feat, inputs = colored_case(tmp_path, constant=True)
    run = colored.colored_release(feat, 3, key="colored", epsilon=1.0, delta=1e-6, random_state=4)
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0
    assert run.covariance.caveats and all(b.shape[1] == 2 for b in run.covariance.bases)
    assert all(np.all(block[2] == 0.0) for block in run.covariance.blocks)  # no noise along c
    np.testing.assert_allclose(run.output.table["c [original units]"], 40.0, rtol=1e-12)
    with pytest.raises(ParameterError, match="δ > 0"):
        colored.colored_release(feat, 3, key="colored", epsilon=1.0, delta=0.0, random_state=4)
    with pytest.raises(ParameterError, match="secure sampling"):
        colored.colored_release(
            feat, 3, key="colored", epsilon=1.0, delta=1e-6, random_state=Sampler.diagnostic(1)
        )


@pytest.mark.parametrize(("candidates", "passes"), [(200, 1), (2, 3)])
def test_colored_rows_outside_the_candidates_are_certified_by_the_bound_or_by_passes(
    tmp_path: Path, monkeypatch, candidates: int, passes: int
) -> None:
    """200 candidates of about 2,000 rows per cluster: the bound certifies the other rows, no pass after
    the moments pass; 2: it cannot, and certificate passes do. Either way every row's constraint holds and
    the covariance is the in-memory optimum."""
    monkeypatch.setattr(colored, "CANDIDATES", candidates)
    feat, inputs = colored_case(tmp_path)
    run = colored.colored_release(
        feat, 3, key="colored", epsilon=1.0, delta=1e-6, random_state=Sampler(4), sample_rows=1500
    )
    assert run.passes == passes
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0
    mem = colored_noise_covariance(inputs.X, labels, 1.0, 1e-6)
    assert run.covariance.gap <= 1e-5 and abs(run.covariance.trace / mem.trace - 1) <= 1e-5


def test_the_bound_holds_on_every_row_of_the_ellipsoid_and_is_tight() -> None:
    """Brute force: rows on the boundary of ||F~' (x - s)||^2 <= tau, in random directions and along the
    worst one, never exceed the bound; centred on c (a = 0) the bound is attained up to its margins."""
    rng = np.random.default_rng(3)
    d, n = 4, 501.0
    u = rng.normal(size=(300, d)) @ rng.normal(size=(d, d))
    sol = solve_cluster(u / (n - 1), 1e-8)
    basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
    root = rng.uniform(0.5, 2.0, d)
    center = rng.normal(size=d)
    factor = sol.basis / np.sqrt(sol.eigenvalues)
    for shift, tight in ((np.zeros(d), True), (0.05 * rng.normal(size=d), False)):
        shape = colored.Shape(center + shift, basis, root)
        bound = colored._outside_bound(sol, center, n, shape, 2.0)
        y = rng.normal(size=(20000, d))
        m = factor.T @ (basis * root) / (n - 1)
        y = np.vstack([y, np.linalg.svd(m)[2][:1]])  # the direction M stretches most
        y *= np.sqrt(2.0) / np.linalg.norm(y, axis=1, keepdims=True)
        x = shape.mean + y @ (basis * root).T  # ||F~' (x - s)||^2 = 2
        score = np.einsum("ij,ij->i", (x - shape.mean) @ shape.factor, (x - shape.mean) @ shape.factor)
        np.testing.assert_allclose(score, 2.0, rtol=1e-12)
        q, outside = colored.constraint_values(x.T, center, n, factor, sol.basis)
        assert not outside.any() and q.max() <= bound
        if tight:
            assert q.max() >= bound * (1 - 1e-9)
    flat = dataclasses.replace(sol, basis=sol.basis[:, :2], eigenvalues=sol.eigenvalues[:2])
    assert colored._outside_bound(flat, center, n, shape, 2.0) == np.inf  # rank < d: no bound


def test_top_rows_keeps_the_largest_scores_above_the_floor_ties_to_the_earlier_row() -> None:
    """Chunk by chunk, trimmed on the way and combined across blocks: the same rows as one stable sort of
    the rows scoring above the floor."""
    rng = np.random.default_rng(5)
    score = rng.integers(0, 40, 5000).astype(float)  # many ties
    label = rng.integers(0, 3, 5000)
    floor = np.array([-np.inf, 10.0, 38.0])

    def block(lo: int, hi: int):
        top = colored.TopRows(3, 25, (np.zeros(0, dtype=np.intp),), floor)
        for start in range(lo, hi, 97):
            rows = np.arange(start, min(start + 97, hi))
            for c in range(3):
                mine = rows[label[rows] == c]
                top.add(c, score[mine], mine)
        return top.rows()

    got = colored.combine_top(block(0, 2600), block(2600, 5000), 25)
    for c in range(3):
        mine = np.flatnonzero((label == c) & (score > floor[c]))
        want = mine[np.argsort(-score[mine], kind="stable")[:25]]
        assert np.array_equal(got[2][got[0] == c], want)
        assert np.array_equal(got[1][got[0] == c], score[want])


def test_a_batch_job_s_duckdb_spills_to_the_temporary_folder_from_the_start() -> None:
    """Every spill of a batch job's DuckDB (a cache, a window sort of the per-user cap) goes to
    ``SPILL_FOLDER``; DuckDB's own default is ``.tmp`` in the working directory."""
    from dpcore.outofcore.source import connect

    setting = connect("duckdb").raw_sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
    assert setting == str(features.SPILL_FOLDER)


def releases(feat: TableFeatures) -> list[pd.DataFrame]:
    """DP-Lloyd, Blowfish, colored and white releases of ``feat`` with demo seeds."""
    params = {"n_clusters": 3, "n_iter": 4, "neighbours": "bounded"}
    graph = {"n_clusters": 3, "graph": DistanceThresholdGraph(0.3, "l1").to_dict()}
    kw = {"epsilon": 1.0, "delta": 1e-6, "sample_rows": 500}
    return [
        release_centroids("dp_lloyd", feat, epsilon=1.0, random_state=3, params=params).table,
        release_centroids("blowfish", feat, epsilon=1.0, random_state=3, params=graph).table,
        colored.colored_release(feat, 3, key="colored", random_state=3, **kw).output.table,
        white.white_release(
            feat, "white_per_cluster", 3, per_cluster=True, random_state=3, **kw
        ).output.table,
    ]


@pytest.fixture(scope="module")
def blocks(data, tmp_path_factory):
    """The module's table as float32 and float64 Parquet files, small canonical blocks (several per pass)."""
    df, _ = data
    folder = tmp_path_factory.mktemp("blocks")
    narrow = df[list("abc")].astype("float32")
    narrow.to_parquet(folder / "f32.parquet", index=False)
    narrow.astype("float64").to_parquet(folder / "f64.parquet", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "BLOCK_ROWS", 700)
        mp.setattr(kernel, "CHUNK_ROWS", 256)  # several chunks per block
        mp.setattr(colored, "CANDIDATES", 40)  # the colored pass trims its candidates across blocks
        yield narrow, folder


def test_streamed_and_in_memory_feeds_give_the_same_releases(blocks, monkeypatch) -> None:
    """Above DPCORE_MEMORY_BUDGET every pass streams DuckDB's batches: the canonical blocks and the order
    of additions are those of the rows in memory, so every release is the same, bit for bit, and the
    dashboard's in-memory DP-Lloyd on the same rows too."""
    narrow, folder = blocks
    feat = duckdb_features(folder / "f64.parquet")
    with feat.feed() as feed:
        assert isinstance(feed, kernel.MemoryFeed) and feed.rows.dtype == np.float64
    held = releases(feat)
    monkeypatch.setenv("DPCORE_MEMORY_BUDGET", "1000")
    with feat.feed() as feed:
        assert isinstance(feed, kernel.StreamFeed) and feed.n == len(narrow)
    streamed = releases(feat)
    for a, b in zip(held, streamed, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    params = {"n_clusters": 3, "n_iter": 4, "neighbours": "bounded"}
    mem = release_centroids("dp_lloyd", in_memory(narrow), epsilon=1.0, random_state=3, params=params)
    pd.testing.assert_frame_equal(mem.table, held[0], check_exact=True)


def test_the_compact_float32_copy_changes_no_release(blocks) -> None:
    """Features stored as float32 are held in memory as float32 (half the bytes); the kernels scale the
    same values in float64, so every release equals the one from the float64 copy of the table."""
    _, folder = blocks
    f32, f64 = duckdb_features(folder / "f32.parquet"), duckdb_features(folder / "f64.parquet")
    assert f32.dtype == np.float32 and f64.dtype == np.float64
    with f32.feed() as feed:
        assert isinstance(feed, kernel.MemoryFeed) and feed.rows.dtype == np.float32
    for a, b in zip(releases(f32), releases(f64), strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_the_keyed_sample_keeps_each_row_with_the_sampling_fraction() -> None:
    """Over 200 fresh salts each of 2,000 distinct rows is kept about 0.1 of the time: per-row counts
    spread as Binomial(200, 0.1) (a rule that ignored the salt would keep a row always or never), the
    rows come in key order and the same salt draws the same rows again, whatever the blocks."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2000, 3))
    feed = kernel.MemoryFeed(X)
    lower, upper = np.full(3, -1.0), np.full(3, 1.0)
    position = {tuple(r): i for i, r in enumerate(X)}
    counts = np.zeros(2000)
    random_state = Sampler(6)
    same = lambda raw: np.asarray(raw, dtype=float)  # noqa: E731
    for _ in range(200):
        salt = clustering.KEY_SCALE * (1.0 + random_state.rng.random(3))
        kept = clustering.keyed_sample(feed, same, lower, upper, salt, 0.1)
        rows = np.array([position[tuple(r)] for r in kept])
        assert len(np.unique(rows)) == len(rows)
        counts[rows] += 1
    assert abs(counts.mean() - 20.0) < 0.5  # 200 x 0.1 rows kept per row on average
    assert 12.0 < counts.var() < 25.0 and counts.min() >= 1  # binomial spread: 200 x 0.1 x 0.9 = 18
    assert stats.chisquare(np.bincount(np.arange(2000) // 200, weights=counts)).pvalue > 1e-3
    pieces = kernel.StreamFeed(
        lambda: (
            pa.RecordBatch.from_arrays(list(X[i : i + 333].T), list("abc")) for i in range(0, 2000, 333)
        ),
        2000,
    )
    assert np.array_equal(clustering.keyed_sample(pieces, same, lower, upper, salt, 0.1), kept)
    key = clustering.sample_key(kept, lower, upper, salt)
    assert np.all(np.diff(key) >= 0) and key.max() < 0.1


def test_a_certificate_pass_returns_every_row_above_near_and_each_cluster_s_largest(monkeypatch) -> None:
    """Brute force: q = ||u' F_k||^2 of every row; the pass (over blocks, combined) returns each cluster's
    largest q exactly, every row with q above NEAR when there are at most ADDED of them, else the ADDED
    largest, and flags the rows outside a rank-deficient cluster's span."""
    monkeypatch.setattr(colored, "ADDED", 50)
    rng = np.random.default_rng(7)
    d, k = 4, 3
    flat = np.linalg.qr(rng.normal(size=(d, 2)))[0]
    factors = [rng.normal(size=(d, d)), 3.0 * rng.normal(size=(d, d)), flat]
    bases = [np.eye(d), np.eye(d), factors[2]]
    centres = rng.uniform(-0.5, 0.5, (k, d))
    centers, counts = centres + 0.01, np.array([1001.0, 2501.0, 801.0])
    x = centres[rng.integers(0, k, 4000)] + rng.normal(0, 1.0, (4000, d)) * 0.12 * counts.mean()
    same = lambda raw: np.asarray(raw, dtype=float)  # noqa: E731
    found = kernel.MemoryFeed(x).reduce(
        colored.CertificatePass(same, centres, centers, counts, factors, bases, 1e-6), colored.combine_found
    )
    worst, label, q, bad, outside, rows = found
    lab = kernel.nearest_labels(x, centres[None])[0]
    u = (x - centers[lab]) / (counts[lab] - 1.0)[:, None]
    every = np.array([float(np.sum((u[i] @ factors[lab[i]]) ** 2)) for i in range(len(x))])
    norm2 = np.sum(u**2, axis=1)
    out = (lab == 2) & (norm2 - np.sum((u @ bases[2]) ** 2, axis=1) > 1e-9 * norm2)
    score = np.where(out, np.inf, every)
    for c in range(k):
        mine = lab == c
        np.testing.assert_allclose(worst[c], score[mine].max(), rtol=1e-12)
        want = np.sort(score[mine & ((every > colored.NEAR) | out)])[::-1][:50]
        got = np.where(outside, np.inf, q)[label == c]
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert out.any() and outside.sum() == min(out.sum(), 50) and bad[outside].all()
    assert ((every > colored.NEAR) & (lab == 0)).sum() > 50 == np.bincount(label).max()  # trimmed to ADDED
    assert np.array_equal(kernel.nearest_labels(rows, centres[None])[0], label)
