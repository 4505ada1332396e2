"""Confidence sequences (CS) for the mean of a stream of window-level means, for a gate that may stop early.

A confidence *sequence* is a sequence of intervals (L_t, U_t), one after each observation, such that
P(∀t: L_t ≤ μ ≤ U_t) ≥ 1 − α: the coverage holds *uniformly over time*, so the intervals may be checked after
every window and the run stopped at any data-dependent time without inflating the error rate (a fixed-n
confidence interval checked after every window does inflate it: see ``naive_upper`` and the tests).

Four constructions, vectorised over leading axes (the last axis is time; ``betting_cs`` takes one stream):

* ``asymptotic_cs``: Waudby-Smith, Arnold, Wu, Ramdas & Howard, "Time-uniform central limit theory and
  asymptotic confidence sequences" (Ann. Statist. 2024), Theorem 2.2: Robbins' normal-mixture boundary with the
  running variance plugged in. Valid for any law with a finite (2+δ)th moment *as t grows* (coverage error
  → 0), no bounds needed; at gate sizes (8–64 windows) the plug-in σ̂ of the first windows makes it err too
  often (false-PASS 0.07 at α = 0.05 on near-Gaussian window means with ``min_windows=5``, 0.055 with the
  default 8), so it is kept as the reference and for long streams.
* ``t_mixture_cs``: Lai's (1976) t-mixture CS, the normal mixture over the *standardized* effect with the
  variance integrated out (right-Haar prior): exact for Gaussian observations at every t with unknown variance,
  and asymptotically the same boundary as ``asymptotic_cs`` (radius ratio 1.03 at t = 64, 1.002 at 1000), so an
  asymptotic CS in the sense above for any finite-variance law. **Used for mean KL and Δ ln PPL**, which are
  unbounded (Δ ln PPL also signed).
* ``eb_cs``: Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2023),
  the predictable plug-in empirical-Bernstein CS (PrPl-EB, their Theorem 2 and eq. (26)–(27)); optionally the
  without-replacement form of their Section 6 for a finite population of N windows. Non-asymptotic: exact
  coverage at every t for observations in known bounds [a, b].
* ``betting_log_capital`` / ``betting_cs``: the same paper's betting (hedged-capital) construction, exact like
  EB and about half as wide near a bound. **For top-1 agreement** (window means in [0, 1]): the gate's exact
  test at a limit L is the capital at m = L reaching 1/α. Exactness costs width at gate sizes (the bets are
  capped by the [0, 1] range, not by the spread): ≈ 2.5–3× the t-mixture CS's width at 64 windows with real
  spreads; the t-mixture CS is also calibrated there (see the tests) if speed matters more.

Why not EB (or betting) for KL: a window's mean KL has no a-priori bound, and a bounded transform
(1 − e^{−KL}, or clipping at a cap) changes the mean (Jensen), so a CS for E[f(KL)] is not a CS for E[KL] and
cannot be compared with a limit on mean KL; a cap only works if no window can exceed it, which nothing
guarantees. Indeed no non-asymptotic *upper* bound on the mean of a non-negative unbounded variable exists (a
rare huge window can always be lurking), so a PASS on mean KL rests on an approximation whatever the method;
a *lower* bound (the FAIL side) could be exact by betting on X ≥ 0. The t-mixture CS needs only moments;
``tests/test_sequential_maths.py`` checks its calibration by simulation at gate sizes (≤ 64 windows) on skewed
laws (lognormal with σ_log 0.1 and 0.3, and resampled real window means); beyond that skew it is not
checked.

Where the assumptions come from: the gate visits windows in a seeded random order fixed before any result is
seen, so the window means are a uniformly random permutation of a fixed finite population (exchangeable), and
the target is the population mean, the full-corpus figure. For ``eb_cs`` the without-replacement form
(``population=N``) is exact for that. The t-mixture and asymptotic CSs are with-replacement (i.i.d.)
boundaries; sampling without replacement only shrinks the variance of running sums (finite-population
correction (N−t)/(N−1)), so they are conservative there (checked by simulation for the t-mixture CS).
Several limits in one gate: ``split_alpha`` (union bound).

Token weighting: the corpus figure is a token-weighted mean Σ w_i x_i / Σ w_i. Since the window plan (and so
every w_i) is fixed before scoring, ``token_weighted`` turns x_i into y_i = x_i · w_i / w̄ (w̄ the mean window
size over the plan) whose population mean is exactly that figure; feed the y_i to either CS (for ``eb_cs``
with bounds scaled by max w_i / w̄). With equal windows y_i = x_i.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infoeval.measure.cs_bounded import betting_cs, betting_log_capital, eb_cs  # noqa: F401  (the bounded CSs)
from infoeval.measure.cs_mixture import (  # noqa: F401  (the mixture CSs)
    SIDES,
    _two_sided_u,
    asymptotic_cs,
    asymptotic_radius,
    normal_mixture_rho,
    running_mean_sd,
    t_mixture_cs,
    t_mixture_radius,
)


def split_alpha(alpha: float, k: int) -> float:
    """The level for each of k statements so that all hold together with probability ≥ 1 − alpha (Bonferroni:
    P(any fails) ≤ Σ α/k = α, whatever the dependence between them).

    >>> split_alpha(0.05, 4)
    0.0125
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    return alpha / k


