"""Write ``legacy_sources/``: a people table (CSV) and what dpcore wrote about it before source kinds were
modules (main at 5d4c0e0): the session-plan origins of a folder file, a database table and a SELECT (with
their fingerprints and the fingerprints of their diagnostic samples) and a release manifest made on the
folder file. Run once from the repository root on that commit; the files are kept as they were written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
from dpcore.report import make_release

from dpcore.data import fingerprint, infer_schema, prepare
from dpcore.data.sources import DatabaseQuery, DatabaseTable, FolderFile, load_source
from dpcore.kmeans import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.plan import ReleasePlan, preparation_steps
from dpcore.policy import PureDP

HERE = Path(__file__).resolve().parent / "legacy_sources"
BOUNDS = {"a": (-10.0, 10.0), "b": (0.0, 10.0)}


def people(n: int = 240, seed: int = 20261128) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centres = np.array([[-5.0, 2.0], [4.0, 8.0], [0.0, 5.0]])
    df = pd.DataFrame(centres[rng.integers(0, 3, n)] + rng.normal(0, [1.5, 1.0], (n, 2)), columns=["a", "b"])
    df["a"] = df["a"].round(3)
    df["b"] = df["b"].round(3)
    df.loc[[4, 9], "a"] = np.nan
    return df


def main() -> None:
    import sqlalchemy as sa

    HERE.mkdir(exist_ok=True)
    people().to_csv(HERE / "people.csv", index=False)
    db = Path("/tmp/legacy_people.db")
    db.unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        pd.read_csv(HERE / "people.csv").to_sql("people", conn, index=False)
    engine = sa.create_engine(f"sqlite:///{db}")
    specs = [
        FolderFile(str(HERE), "people.csv"),
        DatabaseTable("warehouse", "people"),
        DatabaseQuery("warehouse", "SELECT a, b FROM people WHERE b > 3"),
    ]
    origins = []
    for spec in specs:
        for max_rows in (1000, 50):
            loaded = load_source(spec, folders=[str(HERE)], engine=engine, max_rows=max_rows, sample_seed=11)
            origin = {"source": spec.to_dict(), "seed": 11, "sampled": loaded.sampled, "rows": loaded.n_rows}
            origins.append(
                {
                    "origin": origin,
                    "max_rows": max_rows,
                    "fingerprint": loaded.fingerprint,
                    "table_fingerprint": fingerprint(loaded.table),
                }
            )
    loaded = load_source(specs[0], folders=[str(HERE)], max_rows=1000)
    df = loaded.table
    prep = prepare(df, infer_schema(df), list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    steps = preparation_steps([f"drop on a ({int(df['a'].isna().sum())} rows removed)"], prep)
    plan = ReleasePlan(
        domain="kmeans",
        mechanism="dp_lloyd",
        epsilon=1.0,
        policy=PureDP(1.0),
        dataset_name="people",
        fingerprint=prep.fingerprint,
        params={"n_clusters": 3},
        preparation=steps,
        mode="demo",
        seed=7,
    )
    ledger = Ledger.initialise("sqlite:////tmp/legacy_ledger.db")
    ledger.set_budget(plan.account, epsilon=5.0)
    rel = make_release(
        ledger, plan, KMeansInputs.from_prepared(prep), request_id="legacy-1", user="u",
        artifacts_dir="/tmp/legacy_artifacts", name="kmeans",
    )
    (HERE / "session_origins.json").write_text(json.dumps(origins, indent=1) + "\n")
    (HERE / "people-manifest.json").write_text(json.dumps(rel.manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
