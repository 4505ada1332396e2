"""quantize-compare and compress-bits as rich tables, read from the result's JSON (their CSV frames:
``comparison/frames.py``). No torch."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from infoeval.errors import counted
from infoeval.input.protocols import registered
from infoeval.measure.stats import MIN_BLOCKS
from infoeval.output.llamacpp_table import print_block, scope_note
from infoeval.output.tables import fmt_num, fmt_pm, report_table, run_header


def _layers(q: dict) -> str:
    """ "quantized/skipped" layers (a GGUF's blocks say only how many are quantized; a module you built neither)."""
    if q.get("layers_quantized") is None:
        return "–"
    return (
        f"{q['layers_quantized']}"
        if q.get("layers_skipped") is None
        else f"{q['layers_quantized']}/{q['layers_skipped']}"
    )


def se_note(metrics: dict) -> str:
    """How the ± were made, for a table's caption: batch means over blocks of consecutive positions."""
    b, g = metrics.get("se_block"), metrics.get("se_blocks")
    if not b or not g:
        return ""
    few = "; few blocks: read it as rough" if g < MIN_BLOCKS else ""
    return f", batch means over {g} blocks of {b} consecutive positions{few}"


def reference_table(ref: dict, title: str = "Reference") -> Table:
    t = report_table(
        title, ["PPL", "bits/token", "bits/byte", "tokens", "bytes", "entropy P10", "P50", "P90 (bits)"], left=0
    )
    t.add_row(
        fmt_pm(ref["ppl"], ref["ppl_se"], 3),
        fmt_num(ref["bits_per_token"]),
        fmt_num(ref["bits_per_byte"]),
        fmt_num(ref["tokens"]),
        fmt_num(ref["bytes"]),
        fmt_num(ref["entropy_p10"], 3),
        fmt_num(ref["entropy_p50"], 3),
        fmt_num(ref["entropy_p90"], 3),
    )
    return t


def floor_cell(versus: dict | None) -> str:
    """A variant's "× floor" cell: its mean KL over the floor's, and "at floor" where the run cannot tell them apart."""
    if not versus:
        return ""
    r = versus["x_floor"]
    x = "–" if r is None else (f"{r:,.0f}×" if r >= 100 else f"{r:.3g}×")
    return x + (" at floor" if versus["at_floor"] else "")


def floor_note(floor: dict) -> str:
    """The caption's words on the floor: what it is, where it ran, how to read × floor."""
    if not floor.get("metrics"):
        return "; the noise floor ran on no window of this run"
    return (
        f"; floor: the reference with its weights moved by one bfloat16 rounding step, on {len(floor['windows'])} of "
        f"{counted(floor['windows_of_run'], 'window')} ({floor['mode']}); × floor: mean KL over the floor's; at floor: "
        "within 2 SE of it"
    )


def variants_tables(result: dict) -> list[Table]:
    """Two tables so each fits a 100-column terminal: likelihood and agreement, then the KL distribution; with a
    noise floor, its line under the variants of each and a "× floor" column."""
    return [_agreement_table(result), _kl_table(result)]


def _agreement_table(result: dict) -> Table:
    """Each variant's PPL, its ratio to the reference's, top-1 agreement and Δ bits/byte (the floor's top-1 under
    them)."""
    floor = result.get("floor")
    a = report_table(
        "Variants vs reference",
        ["scheme", "bits/w", "layers q/skip", "PPL", "PPL ratio", "Δ ln PPL", "top-1 agree", "Δ bits/byte"],
        "likelihood and agreement of each variant with the reference (± one standard "
        f"error{se_note(result['reference'])})",
        no_wrap=True,
    )
    for v in result["variants"]:
        m, q = v["metrics"], v["quantization"]
        a.add_row(
            v["name"],
            fmt_num(q.get("bits_per_weight"), 3),
            _layers(q),
            fmt_num(m["ppl"], 3),
            fmt_num(m["ppl_ratio"]),
            fmt_pm(m["ln_ppl_ratio"], m["ln_ppl_ratio_se"]),
            fmt_pm(100 * m["top1"], 100 * m["top1_se"], 2) + " %",
            fmt_num(m["bits_per_byte_delta"]),
        )
    if floor and floor.get("metrics"):
        f = floor["metrics"]
        a.add_row(
            "floor",
            "",
            f"{floor['layers']}/–",
            "",
            "",
            "",
            fmt_pm(100 * (1 - f["top1_disagree"]), 100 * f["top1_disagree_se"], 2) + " %",
            "",
            style="dim",
        )
    return a


def _kl_table(result: dict) -> Table:
    """Each variant's per-position KL: mean (and × floor), quantiles, max, reverse KL and TV (the floor's under
    them)."""
    floor = result.get("floor")
    versus = (floor or {}).get("variants") or {}
    k = report_table(
        "Per-position KL",
        ["scheme", "mean KL", *(["× floor"] if floor else []), "P50", "P90", "P99", "P99.9", "max", "rev KL", "TV"],
        "per-position KL(reference ‖ variant) in nats; means of reverse KL and TV"
        + (floor_note(floor) if floor else ""),
        no_wrap=True,
    )
    for v in result["variants"]:
        m = v["metrics"]
        k.add_row(
            v["name"],
            fmt_pm(m["kl_mean"], m["kl_se"]),
            *([floor_cell(versus.get(v["name"]))] if floor else []),
            fmt_num(m["kl_p50"], 3),
            fmt_num(m["kl_p90"], 3),
            fmt_num(m["kl_p99"], 3),
            fmt_num(m["kl_p999"], 3),
            fmt_num(m["kl_max"], 3),
            fmt_num(m["rkl_mean"], 3),
            fmt_num(m["tv_mean"], 3),
        )
    if floor and floor.get("metrics"):
        f = floor["metrics"]
        k.add_row(
            "floor",
            fmt_pm(f["kl_mean"], f["kl_se"]),
            "1×",
            "",
            "",
            fmt_num(f["kl_p99"], 3),
            "",
            "",
            "",
            "",
            style="dim",
        )
    return k


def compress_table(result: dict) -> Table:
    ref = result["reference"]
    t = report_table(
        "Bits for the same text",
        ["method", "bits", "bits/byte", "vs model"],
        f"the model and each compressor on the same {ref['bytes']:,} bytes",
    )
    t.add_row("model (Σ −log₂ q)", fmt_num(round(ref["total_bits"])), fmt_num(ref["bits_per_byte"]), "1.000")
    for r in result["compressors"]:
        t.add_row(
            r["method"], fmt_num(r["bits"]), fmt_num(r["bits_per_byte"]), fmt_num(r["bits"] / ref["total_bits"], 3)
        )
    return t


def print_until(console: Console, result: dict) -> None:
    """--until-se: one line saying whether the precision was reached and what it took."""
    if result.get("until_se"):
        from infoeval.comparison.until import until_line

        console.print(until_line(result["until_se"]))


def print_quantize_compare(console: Console, result: dict) -> None:
    console.print(run_header(result))
    print_until(console, result)
    console.print(reference_table(result["reference"]))
    print_protocol_figures(console, result)
    for table in variants_tables(result):
        console.print(table)
    from infoeval.comparison.views import frontier_table, paired_table

    if result.get("frontier"):
        console.print(frontier_table(result))
    if result.get("paired"):
        console.print(paired_table(result["paired"]))


def print_quantize_compare_llamacpp(console: Console, result: dict) -> None:
    """--table llama.cpp: the run header (and the protocol's own figures), then llama-perplexity --kl-divergence's
    block for each variant."""
    console.print(run_header(result))
    print_until(console, result)
    print_protocol_figures(console, result)
    for v in result["variants"]:
        print_block(
            console,
            f"\n### {v['name']} (Q) vs the reference (base)",
            v["metrics"],
            result["reference"],
            (scope_note(result),),
        )
    if (result.get("floor") or {}).get("metrics"):
        console.print(floor_summary(result["floor"]))


def floor_summary(floor: dict) -> str:
    """The noise floor in one line (under llama.cpp's blocks): its numbers and each variant's × floor."""
    m = floor["metrics"]
    times = ", ".join(f"{name} {floor_cell(v)}" for name, v in floor["variants"].items())
    return (
        f"\nnoise floor ({len(floor['windows'])} of {counted(floor['windows_of_run'], 'window')}, {floor['mode']}): "
        f"mean KL {fmt_pm(m['kl_mean'], m['kl_se'])}, "
        f"P99 {fmt_num(m['kl_p99'], 3)}, top-1 disagreement {100 * m['top1_disagree']:.2f} %; × floor: {times}"
    )


def print_compress_bits(console: Console, result: dict) -> None:
    console.print(run_header(result))
    print_until(console, result)
    console.print(reference_table(result["reference"], "Model"))
    print_protocol_figures(console, result)
    console.print(compress_table(result))
    console.print(f"model bits / xz bits = {fmt_num(result['model_over_xz'], 3)} (the model's own size is not counted)")


def print_protocol_figures(console: Console, result: dict) -> None:
    """The protocol's own figures (``protocol_metrics``, laid out by its ``figure_table``), one row per model;
    nothing for a protocol without figures of its own."""
    pm = result.get("protocol_metrics")
    if not pm:
        return
    note = (
        ""
        if pm["complete"]
        else "; NOT the whole protocol (--max-tokens cut it): use --max-tokens all to compare with published figures"
    )
    spec = registered(pm["protocol"]).figure_table
    t = report_table(spec.title, ["model", *(header for header, _, _ in spec.columns)], spec.caption + note)
    for name, f in pm["figures"].items():
        t.add_row(name, *(fmt_num(f[key], digits) for _, key, digits in spec.columns))
    console.print(t)


def print_quantize_compare_confidence(console: Console, result: dict) -> None:
    """--table confidence: the run header and the reference's table, then mean KL and top-1 by confidence."""
    from infoeval.comparison.views import confidence_tables

    console.print(run_header(result))
    console.print(reference_table(result["reference"]))
    for table in confidence_tables(result) if result.get("by_confidence") else ():
        console.print(table)
