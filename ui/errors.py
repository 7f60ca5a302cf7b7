"""Showing errors on the page: user mistakes get their message, anything else a generic note and a log entry.

No stack trace ever reaches the page; Streamlit's own control flow (``st.stop``, ``st.rerun``) derives from
``BaseException`` and passes through untouched. The log entry names the exception type and the code
locations, never the exception's message: library messages quote cell values (``Out of bounds nanosecond
timestamp: 1-01-01``), and the data must not reach the server log.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st

from dpcore.errors import DPCoreError
from ui.text import md

logger = logging.getLogger("dpcore.app")


@dataclass
class Outcome:
    """Result of a guarded block: ``failed`` is True when an error was caught and shown."""

    failed: bool = False
    message: str = ""


@contextmanager
def user_errors(action: str = "running this step") -> Iterator[Outcome]:
    """Run a block; show a ``DPCoreError`` (incl. ``BudgetExceeded``) with ``st.error(str(err))``.

    Any other exception shows "Something went wrong while <action>; the details were logged." and its
    type and stack (not its message, see :func:`log_unexpected`) go to the ``dpcore.app`` logger. The
    yielded :class:`Outcome` tells the page what happened.
    """
    outcome = Outcome()
    try:
        yield outcome
    except DPCoreError as err:
        outcome.failed, outcome.message = True, str(err)
        st.error(md(outcome.message))  # messages quote file and column names
    except Exception as err:
        log_unexpected(err, action)
        outcome.failed = True
        outcome.message = f"Something went wrong while {action}; the details were logged."
        st.error(md(outcome.message))


def in_words(err: BaseException) -> str:
    """Why ``err`` happened, for the page: a ``DPCoreError``'s own message; for another exception (a saved
    plan missing a key, of the wrong type) a sentence of ours, never the library's text."""
    if isinstance(err, DPCoreError):
        return str(err)
    return f"it is incomplete or was saved by another version ({type(err).__name__})"


def log_unexpected(err: BaseException, action: str) -> None:
    """Log ``err``'s type and the stack of each exception in its chain, without any message."""
    stack: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        stack = [f"{type(current).__name__} at\n", *traceback.format_tb(current.__traceback__), *stack]
        current = current.__cause__ or current.__context__
    logger.error(
        "Unexpected %s while %s (message withheld: it may quote data)\n%s",
        type(err).__name__,
        action,
        "".join(stack),
    )
