"""PNG plots for the commands (matplotlib is optional: ``pip install 'infoeval[plot]'``).

Each plot stands on its own: a title naming the model and text, axis labels with units, a legend. Figures are
drawn on matplotlib's Agg canvas without pyplot (no display, no global state), at a fixed size of
``FIG_WIDTH_IN × FIG_HEIGHT_IN`` inches and ``DPI`` (1200 × 500 pixels for a PNG), and written atomically.
No torch import: the inputs are numpy arrays and result dicts.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from infoeval.errors import UsageError, spell

FIG_WIDTH_IN, FIG_HEIGHT_IN, DPI = 12.0, 5.0, 100
PNG_SIZE = (int(FIG_WIDTH_IN * DPI), int(FIG_HEIGHT_IN * DPI))  # (width, height) in pixels
FORMATS = (".png", ".svg", ".pdf")
MISSING = "matplotlib is not installed; pip install 'infoeval[plot]'"
KL_FLOOR = 1e-6  # nats; smaller per-position KLs (and float rounding below 0) are drawn at the floor


def _check_path(path: Path) -> None:
    if Path(path).suffix.lower() not in FORMATS:
        raise UsageError(f"{spell('plot')} '{path}': the file name must end in {', '.join(FORMATS)}")


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(MISSING) from None
    return Figure


def require(path: Path | None = None) -> None:
    """Fail early (before a long run) when matplotlib is missing or the file type is not one we write."""
    if path is not None:
        _check_path(path)
    _figure_class()


def _figure(ncols: int = 1):
    fig = _figure_class()(figsize=(FIG_WIDTH_IN, FIG_HEIGHT_IN), dpi=DPI, layout="constrained")  # every PNG PNG_SIZE
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def _save(fig, path: Path) -> None:
    from infoeval.output.results import atomic_write_bytes

    path = Path(path)
    _check_path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower().lstrip("."), dpi=DPI)
    atomic_write_bytes(path, buf.getvalue())


def _subject(result: dict) -> str:
    """'model M on text T' from a result's provenance."""
    pv = result.get("provenance", {})
    model = Path(str(pv.get("model", {}).get("spec", "?")).rstrip("/")).name
    t = pv.get("text", {})
    text = Path(t["path"]).name if t.get("source") == "file" and t.get("path") else t.get("source", "?")
    return f"{model} on {text}"


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and the fraction of values ≤ each: (x, F(x)) with F = (i + 1)/n.

    >>> ecdf(np.array([3.0, 1.0, 2.0]))[1].tolist()
    [0.3333333333333333, 0.6666666666666666, 1.0]
    """
    x = np.sort(np.asarray(values, dtype=float))
    return x, np.arange(1, x.size + 1) / x.size


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each point (fewer at the start).

    >>> rolling_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist()
    [1.0, 2.0, 4.0, 6.0]
    """
    c = np.cumsum(np.concatenate([[0.0], np.asarray(values, dtype=float)]))
    i = np.arange(1, c.size)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


def plot_quantize_compare(result: dict, columns, path: Path) -> None:
    """Left: CDF of per-position KL(reference ‖ variant) per scheme, log x; middle: reference entropy histogram;
    right, with two variants or more that store bits: the bits-against-KL frontier (``plot_frontier``).

    ``columns`` is what ``comparison.pipeline.quantize_compare`` returns (``.reference`` and ``.variants`` dicts of
    arrays).
    """
    front = result.get("frontier")
    fig, (ax, bx, *cx) = _figure(3 if front else 2)
    if front:
        plot_frontier(cx[0], result)
    for name, cols in columns.variants.items():
        kl = np.maximum(np.asarray(cols["kl"], dtype=float), KL_FLOOR)
        x, f = ecdf(kl)
        mean = float(np.mean(cols["kl"]))
        ax.step(x, f, where="post", label=f"{name} (mean {mean:.3g}, P99 {np.quantile(kl, 0.99):.3g})")
    ax.set_xscale("log")
    ax.set_xlabel(
        "per-position KL, nats (log scale)"
        if front
        else f"per-position KL(reference ‖ variant), nats (log scale; < {KL_FLOOR:g} drawn at {KL_FLOOR:g})"
    )
    ax.set_ylabel("fraction of positions with KL ≤ x")
    ax.set_title("CDF of per-position KL by scheme")
    ax.grid(True, which="both", alpha=0.3)
    # below the panel: inside it, the legend's three long labels covered the top of a curve wherever it stood
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.16), borderaxespad=0.0, frameon=False, title="scheme")
    ent = np.asarray(columns.reference["entropy"], dtype=float) / math.log(2)
    bx.hist(ent, bins=50, color="tab:gray", label=f"{ent.size:,} positions, median {np.median(ent):.2f} bits")
    bx.set_xlabel(
        "reference's next-token entropy, bits" if front else "entropy of the reference's next-token distribution, bits"
    )
    bx.set_ylabel("positions")
    bx.set_title("Reference entropy per position")
    bx.legend(loc="upper right")
    fig.suptitle(f"quantize-compare: {_subject(result)}, {columns.reference['nll'].shape[0]:,} scored tokens")
    _save(fig, path)


