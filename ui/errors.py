"""Showing errors on the page: user mistakes get their message, anything else a generic note and a log entry.

No stack trace ever reaches the page (PRODUCT.md, "Quality bar"); Streamlit's own control flow
(``st.stop``, ``st.rerun``) derives from ``BaseException`` and passes through untouched.
"""

from __future__ import annotations

import logging
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
    traceback goes to the ``dpcore.app`` logger. The yielded :class:`Outcome` tells the page what happened.
    """
    outcome = Outcome()
    try:
        yield outcome
    except DPCoreError as err:
        outcome.failed, outcome.message = True, str(err)
        st.error(md(outcome.message))  # messages quote file and column names
    except Exception:
        logger.exception("Unexpected error while %s", action)
        outcome.failed = True
        outcome.message = f"Something went wrong while {action}; the details were logged."
        st.error(md(outcome.message))
