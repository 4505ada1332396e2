"""Pure maths of speculative decoding and distillation: per-position acceptance, expected tokens per target call,
entropy-quartile tables, run lengths, Pearson correlation and the chi-square test.

Notation: p is the target (teacher), q the draft (student); papers swap the letters. Natural logs (nats)
unless a name says bits.

    β(p, q)   = Σₓ min(p(x), q(x)) = 1 − TV(p, q)      probability that a token drawn from q is accepted
    α         = mean of β over positions                 the acceptance rate
    E(α, γ)   = 1 + α + … + α^γ = (1 − α^(γ+1)) / (1 − α) expected tokens per target call with γ drafts
                (α → 1: γ + 1), assuming i.i.d. acceptances with rate α
    Pinsker:    TV ≤ √(KL(p‖q) / 2), i.e. 2·TV² ≤ KL

Worked example: p = (0.5, 0.5), q = (0.9, 0.1): β = 0.5 + 0.1 = 0.6, TV = 0.4, KL = 0.5108 nats,
√(KL/2) = 0.5054 ≥ 0.4; E(0.6, γ = 4) = 1 + 0.6 + 0.36 + 0.216 + 0.1296 = 2.3056.
"""

from __future__ import annotations

import numpy as np

from infoeval.measure.stats import mean_se


def expected_tokens(alpha, gamma: int):
    """E = (1 − α^(γ+1)) / (1 − α) tokens per target call with γ drafts and i.i.d. acceptance rate α; the
    α → 1 limit is γ + 1. Works on floats and numpy arrays.

    >>> round(expected_tokens(0.6, 4), 4), expected_tokens(1.0, 4), expected_tokens(0.0, 4)
    (2.3056, 5.0, 1.0)
    """
    a = np.asarray(alpha, dtype=np.float64)
    near_one = np.abs(1.0 - a) < 1e-9
    safe = np.where(near_one, 0.5, a)
    e = np.where(near_one, gamma + 1.0, (1.0 - safe ** (gamma + 1)) / (1.0 - safe))
    return float(e) if e.ndim == 0 else e


def break_even_alpha(gamma: int, cost: float, verify: float = 1.0) -> float:
    """The acceptance α* at which speculative decoding breaks even: E(α*, γ) = γ·c + v, with c the cost of a draft
    step and v that of a verifying target call (γ + 1 tokens), both in units of one plain target step (v = 1 in
    the papers' model, more on a CPU). NaN when even α = 1 cannot pay (γ·c + v ≥ γ + 1). E is increasing in α,
    so bisection.

    >>> round(break_even_alpha(4, 0.25), 4)  # E(α, 4) = 2: 1 + α + α² + α³ + α⁴ = 2
    0.5188
    """
    target = gamma * cost + verify
    if not (cost >= 0 and verify > 0 and target < gamma + 1.0):
        return float("nan")
    if target <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_tokens(mid, gamma) < target else (lo, mid)
    return 0.5 * (lo + hi)


def expected_tokens_table(beta: np.ndarray, gammas=range(1, 9), windows: np.ndarray | None = None) -> list[dict]:
    """For each γ: E at α = mean β, and the mean over positions of E(β_i) (≥ the first, E being convex in α)
    with its standard error (batches of whole ``windows``)."""
    beta = np.asarray(beta, dtype=np.float64)
    alpha = float(beta.mean()) if beta.size else float("nan")
    rows = []
    for g in gammas:
        m, se = mean_se(expected_tokens(beta, g), windows) if beta.size else (float("nan"), float("nan"))
        rows.append(
            {"gamma": g, "e_mean_alpha": expected_tokens(alpha, g), "e_per_position": m, "e_per_position_se": se}
        )
    return rows


def entropy_quartiles(
    entropy_bits: np.ndarray, beta: np.ndarray, kl: np.ndarray, top1: np.ndarray, windows: np.ndarray | None = None
) -> list[dict]:
    """Positions cut into four groups at the quartiles of the target's entropy (rank-based, so ties in entropy
    cannot leave a group empty): n, entropy range and mean (bits), mean β ± SE (a group's positions in text order,
    batches of whole ``windows``), mean KL, top-1 rate.

    Group k holds the positions of rank ⌊k·n/4⌋ … ⌊(k+1)·n/4⌋ − 1 in ascending entropy.
    """
    h = np.asarray(entropy_bits, dtype=np.float64)
    order = np.argsort(h, kind="stable")
    n = h.size
    rows = []
    for k in range(4):
        idx = np.sort(order[(k * n) // 4 : ((k + 1) * n) // 4])
        a, a_se = mean_se(beta[idx], None if windows is None else np.asarray(windows)[idx])
        rows.append(
            {
                "quartile": f"Q{k + 1}",
                "n": int(idx.size),
                "entropy_min_bits": float(h[idx].min()) if idx.size else float("nan"),
                "entropy_max_bits": float(h[idx].max()) if idx.size else float("nan"),
                "entropy_mean_bits": float(h[idx].mean()) if idx.size else float("nan"),
                "alpha": a,
                "alpha_se": a_se,
                "kl_mean": float(np.mean(kl[idx])) if idx.size else float("nan"),
                "top1": float(np.mean(top1[idx])) if idx.size else float("nan"),
            }
        )
    return rows


def run_lengths(match: np.ndarray, position: np.ndarray | None = None) -> np.ndarray:
    """Lengths of the maximal runs of consecutive True values; a gap in ``position`` (not previous + 1) ends a run.

    >>> run_lengths(np.array([1, 1, 0, 1, 1, 1, 0, 0, 1], bool)).tolist()
    [2, 3, 1]
    >>> run_lengths(np.array([1, 1, 1], bool), np.array([5, 6, 9])).tolist()  # 6 → 9 is a gap
    [2, 1]
    """
    m = np.asarray(match, dtype=bool)
    if m.size == 0:
        return np.zeros(0, dtype=np.int64)
    pos = np.arange(m.size) if position is None else np.asarray(position, dtype=np.int64)
    # a run starts at a match whose predecessor is not a contiguous match
    contiguous = np.concatenate([[False], np.diff(pos) == 1])
    prev_match = np.concatenate([[False], m[:-1]]) & contiguous
    starts = np.flatnonzero(m & ~prev_match)
    # a run ends at a match whose successor is not a contiguous match
    next_match = np.concatenate([m[1:] & contiguous[1:], [False]])
    ends = np.flatnonzero(m & ~next_match)
    return (ends - starts + 1).astype(np.int64)


RUN_BINS = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8), (9, 16), (17, 32), (33, None))


def run_length_table(lengths: np.ndarray, rate: float) -> list[dict]:
    """Histogram of run lengths in RUN_BINS: count and share of runs, beside the share a geometric law would give
    if matches were independent with probability ``rate`` (P(L = k) = (1 − a)·a^(k−1)), which shows clustering."""
    lengths = np.asarray(lengths)
    total = max(int(lengths.size), 1)
    rows = []
    for lo, hi in RUN_BINS:
        inside = (lengths >= lo) & (lengths <= (hi if hi is not None else np.iinfo(np.int64).max))
        # P(lo ≤ L ≤ hi) = a^(lo−1) − a^hi under the geometric law
        iid = rate ** (lo - 1) - (rate**hi if hi is not None else 0.0)
        rows.append(
            {
                "length": f"{lo}" if lo == hi else (f"{lo}–{hi}" if hi else f"≥{lo}"),
                "runs": int(inside.sum()),
                "share": int(inside.sum()) / total,
                "share_if_independent": float(iid),
            }
        )
    return rows
