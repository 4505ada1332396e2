"""The mixture confidence sequences for an unbounded mean: Robbins' normal mixture with the running variance
(``asymptotic_cs``) and Lai's t-mixture (``t_mixture_cs``, the gate's CS for mean KL and Δ ln PPL). Why these, and
their assumptions: ``measure/sequential.py``."""

from __future__ import annotations

import math

import numpy as np

SIDES = ("both", "lower", "upper")


def _check(alpha: float, side: str) -> None:
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")


# ---- the asymptotic CS (normal mixture) ---------------------------------------------------------------------
def normal_mixture_rho(t_opt: float, alpha: float) -> float:
    """The mixture's ρ (in units of 1/σ) that makes the two-sided boundary tightest near t = t_opt:
    ρ = √((−2 ln α + ln(1 − 2 ln α)) / t_opt) (Waudby-Smith et al. 2024, after Theorem 2.2; it is the first
    fixed-point step of the exact optimum u = ln(u+1) − 2 ln α, u = t ρ²).

    >>> round(normal_mixture_rho(32, 0.05), 4)
    0.498
    """
    if t_opt <= 0:
        raise ValueError(f"t_opt must be > 0, got {t_opt}")
    c = -2.0 * math.log(alpha)
    return math.sqrt((c + math.log(c + 1.0)) / t_opt)


def _two_sided_u(t: np.ndarray, rho: float, alpha: float) -> np.ndarray:
    """Robbins' two-sided normal-mixture boundary for a standardized sum S_t (variance t): the mixture
    ∫ exp(λS − λ²t/2) dN(0, ρ²)(λ) = exp(ρ²S²/(2(1+ρ²t))) / √(1+ρ²t) reaches 1/α at |S| = u(t), where
    u(t)² = 2(1+ρ²t)/ρ² · ln(√(1+ρ²t)/α). Ville's inequality: P(∃t: |S_t| ≥ u(t)) ≤ α."""
    a = 1.0 + rho * rho * t
    return np.sqrt(2.0 * a / (rho * rho) * np.log(np.sqrt(a) / alpha))


def _log_ndtr_pos(z: np.ndarray) -> np.ndarray:
    """ln Φ(z) for z ≥ 0, via erfc (Numerical Recipes' Chebyshev erfcc, relative error < 1.2e-7)."""
    x = np.abs(z) / math.sqrt(2.0)
    s = 1.0 / (1.0 + 0.5 * x)
    poly = (
        -x * x
        - 1.26551223
        + s
        * (
            1.00002368
            + s
            * (
                0.37409196
                + s
                * (
                    0.09678418
                    + s
                    * (
                        -0.18628806
                        + s * (0.27886807 + s * (-1.13520398 + s * (1.48851587 + s * (-0.82215223 + s * 0.17087277))))
                    )
                )
            )
        )
    )
    erfc = s * np.exp(poly)
    return np.log1p(-0.5 * erfc)


def _one_sided_u(t: np.ndarray, rho: float, alpha: float) -> np.ndarray:
    """The one-sided normal-mixture boundary (Howard et al. 2021, the half-normal mixture over λ > 0):
    M = 2/√(1+ρ²t) · exp(ρ²S²/(2(1+ρ²t))) · Φ(ρS/√(1+ρ²t)) reaches 1/α at S = u(t), P(∃t: S_t ≥ u(t)) ≤ α.
    No closed form: bisection between the two-sided boundaries at 2α (below it M ≤ 1/α) and at α (above)."""
    a = 1.0 + rho * rho * t
    lo = _two_sided_u(t, rho, 2.0 * alpha)
    hi = _two_sided_u(t, rho, alpha)
    target = math.log(1.0 / alpha) - math.log(2.0) + 0.5 * np.log(a)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        g = rho * rho * mid * mid / (2.0 * a) + _log_ndtr_pos(rho * mid / np.sqrt(a)) - target
        up = g >= 0
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return hi


