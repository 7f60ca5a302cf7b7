"""Where the dashboard listens: this machine only, unless sign-in is configured or the operator opens it.

Without sign-in, anyone who can reach the server reads every release and edits the budgets, so
``scripts/run-app`` binds to ``localhost`` (also the ``server.address`` of ``.streamlit/config.toml``).
It binds to every interface (``0.0.0.0``) when ``.streamlit/secrets.toml`` configures sign-in
(:func:`ui.auth.auth_enabled`) or when the operator sets ``DPCORE_LISTEN_ALL=1`` (e.g. behind a proxy
that signs users in). ``python -m ui.listen`` prints the address on stdout and the reason on stderr.
"""

from __future__ import annotations

import os
import sys

from ui import auth

__all__ = ["LISTEN_ALL_ENV", "listen_address"]

LISTEN_ALL_ENV = "DPCORE_LISTEN_ALL"
LOCAL = "localhost"
ALL = "0.0.0.0"


def listen_address() -> tuple[str, str]:
    """(address, reason): :data:`ALL` with sign-in configured or ``DPCORE_LISTEN_ALL=1``, else localhost."""
    if os.environ.get(LISTEN_ALL_ENV) == "1":
        return ALL, f"{LISTEN_ALL_ENV}=1 (the operator opened it; sign-in is not checked)"
    if auth.auth_enabled():
        return ALL, "sign-in is configured in .streamlit/secrets.toml"
    return LOCAL, (
        "sign-in is off, so only this machine can connect; configure sign-in or set "
        f"{LISTEN_ALL_ENV}=1 to listen on every interface"
    )


if __name__ == "__main__":
    address, reason = listen_address()
    print(f"Listening on {address}: {reason}.", file=sys.stderr)
    print(address)
