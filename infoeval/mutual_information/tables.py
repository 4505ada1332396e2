"""Rich tables and CSV frames for mutual-info; no torch import."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from infoeval.output.tables import report_table

MI_CSV_COLUMNS = [
    "length",
    "blocks",
    "mi_bits",
    "mi_bits_se",
    "mi_bits_sd",
    "mi_bits_per_token",
    "mi_bits_fit",
    "marginal_bits_per_token",
    "marginal_bits_per_token_se",
    "conditional_bits_per_token",
    "conditional_bits_per_token_se",
    "seconds",
]
BLOCK_COLUMNS = [
    "length",
    "block",
    "x_start",
    "y_start",
    "end",
    "byte_start",
    "byte_end",
    "marginal_bits",
    "conditional_bits",
    "mi_bits",
]


def mi_summary_frame(result: dict) -> pd.DataFrame:
    """One row per length."""
    return pd.DataFrame(result["lengths"]).reindex(columns=MI_CSV_COLUMNS)


def mi_blocks_frame(result: dict) -> pd.DataFrame:
    """One row per block: where it lies (stream positions, byte offsets) and its bits."""
    return pd.DataFrame(result["blocks"]).reindex(columns=BLOCK_COLUMNS)


def fit_line(result: dict) -> str:
    """The power-law fit in one line, or why there is none."""
    fit = result["fit"]
    if not fit.get("fit"):
        return f"no power-law fit: {fit.get('reason')}"
    f = fit["fit"]
    kind = "paired" if f["paired"] else "independent"
    dropped = (
        f"; not fitted (mean I ≤ 0): {', '.join(map(str, fit['lengths_dropped']))}" if fit["lengths_dropped"] else ""
    )
    return (
        f"fit I(L) ≈ A·L^β by least squares in log-log space: A = {f['a']:.4g} bits, [bold]β = {f['beta']:.3f}[/] "
        f"({100 * fit['level']:.0f}% CI [{f['beta_low']:.3f}, {f['beta_high']:.3f}], {kind} bootstrap over blocks, "
        f"{f['bootstrap_used']}/{f['bootstrap_replicates']} replicates, seed {f['seed']}), R² = {f['r2']:.4f}{dropped}"
    )


def mi_table(result: dict) -> Table:
    t = report_table(
        "Mutual information",
        ["L", "blocks", "I ± SE (bits)", "I/token", "H(Y)/token", "H(Y|X)/token", "fit A·L^β", "seconds"],
        "bipartite mutual information I(X;Y) ≈ H(Y) − H(Y|X), X = first L/2 tokens, Y = last L/2 (bits)",
        left=0,
        no_wrap=True,
    )
    for r in result["lengths"]:
        t.add_row(
            str(r["length"]),
            str(r["blocks"]),
            f"{r['mi_bits']:.2f} ± {r['mi_bits_se']:.2f}",
            f"{r['mi_bits_per_token']:.3f}",
            f"{r['marginal_bits_per_token']:.3f} ± {r['marginal_bits_per_token_se']:.3f}",
            f"{r['conditional_bits_per_token']:.3f} ± {r['conditional_bits_per_token_se']:.3f}",
            "–" if r["mi_bits_fit"] is None else f"{r['mi_bits_fit']:.2f}",
            f"{r['seconds']:.1f}",
        )
    return t


def print_mutual_info(console: Console, result: dict) -> None:
    pv = result["provenance"]
    m, t, pr = pv["model"], pv["text"], pv["protocol"]
    console.print(
        f"model [bold]{m['spec']}[/] ({m['architecture']}, {m['n_parameters'] / 1e6:.1f}M params, {pv['dtype']} on "
        f"{pv['device']})  text [bold]{t['source']}[/] ({t['path'] or t['source']}, sha256 {t['sha256'][:12]})\n"
        f"start token: {pr['prefix_token']} (id {pr['prefix_id']}); blocks of every length start every "
        f"{max(result['settings']['lengths']):,} tokens; {pr['tokens_available']:,} text tokens available"
    )
    short = {k: v for k, v in pr["blocks"].items() if v < pr["blocks_requested"]}
    if short:
        console.print(
            f"[yellow]note:[/] {pr['blocks_requested']} blocks were asked for, but the text (or --max-tokens) "
            "holds only " + ", ".join(f"{v} of L = {k}" for k, v in short.items())
        )
    console.print(mi_table(result))
    console.print(fit_line(result))
