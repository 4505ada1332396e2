"""Tables of compress and decompress, from their results' JSON."""

from __future__ import annotations

from rich.console import Console

from infoeval.errors import counted
from infoeval.output.tables import fmt_num, report_table


def _header_line(data: dict, verb: str) -> str:
    m = data["provenance"].get("model")
    model = f"model [bold]{m['spec']}[/] ({m['dtype']} on {m['device']})" if m else "no model needed"
    return f"{verb} [bold]{data['input']['path']}[/] → [bold]{data['output']['path']}[/]  {model}"


def _speed(rate: dict | None) -> tuple[str, str]:
    if not rate:
        return "–", "–"
    return fmt_num(rate["bytes_per_s"], 4), fmt_num(rate["tokens_per_s"], 4)


def sizes_table(data: dict):
    lay, bits, bpb = data["layout"], data["bits"], data["bits_per_byte"]
    caption = (
        f"{counted(lay['tokens'], 'token')} in {counted(lay['segments'], 'segment')} of ≤ {lay['ctx']} tokens, "
        f"{counted(lay['groups'], 'group')} of ≤ {lay['group']} segments stepped together; {lay['coder']}"
        if data["mode"] == "model"
        else "stored with xz -9 (the model was not used)"
    )
    t = report_table("Sizes", ["", "bytes", "bits", "bits/byte"], caption)
    n = data["input"]["bytes"]
    t.add_row("input", fmt_num(n), fmt_num(8 * n), "8.0000")
    if bits["ideal"] is not None:
        t.add_row("ideal Σ −log₂ q", "", fmt_num(bits["ideal"], 1), fmt_num(bpb["ideal"]))
    t.add_row("payload", fmt_num(bits["payload"] // 8), fmt_num(bits["payload"]), fmt_num(bpb["payload"]))
    t.add_row("[bold]file", fmt_num(data["output"]["bytes"]), fmt_num(bits["file"]), fmt_num(bpb["achieved"]))
    for r in data["compressors"]:
        t.add_row(r["method"], fmt_num(r["bytes"]), fmt_num(r["bits"]), fmt_num(r["bits_per_byte"]))
    return t


def overhead_table(data: dict):
    o = data["overhead"]
    t = report_table(
        "Overhead above ideal",
        ["cause", "bits", "% of ideal"],
        f"quantisation bound: {fmt_num(o['quantisation_bound_bits'], 3)} bits; "
        f"payload / ideal = {fmt_num(o['payload_over_ideal'], 6)}",
    )
    ideal = data["bits"]["ideal"]
    for name, key in (
        ("integer counts", "quantisation_bits"),
        ("range coder", "coder_bits"),
        ("header and tables", "container_bits"),
        ("[bold]total", "total_bits"),
    ):
        t.add_row(name, fmt_num(o[key], 4), fmt_num(100 * o[key] / ideal if ideal else None, 4))
    return t


def speed_table(data: dict):
    t = report_table("Throughput", ["", "bytes/s", "tokens/s"], "decompress measured by the in-memory check (--verify)")
    for name in ("compress", "decompress"):
        t.add_row(name, *_speed(data["throughput"][name]))
    return t


def print_compress(console: Console, data: dict) -> None:
    console.print(_header_line(data, "compressed"))
    if data["reason"]:
        console.print(f"[yellow]stored with xz[/]: {data['reason']}")
    console.print(sizes_table(data))
    if data["overhead"]:
        console.print(overhead_table(data))
    console.print(speed_table(data))
    xz = next((r for r in data["compressors"] if r["method"] == "xz -9"), None)
    if xz and xz["file_over_this"] is not None:
        console.print(f"file / xz -9 = {fmt_num(xz['file_over_this'], 3)} (the model's own size is not counted)")


def print_decompress(console: Console, data: dict) -> None:
    console.print(_header_line(data, "decompressed"))
    bps, tps = _speed(data["throughput"])
    console.print(
        f"{data['output']['bytes']:,} bytes ({data['tokens']:,} tokens, {data['mode']}) from "
        f"{data['input']['bytes']:,}; "
        f"{bps} bytes/s, {tps} tokens/s; sha256 {data['output']['sha256'][:16]}… checked"
    )
    for line in data["forced"]:
        console.print(f"[yellow]--force[/]: {line}")
