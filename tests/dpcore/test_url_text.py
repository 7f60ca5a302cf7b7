"""A database URL's secrets (its password and every query value: ``?token=``, ``?sslpassword=``...) reach no
message: not the batch command's refusal, not a ledger error, not the Data page, whether the URL is shown
by the project (:func:`dpcore.url_text.shown_url`) or quoted by the driver in its error
(:func:`dpcore.url_text.url_redactor`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from dpcore.ledger import Ledger, LedgerError
from dpcore.url_text import URL_PLACEHOLDER, shown_url, url_redactor
from tests.pages.test_sources import DATABASE, QUERY, _open, warehouse  # noqa: F401 (a fixture)
from tests.system.test_cli_audit import one_line_refusal, run, setup, write_plan  # noqa: F401 (a fixture)

SECRET = "SECRET123"
# an unreachable PostgreSQL server: libpq refuses these options before it connects
PG = "postgresql+psycopg://curator:pw@127.0.0.1:1/warehouse"


def test_shown_url_masks_the_password_and_every_query_value_and_keeps_the_keys() -> None:
    url = f"postgresql+psycopg://curator:{SECRET}@db.example:5432/sales?sslpassword=k3y&token={SECRET}"
    shown = shown_url(url)
    assert shown == "postgresql+psycopg://curator:***@db.example:5432/sales?sslpassword=***&token=***"
    assert shown_url(sa.make_url(url)) == shown
    assert "k3y" not in shown and SECRET not in shown
    repeated = shown_url(f"sqlite:///x.db?token={SECRET}&token=other")
    assert repeated == "sqlite:///x.db?token=***&token=***"
    assert shown_url("sqlite:///x.db") == "sqlite:///x.db"  # nothing to hide: the URL as written


@pytest.mark.parametrize(
    "garbage", ["not a url", f"postgresql://curator:{SECRET}@host:port{SECRET}/db", f"://{SECRET}"]
)
def test_text_that_is_not_a_url_is_shown_as_a_placeholder_never_as_itself(garbage: str) -> None:
    assert shown_url(garbage) == URL_PLACEHOLDER
    assert url_redactor(garbage)(f"could not open {garbage}") == f"could not open {URL_PLACEHOLDER}"


def test_the_redactor_removes_a_url_and_its_values_quoted_alone_but_not_ordinary_words() -> None:
    url = f"postgresql+psycopg://curator:p%40ss@db/sales?sslmode={SECRET}&token=tok+en&connect_timeout=10"
    redact = url_redactor(url)
    assert redact(f"open {url} failed") == f"open {shown_url(url)} failed"
    assert redact(f'invalid sslmode value: "{SECRET}"') == 'invalid sslmode value: "***"'
    assert redact("password p@ss, token 'tok en' or tok+en, p%40ss") == (
        "password ***, token '***' or ***, ***"
    )
    # a value is hidden where it stands alone, not inside a longer word or number
    assert redact("timed out after 10 s; 100 rows; SECRET1234") == (
        "timed out after *** s; 100 rows; SECRET1234"
    )
    assert url_redactor()("nothing to hide") == url_redactor("")("nothing to hide") == "nothing to hide"


def test_the_batch_command_s_refusal_of_a_database_read_does_not_show_the_url_s_token(
    setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811 (the fixture)
) -> None:
    manifest, _, ledger = setup
    db = tmp_path / "warehouse.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE people (a REAL)")
    engine.dispose()
    source = f"sqlite:///file:{db}?token={SECRET}&uri=true"  # SQLite ignores a URI parameter it does not know
    code, out, err = run(
        capsys, write_plan(tmp_path, manifest), "--source", source, "--query", "SELECT a FROM missing",
        "--ledger", ledger, "--artifacts", tmp_path / "out",
    )
    one_line_refusal(code, err)
    assert "no such table: missing" in err and "token=***" in err
    assert SECRET not in out + err


@pytest.mark.parametrize(
    "source",
    [f"postgresql+psycopg://u:pw@localhost:{SECRET}/db", "sqlite:///{db}?timeout=" + SECRET],
    ids=["port the URL cannot parse", "query value the driver cannot parse"],
)
def test_a_database_url_the_batch_command_cannot_open_is_one_line_without_its_values(
    setup, tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str  # noqa: F811 (the fixture)
) -> None:
    manifest, _, ledger = setup
    db = tmp_path / "warehouse.db"
    sa.create_engine(f"sqlite:///{db}").dispose()
    db.touch()  # the file exists: the URL's query value is what cannot be read
    code, out, err = run(
        capsys, write_plan(tmp_path, manifest), "--source", source.format(db=db), "--table", "people",
        "--ledger", ledger, "--artifacts", tmp_path / "out",
    )
    one_line_refusal(code, err)
    assert "Cannot open the database URL" in err or "database URL" in err
    assert SECRET not in out + err


@pytest.mark.parametrize("query", [f"token={SECRET}", f"sslmode={SECRET}"])
def test_a_ledger_error_shows_neither_the_url_s_query_values_nor_its_password(query: str) -> None:
    with pytest.raises(LedgerError) as caught:
        Ledger(f"{PG}?{query}")
    message = str(caught.value)
    assert "cannot be used" in message and PG.replace(":pw@", ":***@") in message
    assert SECRET not in message and ":pw@" not in message


def _page_text(at: AppTest) -> str:
    """Every element of the page (main area and sidebar) as its protobuf text."""
    texts, stack = [], [at._tree]
    while stack:
        node = stack.pop()
        if getattr(node, "proto", None) is not None:
            texts.append(str(node.proto))
        stack.extend(getattr(node, "children", {}).values())
    return "\n".join(texts)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_data_page_shows_no_secret_of_a_connection_whose_reads_fail(
    warehouse: str,  # noqa: F811 (the fixture)
    kind: str,
) -> None:
    # the driver quotes the bad value in its error, whether the page lists the tables or reads a SELECT
    url = {
        "sqlite": f"sqlite:///file:{sa.make_url(warehouse).database}?mode={SECRET}&token={SECRET}&uri=true",
        "postgresql": f"{PG}?sslmode={SECRET}",
    }[kind]
    secrets: dict[str, Any] = {"dpcore": {"databases": ["w"]}, "connections": {"w": {"url": url}}}
    at = _open(secrets)
    at.radio(key="data_source").set_value(DATABASE).run()
    assert any("Could not list the tables" in e.value for e in at.error)
    assert SECRET not in _page_text(at)
    at.radio(key="data_source").set_value(QUERY).run()
    at.text_area(key="data_source_database_query_sql_w").input("SELECT age FROM people").run()
    at.button(key="data_load_source").click().run()
    assert any("The database refused the read" in e.value for e in at.error)
    assert SECRET not in _page_text(at)
