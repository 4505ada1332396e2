"""Pure power-law fitting: I(L) ≈ A·L^β by least squares in log-log space, and a bootstrap CI for β.

The fit is ordinary least squares of ln I on ln L (every length weighs the same):

    β = Σ (u − ū)(v − v̄) / Σ (u − ū)²,   ln A = v̄ − β ū,   u = ln L, v = ln I.

Worked example: I(16) = 12, I(64) = 24 (I = 3·√L) gives β = ln(24/12) / ln(64/16) = 0.5 and A = 12 / 16^0.5 = 3.

The confidence interval for β resamples the *blocks* with replacement, recomputes each length's mean and
refits; the interval is the central ``level`` quantile range of the replicate slopes (percentile bootstrap).
When every length has the same number of blocks, block k of every length is taken to cover the same stretch of
text (as ``mutual_info`` cuts them), so one draw of block indices serves all lengths (*paired*): the lengths'
means move together, as they do when a different text is sampled. Otherwise each length is resampled on its own.
A replicate in which some fitted length's mean is not positive cannot be fitted in log space and is dropped;
the number used is reported. The generator is seeded, so the interval is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infoeval.errors import DataError, spell


@dataclass(frozen=True)
class PowerLaw:
    """I(L) ≈ a · L^beta; r2 is the coefficient of determination of the log-log fit."""

    a: float
    beta: float
    r2: float

    def __call__(self, length: float | np.ndarray) -> float | np.ndarray:
        return self.a * np.asarray(length, dtype=float) ** self.beta


def _slopes(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Least-squares slopes of v on u along the last axis; u: (k,), v: (..., k)."""
    du = u - u.mean()
    return ((v - v.mean(-1, keepdims=True)) * du).sum(-1) / (du * du).sum()


def fit_power_law(lengths: Sequence[float], values: Sequence[float]) -> PowerLaw:
    """Least squares of ln(value) on ln(length); needs ≥ 2 distinct lengths and positive values.

    >>> f = fit_power_law([16, 64], [12.0, 24.0])
    >>> round(f.a, 6), round(f.beta, 6)
    (3.0, 0.5)
    """
    x = np.asarray(lengths, dtype=float)
    y = np.asarray(values, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("lengths and values must be 1-D and of the same size")
    if np.unique(x).size < 2:
        raise DataError("a power-law fit needs at least two different lengths")
    if np.any(x <= 0) or np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise DataError("a power-law fit in log-log space needs positive lengths and positive values")
    u, v = np.log(x), np.log(y)
    beta = float(_slopes(u, v))
    ln_a = float(v.mean() - beta * u.mean())
    resid = v - (ln_a + beta * u)
    ss_tot = float(((v - v.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return PowerLaw(math.exp(ln_a), beta, r2)


@dataclass(frozen=True)
class BetaInterval:
    low: float
    high: float
    se: float  # standard deviation of the replicate slopes
    level: float
    replicates: int  # asked for
    used: int  # replicates whose means were all positive
    seed: int
    paired: bool  # one draw of block indices for all lengths


def bootstrap_beta(
    lengths: Sequence[float], samples: Sequence[np.ndarray], replicates: int = 1000, seed: int = 0, level: float = 0.95
) -> BetaInterval:
    """Percentile-bootstrap interval for β: resample each length's per-block values with replacement.

    ``samples[i]`` holds the per-block values (e.g. bits of mutual information) of ``lengths[i]``.
    """
    if not 0 < level < 1:
        raise ValueError("level must be between 0 and 1")
    if replicates < 2:
        raise DataError(f"{spell('bootstrap')} {replicates} is too few; give at least 2 replicates")
    if len(lengths) != len(samples) or len(lengths) < 2:
        raise DataError("the bootstrap needs per-block values for at least two lengths")
    rng = np.random.default_rng(seed)
    samples = [np.asarray(s, dtype=float) for s in samples]
    if any(s.size < 1 for s in samples):
        raise DataError("every length needs at least one block to resample")
    paired = len({s.size for s in samples}) == 1
    shared = rng.integers(0, samples[0].size, size=(replicates, samples[0].size)) if paired else None
    means = np.empty((replicates, len(lengths)))
    for j, s in enumerate(samples):
        idx = shared if paired else rng.integers(0, s.size, size=(replicates, s.size))
        means[:, j] = s[idx].mean(1)
    ok = (means > 0).all(1)
    used = int(ok.sum())
    if used < 2:
        raise DataError("fewer than two bootstrap replicates had positive means at every length; the CI is undefined")
    betas = _slopes(np.log(np.asarray(lengths, dtype=float)), np.log(means[ok]))
    tail = (1 - level) / 2
    low, high = np.quantile(betas, [tail, 1 - tail])
    return BetaInterval(float(low), float(high), float(betas.std(ddof=1)), level, replicates, used, seed, paired)


def fit_with_ci(
    lengths: Sequence[int], samples: Sequence[np.ndarray], replicates: int = 1000, seed: int = 0, level: float = 0.95
) -> dict:
    """Fit the per-length means of ``samples`` over the lengths whose mean is positive, with a bootstrap CI.

    Returns a JSON-ready dict; ``fit`` is None (with ``reason``) when fewer than two lengths can be fitted.
    """
    means = [float(np.mean(s)) for s in samples]
    keep = [i for i, m in enumerate(means) if m > 0]
    dropped = [int(lengths[i]) for i in range(len(lengths)) if i not in keep]
    out: dict = {"lengths_fitted": [int(lengths[i]) for i in keep], "lengths_dropped": dropped, "level": level}
    if len(keep) < 2:
        out.update(fit=None, reason="fewer than two lengths with a positive mean; a log-log fit is impossible")
        return out
    xs = [lengths[i] for i in keep]
    law = fit_power_law(xs, [means[i] for i in keep])
    ci = bootstrap_beta(xs, [samples[i] for i in keep], replicates, seed, level)
    out["fit"] = {
        "a": law.a,
        "beta": law.beta,
        "r2": law.r2,
        "beta_low": ci.low,
        "beta_high": ci.high,
        "beta_se": ci.se,
        "bootstrap_replicates": ci.replicates,
        "bootstrap_used": ci.used,
        "seed": ci.seed,
        "paired": ci.paired,
    }
    return out
