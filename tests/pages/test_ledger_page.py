"""The Ledger page: releases newest first in readable columns (identifiers last, DEMO marked), budgets per
account grouped by dataset with every dataset's name, the release-files picker on the newest release, and
a CSV that names the dataset."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.artifacts import save_artifacts
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Account, Ledger
from ui.release import artifacts_dir
from ui.state import Dataset

TIMEOUT = 60
DP = "one row added or removed"
GEO = "one location moved, level counted within 1000 m"


@pytest.fixture
def tiny() -> Dataset:
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9, 0.3], "y": [1.0, 2.0, 3.0, 4.0]})
    return Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


OTHER_FP = "cd" * 32
OTHER = OTHER_FP[:16]


def _spend(ledger: Ledger, account: Account, eps: float, mechanism: str, request_id: str, **kw) -> None:
    path, digest = save_artifacts(artifacts_dir(), request_id, {f"{request_id}.csv": b"x\n1\n"})
    ledger.spend(account, eps, 0.0, mechanism, request_id, artifact_path=path, artifact_hash=digest, **kw)


@pytest.fixture
def ledger(tiny: Dataset) -> Ledger:
    """Two datasets: 'tiny' (in use) and 'other.csv' (not), three accounts, three releases."""
    led = Ledger(config.ledger_url())
    led.register_dataset(tiny.dataset_id, "tiny", tiny.fingerprint)
    led.register_dataset(OTHER, "other.csv", OTHER_FP)
    dp = Account(tiny.dataset_id, "dp", DP)
    demo = Account(tiny.dataset_id, "dp", DP, "demo")
    geo = Account(OTHER, "geo_ind", GEO)
    for account, eps in ((dp, 2.0), (demo, 1.0), (geo, 3.0)):
        led.set_budget(account, eps, 0.0)
    _spend(led, dp, 0.5, "dp_lloyd", "req-oldest", definition="pure_dp", fingerprint=tiny.fingerprint)
    _spend(led, geo, 1.0, "planar_laplace", "req-middle", definition="geo_ind", fingerprint=OTHER_FP)
    _spend(led, demo, 0.25, "dp_lloyd", "req-newest", definition="pure_dp", fingerprint=tiny.fingerprint)
    return led


def _ledger_page(app_path: str, dataset: Dataset) -> AppTest:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = dataset
    at.run()
    at.switch_page("pages/ledger.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def _releases(at: AppTest) -> pd.DataFrame:
    (frame,) = [d.value for d in at.dataframe if "request id" in d.value.columns]
    return frame


def _accounts(at: AppTest) -> dict[str, pd.DataFrame]:
    """Dataset heading -> its accounts table (the tables follow the headings in order)."""
    tables = [d.value for d in at.dataframe if "ε left" in d.value.columns]
    return dict(zip([h.value for h in at.subheader][: len(tables)], tables, strict=True))


def test_releases_newest_first_in_readable_columns_identifiers_last(app_path, tiny, ledger) -> None:
    at = _ledger_page(app_path, tiny)
    at.radio(key="ledger_scope").set_value("all").run()
    shown = _releases(at)
    assert shown["request id"].tolist() == ["req-newest", "req-middle", "req-oldest"]
    columns = list(shown.columns)
    assert columns[:9] == [  # what a curator reads first: when, what, how much, in which mode
        "time (UTC)",
        "dataset",
        "mechanism",
        "ε",
        "δ",
        "mode",
        "privacy definition",
        "neighbour relation",
        "user",
    ]
    assert columns[-1] == "dataset fingerprint" and columns.index("request id") > columns.index("user")
    assert shown["dataset"].tolist() == ["tiny", "other.csv", "tiny"]  # names for every dataset
    assert shown["mechanism"].tolist() == [
        "DP-Lloyd (SuLQ)",
        "Planar Laplace (per location)",
        "DP-Lloyd (SuLQ)",
    ]
    assert shown["privacy definition"].tolist()[::2] == ["ε-differential privacy"] * 2
    assert shown["neighbour relation"].tolist() == [DP, GEO, DP]
    assert shown["mode"].tolist() == ["DEMO", "release", "release"]
    assert shown["ε"].tolist() == [0.25, 1.0, 0.5] and shown["user"].tolist() == ["test-curator"] * 3
    assert len(shown["time (UTC)"].iloc[0]) == 19 and "T" not in shown["time (UTC)"].iloc[0]

    at.radio(key="ledger_scope").set_value("current").run()
    assert _releases(at)["request id"].tolist() == ["req-newest", "req-oldest"]


def test_budgets_per_account_grouped_by_dataset_with_names(app_path, tiny, ledger) -> None:
    at = _ledger_page(app_path, tiny)
    assert [h.value for h in at.subheader][:2] == ["tiny", "other.csv"]  # the dataset in use first
    tables = _accounts(at)
    mine, other = tables["tiny"], tables["other.csv"]
    assert mine["mode"].tolist() == ["release", "DEMO"]  # the demo account is its own, after the real one
    assert mine["ε left"].tolist() == [1.5, 0.75] and mine["ε total"].tolist() == [2.0, 1.0]
    assert mine["neighbour relation"].tolist() == [DP, DP]
    assert other["privacy definition"].tolist() == ["geo-indistinguishability (level l within r)"]
    assert other["ε left"].tolist() == [2.0] and other["releases"].tolist() == [1]


def test_release_files_picker_defaults_to_the_newest(app_path, tiny, ledger, downloads) -> None:
    at = _ledger_page(app_path, tiny)
    picker = at.selectbox(key="ledger_release")
    assert picker.value == "req-newest" and picker.options[0].endswith("DEMO · req-newe")
    assert "DEMO-release-req-newe.zip" in downloads
    at.radio(key="ledger_scope").set_value("all").run()
    assert at.selectbox(key="ledger_release").value == "req-newest"
    at.selectbox(key="ledger_release").set_value("req-middle").run()
    assert "release-req-midd.zip" in downloads


def test_csv_export_names_the_dataset_newest_first(app_path, tiny, ledger, downloads) -> None:
    at = _ledger_page(app_path, tiny)
    at.radio(key="ledger_scope").set_value("all").run()
    exported = pd.read_csv(io.BytesIO(downloads["ledger.csv"]))
    assert exported["dataset"].tolist() == ["tiny", "other.csv", "tiny"]
    assert exported["request id"].tolist() == ["req-newest", "req-middle", "req-oldest"]
    assert exported["dataset id"].tolist() == [tiny.dataset_id, OTHER, tiny.dataset_id]
    assert exported["mode"].tolist() == ["DEMO", "release", "release"]
    assert {"parameters", "artifact file", "account"} <= set(exported.columns)
    assert exported.columns[0] == "time (UTC)"


def test_no_server_path_on_the_page_or_in_the_csv(app_path, tiny, ledger, downloads) -> None:
    at = _ledger_page(app_path, tiny)
    folder = str(artifacts_dir().resolve())
    record = ledger.release_by_request("req-newest")
    assert record is not None and str(record.artifact_path).startswith(folder)  # the ledger keeps the path
    texts = [e.value for e in (*at.caption, *at.markdown, *at.info, *at.warning)]
    assert not [t for t in texts if folder in t or str(Path(folder).parent) in t]
    assert any(f"`{Path(record.artifact_path).name}`" in t for t in texts)
    csv = downloads["ledger.csv"].decode()
    assert folder not in csv and str(Path(folder).parent) not in csv
    exported = pd.read_csv(io.StringIO(csv))
    assert exported["artifact file"].iloc[0] == Path(record.artifact_path).name


def test_a_name_used_for_different_tables_is_flagged(app_path, tiny, ledger) -> None:
    at = _ledger_page(app_path, tiny)
    assert not at.warning  # one table per name so far
    changed = "ef" * 32  # the same name, rows reordered or a column renamed: the budget is the name's
    _spend(ledger, Account(tiny.dataset_id, "dp", DP), 0.5, "dp_lloyd", "req-changed", fingerprint=changed)
    at = _ledger_page(app_path, tiny)
    (warning,) = [w.value for w in at.warning]
    assert "2 different tables" in warning and f"`{changed[:12]}`" in warning
    assert f"`{tiny.fingerprint[:12]}`" in warning
