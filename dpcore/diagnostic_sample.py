"""A uniform random sample of a large table's rows for the diagnostics (comparisons over many trials).

A comparison runs every mechanism many times on the true data; on a large table it runs on a uniform
sample of ``DIAGNOSTIC_ROWS`` rows drawn without replacement, the same one for the same table (the draw is
seeded from the table's fingerprint and the limit), so reruns and cached results agree. Diagnostics only:
a release always reads every row and draws its noise from OS entropy (``Sampler()``).
"""

from __future__ import annotations

import hashlib

import numpy as np

from dpcore.errors import ParameterError
from dpcore.mechanisms import Sampler

__all__ = ["DIAGNOSTIC_ROWS", "diagnostic_sample", "sample_label"]

DIAGNOSTIC_ROWS = 50_000  # rows a comparison reads at most (a uniform sample beyond that)


def _seed(fingerprint: str, limit: int, n_rows: int) -> int:
    """A 128-bit seed from SHA-256 of (fingerprint, limit, rows): one sample per table and limit."""
    digest = hashlib.sha256(f"dpcore-diagnostic-sample-v1\n{fingerprint}\n{limit}\n{n_rows}".encode())
    return int.from_bytes(digest.digest()[:16], "big")


def diagnostic_sample(n_rows: int, fingerprint: str, limit: int = DIAGNOSTIC_ROWS) -> np.ndarray:
    """Sorted row indices of a uniform sample without replacement of ``min(n_rows, limit)`` rows.

    Every subset of ``limit`` rows is equally likely (``Generator.choice(replace=False)``); with
    ``n_rows <= limit`` every row is kept (``arange(n_rows)``). Seeded from ``fingerprint`` (diagnostic
    sampling, ``Sampler.diagnostic``): never use it for a release.
    """
    for name, value in (("n_rows", n_rows), ("limit", limit)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ParameterError(f"{name} must be a whole number >= 1 (got {value!r}).")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise ParameterError("the diagnostic sample needs the table's fingerprint (a non-empty string).")
    n, size = int(n_rows), int(limit)
    if n <= size:
        return np.arange(n)
    rng = Sampler.diagnostic(_seed(fingerprint, size, n)).rng
    return np.sort(rng.choice(n, size=size, replace=False))


def sample_label(used: int, total: int) -> str:
    """The label shown with a comparison on a sample; empty when every row was used."""
    if used >= total:
        return ""
    return (
        f"Comparison on a uniform sample of {used:,} of {total:,} rows; the release uses every row. "
        "Errors of means, counts and centroids shrink as the rows grow, so here they overstate those of a "
        "release on the full table."
    )
