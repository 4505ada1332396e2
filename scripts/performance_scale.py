"""The performance page's "How cost grows" section, from ``benchmarks/results/scale.json`` (``benchmarks/scale.py``):
per model, each plan's wall time per scored token, measured peak RSS against the memory plan's estimate (or the line
the plan was refused with), and the reference files' bytes per position against llama.cpp's 2·V."""

from __future__ import annotations


def _mib(x: float) -> str:
    return f"{x:,.0f}"


def _run_row(row: dict, plan: str, run: dict) -> list[str]:
    head = [row["model"], f"{row['parameters'] / 1e9:.2f} B", row["dtype"], f"`{plan}`"]
    if "wall_s" not in run:
        return [*head, "refused", "–", "–", "–", "–", run.get("said", "").replace("|", "\\|")]
    taken = run["plan_taken"] if run["plan_taken"] != plan else ""
    return [
        *head,
        run["plan_taken"] if taken else "ran",
        f"{run['wall_s']:,.1f} s",
        f"{1000 * run['s_per_scored_token']:,.1f} ms",
        _mib(run["peak_rss_mib"]),
        f"{_mib(run['estimate_mib'])} ({run['estimate_over_measured']:.3f}×)",
        "",
    ]


def scale_section(rec: dict | None) -> list[str]:
    """The section's markdown lines (a note where the record is missing)."""
    out = ["## How cost grows", ""]
    if rec is None:
        return out + ["No `benchmarks/results/scale.json` yet: run `python benchmarks/scale.py --save`.", ""]
    f = rec["figures"]
    if not all("runs" in row for row in f["rows"]):
        return out + ["The scale record predates `--plan`: run `python benchmarks/scale.py --save`.", ""]
    out += [
        f"quantize-compare with the default three schemes on {f['tokens']:,} tokens (ctx {f['ctx']}), the noise "
        "floor on, each run a fresh process under `--plan` (the memory budget: 90 % of the memory available); the "
        "Qwen3 shapes carry seeded random weights. `estimate`: the plan's peak as estimated from the config before "
        "anything loaded, against the measured peak RSS. Details under [scale](#scale).",
        "",
        "| model | parameters | dtype | --plan | outcome | wall | per token | peak MiB | estimate MiB | said |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in f["rows"]:
        for plan, run in row["runs"].items():
            out.append("| " + " | ".join(_run_row(row, plan, run)) + " |")
    out.append("")
    ratios = [
        (r["model"], r["reference_first_over_lockstep_wall"])
        for r in f["rows"]
        if "reference_first_over_lockstep_wall" in r
    ]
    if ratios:
        out += [
            "reference-first's wall over the lockstep's, same run: " + ", ".join(f"{m} {x:.3f}×" for m, x in ratios),
            "",
        ]
    sized = [r for r in f["rows"] if "reference_bytes_per_position" in r]
    if sized:
        out += [
            "Reference files, bytes per scored position (`--format hidden` with the candidate's head):",
            "",
            "| model | top-K file | hidden states | llama.cpp 2·V | hidden / llama.cpp |",
            "|---|---|---|---|---|",
        ]
        for r in sized:
            b = r["reference_bytes_per_position"]
            out.append(
                f"| {r['model']} | {b['topk']:,.0f} | {b['hidden']:,.0f} | {b['llama_cpp']:,} | "
                f"{100 * b['hidden_over_llama_cpp']:.1f} % |"
            )
        out.append("")
    return out
