"""sensitivity's plot: mean KL (± 1.96 SE) of each unit along the depth, one line per layer type (by linear),
one line of blocks (by block), or a bar per type (by type); the proxy dashed in the same colour. Uses
``plots``' figure helpers (matplotlib optional); no torch import."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infoeval.output import plots


def series(data: dict, scheme: str) -> dict[str, list[dict]]:
    """Units of one scheme grouped into the plot's lines: by layer type (the name after the block index) for
    --by linear, one line 'block' for --by block, one entry per type for --by type; each line in depth order."""
    out: dict[str, list[dict]] = {}
    for u in data["units"]:
        if u["scheme"] != scheme:
            continue
        label = {
            "linear": lambda n: n.split(".", 3)[-1] if n.count(".") >= 3 else n,
            "block": lambda n: "block",
            "type": lambda n: n,
        }[u["kind"]](u["unit"])
        out.setdefault(label, []).append(u)
    return {k: sorted(v, key=lambda u: u["depth"]) for k, v in out.items()}


def _floor(values) -> np.ndarray:
    return np.maximum(np.asarray([v if v is not None else np.nan for v in values], dtype=float), plots.KL_FLOOR)


def _bars(ax, lines: dict[str, list[dict]]) -> None:
    names = list(lines)
    kl = _floor([lines[n][0]["kl_mean"] for n in names])
    se = np.asarray([lines[n][0]["kl_se"] or 0.0 for n in names])
    x = np.arange(len(names))
    ax.bar(x, kl, yerr=1.96 * se, color="tab:blue", label="direct mean KL ± 1.96 SE")
    proxy = [lines[n][0]["proxy"] for n in names]
    if any(p is not None for p in proxy):
        ax.plot(x, _floor(proxy), "o", color="tab:red", label="diagonal-Fisher proxy")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_xlabel("layer type (every block)")


def _lines(ax, lines: dict[str, list[dict]]) -> None:
    for i, (name, units) in enumerate(lines.items()):
        colour = f"C{i % 10}"
        x = np.asarray([u["depth"] for u in units])
        kl = _floor([u["kl_mean"] for u in units])
        se = np.asarray([u["kl_se"] or 0.0 for u in units])
        ax.errorbar(x, kl, yerr=1.96 * se, color=colour, marker="o", ms=3, lw=1.2, capsize=2, label=name)
        if any(u["proxy"] is not None for u in units):
            ax.plot(x, _floor([u["proxy"] for u in units]), color=colour, ls="--", lw=0.8, alpha=0.7)
    ax.set_xlabel("decoder block (dashed: the diagonal-Fisher proxy)")


def plot_sensitivity(data: dict, path: Path) -> None:
    """One panel per scheme (at most 3): KL per unit along depth, log y."""
    schemes = data["schemes"][:3]
    fig, axes = plots._figure(len(schemes))
    for ax, scheme in zip(axes, schemes):
        lines = series(data, scheme)
        (_bars if data["by"] == "type" else _lines)(ax, lines)
        ax.set_yscale("log")
        ax.set_ylabel("mean KL(reference ‖ unit quantized), nats/token")
        ax.set_title(f"{scheme}: each {data['by']} quantized alone")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    tokens = data["reference"]["tokens"]
    fig.suptitle(f"sensitivity: {plots._subject(data)}, {tokens:,} scored tokens")
    plots._save(fig, path)
