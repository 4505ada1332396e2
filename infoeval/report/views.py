"""The report page's views of many variants, drawn without matplotlib: the bits-against-KL frontier as an inline
SVG chart (each point's ``<title>`` shows its variant on hover), the paired verdicts against ``--baseline`` and
KL by the reference's confidence as HTML tables. Each is a figure of the section (``plots.section_plots``)."""

from __future__ import annotations

import html
import math

W, H, LEFT, BOTTOM, TOP, RIGHT = 520, 300, 64, 40, 16, 16  # the chart's size and margins, px
SERIES = (("kl_mean", "mean KL", "#1f77b4", "circle"), ("kl_p999", "KL P99.9", "#ff7f0e", "cross"))
VERDICT_CLASS = {"better": "better", "worse": "worse", "not distinguishable": "same"}
WORD = {"better": "better", "worse": "worse", "not distinguishable": "≈"}


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda x: a + (x - lo) / span * (b - a)


def frontier_svg(points: list[dict]) -> str:
    """Stored bits per weight (x) against KL (log y) of ``measure.frontier.frontier_points``: every variant's mean KL
    (circles) and P99.9 (crosses), each figure's frontier joined by a line; hovering a point shows its variant and
    numbers (its ``<title>``)."""
    ys = [max(p[f], 1e-9) for p in points for f, *_ in SERIES]
    xs = [p["bits"] for p in points]
    lo, hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    x_lo, x_hi = math.floor(min(xs)), math.ceil(max(xs))
    sx = _scale(x_lo - 0.25, x_hi + 0.25, LEFT, W - RIGHT)
    sy = _scale(lo, max(hi, lo + 1), H - BOTTOM, TOP)
    y = lambda v: sy(math.log10(max(v, 1e-9)))  # noqa: E731
    out = [
        f'<svg class="frontier" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" role="img">'
    ]
    for e in range(lo, max(hi, lo + 1) + 1):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(e):.1f}" y2="{sy(e):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{sy(e) + 4:.1f}" text-anchor="end" font-size="11">1e{e}</text>'
        )
    step = max(1, math.ceil((x_hi - x_lo) / 8))
    for b in range(x_lo, x_hi + 1, step):  # whole bits: the variants' own (4.22, 4.25, 4.5) would overlap
        out.append(f'<text x="{sx(b):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle" font-size="11">{b}</text>')
    out.append(
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" text-anchor="middle" font-size="12">stored bits per '
        "weight</text>"
        f'<text x="14" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 '
        f'14 {(TOP + H - BOTTOM) / 2})">KL, nats</text>'
    )
    for figure, label, colour, shape in SERIES:
        on = sorted((p["bits"], p[figure]) for p in points if figure in p["on"])
        out.append(
            f'<polyline data-figure="{figure}" fill="none" stroke="{colour}" stroke-opacity="0.6" points="'
            + " ".join(f"{sx(b):.1f},{y(v):.1f}" for b, v in on)
            + '"/>'
        )
        for p in points:
            cx, cy = sx(p["bits"]), y(p[figure])
            tip = html.escape(
                f"{p['name']}: {p['bits']:.4g} bits/weight, {label} {p[figure]:.4g}"
                + (" (on the frontier)" if figure in p["on"] else "")
            )
            mark = (
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"/>'
                if shape == "circle"
                else f'<path d="M{cx - 5:.1f},{cy - 5:.1f}L{cx + 5:.1f},{cy + 5:.1f}M{cx - 5:.1f},{cy + 5:.1f}'
                f'L{cx + 5:.1f},{cy - 5:.1f}" stroke="{colour}" stroke-width="2"/>'
            )
            out.append(
                f'<g class="point" data-variant="{html.escape(p["name"])}" '
                f'data-figure="{figure}"><title>{tip}</title>{mark}</g>'
            )
        out.append(
            f'<text x="{W - RIGHT - 4}" y="{TOP + 14 + 16 * SERIES.index((figure, label, colour, shape))}" '
            f'text-anchor="end" font-size="11" fill="{colour}">{label}</text>'
        )
    return "".join(out) + "</svg>"


def _pm(d: float, se: float) -> str:
    return f"{d:+.4g} ± {se:.2g}" if se == se else f"{d:+.4g}"


def verdict_table(paired: dict) -> str:
    """The paired verdicts as an HTML table: a row per variant, each metric's difference ± SE and verdict."""
    from infoeval.measure.paired import LABELS as COLUMNS

    head = "".join(f"<th>{html.escape(t)}</th>" for t in ("variant", *COLUMNS.values(), "top-1 flips"))
    rows = []
    for name, row in paired["variants"].items():
        cells = "".join(
            f'<td class="{VERDICT_CLASS[row[m]["verdict"]]}" '
            f'data-metric="{m}">{html.escape(_pm(row[m]["diff"], row[m]["se"]))} '
            f"{WORD[row[m]['verdict']]}</td>"
            for m in COLUMNS
        )
        f = row["top1_flips"]
        flips = f"<td>{f['baseline_only']:,} / {f['variant_only']:,}</td>"
        rows.append(f'<tr data-variant="{html.escape(name)}"><td>{html.escape(name)}</td>{cells}{flips}</tr>')
    note = (
        f"variant − {html.escape(paired['baseline'])} on the same positions; ± batch-means SE; verdicts "
        "two-sided at α = "
        f"{paired['alpha']:g}, Holm across the variants; ≈ not distinguishable; top-1 flips: positions where "
        "only the baseline / "
        "only the variant agrees with the reference"
    )
    body = "".join(rows)
    return f'<table class="paired"><caption>{note}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def confidence_table(block: dict) -> str:
    """Mean KL (and top-1) by bucket of the reference's top-1 probability: a row per bucket, a column per variant."""
    names, edges = list(block["variants"]), block["edges"]
    head = "".join(
        f"<th>{html.escape(t)}</th>"
        for t in ("reference's top-1 p", "positions", *(f"{n}: mean KL / top-1" for n in names))
    )
    rows = []
    for i, count in enumerate(block["counts"]):
        cells = "".join(
            "<td>–</td>" if v["kl_mean"][i] is None else f"<td>{v['kl_mean'][i]:.4g} / {v['top1'][i]:.3f}</td>"
            for v in block["variants"].values()
        )
        rows.append(f"<tr><td>{edges[i]:.1f}–{edges[i + 1]:.1f}</td><td>{count:,}</td>{cells}</tr>")
    return f'<table class="confidence"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def view_figures(sec: dict) -> list[dict]:
    """The section's views as figures ([{"name", "title", "svg"}]; "svg" is the figure's inline markup)."""
    out = []
    if sec.get("frontier_points"):
        out.append(
            {
                "name": "frontier",
                "title": "Bits against KL: the frontier (hover a point for its variant)",
                "svg": frontier_svg(sec["frontier_points"]),
            }
        )
    if sec.get("paired"):
        out.append(
            {
                "name": "verdicts",
                "title": f"Paired verdicts against {sec['paired']['baseline']}",
                "svg": verdict_table(sec["paired"]),
            }
        )
    if sec.get("by_confidence"):
        out.append(
            {
                "name": "confidence",
                "title": "Mean KL and top-1 by the reference's top-1 probability",
                "svg": confidence_table(sec["by_confidence"]),
            }
        )
    return out
