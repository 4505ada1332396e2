"""kl-fit as a rich table and a CSV frame; no torch import."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from infoeval.output.tables import report_table

KLFIT_CSV_COLUMNS = ["direction", "start", "centre", "width", "kl", "kl_forward", "kl_reverse", "q_mean", "q_sd"]


def klfit_frame(result: dict) -> pd.DataFrame:
    return pd.DataFrame(result["fits"]).reindex(columns=KLFIT_CSV_COLUMNS)


def klfit_table(result: dict) -> Table:
    s = result["settings"]
    target = " + ".join(f"{b['weight']:g}·bump({b['centre']:g}, {b['width']:g})" for b in s["target"])
    t = report_table(
        "Forward vs reverse KL",
        ["minimizes", "from μ₀", "centre μ", "width σ", "KL", "KL(p‖q)", "KL(q‖p)", "q mean", "q sd"],
        f"q = softmax(−½((x − μ)/σ)²) fitted to p ∝ {target} on x = 0…{s['support'] - 1} "
        f"(Adam, lr {s['lr']:g}, {s['steps']} steps, σ₀ = {s['sigma0']:g}); KL in nats",
        no_wrap=True,
    )
    for f in result["fits"]:
        t.add_row(
            f"{f['direction']} {'KL(p‖q)' if f['direction'] == 'forward' else 'KL(q‖p)'}",
            f"{f['start']:g}",
            f"{f['centre']:.1f}",
            f"{f['width']:.1f}",
            f"{f['kl']:.3f}",
            f"{f['kl_forward']:.3f}",
            f"{f['kl_reverse']:.3f}",
            f"{f['q_mean']:.1f}",
            f"{f['q_sd']:.1f}",
        )
    return t


def print_kl_fit(console: Console, result: dict) -> None:
    console.print(klfit_table(result))
    console.print(
        "forward KL(p‖q) is mode covering (q spreads to cover all of p and, in the Gaussian family, matches p's "
        "mean and sd on the grid); reverse KL(q‖p) is mode seeking (q settles on one mode, which depends on the start)"
    )
