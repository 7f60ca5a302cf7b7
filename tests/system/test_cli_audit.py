"""``python -m dpcore run-plan`` as an operator runs it: a plan file that is not a valid plan, an artifacts
folder given relative to the working directory or not writable, files that cannot be published after the
debit, a request id reused with a changed plan or unfit to name files, a SQLite source that does not exist,
``--engine spark`` without Java, Ctrl-C, two jobs of one plan at once, and what a release prints. Every
refusal is one line on stderr (exit status 2, 130 on Ctrl-C), and nothing is debited unless the message
says what was."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from dpcore.__main__ import main
from dpcore.artifacts import STAGING
from dpcore.ledger import Ledger
from dpcore.plan import ReleasePlan
from dpcore.steps import step_from_dict
from tests.dpcore.outofcore.test_run_plan import ROOT, approx_plan, dashboard_release, people_source
from tests.dpcore.test_report_concurrency import identical_runs_meet_before_debit, in_threads


@pytest.fixture
def setup(tmp_path: Path) -> tuple[dict, Path, str]:
    """A dashboard release's manifest, its table as a Parquet file, and a batch ledger with a budget."""
    df, path = people_source(tmp_path, 400)
    manifest, _ = dashboard_release(tmp_path, df)
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(ReleasePlan.from_manifest(manifest).account, epsilon=5.0)
    return manifest, path, url


def spent(url: str, manifest: dict) -> float:
    status = Ledger(url).budget(ReleasePlan.from_manifest(manifest).account)
    assert status is not None
    return status.epsilon_spent


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["run-plan", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_refusal(code: int, err: str) -> str:
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err


def write_plan(folder: Path, manifest: dict) -> Path:
    """``manifest`` written as ``folder/plan.json``, the file an operator passes to run-plan."""
    path = folder / "plan.json"
    path.write_text(json.dumps(manifest))
    return path


def refusal(
    capsys: pytest.CaptureFixture[str], manifest: dict, src: str | Path, url: str, tmp_path: Path, *extra: str
) -> str:
    """The one line ``run-plan`` prints on stderr (exit status 2) for ``manifest`` written as the plan file,
    run on ``src`` with the options ``extra``."""
    plan_file = write_plan(tmp_path, manifest)
    args = ("--source", src, *extra, "--ledger", url, "--artifacts", tmp_path / "out")
    code, _, err = run(capsys, plan_file, *args)
    return one_line_refusal(code, err)


def test_a_plan_file_that_is_not_a_valid_plan_is_refused_in_one_line(setup, tmp_path: Path, capsys) -> None:
    manifest, path, url = setup
    steps = manifest["preparation"]
    edits = {
        "plan-not-object": {"plan": 5},
        "plan-text": {"plan": "mechanism"},
        "epsilon-text": {**manifest, "epsilon": "abc"},
        "epsilon-edited": {**manifest, "epsilon": 2.0},
        "preparation-text": {**manifest, "preparation": "hello"},
        "step-number": {**manifest, "preparation": [steps[0], {**steps[1], "step": 5}]},
        "parameters-number": {**manifest, "parameters": 5},
        "no-fingerprint": {k: v for k, v in manifest.items() if k != "dataset_fingerprint"},
    }
    for name, edited in edits.items():
        plan_file = tmp_path / f"{name}.json"
        plan_file.write_text(json.dumps(edited))
        code, out, err = run(capsys, plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path)
        line = one_line_refusal(code, err)
        fix = "give a *-manifest.json file" if name.startswith("plan-") else "download the plan again"
        assert f"{name}.json" in line and fix in line, line
        assert out == ""
    assert spent(url, manifest) == 0.0


def test_the_artifacts_folder_is_recorded_absolute_and_checked_before_anything_is_read(
    setup, tmp_path: Path, capsys, monkeypatch
) -> None:
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)
    work = tmp_path / "job"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out, err = run(capsys, plan_file, "--source", path, "--ledger", url, "--artifacts", "out")
    assert code == 0, err
    record = Ledger(url).release_by_request("dash-1")
    assert record is not None and Path(record.artifact_path).is_absolute()
    assert Path(record.artifact_path).parent == work / "out" and f"files: {record.artifact_path}" in out
    # the Ledger page and a re-run from another working directory find the files
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, plan_file, "--source", path, "--ledger", url, "--artifacts", "out")
    assert code == 0 and out.startswith("already released (nothing spent)"), err
    # a folder that cannot be made: refused in one line, nothing read, nothing debited
    fresh = {k: v for k, v in manifest.items() if k != "request_id"}
    plan_file.write_text(json.dumps(fresh))
    missing = tmp_path / "not-read.parquet"  # the folder is checked before the source is opened
    code, out, err = run(capsys, plan_file, "--source", missing, "--ledger", url, "--artifacts", path)
    assert "cannot be written" in one_line_refusal(code, err) and "people.parquet" in err
    assert spent(url, manifest) == 1.0