def asymptotic_radius(
    t: np.ndarray, sd: np.ndarray, alpha: float = 0.05, t_opt: float = 32, side: str = "both"
) -> np.ndarray:
    """The half-width of the asymptotic CS after t observations with running sd ``sd``:
    sd · u(t)/t, with u the normal-mixture boundary for a standardized sum (two-sided, or one-sided for
    ``side`` = "lower"/"upper"), ρ = ``normal_mixture_rho(t_opt, alpha)``.

    This is Waudby-Smith et al.'s √(2(tσ̂²ρ²+1)/(t²ρ²) · ln(√(tσ̂²ρ²+1)/α)) with their ρ measured in units of
    1/σ̂ (ρ_theirs = ρ/σ̂): the same CS when σ̂ = 1, and scale-equivariant otherwise (KL in nats, bits or per
    mille gives the same decisions), which a fixed ρ in the metric's units is not.

    >>> round(float(asymptotic_radius(np.array(32), np.array(1.0))), 4)  # vs 1.96/√32 = 0.3465 for a fixed-t CI
    0.5366
    >>> round(float(asymptotic_radius(np.array(32), np.array(1.0), side="upper")), 4)  # vs 1.645/√32 = 0.2908
    0.4893
    """
    _check(alpha, side)
    t = np.asarray(t, dtype=np.float64)
    rho = normal_mixture_rho(t_opt, alpha)
    u = _two_sided_u(t, rho, alpha) if side == "both" else _one_sided_u(t, rho, alpha)
    return np.asarray(sd, dtype=np.float64) * u / t


