"""Out-of-core engine: DuckDB (and Spark local) passes give the in-memory releases bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import ibis
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from scipy import stats

from dpcore.data import fingerprint, infer_schema, load_table, prepare
from dpcore.data.sources import DatabaseTable, FolderFile, load_source
from dpcore.errors import DataError, ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.kmeans.blowfish import BlowfishKMeans
from dpcore.kmeans.cells import cluster_statistics
from dpcore.kmeans.covariance import colored_noise_covariance
from dpcore.kmeans.lloyd import DPLloydKMeans
from dpcore.kmeans.mcmc import LeeKiferKMeans
from dpcore.kmeans.registry import release_centroids
from dpcore.mechanisms import Sampler
from dpcore.metrics import nearest_sets
from dpcore.outofcore import TableFeatures, clustering, colored, features
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
    rows = feat.rows.select(**{f"x{j}": x for j, x in enumerate(feat.scaled())}).to_pandas().to_numpy()
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
    counts, sums = feat.nearest_statistics(centres)
    want_n, want_s = cluster_statistics(Xc, nearest_sets(Xc, centres)[0], 4)
    assert np.array_equal(counts, want_n)
    assert counts[1, 2] == 0 and counts.sum() == 2 * len(df)
    np.testing.assert_allclose(sums, want_s, rtol=1e-12, atol=1e-9)


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
    a = release_centroids("dp_lloyd", in_memory(df), epsilon=1.0, sampler=Sampler(seed), params=params)
    feat = duckdb_features(path)
    b = release_centroids("dp_lloyd", feat, epsilon=1.0, sampler=Sampler(seed), params=params)
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
    a = release_centroids("blowfish", inputs, epsilon=1.0, sampler=Sampler(9), params=params)
    b = release_centroids("blowfish", feat, epsilon=1.0, sampler=Sampler(9), params=params)
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
    a = release_centroids("dp_lloyd", KMeansInputs.from_prepared(prep), epsilon=2.0, sampler=Sampler(1))
    b = release_centroids("dp_lloyd", feat, epsilon=2.0, sampler=Sampler(1))
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
        "dp_lloyd", KMeansInputs.from_prepared(prep), epsilon=2.0, sampler=Sampler(1), params=params
    )
    with open_source(path, "spark", spark=spark) as src:
        feat = TableFeatures.from_bounds(src.table, BOUNDS)
        assert feat.n_rows() == prep.n_samples == 397
        b = release_centroids("dp_lloyd", feat, epsilon=2.0, sampler=Sampler(1), params=params)
    c = release_centroids("dp_lloyd", duckdb_features(path), epsilon=2.0, sampler=Sampler(1), params=params)
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
        b = release_centroids("dp_lloyd", feat, epsilon=1.0, sampler=Sampler(2), params=params)
        run = colored.colored_release(feat, 3, epsilon=1.0, delta=1e-6, sampler=Sampler(2), sample_rows=300)
    a = release_centroids("dp_lloyd", in_memory(small), epsilon=1.0, sampler=Sampler(2), params=params)
    c = release_centroids("dp_lloyd", duckdb_features(part), epsilon=1.0, sampler=Sampler(2), params=params)
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.table, c.table, check_exact=True)
    # the colored passes on Spark: every row's constraint holds under the clustering it used
    X = in_memory(small).X
    labels = nearest_sets(X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(X, labels) <= 1.0 and run.covariance.gap <= 1e-5
    # ... and DuckDB draws the same sample, so the same seed gives the same clustering and release
    duck = colored.colored_release(
        duckdb_features(part), 3, epsilon=1.0, delta=1e-6, sampler=Sampler(2), sample_rows=300
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
    sampler = Sampler(4)
    run = colored.colored_release(feat, 3, epsilon=1.0, delta=1e-6, sampler=sampler, sample_rows=sample_rows)
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0
    mem = colored_noise_covariance(inputs.X, labels, 1.0, 1e-6)
    np.testing.assert_allclose(run.covariance.centers, mem.centers, rtol=0, atol=1e-12)
    assert run.covariance.gap <= 1e-5 and abs(run.covariance.trace / mem.trace - 1) <= 1e-5
    assert run.passes <= 4
    assert list(run.output.table.columns) == ["cluster", "a [original units]", "b [original units]",
                                              "c [original units]"]


def test_colored_out_of_core_rank_deficient_cluster_and_refusals(tmp_path: Path) -> None:
    feat, inputs = colored_case(tmp_path, constant=True)
    run = colored.colored_release(feat, 3, epsilon=1.0, delta=1e-6, sampler=Sampler(4))
    labels = nearest_sets(inputs.X, run.centres[None])[0][0]
    assert run.covariance.max_constraint(inputs.X, labels) <= 1.0
    assert run.covariance.caveats and all(b.shape[1] == 2 for b in run.covariance.bases)
    assert all(np.all(block[2] == 0.0) for block in run.covariance.blocks)  # no noise along c
    np.testing.assert_allclose(run.output.table["c [original units]"], 40.0, rtol=1e-12)
    with pytest.raises(ParameterError, match="δ > 0"):
        colored.colored_release(feat, 3, epsilon=1.0, delta=0.0, sampler=Sampler(4))
    with pytest.raises(ParameterError, match="secure sampling"):
        colored.colored_release(feat, 3, epsilon=1.0, delta=1e-6, sampler=Sampler.diagnostic(1))


def temp_tables(con) -> list[str]:
    rows = con.raw_sql("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    return [row[0] for row in rows]


def memory_limit(con) -> str:
    return con.raw_sql("SELECT current_setting('memory_limit')").fetchall()[0][0]


@pytest.mark.parametrize("user_limit", [None, "3GB", "200MB"])
def test_cached_rows_cap_duckdb_memory_then_are_dropped_and_the_setting_restored(data, user_limit) -> None:
    _, path = data
    con = ibis.duckdb.connect()
    if user_limit is not None:
        con.raw_sql(f"SET memory_limit = '{user_limit}'")
    before = memory_limit(con)
    feat = TableFeatures.from_bounds(con.read_parquet(str(path)), BOUNDS)
    with features.cached(feat.centred()) as rows:
        assert len(temp_tables(con)) == 1
        if user_limit is None:  # DuckDB's default (80% of the RAM) lowered to the cap (shown to 0.1 GiB)
            capped, cap = features._bytes(memory_limit(con)), features.MEMORY_LIMIT
            assert cap - 2**30 / 10 < capped <= cap < features._bytes(before)
        else:  # the user's own limit stays
            assert memory_limit(con) == before
        assert np.array_equal(rows.to_pandas().to_numpy(), feat.centred().to_pandas().to_numpy())
    assert temp_tables(con) == [] and memory_limit(con) == before
    with pytest.raises(RuntimeError), features.cached(feat.centred()):
        raise RuntimeError("a pass failed")
    assert temp_tables(con) == [] and memory_limit(con) == before  # released on errors too


def test_a_cache_spills_to_the_temporary_folder_not_the_working_folder(data, tmp_path, monkeypatch) -> None:
    """DuckDB's default spill folder is ``.tmp`` in the working directory (the app's checkout): a cache
    spills to ``features.SPILL_FOLDER`` instead, and the connection's setting comes back afterwards."""
    _, path = data
    monkeypatch.chdir(tmp_path)
    con = ibis.duckdb.connect()
    setting = lambda: con.raw_sql("SELECT current_setting('temp_directory')").fetchall()[0][0]  # noqa: E731
    assert setting() == ".tmp"
    feat = TableFeatures.from_bounds(con.read_parquet(str(path)), BOUNDS)
    with features.cached(feat.centred(), memory_limit=2**20):  # 1 MiB: the cache spills
        assert setting() == str(features.SPILL_FOLDER)
    assert setting() == ".tmp" and not (tmp_path / ".tmp").exists()