def test_files_that_cannot_be_published_after_the_debit_say_what_was_spent(
    setup, tmp_path: Path, capsys, monkeypatch
) -> None:
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)
    replace = os.replace

    def no_publish(src: str | Path, dst: str | Path) -> None:
        if Path(src).parent.name == STAGING and Path(dst).parent.name != STAGING:
            raise PermissionError(13, "Permission denied")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", no_publish)
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out")
    code, out, err = run(capsys, *args)
    line = one_line_refusal(code, err)
    assert "Request dash-1" in line and "1 spent" in line and "run the same request again" in line
    assert spent(url, manifest) == 1.0
    monkeypatch.setattr(os, "replace", replace)
    code, out, err = run(capsys, *args)  # the retry publishes the staged files and spends nothing
    assert code == 0 and out.startswith("already released (nothing spent)"), err
    record = Ledger(url).release_by_request("dash-1")
    assert Path(record.artifact_path).is_file() and spent(url, manifest) == 1.0


def test_a_request_id_reused_with_a_changed_plan_is_refused(setup, tmp_path: Path, capsys) -> None:
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out")
    assert run(capsys, *args)[0] == 0
    step = step_from_dict(manifest["preparation"][1])
    assert step.bounds[1] == (0.0, 10.0)
    changed = replace(step, bounds=(step.bounds[0], (0.0, 20.0), *step.bounds[2:])).to_dict()
    plan_file.write_text(json.dumps({**manifest, "preparation": [manifest["preparation"][0], changed]}))
    code, out, err = run(capsys, *args)
    assert "another plan" in one_line_refusal(code, err) and out == ""
    assert spent(url, manifest) == 1.0


def test_spark_without_java_is_refused_in_one_line(setup, tmp_path: Path) -> None:
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)
    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PYTHONPATH=str(ROOT), PATH=str(no_java))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpcore",
            "run-plan",
            str(plan_file),
            "--source",
            str(path),
            "--engine",
            "spark",
            "--ledger",
            url,
            "--artifacts",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert "Traceback" not in out.stderr
    line = one_line_refusal(out.returncode, out.stderr)
    assert "Java" in line and "--engine duckdb" in line
    assert spent(url, manifest) == 0.0


def test_a_request_id_that_cannot_name_the_files_is_refused_before_the_source_is_read(
    setup, tmp_path: Path, capsys
) -> None:
    manifest, _, url = setup
    missing = tmp_path / "not-read.parquet"
    line = refusal(capsys, manifest, missing, url, tmp_path, "--request-id", "job 7")
    assert "request_id 'job 7' is not a valid file name" in line
    edited = {**manifest, "request_id": "../x"}  # edited in the file
    assert "'../x' is not a valid file name" in refusal(capsys, edited, missing, url, tmp_path)
    assert spent(url, manifest) == 0.0


def test_a_sqlite_source_that_does_not_exist_is_refused_and_not_created(
    setup, tmp_path: Path, capsys
) -> None:
    manifest, _, url = setup
    typo = tmp_path / "warehuose.db"
    line = refusal(capsys, manifest, f"sqlite:///{typo}", url, tmp_path, "--table", "people")
    assert f"no SQLite database file at {typo}" in line
    assert not typo.exists() and spent(url, manifest) == 0.0


