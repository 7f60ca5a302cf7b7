"""Exact samplers on the integers (Canonne, Kamath & Steinke 2020, "The discrete Gaussian for differential
privacy", Algorithms 1 and 2).

No floating-point operation touches a probability: every draw is a uniform integer from ``random_state.rng``
(OS entropy in secure mode, a fixed seed in demo mode) and every probability is exp(-num / 2^bits) with
num an integer, decided by comparisons of such integers. So the floating-point attacks on Laplace noise
(Mironov 2012) do not apply to what these samplers return.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpcore.errors import ParameterError

IntArray = NDArray[np.int64]


def dyadic_floor(value: float | Fraction, significant_bits: int = 24) -> tuple[int, int]:
    """(num, bits) with num / 2^bits the largest multiple of 2^-bits <= value, num < 2^significant_bits."""
    v = Fraction(value)
    if v <= 0:
        raise ParameterError(f"a positive rate is needed (got {float(v)!r}).")
    bits = significant_bits - 1 - math.floor(math.log2(v))
    num = math.floor(v * 2**bits) if bits >= 0 else math.floor(v / 2**-bits)
    return num, bits


def bernoulli_exp(num: IntArray, bits: int, rng: np.random.Generator) -> NDArray[np.bool_]:
    """One exact Bernoulli(exp(-num / 2^bits)) per entry (num >= 0, num < 2^62, bits <= 52).

    exp(-g) = exp(-1)^floor(g) exp(-frac(g)); for g in [0, 1], K = the first k with Bernoulli(g / k) = 0 is
    odd with probability exp(-g) (Canonne et al. 2020, Alg. 1)."""
    num = np.asarray(num, dtype=np.int64)
    whole, frac = num >> bits, num & ((1 << bits) - 1)
    out = np.ones(num.shape, dtype=bool)
    for k in range(int(whole.max(initial=0))):
        live = np.flatnonzero(out & (whole > k))
        out[live] = _bernoulli_exp_unit(np.full(live.size, 1 << bits, dtype=np.int64), bits, rng)
    live = np.flatnonzero(out)
    out[live] = _bernoulli_exp_unit(frac[live], bits, rng)
    return out


def _bernoulli_exp_unit(num: IntArray, bits: int, rng: np.random.Generator) -> NDArray[np.bool_]:
    """Bernoulli(exp(-g)) for g = num / 2^bits in [0, 1]: Bernoulli(g / k) is a uniform integer below
    k 2^bits compared with num."""
    k = np.ones(num.size, dtype=np.int64)
    live = np.arange(num.size)
    while live.size:
        hit = rng.integers(0, k[live] << bits) < num[live]
        k[live[hit]] += 1
        live = live[hit]
    return k % 2 == 1


def discrete_laplace(size: int, s: int, t_bits: int, rng: np.random.Generator) -> IntArray:
    """``size`` exact draws of Pr[y] proportional to exp(-|y| s / 2^t_bits) on the integers (Canonne et al.
    2020, Alg. 2: X = U + 2^t V is geometric with ratio exp(-2^-t), Y = floor(X / s) is geometric with
    ratio exp(-s 2^-t), and a fair sign with -0 rejected)."""
    out = np.empty(size, dtype=np.int64)
    filled, one = 0, np.int64(1) << t_bits
    while filled < size:
        m = 2 * (size - filled) + 8
        u = rng.integers(0, one, m)
        keep = bernoulli_exp(u, t_bits, rng)
        v = np.zeros(m, dtype=np.int64)
        live = np.arange(m)
        while live.size:
            hit = bernoulli_exp(np.full(live.size, one), t_bits, rng)
            v[live[hit]] += 1
            live = live[hit]
        y = (u + (v << t_bits)) // s
        negative = rng.integers(0, 2, m).astype(bool)
        values = np.where(negative, -y, y)[keep & ~(negative & (y == 0))][: size - filled]
        out[filled : filled + values.size] = values
        filled += values.size
    return out
