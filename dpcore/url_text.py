"""A database URL in a message, a log or a page, without its secrets.

SQLAlchemy's ``render_as_string(hide_password=True)`` hides the password only, while operators put secrets
in the query string too (``?sslpassword=``, ``?token=``, ``?access_token=``); and a driver's error may quote
one of its values on its own (libpq: ``invalid sslmode value: "..."``). :func:`shown_url` is the URL as a
message may show it, :func:`url_redactor` takes a URL's secrets out of any text (a driver's error, a
traceback). Only SQLAlchemy is imported: the ledger uses it without loading pandas.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import sqlalchemy as sa

__all__ = ["MASK", "URL_PLACEHOLDER", "shown_url", "url_redactor"]


URL_PLACEHOLDER = "<the database URL>"
MASK = "***"


def _parsed(url: str | sa.URL) -> sa.URL | None:
    try:
        return url if isinstance(url, sa.URL) else sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        return None


def _query(url: sa.URL) -> list[tuple[str, str]]:
    """The (key, value) pairs of ``url``'s query string, a repeated key once per value."""
    pairs = url.query.items()
    return [(key, one) for key, value in pairs for one in ((value,) if isinstance(value, str) else value)]


def shown_url(url: str | sa.URL) -> str:
    """``url`` for a message: its password and every query value as ``***``, the rest (user, host,
    database, query keys) kept so the operator recognises it; text that is not a URL as
    :data:`URL_PLACEHOLDER`, never as itself."""
    parsed = _parsed(url)
    if parsed is None:
        return URL_PLACEHOLDER
    query = "&".join(f"{quote_plus(key)}={MASK}" for key, _ in _query(parsed))
    return parsed.set(query={}).render_as_string(hide_password=True) + (f"?{query}" if query else "")


def _written(value: str) -> set[str]:
    """``value`` as a text may hold it: as is and percent-encoded (both URL forms)."""
    return {value, quote(value, safe=""), quote_plus(value)}


def url_redactor(*urls: str | sa.URL) -> Callable[[str], str]:
    """A function taking the secrets of ``urls`` out of a text (a driver's error, a traceback): each URL as
    written or rendered becomes :func:`shown_url` (text that is not a URL: :data:`URL_PLACEHOLDER`), then a
    password left anywhere and a query value left standing alone (not inside a longer word or number:
    ``?connect_timeout=10`` keeps "100 rows") become ``***``."""
    shown: dict[str, str] = {}
    passwords: set[str] = set()
    values: set[str] = set()
    for url in urls:
        parsed = _parsed(url)
        if parsed is None:
            shown[str(url)] = URL_PLACEHOLDER
            continue
        masked = shown_url(parsed)
        for form in (url, parsed.render_as_string(hide_password=False), parsed.render_as_string()):
            shown[str(form)] = masked
        if parsed.password:
            passwords |= _written(parsed.password)
        for _, value in _query(parsed):
            values |= _written(value)
    shown.pop("", None)
    longest = sorted(values - {""}, key=len, reverse=True)
    alone = re.compile(rf"(?<![^\W_])(?:{'|'.join(map(re.escape, longest))})(?![^\W_])") if longest else None

    def redact(text: str) -> str:
        for written in sorted(shown, key=len, reverse=True):
            text = text.replace(written, shown[written])
        for secret in sorted(passwords, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return alone.sub(MASK, text) if alone is not None else text

    return redact
