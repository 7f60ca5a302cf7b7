"""Widgets drawn from the parameters a mechanism declares (``dpcore.registry.Param``), never from its name.

Each declared parameter gets one widget, keyed ``{prefix}_{name}`` and kept with ``ui.state.persist``:
a choice of several values a selectbox, named presets a selectbox with a free entry after them, a number
an input bounded by the declared range, text a text input. A parameter the privacy policy fixes (its
``from_policy`` gives a value: geo-indistinguishability's radius, a great-circle Blowfish threshold) shows
the policy's value instead of a widget, a hidden one its default; a single choice shows nothing.
Mechanisms of one page that declare the same parameter share its widget; two different declarations of
one name get a widget each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import streamlit as st

from dpcore.policy import Policy
from dpcore.registry import MechanismSpec, Param
from ui import state

__all__ = ["CUSTOM", "draw_params", "param_keys"]

CUSTOM = "custom"


def param_keys(prefix: str, specs: Iterable[MechanismSpec]) -> dict[tuple[str, str], str]:
    """(mechanism key, parameter name) -> widget key: ``{prefix}_{name}``, or ``{prefix}_{key}_{name}``
    for a mechanism whose parameter of that name differs from the first declaration of it."""
    first: dict[str, Param] = {}
    out: dict[tuple[str, str], str] = {}
    for spec in specs:
        for p in spec.params:
            shared = first.setdefault(p.name, p) == p
            out[spec.key, p.name] = f"{prefix}_{p.name}" if shared else f"{prefix}_{spec.key}_{p.name}"
    return out


def _in_range(p: Param) -> Any:
    """A kept value is reused only if the parameter accepts it (its type, choices and range)."""

    def ok(value: Any) -> bool:
        try:
            return type(value) is type(p.validate(value)) and p.validate(value) == value
        except ValueError:
            return False

    return ok


def _widget(p: Param, key: str, where: Any) -> Any:
    """One widget for ``p`` in container ``where``; the value it holds."""
    if p.choices is not None:
        options = list(p.choices)
        return where.selectbox(
            p.label, options, key=state.persist(key, p.default, options.__contains__), help=p.help or None
        )
    if p.presets:
        names = [name for name, _ in p.presets]
        preset = next((name for name, v in p.presets if v == p.default), CUSTOM)
        options = [*names, CUSTOM]
        shown = dict(p.presets)
        chosen = where.selectbox(
            p.label,
            options,
            format_func=lambda o: o if o == CUSTOM else f"{o} ({shown[o]:,g})",
            key=state.persist(f"{key}_preset", preset, options.__contains__),
            help=p.help or None,
        )
        if chosen != CUSTOM:
            return dict(p.presets)[chosen]
    if p.numeric:
        kind = p.kind
        low, high = kind(p.low), kind(p.high)
        return where.number_input(
            p.label if not p.presets else f"{p.label}, custom",
            min_value=low,
            max_value=high,
            step=1 if kind is int else None,
            key=state.persist(key, kind(p.default), _in_range(p)),
            help=p.help or None,
        )
    if p.kind is bool:
        return where.checkbox(p.label, key=state.persist(key, bool(p.default)), help=p.help or None)
    return where.text_input(p.label, key=state.persist(key, str(p.default)), help=p.help or None)


def draw_params(
    prefix: str,
    specs: Iterable[MechanismSpec],
    policy: Policy,
    *,
    fixed: Mapping[str, Any] | None = None,
    columns: int = 3,
) -> dict[str, dict[str, Any]]:
    """A widget per declared parameter of ``specs`` (grouped under the first mechanism declaring it) and
    every mechanism's values, mechanism key -> {name: value}. ``fixed`` gives values the page sets
    elsewhere (drawn nowhere here, e.g. a per-user limit without a user column)."""
    specs = list(specs)
    keys = param_keys(prefix, specs)
    fixed = dict(fixed or {})
    values: dict[str, Any] = {}  # widget key -> value
    for spec in specs:
        todo = []
        for p in spec.params:
            key = keys[spec.key, p.name]
            if key in values:
                continue
            if p.name in fixed:
                values[key] = fixed[p.name]
            elif p.choices is not None and len(p.choices) == 1:
                values[key] = p.choices[0]
            elif p.from_policy is not None and (given := p.from_policy(policy)) is not None:
                values[key] = p.kind(given)
                st.caption(f"{spec.label}: {p.label} = {given:,g}, from the Privacy policy page.")
            elif p.hidden:
                values[key] = p.default
                st.caption(
                    f"{spec.label}: {p.label} = {p.default:,g} (its default until the Privacy policy page "
                    "sets it)."
                )
            else:
                todo.append((p, key))
        if not todo:
            continue
        st.markdown(f"**{spec.label}**")
        cols = st.columns(min(columns, len(todo)))
        for i, (p, key) in enumerate(todo):
            values[key] = _widget(p, key, cols[i % len(cols)])
    return {s.key: {p.name: values[keys[s.key, p.name]] for p in s.params} for s in specs}
