"""AppTest helpers for the release panel: its spend buttons' keys carry the plan's digest."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Button


def release_button(at: AppTest, key: str, *, again: bool = False) -> Button:
    """The panel ``key``'s Release button (or its "Release this plan again" button) as last drawn."""
    role = "release_again" if again else "release"
    pattern = re.compile(rf"{re.escape(key)}_{role}_[0-9a-f]{{16}}")
    found = [b for b in at.button if b.key is not None and pattern.fullmatch(b.key)]
    assert len(found) == 1, f"{len(found)} {role} buttons for panel {key!r}: {[b.key for b in at.button]}"
    return found[0]


def has_release_button(at: AppTest, key: str, *, again: bool = False) -> bool:
    """Whether the panel ``key`` draws its Release (or "again") button in the last run."""
    role = "release_again" if again else "release"
    pattern = re.compile(rf"{re.escape(key)}_{role}_[0-9a-f]{{16}}")
    return any(b.key is not None and pattern.fullmatch(b.key) for b in at.button)


def again_checkbox(at: AppTest, key: str):
    """The panel ``key``'s "Release this plan again" confirmation checkbox."""
    return next(c for c in at.checkbox if c.key is not None and c.key.startswith(f"{key}_again_"))


def request_id(at: AppTest, key: str, number: int = 1) -> str:
    """The request id of the ``number``-th release of the plan the panel ``key`` shows
    (``ReleasePlan.request_id``: ``plan-`` and 32 hex digits of the plan's key, ``-<n>`` after the first)."""
    first = "plan-" + at.session_state[f"dp_release::{key}"].intent[:32]
    return first if number == 1 else f"{first}-{number}"
