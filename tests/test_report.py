"""dpcore.report: manifest fields, DEMO and local marking, files, offline HTML, artifacts, make_release."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dpcore.errors import ParameterError
from dpcore.ledger import BudgetExceeded, BudgetNotSet, Ledger
from dpcore.mechanisms import Sampler
from dpcore.report import (
    DEMO_NOTICE,
    LOCAL_NOTICE,
    build_manifest,
    html_report,
    load_artifacts,
    make_release,
    release_files,
    save_artifacts,
    sha256_file,
)

BASE = {
    "definition": "approx_dp",
    "policy_label": "(ε, δ)-differential privacy",
    "mechanism": "WhiteNoiseKMeans",
    "guarantee": "(1, 1e-6)-DP, one row added or removed.",
    "calibration": "analytic",
    "epsilon": 1.0,
    "delta": 1e-6,
    "bounds_source": "curator",
    "fingerprint": "ab" * 32,
    "user": "alice",
    "request_id": "0123456789abcdef0123456789abcdef",
    "parameters": {"k": np.int64(4), "centre": np.array([0.5, 1.5]), "sigma": float("nan")},
}


def manifest(**changes):
    return build_manifest(**{**BASE, "sampling_mode": "secure", **changes})


def test_manifest_records_every_field_as_plain_json():
    m = manifest(time="2026-01-02T03:04:05+00:00", dataset_id="abcd")
    for key in ("definition", "mechanism", "guarantee", "calibration", "bounds_source", "user", "request_id"):
        assert m[key] == BASE[key]
    assert m["policy"] == BASE["policy_label"]
    assert m["epsilon"] == 1.0 and m["delta"] == 1e-6
    assert m["dataset_fingerprint"] == BASE["fingerprint"] and m["dataset_id"] == "abcd"
    assert m["time"] == "2026-01-02T03:04:05+00:00"
    assert m["sampling_mode"] == "secure" and m["demo"] is False and "notice" not in m
    assert m["is_local"] is False and "local_notice" not in m
    assert m["parameters"] == {"k": 4, "centre": [0.5, 1.5], "sigma": None}
    json.dumps(m, allow_nan=False)  # strict JSON


def test_demo_and_local_marking():
    demo = manifest(sampling_mode="demo")
    assert demo["demo"] is True and demo["notice"] == DEMO_NOTICE
    local = manifest(definition="local_pdp")
    assert local["is_local"] is True and local["local_notice"] == LOCAL_NOTICE
    assert "not differential privacy" in local["local_notice"]
    assert manifest(is_local=True)["is_local"] is True


def test_diagnostic_sampling_is_never_a_release():
    with pytest.raises(ParameterError, match="diagnostic"):
        manifest(sampling_mode="diagnostic")


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
    demo_files = release_files(table, manifest(sampling_mode="demo"), name="kmeans")
    assert all(name.startswith("DEMO-kmeans-") for name in demo_files)


def test_html_report_is_self_contained_with_plotlyjs_once():
    figs = [go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), go.Figure(go.Bar(x=["a"], y=[1]))]
    table = pd.DataFrame({"name": ["<script>alert(1)</script>"], "value": [1.0]})
    page = html_report("Centroids <b>", manifest(sampling_mode="demo"), figs, [("Released", table)])
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, flags=re.I)  # nothing fetched from the network
    assert page.count("<script>alert(1)</script>") == 0 and "&lt;script&gt;alert(1)" in page  # escaped
    plotly_header = "plotly.js v"
    assert page.count(plotly_header) == 1  # the library is inlined exactly once
    assert page.count("Plotly.newPlot") == 2
    assert "Centroids &lt;b&gt;" in page and DEMO_NOTICE in page
    assert plotly_header not in html_report("No charts", manifest(), [], [("t", table)])


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


def _fake_run(calls: list[str]):
    def run(sampler: Sampler):
        calls.append(sampler.mode)
        noisy = 10.0 + sampler.laplace(3, 1.0)
        return pd.DataFrame({"value": noisy}), [go.Figure(go.Scatter(y=noisy))], {"scale": 1.0}

    return run


def _release(ledger: Ledger, tmp_path: Path, run, request_id: str, *, epsilon=0.4, sampler=None):
    return make_release(
        ledger,
        dataset_id="ds1",
        request_id=request_id,
        run=run,
        sampler=sampler or Sampler(),
        mechanism="FakeLaplace",
        guarantee="0.4-DP, one row added or removed",
        definition="pure_dp",
        policy_label="ε-differential privacy",
        epsilon=epsilon,
        delta=0.0,
        fingerprint="f" * 64,
        user="bob",
        parameters={"k": 3},
        artifacts_dir=tmp_path / "artifacts",
    )


def test_make_release_debits_once_and_replays(tmp_path: Path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.set_budget("ds1", 1.0, 0.0)
    calls: list[str] = []
    first = _release(ledger, tmp_path, _fake_run(calls), "r1")
    assert calls == ["secure"] and not first.replayed
    assert first.record.artifact_hash == sha256_file(first.record.artifact_path)
    assert first.manifest["parameters"] == {"k": 3, "scale": 1.0}
    assert load_artifacts(first.record.artifact_path) == first.files
    again = _release(ledger, tmp_path, _fake_run(calls), "r1")
    assert calls == ["secure"]  # the mechanism did not run again
    assert again.replayed and again.record.id == first.record.id and again.files == first.files
    pd.testing.assert_frame_equal(again.table, first.table)
    assert ledger.remaining("ds1") == pytest.approx((0.6, 0.0))
    assert len(ledger.releases("ds1")) == 1


def test_make_release_refused_leaves_no_files_and_no_debit(tmp_path: Path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    calls: list[str] = []
    with pytest.raises(BudgetNotSet):
        _release(ledger, tmp_path, _fake_run(calls), "r0")
    assert calls == []  # no budget: the mechanism never ran
    ledger.set_budget("ds1", 0.5, 0.0)
    with pytest.raises(BudgetExceeded, match=r"left eps=0\.5"):
        _release(ledger, tmp_path, _fake_run(calls), "r1", epsilon=0.8)
    assert ledger.releases("ds1") == [] and ledger.remaining("ds1") == (0.5, 0.0)
    assert list((tmp_path / "artifacts").glob("*")) == []

    def broken(sampler):
        raise ParameterError("K is larger than the number of rows; choose a smaller K.")

    with pytest.raises(ParameterError):
        _release(ledger, tmp_path, broken, "r2")
    assert ledger.releases("ds1") == []
    with pytest.raises(ParameterError, match="diagnostic"):
        _release(ledger, tmp_path, _fake_run(calls), "r3", sampler=Sampler.diagnostic(1))


def test_demo_release_is_marked_and_reproducible(tmp_path: Path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.set_budget("ds1", 1.0, 0.0)
    a = _release(ledger, tmp_path, _fake_run([]), "d1", sampler=Sampler(7))
    b = _release(ledger, tmp_path, _fake_run([]), "d2", sampler=Sampler(7))
    assert a.record.sampling_mode == "demo" and a.manifest["demo"] is True
    assert all(name.startswith("DEMO-") for name in a.files)
    pd.testing.assert_frame_equal(a.table, b.table)
