"""The bounded confidence sequences, exact at every t for observations in known bounds [a, b] (Waudby-Smith &
Ramdas 2023): predictable plug-in empirical Bernstein (``eb_cs``) and betting (``betting_cs``). Why and when:
``measure/sequential.py``."""

from __future__ import annotations

import math

import numpy as np

from infoeval.measure.cs_mixture import _check


# ---- the bounded CS (predictable plug-in empirical Bernstein) ----------------------------------------------
def _eb_lower(x: np.ndarray, alpha: float, trunc: float, t_opt: float | None, population: int | None) -> np.ndarray:
    """PrPl-EB lower CS at level α for x in [0, 1] (one-sided: ln(1/α)); WSR 2023 Theorem 2 / Section 6."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    s = np.cumsum(x, axis=-1)
    mu = (0.5 + s) / (t + 1.0)  # μ̂_t, regularized towards 1/2
    mu_prev = np.concatenate((np.full(x.shape[:-1] + (1,), 0.5), mu[..., :-1]), axis=-1)  # μ̂_{t−1}
    var = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1.0)  # σ̂²_t, regularized towards 1/4
    var_prev = np.concatenate((np.full(x.shape[:-1] + (1,), 0.25), var[..., :-1]), axis=-1)
    log_a = math.log(1.0 / alpha)
    scale = t * np.log1p(t) if t_opt is None else np.full_like(t, float(t_opt))
    lam = np.minimum(np.sqrt(2.0 * log_a / (var_prev * scale)), trunc)  # λ_t, predictable
    v = 4.0 * (x - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4.0  # ψ_E(λ)
    if population is None:
        z = w = 0.0
    else:
        if population < x.shape[-1]:
            raise ValueError(f"population {population} < {x.shape[-1]} observations")
        s_prev = s - x
        z = s_prev / (population - t + 1.0)  # without replacement: the drawn part's shift of the conditional mean
        w = (t - 1.0) / (population - t + 1.0)
    den = np.cumsum(lam * (1.0 + w), axis=-1)
    centre = np.cumsum(lam * (x + z), axis=-1) / den
    margin = (log_a + np.cumsum(v * psi, axis=-1)) / den
    return np.clip(centre - margin, 0.0, 1.0)


def eb_cs(
    x: np.ndarray,
    alpha: float = 0.05,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    side: str = "both",
    trunc: float = 0.5,
    t_opt: float | None = None,
    population: int | None = None,
    running_intersection: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The predictable plug-in empirical-Bernstein CS (Waudby-Smith & Ramdas 2023) for the mean of a stream
    with values in ``bounds`` = [a, b] (last axis = time). Non-asymptotic: P(∃t: μ ∉ (L_t, U_t)) ≤ α exactly,
    for independent observations with a common mean, or (with ``population=N``) for draws without
    replacement from N fixed values, the target then being their mean.

    On y = (x − a)/(b − a) ∈ [0, 1]: μ̂_t = (½ + Σy)/(t+1), σ̂²_t = (¼ + Σ(y_i − μ̂_i)²)/(t+1),
    λ_t = min(√(2 ln(1/α') / (σ̂²_{t−1} · t ln(1+t))), trunc) (or t_opt in place of t ln(1+t)),
    v_t = 4(y_t − μ̂_{t−1})², ψ_E(λ) = (−ln(1−λ) − λ)/4, and the bound
    Σλ_i y_i / Σλ_i ∓ (ln(1/α') + Σ v_i ψ_E(λ_i)) / Σλ_i, with α' = α/2 for each side of a two-sided CS and
    α' = α for a one-sided one. The upper bound is 1 − (lower bound of 1 − y). Clipped to [a, b], so it never
    leaves the bounds. A constant stream gives an interval around the constant that shrinks like (ln t)/t.

    >>> lo, hi = eb_cs(np.full(50, 0.9))
    >>> round(float(lo[-1]), 3), float(hi[-1])  # trunc = ½ caps how fast it can shrink
    (0.75, 1.0)
    """
    _check(alpha, side)
    a, b = float(bounds[0]), float(bounds[1])
    if not b > a:
        raise ValueError(f"bounds must have b > a, got {bounds}")
    y = (np.asarray(x, dtype=np.float64) - a) / (b - a)
    if np.any(y < -1e-12) or np.any(y > 1.0 + 1e-12):
        raise ValueError(f"observations outside the bounds {bounds}")
    y = np.clip(y, 0.0, 1.0)
    level = alpha / 2.0 if side == "both" else alpha
    lower = _eb_lower(y, level, trunc, t_opt, population) if side != "upper" else np.zeros_like(y)
    upper = 1.0 - _eb_lower(1.0 - y, level, trunc, t_opt, population) if side != "lower" else np.ones_like(y)
    if running_intersection:
        lower, upper = np.maximum.accumulate(lower, axis=-1), np.minimum.accumulate(upper, axis=-1)
    return a + (b - a) * lower, a + (b - a) * upper