def running_mean_sd(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running mean and running sd (ddof = 1; NaN at t = 1) along the last axis, by cumulative sums of x − x₁
    (shift-invariant, so a constant stream has sd exactly 0)."""
    x = np.asarray(x, dtype=np.float64)
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    y = x - x[..., :1]
    s1 = np.cumsum(y, axis=-1)
    s2 = np.cumsum(y * y, axis=-1)
    mean = s1 / t
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(t > 1, np.maximum(s2 - t * mean * mean, 0.0) / np.maximum(t - 1.0, 1.0), np.nan)
    return mean + x[..., :1], np.sqrt(var)


def asymptotic_cs(
    x: np.ndarray,
    alpha: float = 0.05,
    *,
    t_opt: float = 32,
    side: str = "both",
    min_windows: int = 8,
    running_intersection: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The asymptotic confidence sequence for the mean of the stream ``x`` (last axis = time): after each
    observation t, (lower_t, upper_t) = x̄_t ∓ σ̂_t · u(t)/t (``asymptotic_radius``).

    side: "both" — a two-sided CS at level α; "upper" — only an upper bound, P(∃t: U_t < μ) ≤ α (lower = −∞);
    "lower" — only a lower bound. For a gate limit use one side per decision (see ``gate_decisions``).
    min_windows: before this many observations the interval is (−∞, ∞): the coverage is asymptotic, and a
    variance from the first few windows is too often far too small (the simulation in the tests fixes
    the default, 8). t_opt: the time at which the CS is tightest (e.g. half the gate's window budget); any fixed
    value is valid, it only moves the width between early and late times. It must not depend on the data.
    running_intersection: intersect with all earlier intervals (still a CS; never wider).

    A constant stream has σ̂ = 0: the interval is the point (c, c), which is right (the mean is c).

    >>> lo, hi = asymptotic_cs(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), min_windows=5)
    >>> bool(np.isinf(lo[:4]).all()), round(float(lo[-1]), 3), round(float(hi[-1]), 3)
    (True, 0.905, 6.095)
    """
    _check(alpha, side)
    if min_windows < 2:
        raise ValueError(f"min_windows must be ≥ 2 (one window has no variance), got {min_windows}")
    x = np.asarray(x, dtype=np.float64)
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean, sd = running_mean_sd(x)
    r = np.where(t >= min_windows, asymptotic_radius(t, np.nan_to_num(sd), alpha, t_opt, side), np.inf)
    lower = mean - r if side != "upper" else np.full_like(mean, -np.inf)
    upper = mean + r if side != "lower" else np.full_like(mean, np.inf)
    if running_intersection:
        lower, upper = np.maximum.accumulate(lower, axis=-1), np.minimum.accumulate(upper, axis=-1)
    return lower, upper


def t_mixture_radius(t: np.ndarray, sd: np.ndarray, alpha: float = 0.05, t_opt: float = 32) -> np.ndarray:
    """Half-width of Lai's (1976) t-mixture CS after t observations with running sd ``sd`` (ddof = 1).

    For Gaussian observations with unknown mean and variance, mix the standardized effect δ = (μ − μ₀)/σ over
    N(0, 1/c²) and σ over the right Haar measure dσ/σ; the ratio of the scale-invariant likelihoods is the
    martingale (under μ₀) M_t = c/√(t+c²) · (A / (A − B²/(t+c²)))^{t/2}, A = Σ(x_i−μ₀)², B = Σ(x_i−μ₀)
    (Lai 1976; Wang & Ramdas 2023 discuss it as "Lai's t-CS"; checked by quadrature in the tests). Ville's
    inequality gives P(∃t: M_t ≥ 1/α) ≤ α, and solving M_t < 1/α for μ₀ with A = Q + t·d², B = t·d
    (d = x̄ − μ₀, Q = (t−1)·sd²) gives |d| < √((k−1)Q / (t(1 − k c²/(t+c²)))), k = exp(2 ln(√((t+c²)/c²)/α)/t);
    infinite while the denominator is ≤ 0 (the first few observations say nothing). c = 1/ρ with ρ =
    ``normal_mixture_rho(t_opt, alpha)``: as t grows, sd → σ and this tends to the normal-mixture radius of
    ``asymptotic_radius`` (so it is an asymptotic CS in Waudby-Smith et al.'s sense for any law with finite
    variance), while for Gaussian data it is exact at every t, which the plug-in σ̂ of ``asymptotic_cs`` is not.

    >>> r = t_mixture_radius(np.arange(1, 65), np.ones(64))
    >>> int(np.isinf(r).sum()), round(float(r[31]), 4), round(float(asymptotic_radius(np.array(32), 1.0)), 4)
    (6, 0.5744, 0.5366)
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    t = np.asarray(t, dtype=np.float64)
    sd = np.asarray(sd, dtype=np.float64)
    c2 = 1.0 / normal_mixture_rho(t_opt, alpha) ** 2
    k = np.exp((2.0 * math.log(1.0 / alpha) + np.log((t + c2) / c2)) / t)
    den = t * (1.0 - k * c2 / (t + c2))
    q = np.where(t > 1, (t - 1.0) * np.nan_to_num(sd) ** 2, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.sqrt((k - 1.0) * q / np.where(den > 0, den, 1.0))
    return np.where(den > 0, r, np.inf)


def t_mixture_cs(
    x: np.ndarray, alpha: float = 0.05, *, t_opt: float = 32, side: str = "both", running_intersection: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Lai's t-mixture confidence sequence for the mean of the stream ``x`` (last axis = time):
    x̄_t ∓ ``t_mixture_radius``. The recommended CS for unbounded metrics (mean KL, Δ ln PPL): exact for
    Gaussian window means, asymptotically the normal-mixture CS for any finite-variance law, and, unlike
    ``asymptotic_cs``, it needs no burn-in rule (it is (−∞, ∞) until the data can say something: t ≤ 6 at
    α = 0.05, t_opt = 32).

    side "upper"/"lower" keeps one bound of the two-sided CS at level α (the other is ±∞): each one alone then
    errs with probability ≤ α, conservatively (the mixture is symmetric in δ; a one-sided half-normal mixture
    would be a little tighter but has no closed form here). The simulation in the tests checks its false-PASS
    rate on skewed laws up to 64 windows.

    >>> lo, hi = t_mixture_cs(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]))
    >>> bool(np.isinf(lo[:6]).all()), round(float(lo[-1]), 3), round(float(hi[-1]), 3)
    (True, -1.815, 10.815)
    >>> t_mixture_cs(np.full(8, 2.5))[1][-1]  # a constant stream: the point 2.5
    np.float64(2.5)
    """
    _check(alpha, side)
    x = np.asarray(x, dtype=np.float64)
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean, sd = running_mean_sd(x)
    r = t_mixture_radius(t, sd, alpha, t_opt)
    lower = mean - r if side != "upper" else np.full_like(mean, -np.inf)
    upper = mean + r if side != "lower" else np.full_like(mean, np.inf)
    if running_intersection:
        lower, upper = np.maximum.accumulate(lower, axis=-1), np.minimum.accumulate(upper, axis=-1)
    return lower, upper
