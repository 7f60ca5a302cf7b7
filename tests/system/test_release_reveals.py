"""A k-means release reveals nothing data-derived: the attacks of the audit, run on the released files.

The centroids of a release are published in one coordinate system per feature, the one in which its clip
box is public: original units when the curator gave the bounds, fractions of the data range when the
bounds were read from the data. Each attack below reads only the CSV, JSON and HTML files of a release
(plus the public bounds in the standardising case) and tries to recover the data's exact minimum and
maximum, or its exact mean and standard deviation:

* two coordinate systems of one feature (an affine map between two columns, from two centroids);
* a centroid clipped at a data-derived bound shows the bound itself;
* DP-Lloyd (Blum et al. 2005; Su et al. 2016) clips centres to the bounds in the space it runs in: with
  standardising that is ((lo - mean) / std, (hi - mean) / std), so the two clip points and the public
  (lo, hi) give mean and std.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMeansInputs, centroid_table
from dpcore.ledger import Ledger
from dpcore.location.geometry import Region
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.mechanisms import Sampler
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP
from dpcore.releases import Release, make_release

LO, HI = 20_000.0, 100_000.0  # the curator's public bounds of "income" in the standardising case
SEEDS = range(6)  # demo seeds: reproducible releases, several per setting so that some clip at both ends
FRACTION = " [fraction of data range]"
ORIGINAL = " [original units]"


def _frame() -> pd.DataFrame:
    """40 rows whose extremes are odd numbers an attacker could not guess (26749.69 as in the audit)."""
    rng = np.random.default_rng(11)
    income = np.r_[26_749.69, 91_234.57, rng.uniform(30_000, 90_000, 38)]
    wines = np.r_[3.25, 1_437.5, rng.uniform(10, 1_400, 38)]
    return pd.DataFrame({"income": income, "wines": wines})


def _release(tmp_path: Path, scaling: str, bounds: dict | None, epsilon: float, seed: int) -> Release:
    df = _frame()
    prep = prepare(
        df, infer_schema(df), ["income", "wines"], scaling=scaling, bounds=bounds, data_bounds_ok=not bounds
    )
    plan = ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=epsilon,
        policy=PureDP(epsilon),
        dataset_name="audit",
        fingerprint=prep.fingerprint,
        params={"n_clusters": 6},
        preparation=preparation_steps([], prep),
        mode="demo",
        seed=seed,
    )
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget(plan.account, 1_000.0)
    return make_release(
        ledger,
        plan,
        KMeansInputs.from_prepared(prep),
        request_id=f"r{seed}-{str(epsilon).replace('.', '_')}-{scaling}-{'public' if bounds else 'data'}",
        user="auditor",
        artifacts_dir=tmp_path / "artifacts",
    )


# ---------------------------------------------------------------- reading the released files


class _TableParser(HTMLParser):
    """The released table of the HTML report: header cells and rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_cell = False
        self._section = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr" and self._section == "Released table":
            self.rows.append([])
        self._in_cell = tag in ("td", "th")
        if tag == "h2":
            self._section = "?"

    def handle_endtag(self, tag: str) -> None:
        self._in_cell = self._in_cell and tag not in ("td", "th")

    def handle_data(self, data: str) -> None:
        if self._section == "?":
            self._section = data.strip()
        elif self._in_cell and self.rows and self._section == "Released table":
            self.rows[-1].append(data)


def _file(release: Release, suffix: str) -> str:
    (name,) = [n for n in release.files if n.endswith(suffix) and not n.endswith("-manifest.json")]
    return release.files[name].decode()


def _tables(release: Release) -> dict[str, pd.DataFrame]:
    """The released table as the CSV, the JSON and the HTML report each carry it."""
    parser = _TableParser()
    parser.feed(_file(release, "-report.html"))
    header, *rows = parser.rows
    html_table = pd.DataFrame(rows, columns=header)
    for column in html_table.columns:
        numbers = pd.to_numeric(html_table[column], errors="coerce")
        if numbers.notna().all():
            html_table[column] = numbers
    return {
        "csv": pd.read_csv(io.StringIO(_file(release, ".csv"))),
        "json": pd.DataFrame(json.loads(_file(release, ".json"))["data"]),
        "html": html_table,
    }


