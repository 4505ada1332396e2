"""The one metric registry: unit, direction and description of every metric every command reports (tables, CSV
columns, result JSON and the gate's limit directions read it). ``column_metrics`` computes quantize-compare's.
"""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.measure.llamacpp_table_stats import DP_PERCENTILES, KLD_PERCENTILES


@dataclass(frozen=True)
class Metric:
    unit: str
    higher_is_better: bool | None
    description: str


METRICS: dict[str, Metric] = {
    "tokens": Metric("tokens", None, "scored tokens"),
    "bytes": Metric("bytes", None, "UTF-8 bytes of the scored text"),
    "ppl": Metric("", False, "perplexity exp(mean NLL)"),
    "ppl_se": Metric("", None, "standard error of PPL (delta method: PPL · SE of mean NLL)"),
    "se_block": Metric(
        "positions", None, "mean positions per batch of the batch-means standard errors (whole windows, at least ⌊√n⌋)"
    ),
    "se_blocks": Metric(
        "blocks",
        None,
        "batches G behind each standard error (the gate's bounds use Student's t with G − 1 degrees of freedom)",
    ),
    "nll_mean": Metric("nats/token", False, "mean negative log-likelihood of the observed tokens"),
    "bits_per_token": Metric("bits/token", False, "mean NLL / ln 2"),
    "bits_per_byte": Metric("bits/byte", False, "Σ NLL / ln 2 / UTF-8 bytes of the scored text"),
    "bits_per_byte_se": Metric(
        "bits/byte",
        None,
        "standard error of bits/byte (a ratio: the SE of the linearised (NLL/ln 2 − bpb·bytes)/mean bytes)",
    ),
    "total_bits": Metric("bits", False, "Σ NLL / ln 2 over the scored tokens (ideal code length)"),
    "entropy_mean": Metric("bits", None, "mean per-position entropy of the reference's next-token distribution"),
    "entropy_p10": Metric("bits", None, "10th percentile of per-position entropy"),
    "entropy_p50": Metric("bits", None, "median per-position entropy"),
    "entropy_p90": Metric("bits", None, "90th percentile of per-position entropy"),
    "ln_ppl_ratio": Metric(
        "nats", False, "Δ ln PPL = mean(NLL_variant − NLL_reference) = ln(PPL_variant / PPL_reference)"
    ),
    "ln_ppl_ratio_se": Metric("nats", None, "paired standard error of Δ ln PPL"),
    "ppl_ratio": Metric("", False, "PPL_variant / PPL_reference"),
    "kl_mean": Metric("nats", False, "mean KL(reference ‖ variant) over scored positions"),
    "kl_se": Metric("nats", None, "standard error of mean KL"),
    "kl_p50": Metric("nats", False, "median per-position KL"),
    "kl_p90": Metric("nats", False, "90th percentile of per-position KL"),
    "kl_p99": Metric("nats", False, "99th percentile of per-position KL"),
    "kl_p999": Metric("nats", False, "99.9th percentile of per-position KL"),
    "kl_max": Metric("nats", False, "largest per-position KL"),
    "top1": Metric(
        "fraction",
        True,
        "top-1 agreement: the reference's top token is the variant's top token (ties count as agreement)",
    ),
    "top1_se": Metric("fraction", None, "standard error of top-1 agreement (batch means of the 0/1 column)"),
    "rkl_mean": Metric("nats", False, "mean reverse KL(variant ‖ reference)"),
    "rkl_se": Metric("nats", None, "standard error of mean reverse KL"),
    "tv_mean": Metric("", False, "mean total variation ½Σ|p − q| (1 − TV is the speculative acceptance)"),
    "bits_per_byte_delta": Metric("bits/byte", False, "variant bits/byte − reference bits/byte"),
    "bits_per_byte_delta_se": Metric("bits/byte", None, "paired standard error of the bits/byte difference"),
    "kl_lower_mean": Metric(
        "nats", False, "mean coarse KL over the reference's top-K + one tail bucket: a lower bound of mean KL"
    ),
    "kl_lower_se": Metric("nats", None, "standard error of the mean coarse KL"),
    "tv_se": Metric("", None, "standard error of mean TV"),
}


# llama-perplexity --kl-divergence's final block (definitions: infoeval/measure/llamacpp_table_stats.py)
_LLAMA = " (llama.cpp's definition; see llamacpp_table_stats)"
_RANK = {"max": "largest", "median": "median", "min": "smallest"}  # the others: percentiles


def _rank(key: str, fraction: float) -> str:
    return _RANK.get(key, f"percentile P{100 * fraction:g}")


