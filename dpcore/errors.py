"""Exception types raised by dpcore.

Every error a user can cause is a ``DPCoreError`` whose message names the problem and the fix, so the
app can show ``str(err)`` and keep working. They subclass ``ValueError`` for library callers.
"""

from __future__ import annotations


class DPCoreError(ValueError):
    """Base class: a bad input or parameter, with a message meant for the user."""


class DataError(DPCoreError):
    """A table could not be read, parsed or prepared."""


class PolicyError(DPCoreError):
    """A privacy policy parameter is invalid (eps <= 0, delta outside (0, 1), ...)."""


class ParameterError(DPCoreError):
    """A mechanism parameter is invalid for this data (K > rows, a cluster of size 1, ...)."""
