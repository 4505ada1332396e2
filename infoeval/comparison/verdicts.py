"""The paired verdicts' table (``quantize-compare --baseline NAME``): every other variant against the baseline on
the same positions, each metric's difference ± SE and its verdict (``measure/paired.py`` computes them)."""

from __future__ import annotations

from infoeval.output.report import ReportTable, fmt_pm, report_table

# metric → the column's title (variant − baseline)
COLUMNS = {"kl_mean": "Δ mean KL", "kl_p99": "Δ KL P99", "top1": "Δ top-1", "ln_ppl_ratio": "Δ ln PPL"}
STYLE = {"better": "green", "worse": "red", "not distinguishable": "dim"}
WORD = {"better": "better", "worse": "worse", "not distinguishable": "≈"}


def cell(row: dict) -> str:
    """One metric's difference ± SE and its verdict, coloured (≈: not distinguishable)."""
    style = STYLE[row["verdict"]]
    return f"[{style}]{fmt_pm(row['diff'], row['se'])} {WORD[row['verdict']]}[/]"


def paired_table(paired: dict) -> ReportTable:
    """A row per variant: the differences from the baseline with their verdicts, and the top-1 flips."""
    caption = (f"variant − {paired['baseline']} on the same positions; ± batch-means SE (KL P99: bootstrap over the batches); "
               f"better / worse: two-sided at α = {paired['alpha']:g} after Holm across the variants, ≈ not distinguishable; "
               "flips: positions where only the baseline / only the variant agrees with the reference's top-1")  # fmt: skip
    table = report_table(f"paired against {paired['baseline']}", ["variant", *COLUMNS.values(), "top-1 flips"], caption)
    for name, row in paired["variants"].items():
        f = row["top1_flips"]
        table.add_row(name, *(cell(row[m]) for m in COLUMNS), f"{f['baseline_only']:,} / {f['variant_only']:,}")
    return table
