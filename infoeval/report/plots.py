"""The page's plots as inline SVG, drawn with matplotlib (its SVG backend: vector figures with text kept as text,
no font files and nothing fetched; the same library as ``--plot``, so no second plotting dependency). Per
section: the KL distribution (CDF and histogram per variant, a gate's P99 limit marked), KL against the
reference's entropy, mean KL along the text and along the position in the window, and a gate's limits with their
bounds; for compress-bits the same views of the model's bits. Without matplotlib the page has no plots and says
how to get them."""

from __future__ import annotations

import importlib.util
import io
import re

import numpy as np

from infoeval.measure.stats import LN2
from infoeval.report.packed import unpack
from infoeval.report.series import binned_stats, ecdf_points, group_means, log_histogram

MISSING = "plots need matplotlib: pip install 'infoeval[plot]'"
COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
COORDINATES = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|width|height)=")([^"]*)"')  # attributes that hold coordinates only
NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float, ncols: int = 1, nrows: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False).ravel()


def _svg(fig, salt: str) -> str:
    """The figure as an <svg> element (no XML prologue), its ids salted so that several figures share a page."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return compact_svg(buf.getvalue())


def _rounded(match: re.Match) -> str:
    return (
        match.group(1)
        + NUMBER.sub(lambda m: f"{float(m.group()):.1f}".rstrip("0").rstrip("."), " ".join(match.group(2).split()))
        + '"'
    )


def compact_svg(text: str) -> str:
    """matplotlib's SVG made small for inlining: the <svg> element only (no prologue, metadata or comments),
    coordinates to 0.1 pt (a tenth of a point of a figure a few hundred points wide), no group names, no
    whitespace between tags. Labels and other text are left as they are."""
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>|<!--.*?-->", "", text, flags=re.S)
    text = COORDINATES.sub(_rounded, text)
    text = re.sub(r'<g id="[^"]*">', "<g>", text)  # group names (figure_1, axes_1 …): nothing refers to them
    return re.sub(r">\s+<", "><", text).strip()


def _floats(column) -> np.ndarray:
    return unpack(column).astype(np.float64)


def _series(sec: dict) -> dict[str, np.ndarray]:
    """name → the per-position values the plots show: each variant's KL, or the model's bits without variants."""
    if sec["variants"]:
        return {name: _floats(v["kl"]) for name, v in sec["variants"].items()}
    return {"the model": _floats(sec["ref"]["nll"]) / LN2}


def _limit(sec: dict, metric: str) -> float | None:
    for v in (sec.get("gate") or {}).get("verdicts", ()):
        if v.get("metric") == metric:
            return float(v["threshold"])
    return None


def distribution(sec: dict, salt: str) -> str:
    """The CDF and the histogram of every variant's KL (of the model's bits per token without variants)."""
    series, kl = _series(sec), bool(sec["variants"])
    fig, (a, b) = _figure(9, 3.2, 2)
    for (name, x), colour in zip(series.items(), COLOURS):
        v, f = ecdf_points(x)
        keep = v > 0 if kl else slice(None)  # a log axis cannot show KL = 0; the CDF still counts it
        a.plot(v[keep], f[keep], color=colour, label=name, lw=1.5)
        if kl:
            edges, share = log_histogram(x)
        else:
            counts, edges = np.histogram(x, bins=40)
            share = counts / len(x)
        b.stairs(share, edges, color=colour, label=name, lw=1.5)
    p99 = _limit(sec, "kl_p99")
    if p99 is not None:
        a.axvline(p99, color="k", ls="--", lw=1)
        a.axhline(0.99, color="k", ls=":", lw=0.8)
        a.annotate(f"gate: P99 ≤ {p99:g}", (p99, 0.99), xytext=(4, -14), textcoords="offset points", fontsize=8)
    label = "KL(reference‖variant), nats" if kl else "bits per token"
    a.set(xlabel=label, ylabel="share of positions ≤ x", title="CDF", ylim=(0, 1.01))
    b.set(xlabel=label, ylabel="share of positions", title="histogram")
    if kl:
        a.set_xscale("log")
        b.set_xscale("log")
    a.legend(fontsize=8)
    a.grid(alpha=0.3)
    b.grid(alpha=0.3)
    return _svg(fig, salt)


def entropy_relation(sec: dict, salt: str) -> str:
    """Mean (and 90th percentile) KL, or bits, in 20 quantile bins of the reference's entropy."""
    series, entropy = _series(sec), _floats(sec["ref"]["entropy"])
    fig, (a,) = _figure(9, 3.2)
    for (name, y), colour in zip(series.items(), COLOURS):
        s = binned_stats(entropy, y)
        a.plot(s["x"], s["mean"], "o-", color=colour, label=f"{name}: mean", ms=3, lw=1.5)
        a.plot(s["x"], s["p90"], "--", color=colour, label=f"{name}: P90", lw=1)
    a.set(
        xlabel="reference entropy, nats (20 bins of equal count)",
        ylabel="KL, nats" if sec["variants"] else "bits per token",
        title="against the reference's uncertainty",
    )
    if sec["variants"]:
        a.set_yscale("log")
    a.legend(fontsize=8, ncol=2)
    a.grid(alpha=0.3)
    return _svg(fig, salt)


