"""quantize-compare's views of many variants: the paired verdicts against ``--baseline`` (each metric's
difference ± SE and verdict; ``measure/paired.py``), the bits-against-KL frontier (``measure/frontier.py``) and
``--table confidence``: mean KL and top-1 by the reference's top-1 probability (``measure/confidence.py``)."""

from __future__ import annotations

from rich.table import Table

from infoeval.measure.frontier import frontier_points
from infoeval.measure.paired import LABELS as COLUMNS  # noqa: E402  (metric → its column's title)
from infoeval.output.tables import ReportTable, fmt_num, fmt_pm, report_table

STYLE = {"better": "green", "worse": "red", "not distinguishable": "dim"}
WORD = {"better": "better", "worse": "worse", "not distinguishable": "≈"}


def cell(row: dict) -> str:
    """One metric's difference ± SE and its verdict, coloured (≈: not distinguishable)."""
    style = STYLE[row["verdict"]]
    return f"[{style}]{fmt_pm(row['diff'], row['se'])} {WORD[row['verdict']]}[/]"


def paired_table(paired: dict) -> ReportTable:
    """A row per variant: the differences from the baseline with their verdicts, and the top-1 flips."""
    caption = (
        f"variant − {paired['baseline']} on the same positions; ± batch-means SE (KL P99: bootstrap over the batches); "
        f"better / worse: two-sided at α = {paired['alpha']:g} after Holm across the variants, ≈ not distinguishable; "
        "flips: positions where only the baseline / only the variant agrees with the reference's top-1"
    )
    table = report_table(f"paired against {paired['baseline']}", ["variant", *COLUMNS.values(), "top-1 flips"], caption)
    for name, row in paired["variants"].items():
        f = row["top1_flips"]
        table.add_row(name, *(cell(row[m]) for m in COLUMNS), f"{f['baseline_only']:,} / {f['variant_only']:,}")
    return table


def frontier_table(result: dict) -> Table:
    """The variants by stored bits per weight with their mean and P99.9 KL, and the figures on whose frontier each
    stands (no variant with at most its bits has a lower value)."""
    t = report_table(
        "Bits against KL",
        ["variant", "bits/weight", "mean KL", "KL P99.9", "on the frontier of"],
        "stored bits per weight; a variant is on a figure's frontier when no other stores at most its bits "
        "with a lower value",
    )
    for p in frontier_points(result):
        on = [{"kl_mean": "mean KL", "kl_p999": "P99.9"}[f] for f in p["on"]]
        t.add_row(
            p["name"],
            fmt_num(p["bits"], 4),
            fmt_num(p["kl_mean"], 4),
            fmt_num(p["kl_p999"], 3),
            f"[green]{', '.join(on)}[/]" if on else "[dim]–[/]",
            style=None if on else "dim",
        )
    return t


def confidence_tables(result: dict) -> list[Table]:
    """Mean KL, then top-1 agreement, by bucket of the reference's top-1 probability: a row per bucket (its range
    and count), a column per variant."""
    block, names = result["by_confidence"], list(result["by_confidence"]["variants"])
    edges, tables = block["edges"], []
    for metric, title, digits in (
        ("kl_mean", "Mean KL by the reference's confidence", 4),
        ("top1", "Top-1 agreement by the reference's confidence", 3),
    ):
        t = report_table(
            title,
            ["reference's top-1 p", "positions", *names],
            "buckets of the reference's top-1 probability, [lo, hi) (the last [0.9, 1]); – : no position in the bucket",
        )
        for i, count in enumerate(block["counts"]):
            cells = [v[metric][i] for v in block["variants"].values()]
            t.add_row(
                f"{edges[i]:.1f}–{edges[i + 1]:.1f}",
                f"{count:,}",
                *("–" if c is None else fmt_num(c, digits) for c in cells),
            )
        tables.append(t)
    return tables
