"""The widgets of a source kind, drawn from its declaration (:class:`dpcore.data.sources.Field`): a choice
listed by the kind (:meth:`~dpcore.data.sources.SourceSpec.options`) or a typed text, in the declared
order, each widget's value kept per the choices before it."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from dpcore.data.sources import SourceSettings, SourceSpec
from ui import datasets, state
from ui.errors import user_errors
from ui.text import md

LOAD_KEY = "data_load_source"


def widget_key(kind: type[SourceSpec], name: str, chosen: dict[str, str]) -> str:
    """The key of a kind's widget: kept per kind, field and the values chosen before it (a table choice
    per database), for the browser session whatever dataset is loaded (``data_source`` keys)."""
    return "_".join(["data_source", kind.kind, name, *chosen.values()])


def source_form(
    kind: type[SourceSpec], settings: SourceSettings, current: Mapping[str, str] | None = None
) -> SourceSpec | None:
    """Draw ``kind``'s widgets under ``settings`` (the folders and databases this user may load), first
    showing the ``current`` dataset's source (its saved form) where it is of this kind; the spec they name,
    or None while a choice has nothing to offer or a text is empty (what is missing is said)."""
    shown_now = dict(current or {}) if (current or {}).get("kind") == kind.kind else {}
    chosen: dict[str, str] = {}
    for field in kind.fields:
        key = widget_key(kind, field.name, chosen)
        if field.widget == "text":
            text = st.text_area(
                field.label,
                key=state.persist(key, str(shown_now.get(field.name, ""))),
                placeholder=field.placeholder,
                help=field.help or None,
            )
            if not text.strip():
                return None
            chosen[field.name] = text
            continue
        with user_errors(f"listing the choices of {field.label.lower()}") as outcome:
            options = datasets.source_options(kind, field, chosen, settings)
        if outcome.failed:
            return None
        if not options:
            empty = field.empty.format(**{k: md(v) for k, v in chosen.items()})
            st.info(empty or f"Nothing to choose as {field.label.lower()}.")
            return None
        now = next((o for o, to in options.items() if to.items() <= shown_now.items()), None)
        shown = st.selectbox(
            field.label,
            list(options),
            key=state.persist(key, now or next(iter(options)), options.__contains__),
            help=field.help or None,
        )
        chosen.update(options[shown])
    with user_errors(f"choosing {kind.title.lower()}") as outcome:
        spec = kind(**chosen)
    return None if outcome.failed else spec
