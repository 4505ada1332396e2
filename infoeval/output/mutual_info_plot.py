"""The mutual-info command's figure: I(L) against the block length on log-log axes with its fitted power law, and
Y's bits per token with and without X (the figure plumbing: ``plots``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infoeval.output.plots import _figure, _save, _subject


def _plain_log_labels(axis) -> None:
    """Tick labels like 20, 50, 100 on a log axis (not 2×10¹), minor ones too when the range is short."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def plot_mutual_info(result: dict, path: Path) -> None:
    """Left: I(L) ± 1.96 SE on log-log axes with the fitted line; right: Y's bits per token with and without X."""
    rows = result["lengths"]
    L = np.array([r["length"] for r in rows], dtype=float)
    mi = np.array([r["mi_bits"] for r in rows])
    se = np.array([r["mi_bits_se"] for r in rows])
    fig, (ax, bx) = _figure(2)
    pos = mi > 0
    if pos.any():
        floor = mi[pos].min() / 4  # a lower whisker reaching 0 or below is cut here (a log axis has no 0)
        lo = np.minimum(1.96 * se, mi - floor)
        ax.errorbar(
            L[pos], mi[pos], yerr=[lo[pos], 1.96 * se[pos]], fmt="o", capsize=3, label="mean I ± 1.96 SE over blocks"
        )
    if not pos.all():
        ax.plot([], [], " ", label=f"not drawn, mean I ≤ 0: L = {', '.join(str(int(v)) for v in L[~pos])}")
    fit = (result.get("fit") or {}).get("fit")
    if fit:
        grid = np.geomspace(L.min(), L.max(), 100)
        ax.plot(
            grid,
            fit["a"] * grid ** fit["beta"],
            "-",
            color="tab:red",
            label=f"fit I = {fit['a']:.3g}·L^{fit['beta']:.3f}, β 95% CI [{fit['beta_low']:.3f}, "
            f"{fit['beta_high']:.3f}]",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(L, [str(int(v)) for v in L])
    ax.set_yscale("log")
    _plain_log_labels(ax.yaxis)
    if pos.any():
        ax.set_ylim(bottom=floor)  # after every artist, so the top still fits them all
    ax.set_xlabel("block length L, tokens (X = first L/2, Y = last L/2)")
    ax.set_ylabel("I(X; Y) ≈ H(Y) − H(Y|X), bits")
    ax.set_title("Bipartite mutual information")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left")
    for key, label in (
        ("marginal_bits_per_token", "H(Y)/(L/2): Y after the start token only"),
        ("conditional_bits_per_token", "H(Y|X)/(L/2): Y after the start token and X"),
    ):
        y = np.array([r[key] for r in rows])
        e = np.array([r[key + "_se"] for r in rows])
        bx.errorbar(L, y, yerr=1.96 * e, fmt="o-", capsize=3, label=label)
    bx.set_xscale("log", base=2)
    bx.set_xticks(L, [str(int(v)) for v in L])
    bx.set_xlabel("block length L, tokens")
    bx.set_ylabel("bits per token of Y (mean ± 1.96 SE)")
    bx.set_title("Per-token view: what X saves on Y")
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(loc="upper right")
    blocks = sorted({r["blocks"] for r in rows})
    fig.suptitle(f"mutual-info: {_subject(result)}, {'/'.join(map(str, blocks))} blocks per length")
    _save(fig, path)