def _walk(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _walk(v)]
    if isinstance(value, list):
        return [x for v in value for x in _walk(v)]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [float(value)]
    if isinstance(value, str):
        return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", value)]
    return []


def _numbers(release: Release) -> dict[str, np.ndarray]:
    """Every number each file holds: CSV cells, JSON values (manifest included), the HTML report's text
    (plotly.js itself removed) and the arrays its charts carry in base64."""
    text = _file(release, "-report.html")
    text = re.sub(r'<script type="text/javascript">.*?</script>', "", text, count=1, flags=re.S)  # plotly.js
    return {
        "csv": np.array(_walk(_file(release, ".csv").replace(",", " "))),
        "json": np.array(_walk(json.loads(_file(release, ".json")))),
        "html": _text_numbers(text),
    }


def _text_numbers(text: str) -> np.ndarray:
    """The numbers in a text, with Plotly's base64 arrays ("bdata") decoded."""
    charts = []
    for dtype, data in re.findall(r'"dtype":"(\w+)","bdata":"((?:[^"\\]|\\.)*)"', text):
        raw = base64.b64decode(json.loads(f'"{data}"'))
        charts.append(np.frombuffer(raw, dtype=np.dtype(dtype)).astype(float))
    return np.r_[_walk(re.sub(r'"bdata":"(?:[^"\\]|\\.)*"', "", text)), *charts]


# ---------------------------------------------------------------- the attacks


def _close(a: np.ndarray, b: float, rtol: float) -> np.ndarray:
    return np.abs(a - b) <= rtol * abs(b)


def _two_systems(table: pd.DataFrame, feature: str) -> list[tuple[float, float]]:
    """Affine maps v = s u + c between two numeric columns of ``feature``, from two centroids; each gives
    the candidates (c - s, c + s) for (min, max) of min-max scaling and (c, s) for (mean, std)."""
    columns = [c for c in table.columns if str(c).startswith(feature + " [")]
    numeric = [c for c in columns if pd.api.types.is_numeric_dtype(table[c])]
    found = []
    for u, v in itertools.permutations(numeric, 2):
        x, y = table[u].to_numpy(float), table[v].to_numpy(float)
        i, j = np.argmin(x), np.argmax(x)
        if x[j] > x[i]:
            s = (y[j] - y[i]) / (x[j] - x[i])
            c = y[i] - s * x[i]
            found += [(c - s, c + s), (c, s), (c, c + s)]
    return found


