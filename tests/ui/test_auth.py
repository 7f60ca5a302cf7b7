"""Optional OIDC sign-in (ui.auth): off without secrets, a sign-in wall when configured and signed out,
the signed-in identity recorded in the ledger.

AppTest injects ``at.secrets`` (the [auth] section) and ``at.user`` (what ``st.user`` returns), so these
run the real helper; the app-level tests replace the helper with monkeypatch as the issue asks.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint, infer_schema
from dpcore.ledger import Ledger
from dpcore.plan import policy_account
from tests.panel import release_button
from ui import auth
from ui.state import DEFAULT_POLICY, Dataset

TIMEOUT = 60
PROVIDER = {
    "client_id": "dashboard",
    "client_secret": "s3cret",
    "server_metadata_url": "https://id.example.org/.well-known/openid-configuration",
}
GENERAL = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "x" * 40}


def _gate_script() -> None:
    import streamlit as st

    from ui import auth

    auth.require_sign_in()
    with st.sidebar:
        auth.render_account()
    st.markdown(f"content for {auth.current_user()} (sign-in enabled: {auth.auth_enabled()})")


def _gate(secrets: dict[str, Any] | None, user: dict[str, Any]) -> AppTest:
    at = AppTest.from_function(_gate_script, default_timeout=TIMEOUT)
    if secrets is not None:
        at.secrets["auth"] = secrets
    at.user = user
    return at.run()


@pytest.fixture
def with_authlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "authlib_installed", lambda: True)


def test_without_secrets_everyone_is_the_local_user() -> None:
    at = _gate(None, {"email": "someone@example.org"})
    assert not at.exception
    assert [m.value for m in at.markdown] == ["content for test-curator (sign-in enabled: False)"]
    assert not at.button


@pytest.mark.parametrize(
    "section",
    [
        {**PROVIDER},  # no redirect_uri / cookie_secret
        {**GENERAL},  # no provider
        {**GENERAL, "client_id": "dashboard", "client_secret": "s3cret"},  # provider incomplete
        {**GENERAL, "google": {"client_id": "dashboard"}},
    ],
    ids=["no general keys", "no provider", "provider without metadata url", "named provider incomplete"],
)
def test_incomplete_auth_section_leaves_sign_in_off(section: dict[str, Any]) -> None:
    at = _gate(section, {"is_logged_in": False})
    assert not at.exception
    assert [m.value for m in at.markdown] == ["content for test-curator (sign-in enabled: False)"]


def test_signed_out_sees_only_the_sign_in_prompt(with_authlib: None) -> None:
    at = _gate({**GENERAL, **PROVIDER}, {"is_logged_in": False})
    assert not at.exception
    assert [t.value for t in at.title] == ["Sign in"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.markdown  # nothing of the page below the gate ran


def test_named_provider_is_offered_by_name(with_authlib: None) -> None:
    at = _gate({**GENERAL, "microsoft": PROVIDER}, {"is_logged_in": False})
    assert [b.label for b in at.button] == ["Sign in with microsoft"]


def test_configured_without_authlib_explains_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "authlib_installed", lambda: False)
    at = _gate({**GENERAL, **PROVIDER}, {"is_logged_in": False})
    assert not at.exception and not at.markdown and not at.button
    assert len(at.error) == 1 and "Authlib" in at.error[0].value and "[auth]" in at.error[0].value


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ({"is_logged_in": True, "email": "alice@example.org", "name": "Alice"}, "alice@example.org"),
        ({"is_logged_in": True, "name": "Bob Builder"}, "Bob Builder"),
        ({"is_logged_in": True, "sub": "u-123"}, "u-123"),
        ({"is_logged_in": True}, "test-curator"),
    ],
    ids=["email", "name", "subject", "no claims"],
)
def test_signed_in_identity(user: dict[str, Any], expected: str) -> None:
    at = _gate({**GENERAL, **PROVIDER}, user)
    assert not at.exception
    assert [m.value for m in at.markdown] == [f"content for {expected} (sign-in enabled: True)"]
    assert any(f"Signed in as **{expected}**" in c.value for c in at.sidebar.caption)
    assert [b.label for b in at.sidebar.button] == ["Sign out"]


# -- through the app ------------------------------------------------------------------------------------


def test_app_requires_sign_in_when_enabled(app_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "auth_enabled", lambda: True)
    monkeypatch.setattr(auth, "is_logged_in", lambda: False)
    monkeypatch.setattr(auth, "authlib_installed", lambda: True)
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Sign in"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.sidebar.radio and not at.page_link and not at.metric  # no sidebar, no page content
    at.switch_page("pages/policy.py").run()
    assert [t.value for t in at.title] == ["Sign in"] and not at.number_input


def test_app_without_sign_in_is_unchanged(app_path: str) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    assert not at.exception
    assert "Sign in" not in [t.value for t in at.title]
    assert at.sidebar.radio(key="dp_mode").value == "secure"
    assert "auth_sign_out" not in [b.key for b in at.sidebar.button]


def test_app_signed_in_shows_the_user_in_the_sidebar(app_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "auth_enabled", lambda: True)
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT)
    at.user = {"is_logged_in": True, "email": "carol@example.org"}
    at.run()
    assert not at.exception
    assert "Sign in" not in [t.value for t in at.title]
    assert any("Signed in as **carol@example.org**" in c.value for c in at.sidebar.caption)
    assert [b.label for b in at.sidebar.button] == ["Sign out"]


def _release_script() -> None:
    import numpy as np

    from dpcore.kmeans.registry import KMeansInputs
    from ui.release import current_plan, release_panel

    X = np.linspace(0.0, 1.0, 40).reshape(20, 2)
    plan = current_plan("kmeans", "dp_lloyd", epsilon=0.25, params={"n_clusters": 2})
    release_panel(key="auth", plan=plan, inputs=KMeansInputs(X, None, np.zeros(2), np.ones(2), ("a", "b")))


def test_release_records_the_signed_in_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "current_user", lambda: "alice@example.org")
    raw = pd.DataFrame({"x": [0.1, 0.5, 0.9]})
    ds = Dataset(name="tiny", raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))
    ledger = Ledger(config.ledger_url())
    ledger.set_budget(policy_account(ds.dataset_id, DEFAULT_POLICY), 1.0, 0.0)
    at = AppTest.from_function(_release_script, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = ds
    at.run()
    release_button(at, "auth").click().run()
    assert not at.exception and not at.error
    records = ledger.releases(dataset_id=ds.dataset_id)
    assert [r.user for r in records] == ["alice@example.org"]
    manifest = at.session_state["dp_release::auth"].result.manifest
    assert manifest["user"] == "alice@example.org"
    ledger.close()