# ---- weighting, decisions, the naive rule, a streaming wrapper ---------------------------------------------
def token_weighted(means: np.ndarray, tokens: np.ndarray, mean_tokens: float) -> np.ndarray:
    """y_i = x_i · w_i / w̄: window means made into observations whose population mean is the token-weighted
    mean Σ w_i x_i / Σ w_i, when w̄ = Σ w_i / N is the mean window size over the whole (fixed) plan.

    >>> token_weighted(np.array([0.5, 1.0]), np.array([512, 256]), 384.0).tolist()
    [0.6666666666666666, 0.6666666666666666]
    """
    if mean_tokens <= 0:
        raise ValueError(f"mean_tokens must be > 0, got {mean_tokens}")
    return np.asarray(means, dtype=np.float64) * np.asarray(tokens, dtype=np.float64) / float(mean_tokens)


PASS, CONTINUE, FAIL = 1, 0, -1


def gate_decisions(lower: np.ndarray, upper: np.ndarray, limit: float, kind: str = "max") -> np.ndarray:
    """The decision after each observation for one limit: +1 PASS, −1 FAIL, 0 continue.

    kind "max" (the mean must be ≤ limit, e.g. mean KL): PASS when upper < limit, FAIL when lower > limit.
    kind "min" (the mean must be ≥ limit, e.g. top-1 agreement): PASS when lower > limit, FAIL when upper < limit.
    With ``upper`` an upper CS at level α_pass and ``lower`` a lower CS at α_fail (for kind "max"; the other way
    round for "min"), P(ever PASS | the mean breaks the limit) ≤ α_pass and P(ever FAIL | it meets it) ≤ α_fail,
    at any stopping time. For k limits in one gate give each α/k (``split_alpha``).

    >>> gate_decisions(np.array([0.1, 0.2]), np.array([0.9, 0.4]), 0.5).tolist()
    [0, 1]
    """
    lower, upper = np.asarray(lower), np.asarray(upper)
    if kind == "max":
        good, bad = upper < limit, lower > limit
    elif kind == "min":
        good, bad = lower > limit, upper < limit
    else:
        raise ValueError(f"kind must be 'max' or 'min', got {kind!r}")
    return np.where(good, PASS, np.where(bad, FAIL, CONTINUE)).astype(np.int8)


def first_decision(decisions: np.ndarray) -> tuple[int, int]:
    """(decision, t) at the first non-zero decision of a 1-D sequence (t counts from 1), else (0, len)."""
    d = np.asarray(decisions)
    hit = np.flatnonzero(d)
    return (int(d[hit[0]]), int(hit[0]) + 1) if hit.size else (CONTINUE, int(d.size))


def naive_upper(x: np.ndarray, z: float = 1.645) -> np.ndarray:
    """The rule this module replaces: x̄_t + z·σ̂_t/√t after every window (a fixed-t one-sided 95% bound).
    Checked after every window it is *not* a CS: its error rate grows with the number of looks (the law of
    the iterated logarithm makes it cross eventually with probability 1). Kept for the tests and the docs."""
    mean, sd = running_mean_sd(x)
    t = np.arange(1, np.asarray(x).shape[-1] + 1, dtype=np.float64)
    return np.where(t > 1, mean + z * np.nan_to_num(sd, nan=0.0) / np.sqrt(t), np.inf)


@dataclass
class StreamingCS:
    """One observation at a time: ``update(x)`` returns (lower, upper) after it, equal to the last element of
    the batch function on everything seen so far (``method`` "t" (``t_mixture_cs``), "asymptotic" or "eb";
    ``options`` are its keyword arguments). O(t) per update, which for window streams (≤ thousands) is nothing.

    >>> cs = StreamingCS("eb", alpha=0.05)
    >>> [tuple(round(v, 3) for v in cs.update(0.9)) for _ in range(2)][-1]
    (0.0, 1.0)
    """

    method: str = "t"
    alpha: float = 0.05
    options: dict = field(default_factory=dict)
    seen: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {self.method!r}")

    def update(self, x: float) -> tuple[float, float]:
        self.seen.append(float(x))
        lower, upper = METHODS[self.method](np.array(self.seen), self.alpha, **self.options)
        return float(lower[-1]), float(upper[-1])


METHODS = {"t": t_mixture_cs, "asymptotic": asymptotic_cs, "eb": eb_cs, "betting": betting_cs}