def _both_clip_points(numbers: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Every (mean, std) that a pair a < b of released numbers implies if a, b are the standardised public
    bounds: std = (hi - lo) / (b - a), mean = lo - a std."""
    values = np.unique(numbers[np.isfinite(numbers)])
    a, b = np.meshgrid(values, values, indexing="ij")
    keep = b > a
    std = (hi - lo) / (b[keep] - a[keep])
    return lo - a[keep] * std, std


@pytest.mark.parametrize("epsilon", [0.5, 5.0])
def test_data_bounds_reveal_neither_the_data_minimum_nor_maximum(tmp_path: Path, epsilon: float) -> None:
    df = _frame()
    releases = [_release(tmp_path, "minmax", None, epsilon, seed) for seed in SEEDS]
    for seed, release in zip(SEEDS, releases, strict=True):
        for fmt, table in _tables(release).items():
            for feature in df.columns:
                lo, hi = df[feature].min(), df[feature].max()
                for a, b in _two_systems(table, feature):
                    assert not (np.isclose(a, lo, rtol=1e-6) and np.isclose(b, hi, rtol=1e-6)), (fmt, seed)
        for fmt, numbers in _numbers(release).items():
            for feature in df.columns:
                for extreme in (df[feature].min(), df[feature].max()):
                    rtol = 1e-6 if fmt == "html" else 1e-12  # the report shows 7 significant digits
                    assert not _close(numbers, extreme, rtol).any(), (fmt, seed, feature, extreme)
    clipped = 0
    for release in releases:
        table = release.table
        assert [c for c in table.columns if c != "cluster"] == [f + FRACTION for f in df.columns]
        values = table[[f + FRACTION for f in df.columns]].to_numpy(float)
        assert ((values >= 0) & (values <= 1)).all()
        clipped += int(((values == 0) | (values == 1)).any())
    assert clipped  # some releases were clipped at a bound: the attack had something to read


@pytest.mark.parametrize("epsilon", [0.5, 5.0])
def test_standardising_reveals_neither_the_data_mean_nor_std(tmp_path: Path, epsilon: float) -> None:
    df, bounds = _frame(), {"income": (LO, HI), "wines": (0.0, 1_500.0)}
    releases = [_release(tmp_path, "standardize", bounds, epsilon, seed) for seed in SEEDS]
    for seed, release in zip(SEEDS, releases, strict=True):
        for fmt, table in _tables(release).items():
            for feature in df.columns:
                mean, std = df[feature].mean(), df[feature].std(ddof=0)
                for a, b in _two_systems(table, feature):
                    assert not (np.isclose(a, mean, rtol=1e-6) and np.isclose(b, std, rtol=1e-6)), fmt
        for fmt, numbers in _numbers(release).items():
            for feature, (lo, hi) in bounds.items():
                mean, std = df[feature].mean(), df[feature].std(ddof=0)
                means, stds = _both_clip_points(numbers, lo, hi)
                rtol = 1e-5 if fmt == "html" else 1e-9
                hit = _close(means, mean, rtol) & _close(stds, std, rtol)
                assert not hit.any(), (fmt, seed, feature)
    clipped = 0
    for release in releases:
        table = release.table
        assert [c for c in table.columns if c != "cluster"] == [f + ORIGINAL for f in df.columns]
        for feature, (lo, hi) in bounds.items():
            values = table[feature + ORIGINAL].to_numpy(float)
            assert ((values >= lo - 1e-9 * hi) & (values <= hi + 1e-9 * hi)).all()  # the public bounds
            clipped += int(np.isclose(values, lo).any() and np.isclose(values, hi).any())
    assert clipped  # some releases were clipped at both ends: the attack had both points to read


# ---------------------------------------------------------------- one coordinate system per feature


def _mixed() -> tuple[pd.DataFrame, Any]:
    """Numbers, dates and categories, each with public bounds and with bounds read from the data."""
    rng = np.random.default_rng(5)
    n = 30
    df = pd.DataFrame(
        {
            "pub_num": rng.uniform(10, 90, n),
            "data_num": rng.uniform(10, 90, n),
            "pub_date": pd.to_datetime("2013-01-01") + pd.to_timedelta(rng.integers(0, 700, n), unit="D"),
            "data_date": pd.to_datetime("2013-01-01") + pd.to_timedelta(rng.integers(0, 700, n), unit="D"),
            "pub_cat": rng.choice(["a", "b", "c"], n),
            "data_cat": rng.choice(["x", "y", "z"], n),
        }
    )
    schema = infer_schema(df).with_kind("pub_cat", "categorical").with_kind("data_cat", "categorical")
    schema = schema.with_categories("pub_cat", ["a", "b", "c"])
    bounds = {"pub_num": (0, 100), "pub_date": ("2012-01-01", "2015-12-31")}
    prep = prepare(df, schema, list(df.columns), scaling="standardize", bounds=bounds, data_bounds_ok=True)
    return df, prep


def test_each_feature_is_published_where_its_bounds_are_public() -> None:
    _, prep = _mixed()
    inputs = KMeansInputs.from_prepared(prep)
    assert inputs.data_bounds == ("data_num", "data_date", "data_cat")
    centers = np.vstack([prep.lower, prep.upper, (prep.lower + prep.upper) / 2])  # clipped low, high, middle
    table = centroid_table(inputs, centers)
    assert list(table.columns) == [
        "cluster",
        "pub_num" + ORIGINAL,
        "data_num" + FRACTION,
        "pub_date" + ORIGINAL,
        "data_date" + FRACTION,
        "pub_cat" + ORIGINAL,
        "data_cat" + FRACTION,
    ]
    # clipped centres show the public bounds or 0 and 1: never the data's extremes, mean or std
    np.testing.assert_allclose(table["pub_num" + ORIGINAL], [0, 100, 50])
    assert table["pub_date" + ORIGINAL].tolist() == ["2012-01-01", "2015-12-31", "2013-12-31"]
    assert table["pub_cat" + ORIGINAL].tolist() == ["a", "c", "b"]
    for feature in ("data_num", "data_date", "data_cat"):
        np.testing.assert_allclose(table[feature + FRACTION], [0.0, 1.0, 0.5])


def test_the_manifest_and_the_chart_say_what_the_release_reveals(tmp_path: Path) -> None:
    release = _release(tmp_path, "standardize", None, 1.0, 0)
    manifest = json.loads(_file(release, ".json"))["manifest"]
    columns = manifest["details"]["columns"]
    assert list(columns) == ["income" + FRACTION, "wines" + FRACTION]
    assert all("the range itself is not published" in text for text in columns.values())
    (features,) = [p["step"] for p in manifest["preparation"] if p["step"].startswith("features")]
    assert "income read from the data, not published (centroids are released as fractions" in features
    report = _file(release, "-report.html")
    assert "data-derived (not published)" not in report and "the range itself is not published" in report
    (figure,) = release.figures
    assert figure.layout.yaxis.title.text == "place within its bounds (0 = lower, 1 = upper)"
    assert not [t for t in figure.data if t.type == "table"]  # the bars are the released fractions
    bars = np.array([t.y for t in figure.data])
    np.testing.assert_allclose(bars, release.table[["income" + FRACTION, "wines" + FRACTION]].to_numpy())
    assert not re.search(r"scaled|original units|standardi", json.dumps(figure.to_plotly_json()["layout"]))

    public = _release(tmp_path, "standardize", {"income": (LO, HI), "wines": (0.0, 1_500.0)}, 1.0, 0)
    manifest = json.loads(_file(public, ".json"))["manifest"]
    assert set(manifest["details"]["columns"].values()) == {
        "centroid in original units (dates as YYYY-MM-DD, categories as the nearest category); the DP "
        "mechanisms clip it to the curator's public bounds"
    }
    (features,) = [p["step"] for p in manifest["preparation"] if p["step"].startswith("features")]
    assert "income [20000.0, 100000.0]; wines [0.0, 1500.0]" in features
    (figure,) = public.figures
    assert not [t for t in figure.data if t.type == "table"]  # the released table is shown beside the chart
    assert list(public.table.columns) == ["cluster", "income" + ORIGINAL, "wines" + ORIGINAL]
    assert "released value %{customdata}" in figure.data[0].hovertemplate  # original units, as published


def test_inputs_name_their_data_derived_bounds() -> None:
    X = np.zeros((3, 2))
    with pytest.raises(ParameterError, match="data_bounds must name features of X that have bounds"):
        KMeansInputs(X, feature_names=("a", "b"), data_bounds=("a",))  # no bounds to take a fraction of
    with pytest.raises(ParameterError, match="data_bounds must name features"):
        KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b"), data_bounds=("c",))


# ---------------------------------------------------------------- locations


@pytest.mark.parametrize("key", list(LOCATIONS))
def test_location_releases_show_the_public_region_never_the_data_extent(key: str) -> None:
    """The region (clamp box, grid, plane map) is the curator's: no released number, in the table, the
    manifest details or the chart, is one of the data's extreme coordinates."""
    rng = np.random.default_rng(3)
    lat = np.r_[31.123456789, 44.987654321, rng.uniform(32, 44, 298)]
    lon = np.r_[-119.876543219, -80.123456789, rng.uniform(-119, -81, 298)]
    region = Region(24.0, 50.0, -125.0, -66.0)
    spec = LOCATIONS[key]
    out = spec.release(
        LocationInputs(lat, lon, None, region),
        epsilon=1.0,
        delta=0.0,
        params=spec.validate_params({"n_clusters": 4, "grid_size": 8} if key == "prilocation" else {}),
        random_state=Sampler(seed=4),
    )
    assert out.details["region"] == region.to_dict()
    numbers = np.r_[
        out.table.select_dtypes("number").to_numpy(float).ravel(),
        _walk(json.loads(json.dumps(out.details, default=float))),
        *[_text_numbers(figure.to_json()) for figure in out.figures],
    ]
    assert numbers.size > 2 * len(out.table)
    for extreme in (lat.min(), lat.max(), lon.min(), lon.max()):
        assert not _close(numbers, extreme, 1e-9).any(), extreme
