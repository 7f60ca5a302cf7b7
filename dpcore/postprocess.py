"""Post-processing of released noisy counts: functions of the release alone, so they cost no privacy.

Any function of a differentially private output is as private as the output (Dwork & Roth 2014,
Prop. 2.1), so these may be applied to a released grid at will; they never read the true data.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from dpcore.errors import ParameterError

__all__ = ["Nonnegative", "nonnegative_counts"]

Nonnegative = Literal["project", "clamp"]


def nonnegative_counts(counts: ArrayLike, method: Nonnegative = "project") -> np.ndarray:
    """Noisy counts made non-negative, same shape; post-processing (no privacy cost).

    ``"project"``: the Euclidean projection onto {x >= 0, sum x = max(sum c, 0)}, x_i = max(c_i - tau, 0)
    with tau chosen so the total is kept (Duchi et al. 2008); it keeps the released total, which is an
    unbiased estimate, where clamping inflates it. ``"clamp"``: max(c_i, 0).
    """
    c = np.asarray(counts, dtype=float)
    if not np.isfinite(c).all():
        raise ParameterError("the counts must be finite numbers; pass a released grid's counts.")
    if method == "clamp":
        return np.maximum(c, 0.0)
    if method != "project":
        raise ParameterError(f"unknown method {method!r}; use 'project' (keeps the total) or 'clamp'.")
    total = float(c.sum())
    if total <= 0.0 or c.size == 0:
        return np.zeros_like(c)
    u = np.sort(c.ravel())[::-1]
    excess = np.cumsum(u) - total
    k = np.arange(1, u.size + 1)
    rho = int(np.flatnonzero(u - excess / k > 0)[-1])
    tau = excess[rho] / (rho + 1)
    return np.maximum(c - tau, 0.0)
