"""llama.cpp's ``llama-perplexity --kl-divergence`` statistics, from per-position columns (pure NumPy, no torch).

Read from llama.cpp's tools/perplexity/perplexity.cpp (functions ``log_softmax(…, kl_divergence_result &)``,
``process_logits`` and ``kl_divergence``). Per scored token it accumulates, in doubles, the NLL of Q (the
variant, here q) and of base (the reference, here p), their product, the KLD Σ p (ln p − ln q), Δp = q(y) − p(y)
(``p_diff = expf(-nll) - expf(-nll_base)``), Δp² and Δp⁴, and whether the first argmax of q equals the first argmax
of p ("same top"). Everything below is over tokens, never per chunk: the per-chunk lines llama.cpp prints while it
runs are running totals, and its final block is over every scored token (in its chunks, the second half of each).

    mean ± SE      x̄ ± √((Σx²/n − x̄²)/(n − 1)) = x̄ ± sd(ddof=1)/√n            (``mean_and_uncertainty``)
    cov of means   (Σab/n − ā·b̄)/(n − 1) = Σ(a − ā)(b − b̄)/(n(n − 1))          (``covariance``)
    PPL            exp(mean NLL) ± PPL·SE(NLL)                                  (delta method)
    Cor(ln PPL(Q), ln PPL(base))    cov / (SE(NLL_q)·SE(NLL_p)): Pearson's r of the per-token NLLs
    Mean ln(PPL(Q)/PPL(base))       mean NLL_q − mean NLL_p ± √(SE_q² + SE_p² − 2 cov)  (= SE of the paired
                                    differences, algebraically)
    Mean PPL(Q)/PPL(base)           r = exp(ln ratio) ± r·SE(ln ratio)
    Mean PPL(Q)-PPL(base)           PPL_q − PPL_p ± √(PPL-SE_q² + PPL-SE_p² − 2·PPL_q·PPL_p·cov)
    Mean KLD                        mean ± SE
    RMS Δp                          √(mean Δp²) ± ½/RMS · SE(Δp²)               (SE(Δp²) from Σ Δp² and Σ Δp⁴)
    Same top p                      a ± √(a(1 − a)/(n − 1))                      (n − 1, where top1_se uses n)
    percentiles                     ``percentile`` below; the median as ``median``

Where infoeval differs from llama.cpp (the definitions above are the same; the inputs are not):
  * llama.cpp stores the base log-probs as 16-bit integers over [max − 16, max] and drops KLD terms with
    ln p ≤ −16; its NLL of base is that 16-bit value. infoeval's columns are float32 over the whole vocabulary.
  * "same top p" here is the ``top1`` column: the reference's top token is a top token of q, so exact float ties
    count as agreement (llama.cpp compares the first indices of the two maxima).
  * means and SEs are computed in two passes (``stats.iid_mean_se``), not from running Σx and Σx² (the same number
    without the cancellation); an SE is NaN for n < 2 where llama.cpp prints 0 for n ≤ 10, and the block is
    computed for any n where llama.cpp prints it only from 100 tokens on.
  * Δp is computed in float64 from the float32 NLL columns (llama.cpp: expf in float32).
  * "share positive" (Δp > 0) is infoeval's; llama.cpp does not print it.

The SEs above treat positions as independent, as llama.cpp does; ``kld_statistics`` returns them under
``llamacpp_*`` names (and ``same_top_se``), so that ``--table llama.cpp`` prints llama.cpp's own ± and its
figures stay comparable to ``llama-perplexity``. The same figures' SEs under their plain names
(``ppl_ratio_se``, ``ppl_diff_se``, ``dp_se``, ``dp_rms_se``) are infoeval's batch means (``stats.se``, with
``stats.mean_cov`` for the covariance), which allow for correlated neighbouring positions.
"""

from __future__ import annotations

import math

import numpy as np

from infoeval.measure.stats import iid_se, mean_cov, se

