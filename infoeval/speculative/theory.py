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

import math

import numpy as np
import torch

from infoeval.infotheory import nll

LN2 = math.log(2.0)
PINSKER_TOL = 1e-6  # nats: float32 rounding of KL summed over a 49k vocabulary is ~1e-7


# ------------------------------------------------------------------------------------------ distributions
def log_softmax_t(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(z / T) over the last dimension, in float32 (float64 stays float64).

    >>> log_softmax_t(torch.tensor([2.0, 0.0]), 2.0).exp()  # softmax(1, 0) = (0.7311, 0.2689)
    tensor([0.7311, 0.2689])
    """
    z = logits if logits.dtype == torch.float64 else logits.float()
    return torch.log_softmax(z if temperature == 1.0 else z / temperature, dim=-1)


def position_stats(lp: torch.Tensor, lq: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-row statistics of target log-probs ``lp`` against draft log-probs ``lq`` (both (n, V)), in nats.

    entropy_p, entropy_q, beta = Σ min(p, q), kl = KL(p‖q) (∞ where q = 0 < p), tv = ½ Σ |p − q|, and with
    ``targets`` the observed token's nll under each (nll_p, nll_q). p and q are exponentiated once; terms with
    p = 0 count as 0 (−inf log-probs allowed).

    >>> s = position_stats(torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.9, 0.1]]).log())
    >>> [round(float(s[k]), 4) for k in ("beta", "tv", "kl")]
    [0.6, 0.4, 0.5108]
    """
    p, q = lp.exp(), lq.exp()
    out = {
        "entropy_p": -torch.where(p > 0, p * lp, 0.0).sum(-1),
        "entropy_q": -torch.where(q > 0, q * lq, 0.0).sum(-1),
        "beta": torch.minimum(p, q).sum(-1),
        "kl": torch.where(p > 0, p * (lp - lq), 0.0).sum(-1),
        "tv": 0.5 * (p - q).abs().sum(-1),
    }
    if targets is not None:
        out["nll_p"] = nll(lp, targets)
        out["nll_q"] = nll(lq, targets)
    return out


def top1_match(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """True where the target's top token is also a top token of the draft (exact ties count as a match).
    Temperature does not change it (softmax(z/T) is monotone in z for T > 0)."""
    top_p = logits_p.argmax(-1, keepdim=True)
    return (logits_q.gather(-1, top_p).squeeze(-1) >= logits_q.amax(-1))


# ------------------------------------------------------------------------------------- aggregate statistics
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


def expected_tokens_table(beta: np.ndarray, gammas=range(1, 9)) -> list[dict]:
    """For each γ: E at α = mean β, and the mean over positions of E(β_i) (≥ the first, E being convex in α)
    with its standard error."""
    beta = np.asarray(beta, dtype=np.float64)
    alpha = float(beta.mean()) if beta.size else float("nan")
    rows = []
    for g in gammas:
        m, se = mean_se(expected_tokens(beta, g)) if beta.size else (float("nan"), float("nan"))
        rows.append({"gamma": g, "e_mean_alpha": expected_tokens(alpha, g), "e_per_position": m, "e_per_position_se": se})
    return rows


def entropy_quartiles(entropy_bits: np.ndarray, beta: np.ndarray, kl: np.ndarray, top1: np.ndarray) -> list[dict]:
    """Positions cut into four groups at the quartiles of the target's entropy (rank-based, so ties in entropy
    cannot leave a group empty): n, entropy range and mean (bits), mean β ± SE, mean KL, top-1 rate.

    Group k holds the positions of rank ⌊k·n/4⌋ … ⌊(k+1)·n/4⌋ − 1 in ascending entropy.
    """
    h = np.asarray(entropy_bits, dtype=np.float64)
    order = np.argsort(h, kind="stable")
    n = h.size
    rows = []
    for k in range(4):
        idx = order[(k * n) // 4 : ((k + 1) * n) // 4]
        a, a_se = mean_se(beta[idx])
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
        rows.append({"length": f"{lo}" if lo == hi else (f"{lo}–{hi}" if hi else f"≥{lo}"), "runs": int(inside.sum()),
                     "share": int(inside.sum()) / total, "share_if_independent": float(iid)})  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------ chi-square
def chi2_sf(stat: float, df: int) -> float:
    """P(χ²_df ≥ stat) = Q(df/2, stat/2), the regularized upper incomplete gamma function (torch.special.gammaincc).

    >>> round(chi2_sf(3.841458820694124, 1), 6)  # the 95th percentile of χ²₁
    0.05
    """
    if df < 1:
        return float("nan")  # a single cell: nothing to test
    if not math.isfinite(stat):
        return 0.0
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
