"""Noise primitives: samplers, Laplace and Gaussian calibrations, exponential mechanism, randomized response.

Sampling modes (every result records which one produced it):

- ``secure``: for releases. Laplace and Gaussian noise come from OpenDP's exact samplers, on a lattice
  of step 2^k well below the noise scale; :meth:`Sampler.privatize` rounds the input to that lattice
  first, so a release's low-order bits do not reveal the input (Mironov 2012). All other draws (angles,
  choices, MCMC) come from a numpy generator seeded from the OS entropy source.
- ``demo``: a fixed seed, reproducible; only for labelled stakeholder demos, never a privacy release.
- ``diagnostic``: fast numpy noise for internal comparisons over many trials; never released.

Gaussian calibrations, written as the largest ratio s* = sensitivity / sigma that a calibration admits
at (eps, delta), so that sigma = s / s* and the colored-noise constraint level is gamma = s*^2:

- ``analytic`` (Balle & Wang 2018, Thm. 8): the largest t with
  Phi(t/2 - eps/t) - e^eps Phi(-t/2 - eps/t) <= delta. Exact; the default.
- ``paper`` (Ravi, Scaglione & Peisert 2021, eq. 5): s* = eps / sqrt(2 ln(2 / delta)).
- ``classic`` (Dwork & Roth 2014, Thm. A.1): s* = eps / sqrt(2 ln(1.25 / delta)), eps < 1 only.

The two closed forms are refused (ParameterError) where they miss delta. The classic form is checked
against the exact profile. The paper's form is used for the paper's (eps, delta)-PDP, so it is checked
against the PDP tail Pr[loss > eps] = Phi(t/2 - eps/t) (:func:`pdp_tail`), which is larger than the
profile's delta: it is refused from eps = 6.05 (delta = 1e-2), 6.68 (1e-5) and 7.41 (1e-12) on; at
eps = 8, delta = 1e-5 its tail is 1.8e-5 (its (eps, delta)-DP delta is still below 1e-5 there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, special

from dpcore.errors import ParameterError

SamplingMode = Literal["secure", "demo", "diagnostic"]
Calibration = Literal["analytic", "paper", "classic"]
CALIBRATIONS: dict[str, str] = {
    "analytic": "Analytic Gaussian (Balle & Wang 2018): exact, smallest sigma",
    "paper": "Paper (Ravi et al. 2021, eq. 5): sigma = s sqrt(2 ln(2/delta)) / eps, where it meets delta",
    "classic": "Classic (Dwork & Roth): sigma = s sqrt(2 ln(1.25/delta)) / eps, eps < 1 only",
}
SAMPLING_MODES: dict[str, str] = {
    "secure": "secure: OS entropy and OpenDP's exact samplers (for releases)",
    "demo": "DEMO: fixed seed, reproducible, not a privacy release",
    "diagnostic": "diagnostic: fast numpy noise for internal comparisons, never released",
}


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer)):
        raise ParameterError(f"epsilon must be a number > 0 (got {epsilon!r}).")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0:
        raise ParameterError(f"epsilon must be a finite number > 0 (got {epsilon!r}). Try epsilon = 1.0.")
    return eps


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating, np.integer)):
        raise ParameterError(f"delta must be a number in (0, 1) (got {delta!r}).")
    dlt = float(delta)
    if not (0.0 < dlt < 1.0):
        raise ParameterError(
            f"delta must be in the open interval (0, 1) (got {delta!r}); typical values are below 1/n."
        )
    return dlt


def _check_sensitivity(sensitivity: float) -> float:
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, float, np.floating, np.integer)):
        raise ParameterError(f"sensitivity must be a number >= 0 (got {sensitivity!r}).")
    s = float(sensitivity)
    if not math.isfinite(s) or s < 0:
        raise ParameterError(f"sensitivity must be a finite number >= 0 (got {sensitivity!r}).")
    return s


class Sampler:
    """Source of randomness for a mechanism: secure by default, seeded only in demo mode.

    ``Sampler()`` is secure; ``Sampler(seed=7)`` is demo; ``Sampler.diagnostic()`` is for comparisons.
    """

    def __init__(self, seed: int | None = None, *, mode: SamplingMode | None = None) -> None:
        if mode is None:
            mode = "secure" if seed is None else "demo"
        if mode not in SAMPLING_MODES:
            raise ParameterError(f"unknown sampling mode {mode!r}; use one of {sorted(SAMPLING_MODES)}.")
        if mode == "secure" and seed is not None:
            raise ParameterError("secure sampling refuses a seed: seeds are allowed only in demo mode.")
        if mode == "demo" and seed is None:
            raise ParameterError("demo mode needs a fixed seed (an integer >= 0).")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0
        ):
            raise ParameterError(f"seed must be an integer >= 0 (got {seed!r}).")
        self.mode: SamplingMode = mode
        self.seed = None if seed is None else int(seed)
        # SeedSequence() without entropy draws 128 bits from the OS entropy source (secrets).
        entropy = np.random.SeedSequence() if self.seed is None else np.random.SeedSequence(self.seed)
        self.rng = np.random.Generator(np.random.PCG64(entropy))

    @classmethod
    def diagnostic(cls, seed: int | None = None) -> Sampler:
        """Fast numpy noise for non-released comparisons (sweeps over many trials)."""
        return cls(seed, mode="diagnostic")

    def __repr__(self) -> str:
        return f"Sampler(mode={self.mode!r}, seed={self.seed!r})"

    def normal(self, size: int | Sequence[int], scale: float = 1.0) -> np.ndarray:
        """Independent N(0, scale^2) draws of the given shape."""
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        if self.mode != "secure":
            return self.rng.normal(0.0, scale, size=shape)
        return _opendp_noise("gaussian", shape, float(scale))

    def laplace(self, size: int | Sequence[int], scale: float) -> np.ndarray:
        """Independent Laplace(0, scale) draws of the given shape."""
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        if self.mode != "secure":
            return self.rng.laplace(0.0, scale, size=shape)
        return _opendp_noise("laplace", shape, float(scale))

    def privatize(
        self, value: np.ndarray | float, kind: Literal["laplace", "gaussian"], scale: float
    ) -> np.ndarray:
        """value + independent Laplace/Gaussian noise of this scale, free of the floating-point leak.

        As in OpenDP's own measurements, the input is rounded to the noise lattice (step
        :func:`noise_grid_step`) before the lattice-valued noise is added, so the output's low-order bits
        carry no information about the input (Mironov 2012). Same rounding in every mode.
        """
        arr = snap_to_noise_grid(np.asarray(value, dtype=float), scale)
        noise = self.laplace(arr.shape, scale) if kind == "laplace" else self.normal(arr.shape, scale)
        return snap_to_noise_grid(arr + noise, scale)


def check_random_state(random_state: int | Sampler | None) -> Sampler:
    """The :class:`Sampler` a ``random_state`` stands for (scikit-learn's ``check_random_state``).

    ``None``: secure sampling (OS entropy, OpenDP's exact samplers), the only mode for releases; an
    integer >= 0: a labelled demo seed, reproducible; a :class:`Sampler`: used as given.

    >>> check_random_state(None).mode, check_random_state(7)
    ('secure', Sampler(mode='demo', seed=7))
    >>> check_random_state(0.5)
    Traceback (most recent call last):
    ...
    dpcore.errors.ParameterError: random_state must be None (secure sampling), an integer demo seed >= 0 ...
    """
    if random_state is None:
        return Sampler()
    if isinstance(random_state, Sampler):
        return random_state
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return Sampler(seed=int(random_state))
    raise ParameterError(
        f"random_state must be None (secure sampling), an integer demo seed >= 0 or a dpcore Sampler "
        f"(got {random_state!r})."
    )


_GRID_BITS = 40


def noise_grid_step(scale: float) -> float:
    """Lattice step 2^k, k = floor(log2 scale) - 40, on which secure noise of this scale is drawn."""
    if not math.isfinite(scale) or scale <= 0:
        raise ParameterError(
            f"noise scale must be a finite number > 0 (got {scale!r}); epsilon is probably too small "
            "or the sensitivity too large."
        )
    return math.ldexp(1.0, math.floor(math.log2(scale)) - _GRID_BITS)


def snap_to_noise_grid(values: np.ndarray, scale: float) -> np.ndarray:
    """Round to the lattice of :func:`noise_grid_step` (``scale``): removes the low-order bits of a
    noisy release that could otherwise reveal the exact input (Mironov 2012). For noise that is not
    lattice-valued (colored noise), pass the smallest standard deviation in play."""
    step = noise_grid_step(scale)
    return np.round(np.asarray(values, dtype=float) / step) * step


def _opendp_noise(kind: str, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Exact Laplace/Gaussian noise from OpenDP on the lattice of :func:`noise_grid_step`."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    n = int(np.prod(shape))
    if n == 0 or scale == 0.0:
        return np.zeros(shape)
    k = math.floor(math.log2(noise_grid_step(scale)))
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n)
    if kind == "gaussian":
        meas = dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale, k=k)
    else:
        meas = dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=scale, k=k)
    return np.asarray(meas([0.0] * n), dtype=float).reshape(shape)


@dataclass(frozen=True)
class Noisy:
    """A noisy answer with the facts a manifest needs."""

    value: np.ndarray
    mechanism: str
    scale: float
    sampling_mode: SamplingMode


# ---------------------------------------------------------------- Laplace


def laplace_scale(l1_sensitivity: float, epsilon: float) -> float:
    """Laplace scale b = Delta_1 / eps (Dwork & Roth 2014; Zhu et al. 2017 Def. 2.6)."""
    b = _check_sensitivity(l1_sensitivity) / _check_epsilon(epsilon)
    if not math.isfinite(b):
        raise ParameterError(
            f"epsilon = {epsilon!r} is too small: the noise scale overflows. Use a larger epsilon."
        )
    return b


def laplace_mechanism(
    value: np.ndarray | float,
    l1_sensitivity: float,
    epsilon: float,
    random_state: int | Sampler | None = None,
) -> Noisy:
    """eps-DP for neighbours at L1 distance <= Delta_1: value + Laplace(Delta_1 / eps) per coordinate.

    >>> noisy = laplace_mechanism([10.0, 20.0], l1_sensitivity=1.0, epsilon=0.5)  # secure: OS entropy
    >>> noisy.scale, noisy.sampling_mode, noisy.value.shape
    (2.0, 'secure', (2,))
    """
    b = laplace_scale(l1_sensitivity, epsilon)
    random_state = check_random_state(random_state)
    return Noisy(random_state.privatize(value, "laplace", b), "laplace", b, random_state.mode)


# ---------------------------------------------------------------- Gaussian

# Relative margin kept below the target delta: the float profile below is accurate to about 1e-13
# relative (measured against 50-digit arithmetic), so a calibration that meets delta * (1 - 1e-11) in
# floating point meets delta exactly. It moves sigma by less than 1e-11 relative for delta <= 1e-2.
_DELTA_MARGIN = 1e-11
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(24)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_mills(z: np.ndarray | float) -> np.ndarray:
    """log M(z), M(z) = (1 - Phi(z)) / phi(z) the Mills ratio, accurate for every real z."""
    z = np.asarray(z, dtype=float)
    pos = np.log(math.sqrt(math.pi / 2) * special.erfcx(np.maximum(z, 0.0) / math.sqrt(2.0)))
    neg = special.log_ndtr(-np.minimum(z, 0.0)) + z * z / 2 + _LOG_SQRT_2PI
    return np.where(z >= 0, pos, neg)


def _log_mills_drop(z1: float, t: float) -> float:
    """log M(z1 + t) - log M(z1) <= 0; by Gauss-Legendre quadrature of (log M)' = z - 1/M(z) when the
    drop is small (where the plain difference would cancel), so it keeps ~1e-14 relative accuracy."""
    direct = float(_log_mills(z1 + t) - _log_mills(z1))
    if direct < -0.5:
        return direct
    z = z1 + t * (_GL_NODES + 1.0) / 2.0
    return -t / 2.0 * float(_GL_WEIGHTS @ (np.exp(-_log_mills(z)) - z))


def _log_analytic_delta(t: float, epsilon: float) -> float:
    """log delta(eps) of a Gaussian with ratio t = sensitivity / sigma (Balle & Wang 2018, Thm. 8).

    With z1 = eps/t - t/2, z2 = z1 + t and M the Mills ratio, e^eps phi(z2) = phi(z1), so
    delta = Phi(-z1) - e^eps Phi(-z2) = Phi(-z1) (1 - M(z2) / M(z1)): no cancellation between two
    nearly equal terms, even for small eps and delta.
    """
    if t <= 0 or not math.isfinite(epsilon / t):
        return -math.inf
    if math.isinf(t):
        return 0.0
    z1 = epsilon / t - t / 2
    return float(special.log_ndtr(-z1)) + math.log(-math.expm1(_log_mills_drop(z1, t)))


def analytic_delta(ratio: float, epsilon: float) -> float:
    """delta achieved by a Gaussian with sensitivity/sigma = ratio at eps (Balle & Wang 2018, Thm. 8).

    delta(t) = Phi(t/2 - eps/t) - e^eps Phi(-t/2 - eps/t), evaluated stably (about 1e-13 relative).
    """
    return math.exp(_log_analytic_delta(float(ratio), float(epsilon)))


def _analytic_ratio(epsilon: float, delta: float) -> float:
    """Largest t with delta(t) <= delta (delta(t) increases with t), to the float just below the root
    of delta(t) = delta (1 - margin), so that rounding never puts the calibration above delta."""
    target = math.log(delta) + math.log1p(-_DELTA_MARGIN)

    def gap(log_t: float) -> float:
        return max(_log_analytic_delta(math.exp(log_t), epsilon), -1e6) - target

    lo, hi = -10.0, 10.0
    while gap(lo) > 0:
        lo -= 10.0
    while gap(hi) < 0:
        hi += 10.0
    t = math.exp(optimize.brentq(gap, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500))
    while _log_analytic_delta(t, epsilon) > target:
        t = math.nextafter(t, 0.0)
    return t


def _checked_formula(name: str, ratio: float, epsilon: float, delta: float) -> float:
    """The ratio of a closed-form calibration, refused where its exact delta exceeds the target."""
    if _log_analytic_delta(ratio, epsilon) > math.log(delta) + math.log1p(-_DELTA_MARGIN):
        raise ParameterError(
            f"the {name} Gaussian calibration misses delta at eps = {epsilon:g}, delta = {delta:g}: its "
            f"noise spends delta = {analytic_delta(ratio, epsilon):.3g} (exact accounting, Balle & Wang "
            "2018). Use the analytic calibration, which is exact at every (eps, delta)."
        )
    return ratio


def pdp_tail(ratio: float, epsilon: float) -> float:
    """Pr[privacy loss > eps] = Phi(t/2 - eps/t) for a Gaussian with ratio t = sensitivity / sigma (the
    loss is N(t^2/2, t^2)): the delta of (eps, delta)-PDP (Machanavajjhala et al. 2008), never below the
    (eps, delta)-DP delta of Balle & Wang 2018."""
    return math.exp(_log_pdp_tail(float(ratio), float(epsilon)))


def _log_pdp_tail(t: float, epsilon: float) -> float:
    return float(special.log_ndtr(t / 2 - epsilon / t))


def _checked_pdp(ratio: float, epsilon: float, delta: float) -> float:
    """The paper's ratio, refused where its PDP tail Phi(t/2 - eps/t) exceeds delta: what it is used for
    (Ravi et al. 2021 state (eps, delta)-PDP), and the tail bounds the DP delta too."""
    if _log_pdp_tail(ratio, epsilon) > math.log(delta) + math.log1p(-_DELTA_MARGIN):
        raise ParameterError(
            f"the paper Gaussian calibration is not (eps, delta)-PDP at eps = {epsilon:g}, "
            f"delta = {delta:g}: its privacy loss exceeds eps with probability Phi(t/2 - eps/t) = "
            f"{pdp_tail(ratio, epsilon):.3g} > delta. Use the analytic calibration (an (eps, delta) bound, "
            "exact at every (eps, delta)) or a smaller eps."
        )
    return ratio


def gaussian_ratio(epsilon: float, delta: float, calibration: Calibration = "analytic") -> float:
    """s*(eps, delta): the largest sensitivity-to-sigma ratio the calibration admits (gamma = s*^2).

    Raises ParameterError where a closed-form calibration would not meet delta by the exact profile (the
    paper's: by its PDP tail, :func:`pdp_tail`).
    """
    eps = _check_epsilon(epsilon)
    dlt = _check_delta(delta)
    if calibration == "analytic":
        return _analytic_ratio(eps, dlt)
    if calibration == "paper":
        return _checked_pdp(eps / math.sqrt(2.0 * math.log(2.0 / dlt)), eps, dlt)
    if calibration == "classic":
        if eps >= 1.0:
            raise ParameterError(
                f"the classic Gaussian calibration is valid only for epsilon < 1 (got {eps:g}); "
                "use the analytic calibration instead."
            )
        return _checked_formula("classic", eps / math.sqrt(2.0 * math.log(1.25 / dlt)), eps, dlt)
    raise ParameterError(f"unknown calibration {calibration!r}; use one of {sorted(CALIBRATIONS)}.")


def gaussian_sigma(
    l2_sensitivity: float, epsilon: float, delta: float, calibration: Calibration = "analytic"
) -> float:
    """sigma = Delta_2 / s*(eps, delta) for the chosen calibration.

    >>> round(gaussian_sigma(1.0, epsilon=1.0, delta=1e-5), 4)  # analytic: below the classic form's 4.84
    3.7306
    >>> gaussian_sigma(1.0, epsilon=1.0, delta=1e-5, calibration="classic")
    Traceback (most recent call last):
    ...
    dpcore.errors.ParameterError: the classic Gaussian calibration is valid only for epsilon < 1 (got 1); ...
    """
    sigma = _check_sensitivity(l2_sensitivity) / gaussian_ratio(epsilon, delta, calibration)
    if not math.isfinite(sigma):
        raise ParameterError(
            f"epsilon = {epsilon!r} is too small: the noise scale overflows. Use a larger epsilon."
        )
    return sigma


def gaussian_mechanism(
    value: np.ndarray | float,
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    random_state: int | Sampler | None = None,
    calibration: Calibration = "analytic",
) -> Noisy:
    """(eps, delta)-DP for neighbours at L2 distance <= Delta_2: value + N(0, sigma^2 I)."""
    sigma = gaussian_sigma(l2_sensitivity, epsilon, delta, calibration)
    random_state = check_random_state(random_state)
    return Noisy(
        random_state.privatize(value, "gaussian", sigma),
        f"gaussian ({calibration})",
        sigma,
        random_state.mode,
    )


# ---------------------------------------------------------------- exponential mechanism


def exponential_probabilities(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """Pr[r] proportional to exp(eps q(r) / (2 Delta_q)) (Zhu et al. 2017 Def. 2.8), computed stably."""
    eps = _check_epsilon(epsilon)
    sens = _check_sensitivity(sensitivity)
    if sens == 0:
        raise ParameterError("the score sensitivity must be > 0 for the exponential mechanism.")
    q = np.asarray(scores, dtype=float)
    if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)):
        raise ParameterError("scores must be a non-empty 1-D array of finite numbers.")
    logits = eps * q / (2.0 * sens)
    return special.softmax(logits)


def exponential_mechanism(
    scores: np.ndarray, epsilon: float, sensitivity: float, random_state: int | Sampler | None = None
) -> int:
    """eps-DP selection of an index for neighbours that move each score by at most Delta_q."""
    p = exponential_probabilities(scores, epsilon, sensitivity)
    random_state = check_random_state(random_state)
    return int(random_state.rng.choice(p.size, p=p))


# ---------------------------------------------------------------- randomized response


def randomized_response(
    bits: np.ndarray, epsilon: float, random_state: int | Sampler | None = None
) -> np.ndarray:
    """eps-local-DP for one bit per person: report truthfully with p = e^eps / (1 + e^eps), else flip."""
    b = np.asarray(bits)
    if not np.isin(b, (0, 1)).all():
        raise ParameterError("randomized response takes bits: every value must be 0 or 1.")
    p = float(special.expit(_check_epsilon(epsilon)))
    keep = check_random_state(random_state).rng.random(b.shape) < p
    return np.where(keep, b, 1 - b).astype(int)


def rr_estimate(responses: np.ndarray, epsilon: float) -> float:
    """Unbiased estimate of the true share of ones: (mean - (1 - p)) / (2p - 1) (Dwork & Roth 2014 s.3.2)."""
    p = float(special.expit(_check_epsilon(epsilon)))
    lam = float(np.mean(np.asarray(responses, dtype=float)))
    return (lam - (1.0 - p)) / (2.0 * p - 1.0)
