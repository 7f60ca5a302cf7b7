"""Two runs of one request at once (two batch jobs of one plan, a double click) debit once and say so:
exactly one returns ``replayed=False``, also when both wrote byte-identical files (a demo seed, a manifest
time equal to the second and a mechanism that draws no figure: a figure's HTML carries a random id)."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from dpcore.artifacts import STAGING, save_artifacts, sha256_file
from dpcore.kmeans.registry import KMEANS
from dpcore.ledger import Ledger
from dpcore.manifest import build_manifest
from dpcore.releases import Release, make_release
from tests.dpcore.test_report import INPUTS, _plan

SAME_SECOND = "2026-01-02T03:04:05+00:00"


def identical_runs_meet_before_debit(monkeypatch: pytest.MonkeyPatch, runs: int = 2) -> None:
    """Make ``runs`` concurrent demo runs of DP-Lloyd write byte-identical files (manifest time fixed, no
    figure) and wait for each other after staging them, before any of them debits."""
    spec = KMEANS["dp_lloyd"]

    def without_figures(inputs: object, **kw: object) -> object:
        return replace(spec.release(inputs, **kw), figures=())

    monkeypatch.setitem(KMEANS._specs, "dp_lloyd", replace(spec, release=without_figures))
    monkeypatch.setattr("dpcore.releases.build_manifest", partial(build_manifest, time=SAME_SECOND))
    barrier, register = threading.Barrier(runs, timeout=120), Ledger.register_dataset

    def all_staged(self: Ledger, *args: object, **kwargs: object) -> None:
        barrier.wait()  # every run has computed and staged its files; none has debited
        register(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "register_dataset", all_staged)


def in_threads(*jobs: partial[object]) -> list[object]:
    """Each job's result (or the exception it raised), the jobs run at once in threads."""
    results: list[object] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as err:  # returned to the test, which shows it
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_two_identical_demo_runs_at_once_report_one_release(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    plan = _plan(mode="demo", seed=7)
    ledger = Ledger.initialise(url)
    ledger.set_budget(plan.account, 1.0, 0.0)
    identical_runs_meet_before_debit(monkeypatch)
    release = partial(
        make_release, plan=plan, inputs=INPUTS, request_id="same", user="bob", artifacts_dir=tmp_path / "out"
    )
    results = in_threads(*(partial(release, Ledger(url)) for _ in range(2)))
    assert all(isinstance(r, Release) for r in results), results
    first, second = results
    assert isinstance(first, Release) and isinstance(second, Release)
    assert first.manifest == second.manifest and not first.figures
    assert sorted([first.replayed, second.replayed]) == [False, True]
    [record] = ledger.all_releases()
    assert ledger.remaining(plan.account) == pytest.approx((0.6, 0.0))
    out = tmp_path / "out"
    published = [p.name for p in out.iterdir() if p.name != STAGING]
    assert published == [Path(str(record.artifact_path)).name]
    assert not any((out / STAGING).iterdir())  # nothing unpaid left behind


def test_two_writers_of_the_same_bytes_at_once_both_save(tmp_path: Path, monkeypatch) -> None:
    folder, files, rename = tmp_path / "out", {"a.csv": b"x,y\n1,2\n"}, os.replace
    others: list[tuple[Path, str]] = []

    def another_writer_between_write_and_rename(src: str, dst: str) -> None:
        monkeypatch.setattr("dpcore.artifacts.os.replace", rename)
        others.append(save_artifacts(folder, "same", files))  # the same bytes, written and renamed first
        rename(src, dst)

    monkeypatch.setattr("dpcore.artifacts.os.replace", another_writer_between_write_and_rename)
    path, digest = save_artifacts(folder, "same", files)
    assert (path, digest) == others[0] and sha256_file(path) == digest
    assert [p.name for p in folder.iterdir()] == [path.name]  # no temporary file left


def test_a_release_staging_while_another_publishes_is_saved(tmp_path: Path, monkeypatch) -> None:
    """Two sessions release at once: one publishes (its staged zip leaves the staging folder) just after
    the other made that folder and before it wrote its file. Both are recorded and published (the staging
    folder is not removed under the other writer)."""
    url, out, mkdir = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "out", Path.mkdir
    plan = _plan()
    ledger = Ledger.initialise(url)
    ledger.set_budget(plan.account, 1.0, 0.0)
    release = partial(make_release, ledger, plan, INPUTS, user="bob", artifacts_dir=out)
    others: list[Release] = []

    def another_release_publishes_meanwhile(self: Path, *args: object, **kwargs: object) -> None:
        mkdir(self, *args, **kwargs)
        if self.name == STAGING and not others:
            monkeypatch.setattr(Path, "mkdir", mkdir)
            others.append(release(request_id="first"))

    monkeypatch.setattr(Path, "mkdir", another_release_publishes_meanwhile)
    second = release(request_id="second")
    assert not others[0].replayed and not second.replayed
    assert ledger.remaining(plan.account) == pytest.approx((0.2, 0.0))
    published = [r.record for r in (*others, second)]
    assert all(sha256_file(r.artifact_path) == r.artifact_hash for r in published)
    assert list((out / STAGING).iterdir()) == []  # nothing unpaid left behind
