"""dpcore.manifest, html_report, artifacts, releases: manifest fields, DEMO and local marking, files, offline
HTML, artifacts, make_release."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore.artifacts import load_artifacts, release_files, save_artifacts, sha256_file, stored_file
from dpcore.errors import ParameterError
from dpcore.html_report import REPORT_ROWS, html_report
from dpcore.kmeans.registry import KMEANS, KMeansInputs
from dpcore.ledger import BudgetExceeded, BudgetNotSet, Ledger, LedgerError
from dpcore.manifest import DEMO_NOTICE, LOCAL_NOTICE, build_manifest
from dpcore.plan import ReleasePlan
from dpcore.policy import LocalPDP, PureDP
from dpcore.releases import make_release, stored_preview


def _plan(**changes) -> ReleasePlan:
    base = {
        "domain": "kmeans",
        "mechanism": "dp_lloyd",
        "epsilon": 0.4,
        "policy": PureDP(1.0),
        "dataset_name": "toy",
        "fingerprint": "ab" * 32,
        "params": {"n_clusters": 3},
    }
    return ReleasePlan(**{**base, **changes})


def manifest(plan: ReleasePlan | None = None, **changes):
    base = {"user": "alice", "request_id": "0123456789abcdef0123456789abcdef"}
    details = {"k": np.int64(4), "centre": np.array([0.5, 1.5]), "sigma": float("nan")}
    return build_manifest(plan or _plan(), details=details, **{**base, **changes})


def test_manifest_records_the_plan_as_plain_json():
    plan = _plan()
    m = manifest(plan, time="2026-01-02T03:04:05+00:00")
    for key, value in plan.to_manifest().items():
        assert m[key] == value
    assert m["guarantee"] == plan.guarantee and m["account"] == plan.account.key
    assert m["user"] == "alice" and m["time"] == "2026-01-02T03:04:05+00:00"
    assert m["sampling_mode"] == "secure" and m["demo"] is False and "notice" not in m
    assert m["is_local"] is False and "local_notice" not in m
    assert m["details"] == {"k": 4, "centre": [0.5, 1.5], "sigma": None}
    json.dumps(m, allow_nan=False)  # strict JSON


def test_demo_and_local_marking():
    demo = manifest(_plan(mode="demo", seed=3))
    assert demo["demo"] is True and demo["notice"] == DEMO_NOTICE
    local = manifest(_plan(mechanism="colored", delta=1e-6, policy=LocalPDP(1.0, 1e-6)))
    assert local["is_local"] is True and local["local_notice"] == LOCAL_NOTICE
    assert "not differential privacy" in local["local_notice"]
    assert "not differential privacy" in local["guarantee"]


def test_release_files_round_trip_and_demo_names():
    table = pd.DataFrame({"cluster": [0, 1], "x": [0.25, -1.5], "label": ["a", "b"]})
    m = manifest()
    files = release_files(table, m, name="kmeans", html_text="<html></html>")
    stem = "kmeans-01234567"
    assert sorted(files) == sorted(
        [f"{stem}.csv", f"{stem}.json", f"{stem}-manifest.json", f"{stem}-report.html"]
    )
    pd.testing.assert_frame_equal(pd.read_csv(io.BytesIO(files[f"{stem}.csv"])), table, check_dtype=False)
    bundle = json.loads(files[f"{stem}.json"])
    assert bundle["manifest"] == json.loads(files[f"{stem}-manifest.json"]) == json.loads(json.dumps(m))
    assert bundle["data"] == [
        {"cluster": 0, "x": 0.25, "label": "a"},
        {"cluster": 1, "x": -1.5, "label": "b"},
    ]
    demo_files = release_files(table, manifest(_plan(mode="demo", seed=1)), name="kmeans")
    assert all(name.startswith("DEMO-kmeans-") for name in demo_files)
    assert all(DEMO_NOTICE.encode() in body for body in demo_files.values())  # the mark is inside


def test_html_report_is_self_contained_with_plotlyjs_once():
    figs = [go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), go.Figure(go.Bar(x=["a"], y=[1]))]
    table = pd.DataFrame({"name": ["<script>alert(1)</script>"], "value": [1.0]})
    page = html_report("Centroids <b>", manifest(_plan(mode="demo", seed=1)), figs, [("Released", table)])
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, flags=re.I)  # nothing fetched from the network
    head_and_css = _without_scripts(page)
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:)?//", head_and_css, flags=re.I)
    assert "<link" not in head_and_css and "@import" not in head_and_css and "url(" not in head_and_css
    assert page.count("<script>alert(1)</script>") == 0 and "&lt;script&gt;alert(1)" in page  # escaped
    plotly_header = "plotly.js v"
    assert page.count(plotly_header) == 1  # the library is inlined exactly once
    assert page.count("Plotly.newPlot") == 2
    assert "Centroids &lt;b&gt;" in page and DEMO_NOTICE in page
    assert plotly_header not in html_report("No charts", manifest(), [], [("t", table)])


class _Tables(HTMLParser):
    """Every table of a page, innermost cells as text: ``tables[i]`` is a list of rows of cell texts; a
    cell holding a nested table is recorded as ``"<table k>"`` (k: that table's index)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._open: list[int] = []
        self._cell: list[list[str] | None] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "table":
            if self._open and self._cell[-1] is not None:
                self._cell[-1].append(f"<table {len(self.tables)}>")
            self._open.append(len(self.tables))
            self.tables.append([])
            self._cell.append(None)
        elif tag == "tr" and self._open:
            self.tables[self._open[-1]].append([])
        elif tag in ("td", "th") and self._open:
            self._cell[-1] = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._open:
            self._open.pop()
            self._cell.pop()
        elif tag in ("td", "th") and self._open and self._cell[-1] is not None:
            self.tables[self._open[-1]][-1].append("".join(self._cell[-1]).strip())
            self._cell[-1] = None

    def handle_data(self, data: str) -> None:
        if self._open and self._cell[-1] is not None:
            self._cell[-1].append(data)


def _tables(page: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def _without_scripts(page: str) -> str:
    return re.sub(r"<script.*?</script>", "", page, flags=re.S | re.I)


def test_html_report_shows_the_manifest_as_tables_not_json():
    m = manifest(_plan(params={"n_clusters": 3}), time="2026-01-02T03:04:05+00:00")
    m["parameters"] = {"n_clusters": 3, "bounds": {"Income": [0, 200000], "MntWines": [0, 1500]}}
    m["preparation"] = [
        {"step": "drop on Income (24 rows removed)", "data_derived": False},
        {"step": "Income: filled with the median", "data_derived": True},
    ]
    page = html_report("Centroids", m, [], [])
    body = _without_scripts(page)
    assert '{"' not in body and "&quot;" not in body  # no JSON anywhere
    tables = _tables(page)
    summary = dict(row for row in tables[0] if len(row) == 2)
    assert summary["Mechanism"] == "DP-Lloyd (SuLQ)"
    assert summary["Privacy definition"] == "ε-differential privacy"
    assert summary["Neighbour relation"] == "one row added or removed"
    assert summary["ε (spent)"] == "0.4" and summary["δ (spent)"] == "0"
    assert summary["Dataset"] == "toy" and summary["User"] == "alice"
    assert summary["Time (UTC)"] == "2026-01-02T03:04:05+00:00"
    assert tables[0][-1] == ["Dataset fingerprint (SHA-256)", "ab" * 32]  # the long identifier comes last
    labels = [row[0] for row in tables[0]]
    assert labels.index("Request id") > labels.index("User") > labels.index("ε (spent)")

    params = next(t for t in tables[1:] if ["n clusters", "3"] in t)
    bounds_cell = dict(params)["bounds"]
    assert bounds_cell.startswith("<table ")  # parameters are a nested table, not JSON text
    nested = tables[int(bounds_cell.split()[1].rstrip(">"))]
    assert nested == [["Income", "0, 200000"], ["MntWines", "0, 1500"]]
    prep = next(t for t in tables if t and t[0] == ["step", "data derived"])
    assert prep[1:] == [["drop on Income (24 rows removed)", "no"], ["Income: filled with the median", "yes"]]
    policy = next(t for t in tables if ["privacy definition", "ε-differential privacy"] in t)
    assert ["ε", "1"] in policy  # the policy's total, not labelled as spent
    details = next(t for t in tables if ["k", "4"] in t)
    assert ["centre", "0.5, 1.5"] in details and ["sigma", "none"] in details


def test_html_report_tables_fit_the_page():
    rng = np.random.default_rng(1)
    names = [f"feature_{i}_with_a_long_name" for i in range(40)]
    wide = pd.DataFrame(rng.normal(size=(5, 40)) / 3, columns=names)
    wide.insert(0, "cluster", np.arange(5))
    wide.insert(1, "label", ["a", None, "c", "d", "e"])
    page = html_report("Wide", manifest(), [], [("Released table", wide)])
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert re.search(r"\.scroll\{[^}]*overflow:auto", page)  # wide tables scroll inside their box
    assert re.search(r"body\{[^}]*max-width:1100px", page)
    box = page.split('<div class="scroll">', 1)[1]
    released = _tables(box)[0]
    assert released[0][:3] == ["cluster", "label", "feature_0_with_a_long_name"] and len(released) == 6
    first = wide.iloc[0]
    assert released[1][0] == "0" and released[1][2] == f"{first.iloc[2]:.7g}"  # 7 significant digits
    assert released[2][1] == ""  # a missing value is an empty cell
    assert '<th class="num">cluster</th>' in page and '<td class="num">0</td>' in page  # right-aligned
    assert "5 rows × 42 columns" in page

    long = pd.DataFrame({"x": np.arange(REPORT_ROWS + 5, dtype=float) + 0.5})
    page = html_report("Long", manifest(), [], [("Released table", long)])
    assert len(_tables(page.split('<div class="scroll">', 1)[1])[0]) == REPORT_ROWS + 1
    assert f"{REPORT_ROWS + 5:,} rows × 1 columns; the first {REPORT_ROWS:,} are shown" in page


def test_save_artifacts_hash_matches_file_and_is_deterministic(tmp_path: Path):
    files = {"b.csv": b"x\n1\n", "a.json": b"{}"}
    path, digest = save_artifacts(tmp_path / "art", "req_1", files)
    assert path.parent == tmp_path / "art" and path.name == f"req_1-{digest[:12]}.zip"
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() == sha256_file(path)
    assert load_artifacts(path) == files
    again, digest2 = save_artifacts(tmp_path / "other", "req_1", dict(reversed(files.items())))
    assert digest2 == digest and again.read_bytes() == path.read_bytes()
    with pytest.raises(ParameterError):
        save_artifacts(tmp_path, "../escape", files)
    with pytest.raises(ParameterError):
        save_artifacts(tmp_path, "ok", {"../x.csv": b""})


X = np.random.default_rng(0).uniform(0, 1, (200, 2))
INPUTS = KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b"))


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """Counts the runs of DP-Lloyd's release (the sampling mode of each)."""
    spec, seen = KMEANS["dp_lloyd"], []

    def counted(inputs, **kw):
        seen.append(kw["random_state"].mode)
        return spec.release(inputs, **kw)

    monkeypatch.setitem(KMEANS._specs, "dp_lloyd", replace(spec, release=counted))
    return seen


def _release(ledger: Ledger, tmp_path: Path, request_id: str, **plan_changes):
    return make_release(
        ledger,
        _plan(**plan_changes),
        INPUTS,
        request_id=request_id,
        user="bob",
        artifacts_dir=tmp_path / "artifacts",
    )


def test_make_release_debits_once_and_replays(tmp_path: Path, calls: list[str]):
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    account = _plan().account
    ledger.set_budget(account, 1.0, 0.0)
    first = _release(ledger, tmp_path, "r1")
    assert calls == ["secure"] and not first.replayed
    assert first.record.artifact_hash == sha256_file(first.record.artifact_path)
    assert first.manifest["parameters"]["n_clusters"] == 3
    assert load_artifacts(first.record.artifact_path) == first.files
    again = _release(ledger, tmp_path, "r1")
    assert calls == ["secure"]  # the mechanism did not run again
    assert again.replayed and again.record.id == first.record.id and again.files == first.files
    pd.testing.assert_frame_equal(again.table, first.table)
    assert ledger.remaining(account) == pytest.approx((0.6, 0.0))
    assert len(ledger.releases(account)) == 1


def test_make_release_refused_leaves_no_files_and_no_debit(tmp_path: Path, calls: list[str]):
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    account = _plan().account
    with pytest.raises(BudgetNotSet):
        _release(ledger, tmp_path, "r0")
    assert calls == []  # no budget: the mechanism never ran
    ledger.set_budget(account, 0.5, 0.0)
    with pytest.raises(BudgetExceeded, match=r"has eps=0\.5"):
        _release(ledger, tmp_path, "r1", epsilon=0.8)
    assert ledger.releases(account) == [] and ledger.remaining(account) == (0.5, 0.0)
    assert [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()] == []  # nothing stored
    with pytest.raises(ParameterError):  # the mechanism refuses K > n: nothing stored, nothing debited
        _release(ledger, tmp_path, "r2", params={"n_clusters": 500})
    assert ledger.releases(account) == []


def test_demo_release_is_marked_reproducible_and_on_the_demo_account(tmp_path: Path):
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.set_budget(_plan().account, 1.0, 0.0)
    demo_account = _plan(mode="demo", seed=7).account
    ledger.set_budget(demo_account, 1.0, 0.0)
    a = _release(ledger, tmp_path, "d1", mode="demo", seed=7)
    b = _release(ledger, tmp_path, "d2", mode="demo", seed=7)
    assert a.record.sampling_mode == "demo" and a.manifest["demo"] is True
    assert all(name.startswith("DEMO-") for name in a.files)
    pd.testing.assert_frame_equal(a.table, b.table)
    assert ledger.remaining(_plan().account) == (1.0, 0.0)  # the real budget is untouched
    assert ledger.remaining(demo_account) == pytest.approx((0.2, 0.0))


def test_a_stored_preview_reads_only_the_first_rows_and_each_file_on_demand(tmp_path: Path):
    ledger = Ledger.initialise(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.set_budget(_plan().account, 1.0, 0.0)
    first = _release(ledger, tmp_path, "r1")  # 3 released centroids
    assert stored_preview(ledger, "nope", 2) is None
    preview = stored_preview(ledger, "r1", 2)
    assert preview is not None and preview.n_rows == len(first.table) == 3
    assert len(preview.release.table) == 2 and preview.release.files == {}  # nothing else read
    np.testing.assert_allclose(
        preview.release.table.to_numpy(dtype=float), first.table.head(2).to_numpy(dtype=float), rtol=1e-15
    )
    assert preview.release.manifest == json.loads(json.dumps(first.manifest, default=str))
    assert sorted(preview.names) == sorted(first.files)
    for name in preview.names:  # each file, read when downloaded, is the recorded one
        assert stored_file(preview.path, name, first.record.artifact_hash) == first.files[name]
    with zipfile.ZipFile(preview.path, "a") as archive:  # altered after it was recorded
        archive.writestr("extra.txt", "x")
    with pytest.raises(LedgerError, match="changed since it was recorded"):
        stored_file(preview.path, preview.names[0], first.record.artifact_hash)
    with pytest.raises(LedgerError, match="missing or altered"):
        stored_preview(ledger, "r1", 2)