METRICS |= {
    "ln_ppl_cor": Metric(
        "", None, "Cor(ln(PPL(Q)), ln(PPL(base))): Pearson's r of per-token NLL variant vs reference" + _LLAMA
    ),
    "ppl_ratio_se": Metric("", None, "standard error of PPL_variant / PPL_reference, ratio · SE(Δ ln PPL)"),
    "ppl_diff": Metric("", False, "PPL_variant − PPL_reference"),
    "ppl_diff_se": Metric("", None, "standard error of PPL_variant − PPL_reference, with their covariance"),
    **{
        f"kld_{k}": Metric("nats", False, f"{_rank(k, f)} of per-position KL(reference ‖ variant)" + _LLAMA)
        for k, _, f in KLD_PERCENTILES
    },
    "dp_mean": Metric(
        "", None, "mean Δp = q(y) − p(y), the observed token's probability under the variant minus the reference's"
    ),
    "dp_se": Metric("", None, "standard error of mean Δp"),
    "dp_rms": Metric("", False, "RMS Δp = √(mean Δp²)"),
    "dp_rms_se": Metric("", None, "standard error of RMS Δp, ½/RMS · SE(Δp²)"),
    "dp_positive": Metric(
        "fraction", None, "share of positions with Δp > 0 (the variant gives the observed token more probability)"
    ),
    **{f"dp_{k}": Metric("", None, f"{_rank(k, f)} of per-position Δp" + _LLAMA) for k, _, f in DP_PERCENTILES},
    **{
        f"llamacpp_{k}": Metric(u, None, f"llama.cpp's {d}, positions treated as independent (sd/√n)" + _LLAMA)
        for k, u, d in (
            ("ppl_se", "", "SE of the variant's PPL"),
            ("ppl_base_se", "", "SE of the reference's PPL"),
            ("ln_ppl_ratio_se", "nats", "SE of Δ ln PPL"),
            ("ppl_ratio_se", "", "SE of the PPL ratio"),
            ("ppl_diff_se", "", "SE of the PPL difference"),
            ("kl_se", "nats", "SE of mean KLD"),
            ("dp_se", "", "SE of mean Δp"),
            ("dp_rms_se", "", "SE of RMS Δp"),
        )
    },
    "same_top_se": Metric(
        "fraction", None, "standard error of top-1 agreement as llama.cpp's 'Same top p', √(a(1−a)/(n−1))"
    ),
}


ACCEPT_METRICS: dict[str, Metric] = {
    "alpha": Metric(
        "fraction", True, "acceptance rate α = mean over positions of β = Σₓ min(p(x), q(x)) = 1 − TV(p, q)"
    ),
    "alpha_se": Metric("fraction", None, "standard error of α (batch means of β over positions)"),
    "kl_mean": Metric("nats", False, "mean KL(p‖q) over positions"),
    "kl_se": Metric("nats", None, "standard error of mean KL"),
    "tv_mean": Metric("", False, "mean total variation ½Σ|p − q| (= 1 − α)"),
    "pinsker_violations": Metric(
        "positions", False, "positions where 2·TV² > KL + 1e-6 nats (Pinsker: TV ≤ √(KL/2)); 0 expected"
    ),
    "pinsker_max_ratio": Metric("", None, "largest TV / √(KL/2) among positions with KL > 1e-4 (≤ 1 by Pinsker)"),
    "pearson_r": Metric("", None, "Pearson correlation of the target's entropy (bits) with β over positions; n pairs"),
    "entropy_p_bits": Metric("bits", None, "mean entropy of p (at the condition's temperature)"),
    "entropy_q_bits": Metric("bits", None, "mean entropy of q (at T in mode both, at 1 in mode target)"),
    "nll_p": Metric("nats/token", False, "mean −ln p(y) of the observed token"),
    "nll_q": Metric("nats/token", False, "mean −ln q(y) of the observed token"),
    "top1": Metric("fraction", True, "greedy agreement: argmax p is a top token of q; temperature-independent"),
    "alpha_q1": Metric(
        "fraction", True, "α over the quarter of positions with the lowest target entropy (Q1 … Q4: rising entropy)"
    ),
    "e_mean_alpha": Metric(
        "tokens/target call",
        True,
        "E(ᾱ, γ) = (1 − ᾱ^(γ+1))/(1 − ᾱ) with ᾱ the mean of β (i.i.d. acceptances at rate ᾱ)",
    ),
    "e_per_position": Metric(
        "tokens/target call", True, "mean over positions of E(β_i, γ) (≥ E(ᾱ, γ): E is convex in α)"
    ),
}

