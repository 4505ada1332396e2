"""Rich tables and CSV frames for mutual-info and kl-fit; no torch import."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table


MI_CSV_COLUMNS = [
    "length", "blocks", "mi_bits", "mi_bits_se", "mi_bits_sd", "mi_bits_per_token", "mi_bits_fit",
    "marginal_bits_per_token", "marginal_bits_per_token_se", "conditional_bits_per_token",
    "conditional_bits_per_token_se", "seconds",
]  # fmt: skip
BLOCK_COLUMNS = ["length", "block", "x_start", "y_start", "end", "byte_start", "byte_end", "marginal_bits", "conditional_bits", "mi_bits"]
KLFIT_CSV_COLUMNS = ["direction", "start", "centre", "width", "kl", "kl_forward", "kl_reverse", "q_mean", "q_sd"]


def mi_summary_frame(result: dict) -> pd.DataFrame:
    """One row per length."""
    return pd.DataFrame(result["lengths"]).reindex(columns=MI_CSV_COLUMNS)


def mi_blocks_frame(result: dict) -> pd.DataFrame:
    """One row per block: where it lies (stream positions, byte offsets) and its bits."""
    return pd.DataFrame(result["blocks"]).reindex(columns=BLOCK_COLUMNS)


def klfit_frame(result: dict) -> pd.DataFrame:
    return pd.DataFrame(result["fits"]).reindex(columns=KLFIT_CSV_COLUMNS)


def fit_line(result: dict) -> str:
    """The power-law fit in one line, or why there is none."""
    fit = result["fit"]
    if not fit.get("fit"):
        return f"no power-law fit: {fit.get('reason')}"
    f = fit["fit"]
    kind = "paired" if f["paired"] else "independent"
    dropped = f"; not fitted (mean I ≤ 0): {', '.join(map(str, fit['lengths_dropped']))}" if fit["lengths_dropped"] else ""
    return (
        f"fit I(L) ≈ A·L^β by least squares in log-log space: A = {f['a']:.4g} bits, [bold]β = {f['beta']:.3f}[/] "
        f"({100 * fit['level']:.0f}% CI [{f['beta_low']:.3f}, {f['beta_high']:.3f}], {kind} bootstrap over blocks, "
        f"{f['bootstrap_used']}/{f['bootstrap_replicates']} replicates, seed {f['seed']}), R² = {f['r2']:.4f}{dropped}"
    )


def mi_table(result: dict) -> Table:
    t = Table(title="Bipartite mutual information I(X;Y) ≈ H(Y) − H(Y|X), X = first L/2 tokens, Y = last L/2 (bits)",
              title_justify="left")  # fmt: skip
    for c in ("L", "blocks", "I ± SE (bits)", "I/token", "H(Y)/token", "H(Y|X)/token", "fit A·L^β", "seconds"):
        t.add_column(c, justify="right", no_wrap=True)
    for r in result["lengths"]:
        t.add_row(
            str(r["length"]), str(r["blocks"]), f"{r['mi_bits']:.2f} ± {r['mi_bits_se']:.2f}", f"{r['mi_bits_per_token']:.3f}",
            f"{r['marginal_bits_per_token']:.3f} ± {r['marginal_bits_per_token_se']:.3f}",
            f"{r['conditional_bits_per_token']:.3f} ± {r['conditional_bits_per_token_se']:.3f}",
            "–" if r["mi_bits_fit"] is None else f"{r['mi_bits_fit']:.2f}", f"{r['seconds']:.1f}",
        )  # fmt: skip
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
            f"[yellow]note:[/] {pr['blocks_requested']} blocks were asked for, but the text (or --max-tokens) holds only "
            + ", ".join(f"{v} of L = {k}" for k, v in short.items())
        )
    console.print(mi_table(result))
    console.print(fit_line(result))


def klfit_table(result: dict) -> Table:
    s = result["settings"]
    target = " + ".join(f"{b['weight']:g}·bump({b['centre']:g}, {b['width']:g})" for b in s["target"])
    t = Table(
        title=f"Forward vs reverse KL: q = softmax(−½((x − μ)/σ)²) fitted to p ∝ {target} on x = 0…{s['support'] - 1} "
        f"(Adam, lr {s['lr']:g}, {s['steps']} steps, σ₀ = {s['sigma0']:g}); KL in nats",
        title_justify="left",
    )
    for c in ("minimizes", "from μ₀", "centre μ", "width σ", "KL", "KL(p‖q)", "KL(q‖p)", "q mean", "q sd"):
        t.add_column(c, justify="left" if c == "minimizes" else "right", no_wrap=True)
    for f in result["fits"]:
        t.add_row(
            f"{f['direction']} {'KL(p‖q)' if f['direction'] == 'forward' else 'KL(q‖p)'}", f"{f['start']:g}",
            f"{f['centre']:.1f}", f"{f['width']:.1f}", f"{f['kl']:.3f}", f"{f['kl_forward']:.3f}",
            f"{f['kl_reverse']:.3f}", f"{f['q_mean']:.1f}", f"{f['q_sd']:.1f}",
        )  # fmt: skip
    return t


def print_kl_fit(console: Console, result: dict) -> None:
    console.print(klfit_table(result))
    console.print(
        "forward KL(p‖q) is mode covering (q spreads to cover all of p and, in the Gaussian family, matches p's "
        "mean and sd on the grid); reverse KL(q‖p) is mode seeking (q settles on one mode, which depends on the start)"
    )