def test_a_batch_job_s_duckdb_spills_to_the_temporary_folder_from_the_start() -> None:
    """Every spill of a batch job's DuckDB (a cache, a window sort of the per-user cap) goes to
    ``SPILL_FOLDER``; DuckDB's own default is ``.tmp`` in the working directory."""
    from dpcore.outofcore.source import connect

    setting = connect("duckdb").raw_sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
    assert setting == str(features.SPILL_FOLDER)


def test_cached_and_source_passes_give_the_same_n_and_statistics(data) -> None:
    df, path = data
    feat = duckdb_features(path)
    centres = np.random.default_rng(1).uniform(-0.8, 0.8, (1, 3, 3))
    with feat.centred_rows() as (n, rows), feat.centred_rows(cache_limit=0) as (n_src, src):
        assert rows.op() != src.op()  # one cached, one over the Parquet file
        assert n == n_src == len(df)
        a, b = feat.nearest_statistics(centres, rows), feat.nearest_statistics(centres, src)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_nearest_label_ties_between_later_centres_go_to_the_lowest_index(data) -> None:
    df, path = data
    feat, inputs = duckdb_features(path), in_memory(df)
    Xc = np.clip(inputs.X, inputs.lower, inputs.upper) - (inputs.lower + inputs.upper) / 2
    centres = np.array([[[0.9, 0.9, 0.9], [-0.5, 0.2, -0.3], [0.4, 0.6, 0.2], [-0.5, 0.2, -0.3]]])
    counts, sums = feat.nearest_statistics(centres)  # centre 3 is a copy of centre 1
    want_n, want_s = cluster_statistics(Xc, nearest_sets(Xc, centres)[0], 4)
    assert counts[0, 3] == 0 and counts[0, 1] > 0
    assert np.array_equal(counts, want_n)
    np.testing.assert_allclose(sums, want_s, rtol=1e-12, atol=1e-9)


