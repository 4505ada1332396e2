"""mix as rich tables, a CSV frame and a plot, read from the result's JSON. No torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from infoeval.output.tables import fmt_num, fmt_pm, report_table, run_header

CSV_COLUMNS = [
    "name",
    "kind",
    "bits_per_weight",
    "budgets",
    "predicted_kl",
    "measured_kl",
    "measured_kl_se",
    "additivity",
    "kl_p99",
    "top1",
    "ln_ppl_ratio",
    "ln_ppl_ratio_se",
    "ppl",
    "tokens",
]


def summary_frame(result: dict) -> pd.DataFrame:
    """One row per measured variant (mixes and uniform schemes), ordered by bits."""
    rows = []
    for r in sorted(result["measured"], key=lambda r: r["bits_per_weight"]):
        m = r["metrics"]
        rows.append(
            {
                **{k: r[k] for k in CSV_COLUMNS[:8]},
                "budgets": " ".join(f"{b:g}" for b in r["budgets"]),
                **{k: m[k] for k in CSV_COLUMNS[8:]},
            }
        )
    return pd.DataFrame(rows).reindex(columns=CSV_COLUMNS)


def units_table(result: dict):
    schemes = result["settings"]["schemes"]
    chosen = result["solutions"][0]["choice"]
    t = report_table(
        "Per-unit KL (each unit quantized alone)",
        ["unit", *schemes, "chosen"],
        "mean KL(reference ‖ variant) in nats on the sweep's tokens; 'chosen' is the mix at --budget-bits",
    )
    for u in result["units"]:
        t.add_row(u["unit"], *[fmt_num(u["schemes"][s]["kl_mean"], 3) for s in schemes], chosen[u["unit"]])
    return t


def measured_table(result: dict):
    held = result["held_out"]
    span = held["measured"]
    t = report_table(
        "Held-out measurement",
        ["variant", "bits/weight", "predicted KL", "measured KL", "additivity", "top-1", "Δ ln PPL"],
        f"on {span['tokens']:,} tokens (stream {span['first_target']}…{span['last_target']}); {held['note']}; "
        "predicted = Σ of the units' own KLs, additivity = measured / predicted",
        no_wrap=True,
    )
    for r in sorted(result["measured"], key=lambda r: r["bits_per_weight"]):
        m = r["metrics"]
        t.add_row(
            r["name"],
            f"{r['bits_per_weight']:.4f}",
            fmt_num(r["predicted_kl"], 4),
            fmt_pm(m["kl_mean"], m["kl_se"]),
            fmt_num(r["additivity"], 3),
            fmt_pm(100 * m["top1"], 100 * m["top1_se"], 2) + " %",
            fmt_pm(m["ln_ppl_ratio"], m["ln_ppl_ratio_se"]),
        )
    return t


def target_line(result: dict) -> str:
    s = result["solutions"][0]
    how = "exact" if s["method"] == "exact" else f"{s['method']}, gap ≤ {s['gap']:.3g} nats"
    line = (
        f"budget {s['budget_bits']:.4f} bits/weight → {s['variant']} at {s['bits_per_weight']:.4f} ({how}), "
        f"predicted KL {s['predicted_kl']:.4f}"
    )
    tg = result.get("target")
    if tg:
        line += (
            f"; measured {tg['mix_kl']:.4f} vs uniform {tg['uniform']} {tg['uniform_kl']:.4f} at "
            f"{tg['uniform_bits']:.4f} bits: "
            f"ratio [bold]{tg['ratio']:.3f}[/] (predicted {tg['predicted_ratio']:.3f})"
        )
    return line


def print_mix(console: Console, result: dict) -> None:
    console.print(run_header(result))
    console.print(units_table(result))
    console.print(measured_table(result))
    console.print(target_line(result))
    lc = result["exports"]["llama_cpp"]
    if lc["unmapped"]:
        console.print(
            f"llama.cpp list not written: {len(lc['unmapped'])} layers have no GGUF name (e.g. {lc['unmapped'][0]})"
        )
    ct = result["exports"]["compressed_tensors"]
    if ct["config"] is None:
        console.print(f"compressed-tensors config_groups not written: {ct['reason']}")


def plot_mix(result: dict, path: Path) -> None:
    """Measured and predicted mean KL against stored bits per weight: the mixes as a curve, the uniform schemes as
    points (log KL axis)."""
    from infoeval.output.plots import _figure, _save, _subject

    fig, (ax,) = _figure(1)
    rows = sorted(result["measured"], key=lambda r: r["bits_per_weight"])
    for kind, style in (("mix", "-o"), ("uniform", "s")):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue
        x = np.array([r["bits_per_weight"] for r in sel])
        y = np.array([r["measured_kl"] for r in sel])
        se = np.array([r["measured_kl_se"] for r in sel])
        ax.errorbar(x, y, yerr=1.96 * se, fmt=style, capsize=3, label=f"{kind}: measured (± 1.96 SE)")
        ax.plot(
            x,
            [r["predicted_kl"] for r in sel],
            "x" if kind == "uniform" else "--",
            label=f"{kind}: predicted Σ unit KL",
        )
        if kind == "uniform":
            for r in sel:
                ax.annotate(
                    r["name"], (r["bits_per_weight"], r["measured_kl"]), textcoords="offset points", xytext=(5, 5)
                )
    ax.set_yscale("log")
    ax.set_xlabel("stored bits per quantized weight (codes + fp16 scales)")
    ax.set_ylabel("mean KL(reference ‖ variant), nats (log scale)")
    ax.set_title(f"KL vs bits: mixes by {result['settings']['by']} and uniform schemes, {_subject(result)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best")
    _save(fig, path)