def _predictable_lambda(y: np.ndarray, log_a: float, t_opt: float | None) -> np.ndarray:
    """WSR 2023's PrPl bet size √(2 ln(1/α') / (σ̂²_{t−1} · t ln(1+t))), σ̂² regularized as in ``eb_cs``."""
    t = np.arange(1, y.shape[-1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(y, axis=-1)) / (t + 1.0)
    var = (0.25 + np.cumsum((y - mu) ** 2, axis=-1)) / (t + 1.0)
    var_prev = np.concatenate((np.full(y.shape[:-1] + (1,), 0.25), var[..., :-1]), axis=-1)
    scale = t * np.log1p(t) if t_opt is None else np.full_like(t, float(t_opt))
    return np.sqrt(2.0 * log_a / (var_prev * scale))


def betting_log_capital(
    x: np.ndarray,
    m: float | np.ndarray,
    alpha: float = 0.05,
    *,
    direction: str = "up",
    bounds: tuple[float, float] = (0.0, 1.0),
    trunc: float = 0.5,
    t_opt: float | None = None,
) -> np.ndarray:
    """ln K_t(m), the wealth of Waudby-Smith & Ramdas's (2023, Section 4) betting strategy against the mean
    being m, along the last axis of ``x`` (values in ``bounds``). direction "up" bets that the mean is above m:
    K_t = Π(1 + λ_i (y_i − m)), λ_i = min(λ̇_i, trunc/m); "down" bets it is below: Π(1 − λ_i (y_i − m)),
    λ_i = min(λ̇_i, trunc/(1−m)) (y, m rescaled to [0, 1]; λ̇ the predictable plug-in bet, level ``alpha``).
    If the mean is ≤ m ("up") or ≥ m ("down") this is a non-negative supermartingale, so by Ville's inequality
    P(∃t: K_t ≥ 1/α) ≤ α: a sequential test at the limit itself, e.g. a gate "top-1 ≥ L" may PASS as soon as
    the "up" capital at m = L reaches 1/α. ``m`` may be an array broadcasting against x[..., None]'s shape
    without the time axis (a grid: ``betting_cs``).

    >>> x = np.full(20, 0.9)
    >>> bool(betting_log_capital(x, 0.5)[-1] > np.log(20)), bool(betting_log_capital(x, 0.95)[-1] > 0)
    (True, False)
    """
    a, b = float(bounds[0]), float(bounds[1])
    y = (np.asarray(x, dtype=np.float64) - a) / (b - a)
    mm = (np.asarray(m, dtype=np.float64) - a) / (b - a)
    if np.any((mm <= 0) | (mm >= 1)):
        raise ValueError("m must lie strictly inside the bounds")
    lam_dot = _predictable_lambda(y, math.log(1.0 / alpha), t_opt)
    mm = mm[..., None]
    if direction == "up":
        lam = np.minimum(lam_dot, trunc / mm)
        steps = np.log1p(lam * (y - mm))
    elif direction == "down":
        lam = np.minimum(lam_dot, trunc / (1.0 - mm))
        steps = np.log1p(-lam * (y - mm))
    else:
        raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
    return np.cumsum(steps, axis=-1)


def betting_cs(
    x: np.ndarray,
    alpha: float = 0.05,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    side: str = "both",
    trunc: float = 0.5,
    t_opt: float | None = None,
    grid: int = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """The betting confidence sequence (WSR 2023, Theorem 3, hedged capital with θ = ½) for a 1-D stream with
    values in ``bounds``: lower_t = the largest grid point below which every grid m has "up" capital ≥ 1/α'
    (α' = α/2 per side for a two-sided CS, α one-sided), and the mirror image for upper_t. The grid is
    ``grid`` points strictly inside the bounds; the bound reported is the last *rejected* grid point, so
    rounding only widens it. Tighter than ``eb_cs`` when the window means sit near a bound; O(grid · t).

    >>> lo, hi = betting_cs(np.tile([0.85, 0.95], 32))
    >>> 0.7 < float(lo[-1]) < 0.9 < float(hi[-1]) < 1.0
    True
    """
    _check(alpha, side)
    a, b = float(bounds[0]), float(bounds[1])
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError("betting_cs takes one stream (a 1-D array)")
    level = math.log((2.0 if side == "both" else 1.0) / alpha)
    ms = a + (b - a) * np.arange(1, grid) / grid
    opts = {"alpha": alpha / 2.0 if side == "both" else alpha, "bounds": bounds, "trunc": trunc, "t_opt": t_opt}
    lower = np.full(x.shape, a)
    upper = np.full(x.shape, b)
    if side != "upper":
        rejected = betting_log_capital(x, ms, direction="up", **opts) >= level  # (grid−1, t)
        run = np.cumprod(rejected, axis=0).astype(bool)  # rejected together with every smaller m
        count = run.sum(axis=0)
        lower = np.where(count > 0, ms[np.maximum(count - 1, 0)], a)
    if side != "lower":
        rejected = betting_log_capital(x, ms, direction="down", **opts) >= level
        run = np.cumprod(rejected[::-1], axis=0).astype(bool)
        count = run.sum(axis=0)
        upper = np.where(count > 0, ms[::-1][np.maximum(count - 1, 0)], b)
    return lower, upper
