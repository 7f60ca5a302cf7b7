"""Who may do what: the roles officer, curator and viewer, from the operator's configuration and the
verified identity of the signed-in user, recomputed on every run.

The ``[dpcore.roles]`` table of ``.streamlit/secrets.toml`` (see ``.streamlit/secrets.toml.example``)
lists e-mail addresses per role (``officer = [...]``, ``curator = [...]``, ``viewer = [...]``) and/or
names a groups claim of the identity token (``groups_claim = "groups"``) with the groups granting each
role (``[dpcore.roles.groups]``: ``officer = ["privacy-office"]``, ...). A user's roles are the union of
those matched by their e-mail (only when the provider has not marked it unverified) and their groups.

Roles come from ``st.user`` (the claims of the identity token the server verified at sign-in, kept in a
cookie the server signs) and the secrets, on every call: nothing the browser sends (session state,
widget values, query parameters, the ``?s=`` session token) is read here, so none of it can grant a role.

- **officer**: sets and raises budgets, sets approval rules, approves or denies release requests, sees
  every dataset.
- **curator**: loads data, compares, releases (or requests a release) within the budget.
- **viewer**: reads the Ledger page and downloads released files; runs the comparison pages in demo mode
  only, on the built-in samples.

Without sign-in (one person on a laptop) the local user holds all three roles. With sign-in on but no
``[dpcore.roles]`` table every signed-in user holds all three (the pages say so, and how to restrict).

Dataset access (optional, ``[dpcore.access]``): a data folder or database connection name mapped to the
roles and/or ``group:<name>`` entries that may load from it (a folder or database not listed is open to
every curator; one listed is not offered to anyone else), and ``"dataset:<name>"`` mapped likewise to who
may see that dataset's rows on the Ledger page. Officers see every dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import streamlit as st

from ui import auth

__all__ = [
    "ALL_ROLES",
    "CURATOR",
    "OFFICER",
    "VIEWER",
    "Identity",
    "current",
    "has",
    "may_load",
    "may_see_dataset",
    "refusal",
    "render_roles",
    "require",
    "require_any_role",
    "roles_for",
]

OFFICER, CURATOR, VIEWER = "officer", "curator", "viewer"
ALL_ROLES = frozenset((OFFICER, CURATOR, VIEWER))
ROLE_WORDS = {
    OFFICER: "privacy officer",
    CURATOR: "data curator",
    VIEWER: "viewer",
}
_NOTE_KEY = "dp_roles_note_shown"  # only whether the one-time note was shown: never read for a role


@dataclass(frozen=True)
class Identity:
    """The user of this run: the name recorded in the ledger, their roles and groups, and whether the
    roles are the all-powerful default (``local``: no sign-in; ``unconfigured``: sign-in without roles)."""

    user: str
    roles: frozenset[str]
    groups: frozenset[str] = frozenset()
    local: bool = False
    unconfigured: bool = False

    def __post_init__(self) -> None:
        unknown = self.roles - ALL_ROLES
        if unknown:
            raise ValueError(f"Unknown role(s) {sorted(unknown)}; roles are {sorted(ALL_ROLES)}.")


def _strings(value: Any) -> list[str]:
    """A list of strings from a TOML value (a string is a list of one); anything else is ignored."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return [str(v) for v in value if isinstance(v, str | int)]
    return []


def _folded(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.strip().casefold() for v in values if v.strip())


