"""Smaller hostile findings of issue 25 (finding 9): a SELECT with an unbalanced quote, Parquet text that
is not UTF-8 in a data folder, a data folder that cannot be written, a full disk under a batch job, and a
user name in the release message: each gets its own message, in the project's words, and leaves the app
working.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from dpcore.data import DateEncoding
from dpcore.data.sources import DatabaseQuery, FolderFile, load_source, source_from_dict, validate_select
from dpcore.errors import DataError
from dpcore.outofcore import jobs
from dpcore.outofcore.jobs import JobStatus
from tests.dpcore.outofcore.test_jobs import ledger_for, spec
from tests.dpcore.outofcore.test_jobs import people as people  # a fixture
from ui.text import md

SECRET = "s3cr3t-value"
TIMEOUT = 120


@pytest.mark.parametrize(
    "sql",
    [f"SELECT '{SECRET}", f'SELECT "{SECRET}', f"SELECT 1 /* {SECRET}", f"SELECT {SECRET} FROM ("],
    ids=["quote", "quoted name", "comment", "bracket"],
)
def test_a_select_that_does_not_parse_is_named_without_quoting_it(sql: str) -> None:
    """Before: sqlglot's TokenError was not caught (the page's generic error), and its ParseError text,
    passed through, quoted the query."""
    with pytest.raises(DataError) as refused:
        validate_select(sql, "sqlite")
    message = str(refused.value)
    assert SECRET not in message and "type one SELECT statement" in message
    assert "not closed" in message or "could not be parsed near line 1" in message


def test_a_select_with_an_unbalanced_quote_is_refused_by_load_source(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (a INTEGER)")
    with caplog.at_level(logging.DEBUG), pytest.raises(DataError, match="not closed"):
        load_source(DatabaseQuery("w", f"SELECT a FROM t WHERE a = '{SECRET}"), engine=engine)
    assert SECRET not in caplog.text
    engine.dispose()


def test_parquet_text_that_is_not_utf8_in_a_data_folder_is_refused(tmp_path: Path) -> None:
    raw = pa.array([b"ok", b"\xff\xfe bad"] * 5, pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())
    pq.write_table(pa.table({"s": text, "n": range(10)}), tmp_path / "bad.parquet")
    for max_rows in (100, 3):  # read whole (as an upload), and streamed for a sample
        with pytest.raises(
            DataError, match=r"column 's' is typed as text but holds bytes that are not valid"
        ):
            load_source(FolderFile(str(tmp_path), "bad.parquet"), folders=[str(tmp_path)], max_rows=max_rows)


def test_a_data_folder_that_cannot_keep_an_upload_keeps_the_dataset_and_says_why(
    app_path: str, isolated_data_dir: Path
) -> None:
    """Before: the upload became the dataset in use, then "Something went wrong" on every page (saving the
    session stores it again). ``uploads`` is a file here: writing below it fails as on a read-only disk."""
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Sample: Marketing Campaign").run()
    at.button(key="data_load_sample").click().run()
    (isolated_data_dir / "uploads").write_text("not a folder")
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value(("t.csv", b"a,b\n1,2\n3,4\n", "text/csv")).run()
    errors = [e.value for e in at.error]
    assert not at.exception and any("cannot keep it" in e and "DPCORE_DATA_DIR" in e for e in errors), errors
    assert not any("went wrong" in e for e in errors)
    assert at.session_state["dp_dataset"].name == "Sample: Marketing Campaign"
    for page in ("pages/kmeans.py", "pages/policy.py", "pages/home.py", "pages/data.py"):
        at.switch_page(page).run()
        assert not at.exception and not any("went wrong" in e.value for e in at.error), page


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_under_a_batch_job_is_reported_as_such(
    people,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: "unexpected error (OSError)", then the final status could not be written, so the job read
    as stopped by "a restart or a kill"; and each failed status write left a .tmp file behind."""
    import dpcore.outofcore.run_plan as batch

    monkeypatch.setattr(batch, "run_plan", _disk_full)
    manifest, _ = people
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger_for(url, manifest).close()
    (tmp_path / "p.parquet").touch()  # the job's source names a file (never read: the run fails first)
    state, message = jobs._run(spec(manifest, tmp_path / "p.parquet", url, tmp_path, "job-9"), "j.log", print)
    assert state == "failed" and "the server's disk is full" in message and "start it again" in message

    folder = tmp_path / "jobs"
    folder.mkdir()
    path = folder / "job-9.json"
    running = JobStatus("job-9", "running", jobs._now(), None, None, "k")
    jobs._write_status(path, running, os.getpid())
    monkeypatch.setattr(jobs.os, "replace", _disk_full)  # no room for a new file: rewritten in place
    jobs._write_status(path, JobStatus("job-9", "failed", running.started, jobs._now(), message, "k"), None)
    assert [p.name for p in folder.iterdir()] == ["job-9.json"]  # no .tmp left
    assert jobs._read_status(path, "job-9").message == message


def _release_message() -> None:
    from types import SimpleNamespace

    import pandas as pd

    from ui.release import show_release

    user = "**boss** [click](http://evil.test) <img src=x>"
    record = SimpleNamespace(
        definition="approx_dp", mechanism="m", epsilon=1.0, delta=0.0, request_id="plan-" + "a" * 32,
        user=user, time="2026-01-01T00:00:00", artifact_hash="",
    )  # fmt: skip
    release = SimpleNamespace(
        record=record, manifest={}, files={"a.csv": b"a\n1\n"}, table=pd.DataFrame({"a": [1]}), figures=(),
        replayed=False,
    )  # fmt: skip
    show_release(release, "k")


def test_the_release_message_shows_the_user_name_literally() -> None:
    """ui/release.py renders ``md(rec.user)`` (the lead's fix): a user name is not live Markdown."""
    at = AppTest.from_function(_release_message, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    (success,) = at.success
    assert md("**boss** [click](http://evil.test) <img src=x>") in success.value


@pytest.mark.parametrize(
    ("call", "said", "library"),
    [
        (
            lambda: DateEncoding("when", "%Q-%d").to_datetime(["2021-01-02", "2021-01-03"]),
            "which is not a date format pandas can use",
            "bad directive",
        ),
        (
            lambda: source_from_dict({"kind": "folder_file", "folder": "f", "path": "p", "extra": "x"}),
            "its fields are not those of a FolderFile",
            "unexpected keyword",
        ),
    ],
    ids=["date format", "saved source"],
)
def test_refusals_are_in_the_project_words(call, said: str, library: str) -> None:
    with pytest.raises(DataError) as refused:
        call()
    assert said in str(refused.value) and library not in str(refused.value)