def along(sec: dict, salt: str) -> str:
    """Mean KL (or bits) per window along the text, and by context length (the position in the window)."""
    series = _series(sec)
    fig, (a, b) = _figure(9, 3.2, 2)
    context, window = unpack(sec["context"]).astype(np.int64), unpack(sec["window"])
    step = max(1, int(np.ceil((context.max() if len(context) else 1) / 64)))  # at most 64 points
    for (name, y), colour in zip(series.items(), COLOURS):
        w, m = group_means(window, y)
        a.plot(w, m, color=colour, label=name, lw=1)
        c, mc = group_means((context - 1) // step, y)
        b.plot(c * step + 1, mc, color=colour, label=name, lw=1.5)
    ylabel = "mean KL, nats" if sec["variants"] else "mean bits per token"
    a.set(xlabel="window (along the text)", ylabel=ylabel, title="along the text")
    b.set(xlabel=f"context length (tokens; bins of {step})", ylabel=ylabel, title="along the position in the window")
    a.legend(fontsize=8)
    a.grid(alpha=0.3)
    b.grid(alpha=0.3)
    return _svg(fig, salt)


def gate_limits(sec: dict, salt: str) -> str:
    """Every gate limit: its threshold, the value and the bound judged against it, green if it held, red if not."""
    verdicts = sec["gate"]["verdicts"]
    fig, axes = _figure(9, 0.9 + 0.55 * len(verdicts), nrows=len(verdicts))
    for ax, v in zip(axes, verdicts):
        colour = "#2a7d2a" if v["passed"] else "#b3261e"
        value, bound, threshold = (
            float(v[k]) if v.get(k) is not None else np.nan for k in ("value", "bound", "threshold")
        )
        ax.axvline(threshold, color="k", lw=1.2)
        ax.plot([value, bound], [0, 0], color=colour, lw=3, solid_capstyle="butt")
        ax.plot([value], [0], "o", color=colour, ms=6)
        ax.plot([bound], [0], "|", color=colour, ms=14, mew=2)
        lo, hi = np.nanmin([value, bound, threshold]), np.nanmax([value, bound, threshold])
        pad = 0.15 * (hi - lo) or 0.1 * abs(hi) or 0.1
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_yticks([])
        ax.set_ylabel(v["limit"], rotation=0, ha="right", va="center", fontsize=9)
        side = "≤" if v.get("side") == "max" else "≥"
        ax.set_title(
            f"{side} {threshold:g}: value {value:.4g}, bound {bound:.4g} ({v.get('judged', '')}) — "
            f"{'PASS' if v['passed'] else 'FAIL'}",
            fontsize=8,
            loc="left",
            color=colour,
        )
    return _svg(fig, salt)


def section_plots(sec: dict, index: int) -> list[dict]:
    """The plots of one section: [{"name", "title", "svg"}] (without matplotlib only the views of ``report.views``,
    which need none; the page says so)."""
    from infoeval.report.views import view_figures

    if not available() or not sec["n"]:
        return view_figures(sec)
    what = "KL" if sec["variants"] else "bits per token"
    plots = [
        ("distribution", f"Distribution of {what}", distribution),
        ("entropy", f"{what} against the reference's entropy", entropy_relation),
        ("along", f"Mean {what} along the text and the window", along),
    ]
    if sec.get("gate"):
        plots.insert(0, ("limits", "The gate's limits: value, judged bound and threshold", gate_limits))
    return [
        {"name": name, "title": title, "svg": draw(sec, f"infoeval-{index}-{name}")} for name, title, draw in plots
    ] + view_figures(sec)