def test_the_output_names_the_request_what_was_spent_what_is_left_and_the_files(
    setup, tmp_path: Path, capsys
) -> None:
    manifest, path, _ = setup
    plan = approx_plan(manifest, "colored")
    url = f"sqlite:///{tmp_path / 'approx.db'}"
    Ledger.initialise(url).set_budget(plan.account, epsilon=3.0, delta=1e-5)
    plan_file = write_plan(tmp_path, plan.to_manifest())
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out")
    code, out, err = run(capsys, *args)
    record = Ledger(url).release_by_request(f"plan-{plan.key[:32]}")
    assert code == 0 and record is not None, err
    assert out.splitlines() == [
        f"released: request {record.request_id}, account {plan.account.key}, eps 1, delta 1e-06 spent",
        "budget left on the account: eps 2, delta 9e-06",
        f"files: {record.artifact_path}",
    ]
    code, out, err = run(capsys, *args)
    assert code == 0 and out.splitlines()[0].startswith("already released (nothing spent)")
    assert "eps 1, delta 1e-06 spent at" in out and "budget left on the account: eps 2, delta 9e-06" in out


def test_two_batch_jobs_of_one_plan_at_once_debit_once(tmp_path: Path) -> None:
    df, path = people_source(tmp_path, 400)
    manifest, _ = dashboard_release(tmp_path, df, mode="secure")
    plan = ReleasePlan.from_manifest(manifest)
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(plan.account, epsilon=5.0)
    plan_file = write_plan(tmp_path, plan.to_manifest())  # as downloaded: the request id comes from the plan
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "dpcore",
        "run-plan",
        str(plan_file),
        "--source",
        str(path),
        "--ledger",
        url,
        "--artifacts",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    jobs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    results = [(job.communicate(timeout=300), job.returncode) for job in jobs]
    assert [code for _, code in results] == [0, 0], results
    firsts = sorted(stdout.split(":")[0] for (stdout, _), _ in results)
    assert firsts == ["already released (nothing spent)", "released"]
    ledger = Ledger(url)
    [record] = ledger.all_releases()
    assert ledger.budget(plan.account).epsilon_spent == 1.0
    assert sorted(p.name for p in out.iterdir() if p.name != STAGING) == [Path(record.artifact_path).name]
    assert not any((out / STAGING).iterdir())  # nothing unpaid left behind
    assert all(f"files: {record.artifact_path}" in stdout for (stdout, _), _ in results)


def test_two_demo_jobs_writing_the_same_bytes_at_once_print_one_release(
    setup, tmp_path: Path, monkeypatch
) -> None:
    """Demo jobs of one plan write byte-identical files when their manifests carry the same second; the
    ledger, not the files' hash, says which one debited."""
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)
    identical_runs_meet_before_debit(monkeypatch)
    printed: dict[int, str] = defaultdict(str)

    class PerThread(io.StringIO):
        def write(self, text: str) -> int:
            printed[threading.get_ident()] += text
            return len(text)

    monkeypatch.setattr(sys, "stdout", PerThread())
    args = (plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path / "out")
    job = partial(main, ["run-plan", *map(str, args)])
    assert in_threads(job, job) == [0, 0]
    firsts = sorted(out.split(":")[0] for out in printed.values())
    assert firsts == ["already released (nothing spent)", "released"]
    [record] = Ledger(url).all_releases()
    assert spent(url, manifest) == 1.0
    assert all(f"files: {record.artifact_path}" in out for out in printed.values())


def test_ctrl_c_prints_one_line_and_how_to_finish(setup, tmp_path: Path, capsys, monkeypatch) -> None:
    manifest, path, url = setup
    plan_file = write_plan(tmp_path, manifest)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("dpcore.outofcore.run_plan.open_spec", interrupted)
    try:
        code, _, err = run(capsys, plan_file, "--source", path, "--ledger", url, "--artifacts", tmp_path)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C reached the operator as a traceback")
    assert code == 130 and err.startswith("error: interrupted") and err.count("\n") == 1, err
    assert "run the same command again" in err and spent(url, manifest) == 0.0
