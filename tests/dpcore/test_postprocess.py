"""Released numbers are rounded to a precision their noise justifies (``dpcore.postprocess``), by rules that
read public values only, in every released file and chart; the manifest states the rule and each column's
decimal places."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.data import infer_schema, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.location.geometry import Region
from dpcore.location.registry import LOCATIONS, LocationInputs
from dpcore.mechanisms import Sampler
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP
from dpcore.postprocess import (
    COORDINATE_DECIMALS,
    FIGURE_DECIMALS,
    epsilon_decimals,
    release_decimals,
    round_table,
    significant_decimals,
)
from dpcore.releases import Release, make_release, rounded_output

BOUNDS = {"income": (20_000.0, 100_000.0), "wines": (0.0, 1_500.0)}


def _places(text: str) -> int:
    """Decimal places written in a number's text (0 for whole numbers, 1e-06 counts 6)."""
    exponent = Decimal(text).as_tuple().exponent
    return max(0, -int(exponent))


def _frame(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"income": rng.uniform(30_000, 90_000, 60), "wines": rng.uniform(10, 1_400, 60)})


def _release(tmp_path: Path, df: pd.DataFrame, bounds: dict | None, name: str) -> Release:
    prep = prepare(
        df, infer_schema(df), ["income", "wines"], scaling="minmax", bounds=bounds, data_bounds_ok=not bounds
    )
    plan = ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=1.0,
        policy=PureDP(1.0),
        dataset_name=name,
        fingerprint=prep.fingerprint,
        params={"n_clusters": 3},
        preparation=preparation_steps([], prep),
        mode="demo",
        seed=1,
    )
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget(plan.account, 100.0)
    return make_release(
        ledger,
        plan,
        KMeansInputs.from_prepared(prep),
        request_id=f"r-{name}",
        user="u",
        artifacts_dir=tmp_path / "artifacts",
    )


def test_the_rules_keep_a_decimal_place_below_the_noise():
    assert [significant_decimals(w) for w in (1.0, 80_000.0, 1_500.0, 0.02, 0.0)] == [6, 2, 3, 8, 7]
    # 1/ε is the smallest Laplace scale of a count at ε: the step is a tenth of its leading power of ten
    assert {e: epsilon_decimals(e) for e in (1.0, 0.5, 2.0, 10.0, 0.05, 0.001)} == {
        1.0: 1,
        0.5: 1,
        2.0: 2,
        10.0: 2,
        0.05: 0,
        0.001: -2,
    }
    for eps in (0.05, 0.3, 1.0, 7.0):
        assert 10.0 ** -epsilon_decimals(eps) <= (1 / eps) / 10 + 1e-12
    with pytest.raises(ParameterError, match="ε must be"):
        epsilon_decimals(0.0)
    table = pd.DataFrame(
        {"lat": [1.0], "lon_lo": [2.0], "noisy_count": [3.5], "n": [4], "user": ["a"], "c": [1.0]}
    )
    assert release_decimals(table, 0.5, {"c": 3}) == {"lat": 6, "lon_lo": 6, "noisy_count": 1, "c": 3}
    raw = pd.DataFrame({"x": [1.23456, -0.00004, np.nan, 5.55]})
    rounded = round_table(raw, {"x": 1})
    assert rounded["x"].tolist()[:2] == [1.2, 0.0] and np.isnan(rounded["x"][2])
    assert str(rounded["x"][1]) == "0.0"  # never "-0.0"
    assert (np.abs(rounded["x"] - raw["x"]).dropna() <= 0.05 + 1e-12).all()


def test_a_release_rounds_every_number_in_its_files_and_charts(tmp_path: Path):
    release = _release(tmp_path, _frame(0), BOUNDS, "public")
    rounding = release.manifest["details"]["rounding"]
    decimals = rounding["decimals"]
    # 7 significant digits of the public range in original units: 80,000 -> 2 places, 1,500 -> 3
    assert decimals == {"income [original units]": 2, "wines [original units]": 3}
    assert "public values only" in rounding["rule"] and rounding["chart_decimals"] == FIGURE_DECIMALS
    stem = next(n for n in release.files if n.endswith(".csv"))[:-4]
    csv = pd.read_csv(io.BytesIO(release.files[f"{stem}.csv"]), dtype=str)
    data = json.loads(release.files[f"{stem}.json"])["data"]
    assert json.loads(release.files[f"{stem}-manifest.json"])["details"]["rounding"] == rounding
    for column, places in decimals.items():
        assert max(_places(v) for v in csv[column]) <= places
        assert max(_places(repr(row[column])) for row in data) <= places
    for figure in release.figures:
        for trace in figure.data:
            y = np.asarray(trace.y, dtype=float)
            np.testing.assert_array_equal(y, np.round(y, FIGURE_DECIMALS))
    assert "rounding" in release.files[f"{stem}-report.html"].decode()


def test_the_rounding_step_reads_public_values_only(tmp_path: Path):
    """Two different tables with the same public bounds get the same decimal places; data-derived bounds
    publish fractions of the range, rounded by the unit range."""
    first = _release(tmp_path, _frame(1), BOUNDS, "a")
    other = _release(tmp_path, _frame(2) * 0.5, BOUNDS, "b")
    assert first.manifest["details"]["rounding"] == other.manifest["details"]["rounding"]
    fractions = _release(tmp_path, _frame(3), None, "c")
    assert set(fractions.manifest["details"]["rounding"]["decimals"].values()) == {6}


@pytest.mark.parametrize("key", list(LOCATIONS))
def test_every_location_release_is_rounded(key: str):
    rng = np.random.default_rng(3)
    lat, lon = rng.uniform(32, 44, 200), rng.uniform(-119, -81, 200)
    spec = LOCATIONS[key]
    out = spec.release(
        LocationInputs(lat, lon, None, Region(24.0, 50.0, -125.0, -66.0)),
        epsilon=2.0,
        delta=0.0,
        params=spec.validate_params({"n_clusters": 4, "grid_size": 8} if key == "prilocation" else {}),
        random_state=Sampler(seed=4),
    )
    rounded = rounded_output(out, 2.0)
    decimals = rounded.details["rounding"]["decimals"]
    floats = [c for c in out.table.columns if pd.api.types.is_float_dtype(out.table[c])]
    assert sorted(decimals) == sorted(map(str, floats)) and floats
    for column, places in decimals.items():
        assert places == (COORDINATE_DECIMALS if column.startswith(("lat", "lon")) else epsilon_decimals(2.0))
        values = rounded.table[column].to_numpy(dtype=float)
        np.testing.assert_array_equal(values, np.round(values, places))
        assert (
            np.nanmax(np.abs(values - out.table[column].to_numpy(dtype=float))) <= 0.5 * 10.0**-places + 1e-9
        )
    for figure in rounded.figures:
        for trace in figure.data:
            for name in ("x", "y", "z", "lat", "lon"):
                values = trace[name] if name in trace and trace[name] is not None else None
                if values is not None and np.asarray(values).dtype.kind == "f":
                    arr = np.asarray(values, dtype=float)
                    np.testing.assert_array_equal(arr, np.round(arr, FIGURE_DECIMALS))
