"""Rich tables for spec-accept, spec-decode, distill and temperature; no torch import."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from infoeval.output.tables import fmt_num, fmt_pm, report_table, run_header
from infoeval.speculative.accept_tables import accept_tables


def _table(title: str, columns: list[str], caption: str | None = None, left: int = 1) -> Table:
    return report_table(title, columns, caption, left=left, no_wrap=True)


def describe(info: dict) -> str:
    """One line naming the draft."""
    if info["kind"] == "model":
        return f"{info['spec']} ({info['n_parameters'] / 1e6:.1f}M params)"
    if info["kind"] == "scheme":
        q = info["quantization"]
        return f"target fake-quantized {info['scheme']} ({q['layers_quantized']} layers)"
    return (
        f"target's first {info['layers']}/{info['of_layers']} layers + final norm and head "
        f"({info['n_parameters'] / 1e6:.1f}M params)"
    )


def _draft_line(info: dict, role: str = "draft") -> str:
    return f"{role} [bold]{describe(info)}[/]"


# ------------------------------------------------------------------------------------------------ spec-accept
def print_spec_accept(console: Console, result: dict) -> None:
    console.print(run_header(result))
    console.print(_draft_line(result["provenance"]["draft"]) + "   (p = target, q = draft)")
    for t in accept_tables(result):
        console.print(t)


# ------------------------------------------------------------------------------------------------ distill
def distill_tables(result: dict) -> list[Table]:
    a = _table(
        "Distillation loss",
        ["T", "H(y, q) at T=1", "KL(p_T‖q_T)", "T²·KL", "L", "L bits", "H(p_T, q_T)"],
        f"L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T), α = {result['alpha']:g}; nats (L in bits)",
    )
    b = _table(
        "The teacher at T",
        ["T", "H(p_T) bits", "tail mass 1 − max p_T", "‖∂KL/∂z_q‖", "T²·‖∂KL/∂z_q‖"],
        "the teacher at T ('dark knowledge') and what T² does to the soft gradient ‖∂KL(p_T‖q_T)/∂z_q‖₂",
    )
    for r in result["rows"]:
        a.add_row(
            f"{r['temperature']:g}",
            fmt_pm(r["hard_ce"], r["hard_ce_se"], 3),
            fmt_pm(r["kl"], r["kl_se"]),
            fmt_num(r["t2_kl"]),
            fmt_pm(r["loss"], r["loss_se"]),
            fmt_num(r["loss_bits"]),
            fmt_num(r["soft_ce"], 3),
        )
        b.add_row(
            f"{r['temperature']:g}",
            fmt_num(r["teacher_entropy_bits"], 3),
            fmt_num(r["teacher_tail_mass"]),
            fmt_num(r["grad_norm"]),
            fmt_num(r["t2_grad_norm"]),
        )
    return [a, b]


def print_distill(console: Console, result: dict) -> None:
    console.print(run_header(result))
    console.print(_draft_line(result["provenance"]["student"], "student") + "   (p = teacher, q = student)")
    for t in distill_tables(result):
        console.print(t)
    g = result["grad_check"]
    console.print(
        f"gradient check on {g['positions']} positions: closed form (q_T − p_T)/T vs autograd, "
        f"max |difference| {fmt_num(g['max_abs_diff'], 2)} (largest |gradient| {fmt_num(g['max_abs_grad'], 3)})"
    )


# ------------------------------------------------------------------------------------------------ spec-decode
def print_spec_decode(console: Console, result: dict) -> None:
    pv, s = result["provenance"], result["settings"]
    m = pv["model"]
    console.print(
        f"target [bold]{m['spec']}[/] ({m['architecture']}, {m['n_parameters'] / 1e6:.1f}M params, {pv['dtype']} on "
        f"{pv['device']}, {pv['torch_threads']} threads)  {_draft_line(pv['draft'])}\n"
        f"prompt {pv['prompt']['tokens']} tokens; γ = {s['gamma']}, {s['max_new_tokens']} new tokens, T = "
        f"{s['temperature']:g}, "
        f"seed {s['seed']}, best of {s['repeats']}; EOS does not stop either loop"
    )
    t = _table(
        "Speculative vs plain sampling",
        [
            "method",
            "wall s",
            "tokens/s",
            "target calls",
            "tokens/call",
            "draft calls",
            "accepted/proposed",
            "α̂",
            "speed-up",
        ],
        "speculative sampling against plain sampling from the target",
    )
    for name in ("plain", "speculative"):
        r = result[name]
        spec = name == "speculative"
        t.add_row(
            name,
            fmt_num(r["wall_s"], 3),
            fmt_num(r["tokens_per_s"], 3),
            fmt_num(r["target_calls"]),
            fmt_num(r["tokens_per_target_call"], 3),
            fmt_num(r["draft_calls"]) if spec else "–",
            f"{r['accepted']}/{r['proposed']}" if spec else "–",
            fmt_num(r["alpha"], 3) if spec else "–",
            fmt_num(result["speedup"], 3) + "×" if spec else "1×",
        )
    console.print(t)
    mo = result["model_of_speedup"]
    console.print(
        f"model: E(α̂ = {fmt_num(mo['alpha'], 3)}, γ = {s['gamma']}) = "
        f"{fmt_num(mo['predicted_tokens_per_call'], 3)} tokens per target call; "
        f"per call: target step {fmt_num(mo['target_step_s'] * 1e3, 3)} ms, draft step "
        f"{fmt_num(mo['draft_step_s'] * 1e3, 3)} ms "
        f"(c = {fmt_num(mo['cost_ratio'], 3)}), verifying call {fmt_num(mo['verify_call_s'] * 1e3, 3)} ms (v = "
        f"{fmt_num(mo['verify_cost'], 3)}); "
        f"predicted speed-up E/(γc + v) = {fmt_num(mo['predicted_speedup'], 3)}× (papers' E/(γc + 1) = "
        f"{fmt_num(mo['predicted_speedup_papers'], 3)}×); this draft pays off only when α > "
        f"{fmt_num(mo['break_even_alpha'], 3)}"
    )
    console.print(f"[dim]speculative sample:[/] {result['speculative']['text'][:400]!r}")
    if result.get("verify"):
        console.print(verify_table(result["verify"]))


def _pval(p) -> str:
    return "< 1e-300" if p == 0 else fmt_num(p, 3)


def verify_table(v: dict) -> Table:
    t = _table(
        "Theorem 1 by Monte Carlo",
        ["sampler", "χ² vs target (df)", "p-value", "χ² vs draft (df)", "p-value"],
        f"first two emitted tokens, {v['samples']:,} samples per sampler, χ² against each model's exact law "
        f"({len(v['cells'])} cells + other; seed {v['seed']})",
    )
    for r in v["rows"]:
        vt, vd = r["vs_target"], r["vs_draft"]
        t.add_row(
            r["sampler"],
            f"{fmt_num(vt['stat'], 3)} ({vt['df']})",
            _pval(vt["p_value"]),
            f"{fmt_num(vd['stat'], 3)} ({vd['df']})",
            _pval(vd["p_value"]),
        )
    return t


# ------------------------------------------------------------------------------------------------ temperature
def print_temperature(console: Console, result: dict) -> None:
    src = result["provenance"]["source"]
    if src["kind"] == "model":
        console.print(
            f"model [bold]{src['model']['spec']}[/], next token after a {src['prompt_tokens']}-token prompt; "
            f"the {len(result['labels'])} likeliest of {src['vocab']:,} tokens shown, the rest summed in 'other'"
        )
    cols = (
        ["T", *result["labels"]]
        + (["other"] if src["kind"] == "model" else [])
        + ["top prob", "tail mass", "entropy bits"]
    )
    t = _table("softmax(z / T)", cols, "probability of each class, top probability, tail mass 1 − top, entropy")
    t.add_row(
        "z",
        *[fmt_num(z, 3) for z in result["logits"]],
        *([""] if src["kind"] == "model" else []),
        "",
        "",
        "",
        end_section=True,
    )
    for r in result["rows"]:
        t.add_row(
            f"{r['temperature']:g}",
            *[fmt_num(p, 3) for p in r["probs"]],
            *([fmt_num(r["other"], 3)] if src["kind"] == "model" else []),
            fmt_num(r["top_prob"], 3),
            fmt_num(r["tail_mass"], 3),
            fmt_num(r["entropy_bits"], 3),
        )
    console.print(t)