def plot_frontier(ax, result: dict) -> None:
    """Stored bits per weight against mean KL (dots) and KL P99.9 (crosses), log y; each figure's frontier joined
    by a line, every variant named."""
    from infoeval.measure.frontier import frontier_points

    shown = frontier_points(result)
    for figure, marker, label in (("kl_mean", "o", "mean KL"), ("kl_p999", "x", "KL P99.9")):
        points = ax.plot(
            [p["bits"] for p in shown], [max(p[figure], KL_FLOOR) for p in shown], marker, ls="none", label=label
        )[0]
        line = sorted((p["bits"], max(p[figure], KL_FLOOR)) for p in shown if figure in p["on"])
        ax.plot(
            [x for x, _ in line],
            [y for _, y in line],
            "-",
            color=points.get_color(),
            alpha=0.6,
            label=f"{label} frontier",
        )
    for p in shown:
        ax.annotate(
            p["name"], (p["bits"], max(p["kl_mean"], KL_FLOOR)), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_yscale("log")
    ax.set_xlabel("stored bits per weight")
    ax.set_ylabel("KL(reference ‖ variant), nats (log scale)")
    ax.set_title("Bits against KL: the frontier")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best")


def plot_compress_bits(result: dict, columns, path: Path, window: int | None = None) -> None:
    """Bits per token (−log₂ q of each observed token) along the text, with a rolling mean and the xz line."""
    bits = np.asarray(columns.reference["nll"], dtype=float) / math.log(2)
    pos = np.asarray(columns.reference["position"])
    window = window or max(16, bits.size // 64)
    fig, (ax,) = _figure(1)
    ax.plot(pos, bits, ".", ms=1.5, alpha=0.3, color="tab:blue", label="bits of each token")
    ax.plot(pos, rolling_mean(bits, window), color="tab:red", lw=1.5, label=f"rolling mean over {window:,} tokens")
    ax.axhline(bits.mean(), color="black", lw=1, ls="--", label=f"model mean {bits.mean():.3f} bits/token")
    xz = next((r for r in result.get("compressors", []) if r["method"] == "xz -9"), None)
    if xz is not None:
        per = xz["bits"] / bits.size
        ax.axhline(per, color="tab:green", lw=1, ls=":", label=f"xz -9 on the same bytes: {per:.3f} bits/token")
    ax.set_xlabel("token position in the text (stream index)")
    ax.set_ylabel("bits per token, −log₂ q(token)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(f"compress-bits: {_subject(result)}, {bits.size:,} tokens, {bits.sum():,.0f} bits in all")
    _save(fig, path)


def plot_kl_fit(result: dict, path: Path) -> None:
    """The target p and every fitted q (forward KL: mode covering; reverse KL: mode seeking)."""
    x = np.asarray(result["x"])
    fig, (ax,) = _figure(1)
    ax.fill_between(x, result["p"], step=None, color="tab:gray", alpha=0.35, label="target p")
    styles = {"forward": "-", "reverse": "--"}
    for i, f in enumerate(result["fits"]):  # later lines thinner, so identical fits stay visible
        ax.plot(
            x,
            f["q"],
            styles.get(f["direction"], "-"),
            lw=3.5 - 2.5 * i / max(1, len(result["fits"]) - 1),
            label=f"{f['direction']} KL from μ₀ = {f['start']:g}: centre {f['centre']:.1f}, width {f['width']:.1f}, "
            f"KL {f['kl']:.3f} nats",
        )
    s = result["settings"]
    ax.set_xlabel("x")
    ax.set_ylabel("probability")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(
        f"kl-fit: a discretized Gaussian q fitted to p by forward KL(p‖q) and reverse KL(q‖p) "
        f"(Adam, lr {s['lr']:g}, {s['steps']} steps, σ₀ = {s['sigma0']:g})"
    )
    _save(fig, path)


def plot_acceptance_by_entropy(entropy_bits: np.ndarray, beta: np.ndarray, title: str, path: Path) -> None:
    """Mean acceptance β = Σ min(p, q) per bin of the target's entropy (± 1.96 SE), over a histogram of entropy.

    ``entropy_bits`` and ``beta`` hold one value per position; bins are 20 equal-width bins of entropy.
    """
    h = np.asarray(entropy_bits, dtype=float)
    b = np.asarray(beta, dtype=float)
    if h.shape != b.shape or h.size == 0:
        raise UsageError(
            "plot_acceptance_by_entropy needs one entropy and one acceptance per position (same, non-zero size)"
        )
    edges = np.linspace(h.min(), max(h.max(), h.min() + 1e-9), 21)
    which = np.clip(np.digitize(h, edges) - 1, 0, 19)
    centres, means, errs, counts = [], [], [], np.bincount(which, minlength=20)
    for k in range(20):
        v = b[which == k]
        if v.size:
            centres.append((edges[k] + edges[k + 1]) / 2)
            means.append(v.mean())
            errs.append(1.96 * v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else 0.0)
    fig, (ax,) = _figure(1)
    hx = ax.twinx()
    hx.bar(
        edges[:-1], counts, width=np.diff(edges), align="edge", color="tab:gray", alpha=0.25, label="positions per bin"
    )
    hx.set_ylabel("positions per entropy bin")
    ax.set_zorder(hx.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.errorbar(
        centres,
        means,
        yerr=errs,
        fmt="o-",
        capsize=3,
        color="tab:blue",
        label=f"mean acceptance ± 1.96 SE (overall {b.mean():.3f}, {b.size:,} positions)",
    )
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("entropy of the target's next-token distribution, bits")
    ax.set_ylabel("acceptance β = Σ min(p, q)")
    ax.grid(True, alpha=0.3)
    lines = ax.get_legend_handles_labels()
    bars = hx.get_legend_handles_labels()
    ax.legend(lines[0] + bars[0], lines[1] + bars[1], loc="lower left")
    ax.set_title(title)
    _save(fig, path)
