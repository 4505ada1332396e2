"""Aggregates of per-position numbers: mean ± standard error, quantiles, Pinsker's check, Pearson's r, and
Pearson's χ² goodness-of-fit test; the one ``LN2`` (nats → bits).

Standard errors treat positions as independent (as llama.cpp does); neighbouring positions are correlated, so
the true uncertainty is somewhat larger. Quantiles interpolate linearly between order statistics (NumPy's
default).
"""

from __future__ import annotations

import math

import numpy as np

LN2 = math.log(2.0)
PINSKER_TOL = 1e-6  # nats: float32 rounding of KL summed over a 49k vocabulary is ~1e-7


def se(x: np.ndarray) -> float:
    """Standard error of the mean, sd/√n (NaN for n < 2).

    >>> round(se(np.array([1.0, 2.0, 3.0])), 4)
    0.5774
    """
    return float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")


def quantile(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q))


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error sd/√n (positions treated as independent; NaN SE for n < 2)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    se = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def pinsker(tv: np.ndarray, kl: np.ndarray, tol: float = PINSKER_TOL) -> dict:
    """Check TV ≤ √(KL/2) at every position, as 2·TV² ≤ KL + tol (tol absorbs float32 rounding of KL).

    Returns the number of violations, the tolerance, and the largest ratio TV / √(KL/2) among positions with
    KL > 1e-4 (how tight the bound gets; ≤ 1 always).

    >>> pinsker(np.array([0.4]), np.array([0.5108]))["violations"]
    0
    """
    tv = np.asarray(tv, dtype=np.float64)
    kl = np.asarray(kl, dtype=np.float64)
    bad = 2.0 * tv**2 > kl + tol
    big = kl > 1e-4
    ratio = float((tv[big] / np.sqrt(kl[big] / 2.0)).max()) if big.any() else float("nan")
    return {"violations": int(bad.sum()), "checked": int(tv.size), "tol_nats": tol, "max_ratio": ratio}


def pearson(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Pearson correlation r of x and y and the number of pairs n (NaN when either is constant or n < 2).

    >>> pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 7.0]))[0]  # doctest: +ELLIPSIS
    0.9933...
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = int(x.size)
    if n < 2:
        return float("nan"), n
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return (float((dx * dy).sum()) / den if den > 0 else float("nan")), n


def chi2_sf(stat: float, df: int) -> float:
    """P(χ²_df ≥ stat) = Q(df/2, stat/2), the regularized upper incomplete gamma function (torch.special.gammaincc).

    >>> round(chi2_sf(3.841458820694124, 1), 6)  # the 95th percentile of χ²₁
    0.05
    """
    if df < 1:
        return float("nan")  # a single cell: nothing to test
    if not math.isfinite(stat):
        return 0.0
    import torch  # here, so that the aggregates (and the no-torch reports that read them) load without torch

    q = torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64))
    return float(q)


def chi_square(observed: np.ndarray, probs: np.ndarray) -> dict:
    """Pearson's goodness-of-fit test of counts ``observed`` against cell probabilities ``probs`` (summing to 1):
    χ² = Σ (O − E)² / E with E = N·prob, df = cells − 1, p = P(χ²_df ≥ χ²). A cell with E = 0 and O > 0 gives
    χ² = ∞ and p = 0.

    >>> r = chi_square(np.array([30, 70]), np.array([0.5, 0.5]))
    >>> r["stat"], r["df"], round(r["p_value"], 6)  # (30−50)²/50 · 2 = 16
    (16.0, 1, 6.3e-05)
    """
    o = np.asarray(observed, dtype=np.float64)
    e = np.asarray(probs, dtype=np.float64) * o.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(e > 0, (o - e) ** 2 / np.where(e > 0, e, 1.0), np.where(o > 0, np.inf, 0.0))
    stat = float(terms.sum())
    df = int(o.size - 1)
    return {"stat": stat, "df": df, "p_value": chi2_sf(stat, df)}
