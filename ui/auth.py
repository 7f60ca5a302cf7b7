"""Optional sign-in with Streamlit's OIDC support (``st.login``), so the ledger knows who released what.

Off by default. It turns on when ``.streamlit/secrets.toml`` has an ``[auth]`` section with
``redirect_uri`` and ``cookie_secret`` and at least one provider: ``client_id``, ``client_secret`` and
``server_metadata_url`` either directly in ``[auth]`` (the default provider) or in a sub-table such as
``[auth.google]`` (see ``.streamlit/secrets.toml.example``). Without it the app has one local user,
``dpcore.config.local_user()``. A missing or unreadable secrets file counts as "not configured".
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import streamlit as st

from dpcore import config
from ui.text import md

__all__ = [
    "auth_enabled",
    "authlib_installed",
    "current_user",
    "is_logged_in",
    "provider",
    "render_account",
    "require_sign_in",
]

REQUIRED_KEYS = ("redirect_uri", "cookie_secret")
PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")
DEFAULT_PROVIDER = "default"


def _auth_section() -> Mapping[str, Any]:
    """The ``[auth]`` table of the secrets, or an empty mapping (no file, unreadable file, no section)."""
    if not st.secrets.load_if_toml_exists():
        return {}
    section = st.secrets.get("auth")
    return section if isinstance(section, Mapping) else {}


def _providers(section: Mapping[str, Any]) -> list[str]:
    """Configured provider names: ``"default"`` when the keys sit in ``[auth]``, then named sub-tables."""
    names = [DEFAULT_PROVIDER] if all(section.get(k) for k in PROVIDER_KEYS) else []
    names += [
        str(name)
        for name, sub in section.items()
        if isinstance(sub, Mapping) and all(sub.get(k) for k in PROVIDER_KEYS)
    ]
    return names


def auth_enabled() -> bool:
    """True when the secrets configure sign-in completely (general keys and at least one provider)."""
    section = _auth_section()
    return all(section.get(k) for k in REQUIRED_KEYS) and bool(_providers(section))


def provider() -> str:
    """The provider ``st.login`` uses: the default one if configured, else the first named one."""
    names = _providers(_auth_section())
    return names[0] if names else DEFAULT_PROVIDER


def authlib_installed() -> bool:
    """``st.login`` needs the Authlib package (an optional dependency of Streamlit)."""
    return importlib.util.find_spec("authlib") is not None


def is_logged_in() -> bool:
    """Whether the browser session has signed in (``st.user.is_logged_in``; False outside a session)."""
    return bool(st.user.get("is_logged_in", False))


def current_user() -> str:
    """Identity recorded with releases: the signed-in e-mail (else name or subject), else the local user."""
    if auth_enabled() and is_logged_in():
        for claim in ("email", "name", "preferred_username", "sub"):
            value = st.user.get(claim)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return config.local_user()


def _login() -> None:
    name = provider()
    if name == DEFAULT_PROVIDER:
        st.login()
    else:
        st.login(name)


def require_sign_in() -> None:
    """With sign-in configured, a signed-out session sees only a sign-in prompt, then ``st.stop()``.

    Does nothing when sign-in is off or the session is signed in; safe to call more than once per run.
    """
    if not auth_enabled() or is_logged_in():
        return
    st.title("Sign in")
    st.info(
        "This dashboard records who makes each privacy release. Sign in with your organisation's "
        "account to continue."
    )
    if not authlib_installed():
        st.error(
            "Sign-in is configured in .streamlit/secrets.toml but the Authlib package is missing. "
            "Install it (pip install 'Authlib>=1.3.2') and restart the app, or remove the [auth] section."
        )
    else:
        label = "Sign in" if provider() == DEFAULT_PROVIDER else f"Sign in with {provider()}"
        st.button(label, on_click=_login, type="primary", key="auth_sign_in", icon=":material/login:")
    st.stop()


def render_account() -> None:
    """Sidebar lines for a signed-in session: who is signed in and a sign-out button (else nothing)."""
    if not (auth_enabled() and is_logged_in()):
        return
    st.caption(f"Signed in as **{md(current_user())}**")
    st.button("Sign out", on_click=st.logout, key="auth_sign_out", icon=":material/logout:")
