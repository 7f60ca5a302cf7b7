"""Write the release manifests of this folder with the code of main at 5d4c0e0 (before typed plan steps):
the plans as the dashboard made them then (preparation steps in words), released on the Parquet tables
beside them, each on a ledger of its own. Run from the repository root at that commit:
``python tests/data/manifests_v1/make_manifests.py``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from dpcore.data import fingerprint, handle_missing, infer_schema, load_table, prepare
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.location.contribution import scope_sentence
from dpcore.location.geometry import Region
from dpcore.location.plan_steps import columns_step, region_step
from dpcore.location.registry import LocationInputs
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP
from dpcore.report import make_release

HERE = Path(__file__).resolve().parent
BOUNDS = {"a": (-10.0, 10.0), "b": (0.0, 10.0)}
REGION = Region(24.396308, 49.384358, -124.848974, -66.885444)


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    centres = np.array([[-5.0, 2.0, 20.0], [4.0, 8.0, 70.0], [0.0, 5.0, 50.0]])
    rows = centres[rng.integers(0, 3, n)] + rng.normal(0, [1.5, 1.0, 8.0], (n, 3))
    df = pd.DataFrame(rows, columns=list("abc"))
    df["d"] = np.round(rng.normal(0, 1, n), 3)  # a column no release reads; imputed without effect
    df.loc[[4, 9], "a"] = np.nan
    df.loc[[5, 6], "d"] = np.nan
    df.loc[[20, 21], "c"] = np.nan
    return df


def visits(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    hubs = np.array([[33.6, -101.2], [40.2, -95.3], [37.0, -88.1]])
    pts = hubs[rng.integers(0, 3, n)] + rng.normal(0, [1.6, 2.5], (n, 2))
    df = pd.DataFrame({"Latitude": pts[:, 0], "Longitude": pts[:, 1]})
    df["person id"] = [f"u{u}" for u in rng.integers(0, 90, n)]
    df.loc[[3, 11], "Latitude"] = np.nan
    return df


def release(plan: ReleasePlan, inputs, stem: str, work: Path) -> None:
    ledger = Ledger.initialise(f"sqlite:///{work / (stem + '.db')}")
    ledger.set_budget(plan.account, epsilon=10.0)
    rel = make_release(
        ledger, plan, inputs, request_id=plan.request_id(), user="curator", artifacts_dir=work / stem,
        name=stem,
    )
    text = json.dumps(rel.manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    (HERE / f"{stem}-manifest.json").write_text(text, encoding="utf-8")


def cleaned(df: pd.DataFrame, steps: list[tuple[str, list[str]]]) -> tuple[pd.DataFrame, list[str], list]:
    words, touched = [], []
    for strategy, columns in steps:
        before = len(df)
        df = handle_missing(df, columns, strategy)
        words.append(f"{strategy} on {', '.join(columns)} ({before - len(df)} rows removed)")
        touched.append(columns)
    return df, words, touched


def kmeans(df: pd.DataFrame, fp: str, stem: str, work: Path, *, mode: str, fill: str, **prep) -> None:
    """``fill``: how the rows missing ``c`` are handled (an imputation of a feature is data-derived)."""
    clean, words, touched = cleaned(df, [("drop", ["a"]), ("median", ["d"]), (fill, ["c"])])
    features = list(prep.pop("features", ["a", "b"]))
    prepared = prepare(clean, infer_schema(clean), features, **prep)
    plan = ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=1.0,
        policy=PureDP(1.0),
        dataset_name="people",
        fingerprint=fp,
        params={"n_clusters": 3},
        preparation=preparation_steps(words, prepared, touched=touched, used=prepared.feature_names),
        mode=mode,
        seed=11 if mode == "demo" else None,
        private_bounds=prepared.private_bounds or {},
    )
    release(plan, KMeansInputs.from_prepared(prepared), stem, work)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        people(300).to_parquet(HERE / "people.parquet", index=False)
        visits(400).to_parquet(HERE / "visits.parquet", index=False)
        df = load_table(HERE / "people.parquet")
        fp = fingerprint(df)
        kmeans(df, fp, "kmeans", work, mode="secure", fill="drop", scaling="minmax", bounds=BOUNDS)
        kmeans(
            df, fp, "kmeans-private-bounds", work, mode="secure", fill="drop", features=["a", "b", "c"],
            scaling="minmax", bounds=BOUNDS, private_epsilon=0.5,
        )
        kmeans(
            df, fp, "kmeans-demo-imputed", work, mode="demo", fill="mean", features=["a", "b", "c"],
            scaling="standardize", bounds=BOUNDS, data_bounds_ok=True,
        )
        vis = load_table(HERE / "visits.parquet")
        clean, words, touched = cleaned(vis, [("drop", ["Latitude"])])
        plan = ReleasePlan(
            domain="location",
            mechanism="uniform_grid",
            epsilon=1.0,
            policy=PureDP(1.0),
            dataset_name="visits",
            fingerprint=fingerprint(vis),
            params={"neighbours": "unbounded", "max_per_user": 3},
            preparation=(
                *preparation_steps(words, touched=touched, used=["Latitude", "Longitude", "person id"]),
                columns_step("Latitude", "Longitude", "person id"),
                region_step(REGION),
            ),
            scope=scope_sentence(True, 3),
        )
        inputs = LocationInputs(
            clean["Latitude"].to_numpy(), clean["Longitude"].to_numpy(),
            clean["person id"].astype(str).to_numpy(), REGION,
        )
        release(plan, inputs, "location", work)


if __name__ == "__main__":
    main()
