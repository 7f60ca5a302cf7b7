"""A batch job whose source file is removed between the moment it is listed and the moment it is read
(listed but not yet stamped, during the fingerprint pass, before the engine opens it, during the
mechanism's passes; a CSV file before it is read): the operator gets one line naming the file and the fix
(exit status 2), never a traceback, and nothing is debited."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dpcore.data.sources.folder_file as folder_file
import dpcore.outofcore.source as source
from dpcore.errors import DataError
from dpcore.ledger import Ledger
from dpcore.outofcore.run_plan import run_plan
from dpcore.plan import ReleasePlan
from tests.dpcore.outofcore.test_run_plan import dashboard_release, people_source, people_table
from tests.dpcore.outofcore.test_run_plan_changed_source import FIX, during_release
from tests.system.test_cli_audit import refusal, spent


@pytest.fixture
def parts(tmp_path: Path) -> tuple[dict, Path, str]:
    """A dashboard release's manifest, its table as a folder of two Parquet parts, and a batch ledger."""
    df, folder = people_source(tmp_path, 600, parts=True)
    manifest, _ = dashboard_release(tmp_path, df)
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(ReleasePlan.from_manifest(manifest).account, epsilon=5.0)
    return manifest, folder, url


def removing(victim: Path, real: Callable[..., Any], *, after: bool = False) -> Callable[..., Any]:
    """``real`` that removes ``victim`` just before it runs (or just after, with ``after``)."""

    def step(*args: Any, **kwargs: Any) -> Any:
        if not after:
            victim.unlink()
        result = real(*args, **kwargs)
        if after:
            victim.unlink()
        return result

    return step


def removing_after_first_frame(victim: Path) -> Callable[..., Iterator[Any]]:
    """``parquet_frames`` that removes ``victim`` once the first frame was read (during the pass)."""
    real = source.parquet_frames

    def frames(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for k, frame in enumerate(real(*args, **kwargs)):
            if k == 0:
                victim.unlink()
            yield frame

    return frames


@pytest.mark.parametrize("step", ["listed", "fingerprint pass", "engine", "release passes"])
def test_a_part_removed_while_the_job_reads_the_folder_is_named_in_one_line(
    parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, step: str
) -> None:
    manifest, folder, url = parts
    victim = folder / "part-1.parquet"
    if step == "listed":  # listed, removed before its size and time are recorded
        monkeypatch.setattr(source, "parquet_files", removing(victim, source.parquet_files, after=True))
    elif step == "fingerprint pass":
        monkeypatch.setattr(source, "parquet_frames", removing_after_first_frame(victim))
    elif step == "engine":  # fingerprinted, removed before the engine opens the files
        monkeypatch.setattr(source, "read_parquet", removing(victim, source.read_parquet))
    else:  # removed as the mechanism's passes start reading the files again
        during_release(monkeypatch, victim.unlink)
    err = refusal(capsys, manifest, folder, url, tmp_path)
    assert f"The source file {victim} " in err and FIX in err, err
    assert "nothing was released or debited" in err and spent(url, manifest) == 0.0


def test_run_plan_raises_a_data_error_for_a_listed_file_removed_before_it_is_stamped(
    parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, folder, url = parts
    victim = folder / "part-0.parquet"
    monkeypatch.setattr(source, "parquet_files", removing(victim, source.parquet_files, after=True))
    with pytest.raises(DataError, match=f"The source file {victim} ") as err:
        run_plan(manifest, folder, ledger=Ledger(url), artifacts_dir=tmp_path / "out", user="batch")
    assert FIX in str(err.value) and spent(url, manifest) == 0.0


def test_a_csv_file_removed_before_it_is_read_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    df = people_table(400)
    path = tmp_path / "people.csv"
    df.to_csv(path, index=False)
    manifest, _ = dashboard_release(tmp_path, df)
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    Ledger.initialise(url).set_budget(ReleasePlan.from_manifest(manifest).account, epsilon=5.0)
    monkeypatch.setattr(folder_file, "read_text_file", removing(path, folder_file.read_text_file))
    err = refusal(capsys, manifest, path, url, tmp_path)
    assert f"The source file {path} " in err and FIX in err, err
    assert "nothing was released or debited" in err and spent(url, manifest) == 0.0