# (key suffix, llama.cpp's label, fraction) in llama.cpp's order; KLD omits the quartiles, Δp prints them
KLD_PERCENTILES = (
    ("max", "Maximum", 1.0),
    ("p999", "99.9%  ", 0.999),
    ("p99", "99.0%  ", 0.99),
    ("p95", "95.0%  ", 0.95),
    ("p90", "90.0%  ", 0.90),
    ("median", "Median ", 0.5),
    ("p10", "10.0%  ", 0.10),
    ("p05", " 5.0%  ", 0.05),
    ("p01", " 1.0%  ", 0.01),
    ("p001", " 0.1%  ", 0.001),
    ("min", "Minimum", 0.0),
)
DP_PERCENTILES = (
    KLD_PERCENTILES[:5]
    + (("p75", "75.0%  ", 0.75),)
    + KLD_PERCENTILES[5:6]
    + (("p25", "25.0%  ", 0.25),)
    + KLD_PERCENTILES[6:]
)


def percentile(values: np.ndarray, fraction: float) -> float:
    """llama.cpp's ``percentile`` of sorted ``values``: fraction ≤ 0 → the first, ≥ 1 → the last; otherwise the
    float32 position p = float32(fraction) · (n − 1), ip = ⌊p⌋, and (1 − w)·v[ip] + w·v[min(ip + 1, n − 1)] with
    w = p − ip in float32 (interpolation in the values' dtype: float32 for KLD, as in llama.cpp).

    This is NumPy's default ``linear`` quantile except for float32 rounding: the fraction is a float (0.999f =
    0.99900001…), the position and weight are float32 products (for n − 1 > 2²⁴ the position itself rounds), and
    the lerp is (1 − w)·a + w·b in float32 where NumPy uses a + w·(b − a) in float64. The result is continuous in
    the position, so the two differ by the position's shift, (n − 1)·|float32(f) − f| plus float32 rounding
    (≈ 1.3e-5 at n = 1,000 for 0.999), times the gap between the two neighbours, never by a whole step.

    >>> v = np.array([0.0, 1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    >>> round(percentile(v, 0.9), 6), percentile(v, 0.0), percentile(v, 1.0)  # position 3.6: 0.4·3 + 0.6·4
    (3.6, 0.0, 4.0)
    """
    v = np.asarray(values)
    if v.size == 0:
        return math.nan
    f = np.float32(fraction)
    if f <= 0:
        return float(v[0])
    if f >= 1:
        return float(v[-1])
    p = f * np.float32(v.size - 1)
    ip = int(p)
    w = (p - np.float32(ip)).astype(v.dtype)
    one = np.asarray(1, dtype=v.dtype)
    return float((one - w) * v[ip] + w * v[min(ip + 1, v.size - 1)])


