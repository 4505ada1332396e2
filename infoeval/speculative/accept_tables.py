"""The rich tables of a spec-accept result: acceptance per condition, Pinsker's check, acceptance by entropy
quartile, tokens per target call and the runs of greedy top-1 matches; no torch import."""

from __future__ import annotations

from rich.table import Table

from infoeval.output.tables import fmt_num, fmt_pm, report_table


def _cond(c: dict) -> str:
    return f"T={c['temperature']:g} " + ("both" if c["mode"] == "both" else "target only")


def _acceptance_tables(conds: list[dict]) -> list[Table]:
    """Per condition: α, KL, TV, both entropies and NLLs; and Pinsker's bound checked, with r(H(p), β)."""
    a = report_table(
        "Acceptance of draft tokens",
        ["condition", "α", "KL(p‖q) nats", "TV", "H(p) bits", "H(q) bits", "NLL p", "NLL q"],
        "β = Σ min(p, q) per position, α = mean β (± one standard error)",
        no_wrap=True,
    )
    b = report_table(
        "Pinsker check",
        ["condition", "violations", "max TV/√(KL/2)", "Pearson r(H(p), β)", "n"],
        "Pinsker TV ≤ √(KL/2) at every position; correlation of the target's entropy with β",
        no_wrap=True,
    )
    for c in conds:
        a.add_row(
            _cond(c),
            fmt_pm(c["alpha"], c["alpha_se"]),
            fmt_pm(c["kl_mean"], c["kl_se"]),
            fmt_num(c["tv_mean"]),
            fmt_num(c["entropy_p_bits"], 3),
            fmt_num(c["entropy_q_bits"], 3),
            fmt_num(c["nll_p"], 3),
            fmt_num(c["nll_q"], 3),
        )
        pk = c["pinsker"]
        b.add_row(
            _cond(c),
            f"{pk['violations']} of {pk['checked']:,}",
            fmt_num(pk["max_ratio"]),
            fmt_num(c["pearson_r"]),
            fmt_num(c["pearson_n"]),
        )
    return [a, b]


def _quartile_table(conds: list[dict]) -> Table:
    """Per condition and target-entropy quartile: the entropy range, α, KL and top-1 agreement."""
    q = report_table(
        "Acceptance by entropy quartile",
        ["condition", "quartile", "H(p) range bits", "mean H(p)", "α", "KL nats", "top-1", "n"],
        "acceptance by target-entropy quartile (Q1 = most confident quarter of positions)",
        left=2,
        no_wrap=True,
    )
    for c in conds:
        for i, r in enumerate(c["quartiles"]):
            q.add_row(
                _cond(c) if i == 0 else "",
                r["quartile"],
                f"{fmt_num(r['entropy_min_bits'], 3)}–{fmt_num(r['entropy_max_bits'], 3)}",
                fmt_num(r["entropy_mean_bits"], 3),
                fmt_pm(r["alpha"], r["alpha_se"], 3),
                fmt_num(r["kl_mean"], 3),
                fmt_num(r["top1"], 3),
                fmt_num(r["n"]),
                end_section=i == 3,
            )
    return q


def _tokens_per_call_table(conds: list[dict]) -> Table:
    """Expected tokens per target call for each γ, a column per condition."""
    e = report_table(
        "Tokens per call",
        ["γ", *[_cond(c) for c in conds]],
        "expected tokens per target call E(γ) = (1 − α^(γ+1))/(1 − α): at α = mean β / mean over positions of E(β)",
        no_wrap=True,
    )
    for i, g in enumerate(r["gamma"] for r in conds[0]["expected_tokens"]):
        e.add_row(
            str(g),
            *[
                f"{fmt_num(c['expected_tokens'][i]['e_mean_alpha'], 3)} / "
                f"{fmt_num(c['expected_tokens'][i]['e_per_position'], 3)}"
                for c in conds
            ],
        )
    return e


def _top1_runs_table(t1: dict) -> Table:
    """Runs of consecutive greedy top-1 matches, by length, against their share if matches were independent."""
    r = report_table(
        "Top-1 runs",
        ["run length", "runs", "share", "share if independent"],
        f"greedy top-1 agreement {fmt_pm(100 * t1['top1'], 100 * t1['top1_se'], 2)} %: runs of consecutive matches "
        f"({t1['runs']:,} runs, mean {fmt_num(t1['run_mean'], 3)}, longest {t1['run_max']})",
        no_wrap=True,
    )
    for row in t1["run_lengths"]:
        r.add_row(
            row["length"], fmt_num(row["runs"]), fmt_num(row["share"], 3), fmt_num(row["share_if_independent"], 3)
        )
    return r


def accept_tables(result: dict) -> list[Table]:
    """spec-accept's tables: acceptance, the Pinsker check, acceptance by entropy quartile, tokens per call and
    top-1 runs."""
    conds = result["conditions"]
    return [
        *_acceptance_tables(conds),
        _quartile_table(conds),
        _tokens_per_call_table(conds),
        _top1_runs_table(result["top1"]),
    ]