DECODE_METRICS: dict[str, Metric] = {
    "acceptance": Metric("fraction", True, "accepted draft tokens / proposed draft tokens in the speculative loop"),
    "tokens_per_target_call": Metric(
        "tokens", True, "new tokens / target forward passes (prompt prefill included in the first)"
    ),
    "alpha": Metric(
        "fraction",
        True,
        "α̂ = accepted / verified drafts (the verifier stops at the first rejection): the estimate of α",
    ),
    "predicted_tokens_per_call": Metric(
        "tokens", None, "E(α̂, γ) = (1 − α̂^(γ+1))/(1 − α̂) (ignores the cut at max-new-tokens)"
    ),
    "wall_s": Metric("s", False, "wall time of the generation loop (after a warm-up pass)"),
    "tokens_per_s": Metric("tokens/s", True, "new tokens / wall time"),
    "speedup": Metric("×", True, "plain sampling wall time / speculative sampling wall time"),
    "cost_ratio": Metric("", None, "c = time of one draft step / time of one plain (1-token, cached) target step"),
    "verify_cost": Metric(
        "", None, "v = time of one verifying target call (γ + 1 tokens) / time of one plain target step"
    ),
    "predicted_speedup": Metric(
        "×", None, "E(α̂, γ) / (γ·c + v): tokens per round over the round's cost in target steps"
    ),
    "predicted_speedup_papers": Metric(
        "×", None, "E(α̂, γ) / (γ·c + 1): the papers' model, where verifying costs one target step"
    ),
    "break_even_alpha": Metric(
        "fraction", None, "α* with E(α*, γ) = γ·c + v: the acceptance this draft needs to pay off (NaN if none does)"
    ),
    "chi2_p_value": Metric(
        "", None, "P(χ² ≥ observed) of the first two emitted tokens against a model's exact distribution"
    ),
}

DISTILL_METRICS: dict[str, Metric] = {
    "hard_ce": Metric("nats", False, "H(y, q) = −ln q(y) at T = 1, mean over positions"),
    "kl": Metric("nats", False, "soft loss KL(p_T‖q_T), mean over positions"),
    "t2_kl": Metric("nats", False, "T²·KL(p_T‖q_T)"),
    "loss": Metric("nats", False, "L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T)"),
    "soft_ce": Metric("nats", False, "H(p_T, q_T) = H(p_T) + KL(p_T‖q_T) (the cross-entropy form of the soft loss)"),
    "teacher_entropy_bits": Metric("bits", None, "H(p_T): entropy of the softened teacher"),
    "teacher_tail_mass": Metric(
        "fraction", None, "1 − max p_T: teacher probability outside its top-1 token ('dark knowledge')"
    ),
    "grad_norm": Metric("nats/logit", None, "‖∂KL(p_T‖q_T)/∂z_q‖₂ = ‖q_T − p_T‖₂ / T per position, mean"),
    "t2_grad_norm": Metric("nats/logit", None, "T²·‖∂KL/∂z_q‖₂: the gradient of the T²-scaled soft loss"),
}

TEMPERATURE_METRICS: dict[str, Metric] = {
    "top_prob": Metric("fraction", None, "largest probability of softmax(z/T)"),
    "tail_mass": Metric("fraction", None, "1 − top probability"),
    "entropy_bits": Metric("bits", None, "entropy of softmax(z/T) over all classes (the whole vocabulary for a model)"),
}

MI_METRICS: dict[str, Metric] = {
    "mi_bits": Metric(
        "bits",
        None,
        "I(X;Y) ≈ H(Y) − H(Y|X) per block of L tokens, X the first and Y the second half; mean over blocks",
    ),
    "mi_bits_se": Metric("bits", None, "standard error of the mean I over blocks (sd/√blocks)"),
    "marginal_bits_per_token": Metric("bits/token", None, "H(Y)/(L/2): Y's tokens scored after the start token only"),
    "conditional_bits_per_token": Metric(
        "bits/token", False, "H(Y|X)/(L/2): Y's tokens scored after the start token and X"
    ),
    "mi_bits_per_token": Metric("bits/token", None, "I/(L/2): what X saves per token of Y"),
    "beta": Metric("", None, "exponent of the least-squares fit I(L) ≈ A·L^β in log-log space"),
}

KLFIT_METRICS: dict[str, Metric] = {
    "centre": Metric("x units", None, "fitted μ of q"),
    "width": Metric("x units", None, "fitted σ of q (before discretization and truncation to the grid)"),
    "kl": Metric("nats", False, "the minimized divergence: KL(p‖q) for forward, KL(q‖p) for reverse"),
    "kl_forward": Metric("nats", False, "KL(p‖q) of the fitted q"),
    "kl_reverse": Metric("nats", False, "KL(q‖p) of the fitted q"),
    "q_mean": Metric("x units", None, "mean of the fitted q on the grid"),
    "q_sd": Metric("x units", None, "standard deviation of the fitted q on the grid"),
}

# the metric definitions each command's result carries (``metric_definitions`` in its JSON)
FAMILIES: dict[str, dict[str, Metric]] = {
    "quantize-compare": METRICS,
    "compress-bits": METRICS,
    "reference": METRICS,
    "gate": METRICS,
    "spec-accept": ACCEPT_METRICS,
    "spec-decode": DECODE_METRICS,
    "distill": DISTILL_METRICS,
    "temperature": TEMPERATURE_METRICS,
    "mutual-info": MI_METRICS,
    "kl-fit": KLFIT_METRICS,
}


def definitions(family: str) -> dict[str, dict]:
    """Unit, direction and description of every metric of a command family, as JSON."""
    return {
        n: {"unit": m.unit, "higher_is_better": m.higher_is_better, "description": m.description}
        for n, m in FAMILIES.get(family, {}).items()
    }