def median(values: np.ndarray) -> float:
    """llama.cpp's median of sorted ``values``: the middle one, or 0.5·(sum of the two middle ones) in the values'
    dtype (NumPy's median but for that rounding).

    >>> median(np.array([1.0, 2.0, 4.0, 8.0], dtype=np.float32)), median(np.array([1.0, 2.0, 9.0]))
    (3.0, 2.0)
    """
    v = np.asarray(values)
    n = v.size
    if n == 0:
        return math.nan
    if n % 2:
        return float(v[n // 2])
    return float(np.asarray(0.5, dtype=v.dtype) * (v[n // 2] + v[n // 2 - 1]))


def delta_p(nll_ref: np.ndarray, nll_var: np.ndarray) -> np.ndarray:
    """Δp = q(y) − p(y) = exp(−NLL_variant) − exp(−NLL_reference) per position, in float64.

    >>> delta_p(np.array([np.log(2.0)]), np.array([np.log(4.0)]))  # q(y) = 0.25, p(y) = 0.5
    array([-0.25])
    """
    return np.exp(-np.asarray(nll_var, dtype=np.float64)) - np.exp(-np.asarray(nll_ref, dtype=np.float64))


def rms_se(x: np.ndarray, se_of=iid_se) -> tuple[float, float]:
    """llama.cpp's RMS and its SE: √(mean x²) and ½/RMS · SE(x²) (the delta method on √); ``se_of`` the SE of a
    mean (llama.cpp's sd/√n by default).

    >>> [round(v, 4) for v in rms_se(np.array([3.0, -4.0]))]  # √12.5; SE(x²) = 3.5
    [3.5355, 0.495]
    """
    sq = np.asarray(x, dtype=np.float64) ** 2
    ms = float(sq.mean()) if sq.size else math.nan
    rms = math.sqrt(ms) if ms == ms else math.nan
    return rms, (0.5 / rms * se_of(sq) if rms > 0 else math.nan)


def cov_of_means(a: np.ndarray, b: np.ndarray) -> float:
    """Covariance of the two means, Σ(a − ā)(b − b̄)/(n(n − 1)) (llama.cpp's ``covariance``; NaN for n < 2).

    >>> cov_of_means(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 7.0]))  # Σ = 5, n(n − 1) = 6
    0.8333333333333334
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = a.size
    return float(((a - a.mean()) * (b - b.mean())).sum() / (n * (n - 1))) if n > 1 else math.nan


def _percentiles(prefix: str, x: np.ndarray, table) -> dict[str, float]:
    s = np.sort(x)
    return {f"{prefix}_{key}": median(s) if key == "median" else percentile(s, f) for key, _, f in table}


def kld_statistics(nll_ref: np.ndarray, nll_var: np.ndarray, kl: np.ndarray, top1: np.ndarray) -> dict[str, float]:
    """The numbers of llama.cpp's final block that infoeval's other metrics lack (mean KLD, ln PPL ratio and
    top-1 are ``kl_mean``, ``ln_ppl_ratio`` and ``top1``): PPL ratio and difference, the NLL correlation, KLD
    percentiles (llama.cpp's rule, on the float32 column), Δp mean, RMS, percentiles and share positive. Their SEs
    twice: llama.cpp's (``llamacpp_*``, ``same_top_se`` with n − 1), and infoeval's batch means under the plain
    names (module docstring)."""
    nq, nr = np.asarray(nll_var, dtype=np.float64), np.asarray(nll_ref, dtype=np.float64)
    mq, mr = (float(nq.mean()), float(nr.mean())) if nq.size else (math.nan, math.nan)
    ppl_q, ppl_r, ratio = math.exp(mq), math.exp(mr), math.exp(mq - mr)  # NaN for n = 0
    dp = delta_p(nr, nq)
    sq, sr, cov = iid_se(nq), iid_se(nr), cov_of_means(nq, nr)
    a, n = float(np.mean(top1)) if np.size(top1) else math.nan, np.size(top1)
    naive = _ses(nq, nr, kl, dp, ppl_q, ppl_r, ratio, iid_se, cov_of_means)
    honest = _ses(nq, nr, kl, dp, ppl_q, ppl_r, ratio, se, mean_cov)
    out = {
        "ln_ppl_cor": cov / (sq * sr) if sq > 0 and sr > 0 else math.nan,
        "ppl_ratio_se": honest["ppl_ratio_se"],
        "ppl_diff": ppl_q - ppl_r,
        "ppl_diff_se": honest["ppl_diff_se"],
        **_percentiles("kld", np.asarray(kl, dtype=np.float32), KLD_PERCENTILES),
        "dp_mean": float(dp.mean()) if dp.size else math.nan,
        "dp_se": honest["dp_se"],
        "dp_rms": rms_se(dp)[0],
        "dp_rms_se": honest["dp_rms_se"],
        "dp_positive": float((dp > 0).mean()) if dp.size else math.nan,
        **_percentiles("dp", dp, DP_PERCENTILES),
        "same_top_se": math.sqrt(a * (1 - a) / (n - 1)) if n > 1 else math.nan,
        **{f"llamacpp_{k}": v for k, v in naive.items()},
    }
    return out


def _ses(nq, nr, kl, dp, ppl_q, ppl_r, ratio, se_of, cov_of) -> dict[str, float]:
    """The SEs of llama.cpp's block, with ``se_of`` the SE of a mean and ``cov_of`` the covariance of two means."""
    sq, sr, cov = se_of(nq), se_of(nr), cov_of(nq, nr)
    diff_var = (ppl_q * sq) ** 2 + (ppl_r * sr) ** 2 - 2 * ppl_q * ppl_r * cov
    return {
        "ppl_se": ppl_q * sq,
        "ppl_base_se": ppl_r * sr,
        "ln_ppl_ratio_se": se_of(nq - nr),
        "ppl_ratio_se": ratio * se_of(nq - nr),
        "ppl_diff_se": math.sqrt(max(0.0, diff_var)) if diff_var == diff_var else math.nan,
        "kl_se": se_of(np.asarray(kl, dtype=np.float64)),
        "dp_se": se_of(dp),
        "dp_rms_se": rms_se(dp, se_of)[1],
    }