def test_the_keyed_sample_keeps_each_row_with_the_sampling_fraction(tmp_path: Path) -> None:
    """Over 200 fresh salts each of 2,000 distinct rows is kept about 0.1 of the time: per-row counts
    spread as Binomial(200, 0.1) (a rule that ignored the salt would keep a row always or never), the
    rows come in key order and the same salt draws the same rows again."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.uniform(-1, 1, (2000, 3)), columns=["x0", "x1", "x2"])
    path = tmp_path / "rows.parquet"
    df.to_parquet(path, index=False)
    t = ibis.duckdb.connect().read_parquet(str(path))
    lower, upper = np.full(3, -1.0), np.full(3, 1.0)
    position = {tuple(r): i for i, r in enumerate(df.to_numpy())}
    counts = np.zeros(2000)
    sampler = Sampler(6)
    for _ in range(200):
        salt = clustering.KEY_SCALE * (1.0 + sampler.rng.random(3))
        kept = clustering.keyed_sample(t, lower, upper, salt, 0.1)
        rows = np.array([position[tuple(r)] for r in kept])
        assert len(np.unique(rows)) == len(rows)
        counts[rows] += 1
    assert abs(counts.mean() - 20.0) < 0.5  # 200 x 0.1 rows kept per row on average
    assert 12.0 < counts.var() < 25.0 and counts.min() >= 1  # binomial spread: 200 x 0.1 x 0.9 = 18
    assert stats.chisquare(np.bincount(np.arange(2000) // 200, weights=counts)).pvalue > 1e-3
    assert np.array_equal(clustering.keyed_sample(t, lower, upper, salt, 0.1), kept)
    x = sum((kept[:, j] - lower[j]) / (upper[j] - lower[j]) * salt[j] for j in range(3))
    key = x - np.floor(x)  # numpy's key, bit for bit the engine's: ascending and below the fraction
    assert np.all(np.diff(key) >= 0) and key.max() < 0.1


def test_a_certificate_pass_keeps_every_row_whose_quadratic_form_is_above_near(monkeypatch) -> None:
    """The bound q = ||u' F_k||^2 <= s_k^2 (||x - m_k|| + ||m_k - c_k||)^2 / (n_k - 1)^2 (with its rounding
    margin) skips rows in full-rank clusters only: rows crafted one ulp apart around q = NEAR where the
    bound is tight (x - c_k along F_k's top direction, m_k between c_k and x), and random ones, are
    kept whenever their computed q is above NEAR; a rank-deficient cluster keeps every row."""
    rng = np.random.default_rng(7)
    d, near, k = 4, colored.NEAR, 3
    factors = [rng.normal(size=(d, d)), 3.0 * rng.normal(size=(d, d)), rng.normal(size=(d, 2))]
    centers, counts = rng.uniform(-0.5, 0.5, (k, d)), np.array([1001.0, 2501.0, 801.0])
    centres = np.empty((k, d))
    rows, labels = [], []
    for c, f in enumerate(factors):
        top, s = np.linalg.svd(f)[:2]
        reach = math.sqrt(near) / s[0] * (counts[c] - 1.0)  # ||x - c_k|| where q = NEAR along top
        centres[c] = centers[c] + 0.01 * reach * top[:, 0]  # ||x - c_k|| = ||x - m_k|| + ||m_k - c_k||
        ulps = 1.0 + np.arange(-300, 301) * np.finfo(float).eps
        rows += [centers[c] + top[:, 0] * reach * ulps[:, None]]
        directions = rng.normal(size=(3000, d))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        rows += [centers[c] + directions * reach * rng.uniform(0.5, 1.6, (3000, 1))]
        labels += [c] * (601 + 3000)
    x = np.vstack(rows)
    df = pd.DataFrame(x, columns=[f"x{j}" for j in range(d)]).assign(label=labels, id=np.arange(len(x)))
    t = colored._with_radius(ibis.memtable(df), centres)
    every = colored._quadratic(clustering.centred_shifts(t, centers, counts), factors, "q")
    q = every.to_pandas().set_index("id").q.sort_index()
    candidates = colored._candidates(t, colored._cuts(factors, centres, centers, counts), centers, counts)
    kept = colored._quadratic(candidates, factors, "q").to_pandas().set_index("id")
    assert set(q.index[q > near]) <= set(kept.index)
    assert np.array_equal(kept.q.to_numpy(), q[kept.index].to_numpy())  # the same values, bit for bit
    boundary = q[np.arange(len(x)) % 3601 < 601]
    assert (boundary > near).sum() > 100 and (boundary <= near).sum() > 100  # rows on both sides
    assert set(np.flatnonzero(np.asarray(labels) == 2)) <= set(kept.index)  # rank-deficient: every row
    assert len(kept) < 0.9 * len(x)  # the bound skips rows of the full-rank clusters
    # the crafted rows sit on the bound: a cut 1e-12 too high would lose rows above NEAR
    monkeypatch.setattr(colored, "BOUND_MARGIN", -1e-12)
    tight = colored._candidates(t, colored._cuts(factors, centres, centers, counts), centers, counts)
    tight = tight.to_pandas()
    assert not set(q.index[q > near]) <= set(tight.id)


def test_the_bound_and_the_outer_rows_leave_the_colored_release_unchanged(tmp_path: Path, monkeypatch):
    """The same rows come back from every certificate pass, hence the same covariance, whether the passes
    score the cached outer rows under the bound (as released), every row (no bound), or the table's rows
    under the bound (a floor no cut reaches); the cache is dropped; every row's constraint holds."""
    feat, inputs = colored_case(tmp_path)
    top_rows, above, cuts = colored._top_rows, colored._above, colored._cuts
    found: list[pd.DataFrame] = []
    scored: list[int] = []

    def spy_top(*args):
        rows = top_rows(*args)
        found.append(rows.drop("rank").to_pandas().sort_values(["label", "score", "x0", "x1", "x2"]))
        return rows

    def counted(*args):
        rows = above(*args)
        scored.append(int(rows.count().execute()))
        return rows

    monkeypatch.setattr(colored, "_top_rows", spy_top)
    monkeypatch.setattr(colored, "_above", counted)
    runs = {}
    for case, cut, loose in [
        ("outer rows", cuts, colored.LOOSE),
        ("every row", lambda factors, *a: np.full(len(factors), -1.0), colored.LOOSE),
        ("table rows", cuts, 1e300),
    ]:
        monkeypatch.setattr(colored, "_cuts", cut)
        monkeypatch.setattr(colored, "LOOSE", loose)
        run = colored.colored_release(feat, 3, epsilon=1.0, delta=1e-6, sampler=Sampler(4), sample_rows=40)
        runs[case] = run
        assert temp_tables(feat.table.get_backend()) == []
    passes = runs["outer rows"].passes - 1
    assert passes >= 2 and all(run.passes - 1 == passes for run in runs.values())
    for a, b, c in zip(found[:passes], found[passes : 2 * passes], found[2 * passes :], strict=True):
        assert a.to_numpy().tolist() == b.to_numpy().tolist() == c.to_numpy().tolist()
    # per pass the cached rows are counted when built, then the rows scored
    per_run = [scored[i : i + passes + 1] for i in range(0, len(scored), passes + 1)]
    outer, every, table_rows = per_run
    assert every == [len(inputs.X)] * (passes + 1) and table_rows[0] == 0  # the floor keeps nothing
    assert max(outer[1:]) < outer[0] < len(inputs.X) and table_rows[1:] == outer[1:]
    for run in runs.values():
        for name in ("centers", "counts", "bases", "unit_eigenvalues"):
            a, b = getattr(run.covariance, name), getattr(runs["outer rows"].covariance, name)
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        labels = nearest_sets(inputs.X, run.centres[None])[0][0]
        assert run.covariance.max_constraint(inputs.X, labels) <= 1.0


def test_a_spilled_cache_is_dropped_and_the_connection_keeps_the_spill_folder(tmp_path, monkeypatch) -> None:
    """DuckDB refuses to switch a temporary folder it has spilled to: after a cache that spilled (32 MB of
    rows under a 64 MiB cap) the connection keeps ``features.SPILL_FOLDER`` (never the working folder),
    and later caches and passes run."""
    monkeypatch.chdir(tmp_path)
    rows = pd.DataFrame(np.random.default_rng(0).random((1_000_000, 4)), columns=list("abcd"))
    rows.to_parquet(tmp_path / "big.parquet", index=False)
    con = ibis.duckdb.connect()
    t = con.read_parquet(str(tmp_path / "big.parquet"))
    for _ in range(2):
        with features.cached(t, memory_limit=64 * 2**20) as kept:
            assert int(kept.count().execute()) == len(rows)
        assert temp_tables(con) == [] and not (tmp_path / ".tmp").exists()
        setting = con.raw_sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
        assert setting == str(features.SPILL_FOLDER)