def roles_for(claims: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    """(roles, groups) of a signed-in user with identity-token ``claims`` under ``config`` (the
    ``[dpcore.roles]`` table). The e-mail counts only when ``email_verified`` is absent or true."""
    email = claims.get("email")
    verified = claims.get("email_verified", True) not in (False, "false", "False", 0)
    mail = email.strip().casefold() if isinstance(email, str) and verified else None
    claim = config.get("groups_claim")
    groups = _folded(_strings(claims.get(claim))) if isinstance(claim, str) and claim else frozenset()
    by_group = config.get("groups") if isinstance(config.get("groups"), Mapping) else {}
    roles = set()
    for role in ALL_ROLES:
        if mail is not None and mail in _folded(_strings(config.get(role))):
            roles.add(role)
        if groups & _folded(_strings(by_group.get(role))):
            roles.add(role)
    return frozenset(roles), groups


def _dpcore_secrets() -> Mapping[str, Any]:
    if not st.secrets.load_if_toml_exists():
        return {}
    section = st.secrets.get("dpcore")
    return section if isinstance(section, Mapping) else {}


def _roles_config() -> Mapping[str, Any] | None:
    section = _dpcore_secrets().get("roles")
    return section if isinstance(section, Mapping) else None


def current() -> Identity:
    """The identity of this run, from the verified sign-in (``st.user``) and the secrets; never cached in
    the session, so a change of the configuration or a sign-out takes effect on the next run."""
    user = auth.current_user()
    if not auth.auth_enabled():
        return Identity(user, ALL_ROLES, local=True)
    if not auth.is_logged_in():
        return Identity(user, frozenset())
    config = _roles_config()
    if config is None:
        return Identity(user, ALL_ROLES, unconfigured=True)
    roles, groups = roles_for(dict(st.user.to_dict()), config)
    return Identity(user, roles, groups)


def has(*roles: str) -> bool:
    """Whether the user of this run holds at least one of ``roles``."""
    return bool(current().roles & set(roles))


def _words(roles: Iterable[str]) -> str:
    names = [ROLE_WORDS[r] for r in (OFFICER, CURATOR, VIEWER) if r in set(roles)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def refusal(action: str, *roles: str) -> str | None:
    """Why the user of this run may not ``action`` (a phrase: "set a budget"), or None when they may."""
    who = current()
    if who.roles & set(roles):
        return None
    held = (
        f"you are signed in as {who.user} with the role(s) {_words(who.roles)}"
        if who.roles
        else (f"you are signed in as {who.user}, who has no role in this dashboard")
    )
    return (
        f"Only a {_words(roles)} may {action}; {held}. Nothing was changed. Ask the operator to add you to "
        "[dpcore.roles] in .streamlit/secrets.toml if you need this."
    )


def require(action: str, *roles: str) -> None:
    """Stop the page with the refusal when the user of this run holds none of ``roles``."""
    reason = refusal(action, *roles)
    if reason is not None:
        st.title("Not available to your role")
        st.error(reason, icon=":material/block:")
        st.stop()


def require_any_role() -> None:
    """Stop a signed-in user who holds no role, with the reason and a way to sign out."""
    if current().roles:
        return
    st.title("No access")
    st.error(refusal("use this dashboard", *ALL_ROLES), icon=":material/block:")
    st.button("Sign out", on_click=st.logout, key="roles_sign_out", icon=":material/logout:")
    st.stop()


def render_roles() -> None:
    """Sidebar line: the signed-in user's roles; once per session, the note that without sign-in (or
    without ``[dpcore.roles]``) this user holds every role. Reads only whether the note was shown, never a
    role, from the session."""
    who = current()
    if not (who.local or who.unconfigured):
        st.caption(f"Role: {_words(who.roles).replace(' or ', ' and ')}")
        return
    if st.session_state.get(_NOTE_KEY):
        return
    st.session_state[_NOTE_KEY] = True
    if who.local:
        st.info(
            "Sign-in is off, so you hold all three roles here (privacy officer, data curator and viewer): "
            "you set budgets and approve your own releases. For a shared service, configure sign-in and "
            "[dpcore.roles] in .streamlit/secrets.toml.",
            icon=":material/person:",
        )
    else:
        st.warning(
            "Sign-in is on but .streamlit/secrets.toml has no [dpcore.roles] table, so every signed-in user "
            "holds all three roles. List the officers, curators and viewers there to restrict them.",
            icon=":material/group:",
        )


def _access() -> Mapping[str, Any]:
    section = _dpcore_secrets().get("access")
    return section if isinstance(section, Mapping) else {}


def _listed_allows(entries: Any, who: Identity) -> bool:
    allowed = _folded(_strings(entries))
    return bool(allowed & who.roles or allowed & {f"group:{g}" for g in who.groups})


def may_load(source: str) -> bool:
    """Whether this run's user may load data from ``source`` (a data folder or a database connection
    name): officers always; curators when ``[dpcore.access]`` does not list it, or lists one of their roles
    or ``group:<name>`` of one of their groups; viewers never (they use the built-in samples)."""
    who = current()
    if OFFICER in who.roles:
        return True
    if CURATOR not in who.roles:
        return False
    access = _access()
    return source not in access or _listed_allows(access[source], who)


def may_see_dataset(dataset_id: str) -> bool:
    """Whether this run's user may see the ledger rows of ``dataset_id``: officers always; others unless
    ``[dpcore.access]`` lists the dataset by name (``"dataset:<name>" = [...]``) without one of their
    roles or groups."""
    from dpcore.ledger import dataset_id_for_name

    who = current()
    if OFFICER in who.roles:
        return True
    for key, entries in _access().items():
        name = str(key)
        if name.startswith("dataset:") and dataset_id_for_name(name[len("dataset:") :]) == dataset_id:
            return _listed_allows(entries, who)
    return True
