"""Unit, direction and definition of every metric the speculative-decoding and distillation commands report, in
the style of ``infoeval.metrics.METRICS`` (p = target/teacher, q = draft/student)."""

from __future__ import annotations

from infoeval.metrics import Metric

ACCEPT_METRICS: dict[str, Metric] = {
    "alpha": Metric("fraction", True, "acceptance rate α = mean over positions of β = Σₓ min(p(x), q(x)) = 1 − TV(p, q)"),
    "alpha_se": Metric("fraction", None, "standard error of α, sd(β)/√n"),
    "kl_mean": Metric("nats", False, "mean KL(p‖q) over positions"),
    "kl_se": Metric("nats", None, "standard error of mean KL"),
    "tv_mean": Metric("", False, "mean total variation ½Σ|p − q| (= 1 − α)"),
    "pinsker_violations": Metric("positions", False, "positions where 2·TV² > KL + 1e-6 nats (Pinsker: TV ≤ √(KL/2)); 0 expected"),
    "pinsker_max_ratio": Metric("", None, "largest TV / √(KL/2) among positions with KL > 1e-4 (≤ 1 by Pinsker)"),
    "pearson_r": Metric("", None, "Pearson correlation of the target's entropy (bits) with β over positions; n pairs"),
    "entropy_p_bits": Metric("bits", None, "mean entropy of p (at the condition's temperature)"),
    "entropy_q_bits": Metric("bits", None, "mean entropy of q (at T in mode both, at 1 in mode target)"),
    "nll_p": Metric("nats/token", False, "mean −ln p(y) of the observed token"),
    "nll_q": Metric("nats/token", False, "mean −ln q(y) of the observed token"),
    "top1": Metric("fraction", True, "greedy agreement: argmax p is a top token of q; temperature-independent"),
    "alpha_q1": Metric("fraction", True, "α over the quarter of positions with the lowest target entropy (Q1 … Q4: rising entropy)"),
    "e_mean_alpha": Metric("tokens/target call", True, "E(ᾱ, γ) = (1 − ᾱ^(γ+1))/(1 − ᾱ) with ᾱ the mean of β (i.i.d. acceptances at rate ᾱ)"),
    "e_per_position": Metric("tokens/target call", True, "mean over positions of E(β_i, γ) (≥ E(ᾱ, γ): E is convex in α)"),
}

DECODE_METRICS: dict[str, Metric] = {
    "acceptance": Metric("fraction", True, "accepted draft tokens / proposed draft tokens in the speculative loop"),
    "tokens_per_target_call": Metric("tokens", True, "new tokens / target forward passes (prompt prefill included in the first)"),
    "alpha": Metric("fraction", True, "α̂ = accepted / verified drafts (the verifier stops at the first rejection): the estimate of α"),
    "predicted_tokens_per_call": Metric("tokens", None, "E(α̂, γ) = (1 − α̂^(γ+1))/(1 − α̂) (ignores the cut at max-new-tokens)"),
    "wall_s": Metric("s", False, "wall time of the generation loop (after a warm-up pass)"),
    "tokens_per_s": Metric("tokens/s", True, "new tokens / wall time"),
    "speedup": Metric("×", True, "plain sampling wall time / speculative sampling wall time"),
    "cost_ratio": Metric("", None, "c = time of one draft step / time of one plain (1-token, cached) target step"),
    "verify_cost": Metric("", None, "v = time of one verifying target call (γ + 1 tokens) / time of one plain target step"),
    "predicted_speedup": Metric("×", None, "E(α̂, γ) / (γ·c + v): tokens per round over the round's cost in target steps"),
    "predicted_speedup_papers": Metric("×", None, "E(α̂, γ) / (γ·c + 1): the papers' model, where verifying costs one target step"),
    "break_even_alpha": Metric("fraction", None, "α* with E(α*, γ) = γ·c + v: the acceptance this draft needs to pay off (NaN if none does)"),
    "chi2_p_value": Metric("", None, "P(χ² ≥ observed) of the first two emitted tokens against a model's exact distribution"),
}

DISTILL_METRICS: dict[str, Metric] = {
    "hard_ce": Metric("nats", False, "H(y, q) = −ln q(y) at T = 1, mean over positions"),
    "kl": Metric("nats", False, "soft loss KL(p_T‖q_T), mean over positions"),
    "t2_kl": Metric("nats", False, "T²·KL(p_T‖q_T)"),
    "loss": Metric("nats", False, "L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T)"),
    "soft_ce": Metric("nats", False, "H(p_T, q_T) = H(p_T) + KL(p_T‖q_T) (the cross-entropy form of the soft loss)"),
    "teacher_entropy_bits": Metric("bits", None, "H(p_T): entropy of the softened teacher"),
    "teacher_tail_mass": Metric("fraction", None, "1 − max p_T: teacher probability outside its top-1 token ('dark knowledge')"),
    "grad_norm": Metric("nats/logit", None, "‖∂KL(p_T‖q_T)/∂z_q‖₂ = ‖q_T − p_T‖₂ / T per position, mean"),
    "t2_grad_norm": Metric("nats/logit", None, "T²·‖∂KL/∂z_q‖₂: the gradient of the T²-scaled soft loss"),
}

TEMPERATURE_METRICS: dict[str, Metric] = {
    "top_prob": Metric("fraction", None, "largest probability of softmax(z/T)"),
    "tail_mass": Metric("fraction", None, "1 − top probability"),
    "entropy_bits": Metric("bits", None, "entropy of softmax(z/T) over all classes (the whole vocabulary for a model)"),
}


def metric_meta(registry: dict[str, Metric]) -> dict:
    return {n: {"unit": m.unit, "higher_is_better": m.higher_is_better, "description": m.description} for n, m in registry.items()}
