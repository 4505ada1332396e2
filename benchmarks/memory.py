"""Benchmark: peak resident memory of quantize-compare as the user runs it, against the number of schemes and the
context length. Every case is a fresh `python -m infoeval quantize-compare` process; its peak RSS is read from the
kernel's accounting of that child (``os.wait4``), so nothing in the measured process is instrumented.

    python benchmarks/memory.py [--model smollm2-135m] [--cases default,ctx2048,schemes3,schemes8]

Cases (targets in brackets):
  default   no options: the built-in model and text, 8,192 tokens, ctx 512, 3 schemes        [≤ 1.7 GB]
  ctx2048   --ctx 2048 --max-tokens 2048, the same 3 schemes                                  [≤ 2.5 GB]
  schemes3  ctx 512, --max-tokens 1024, the default 3 schemes
  schemes8  the same with 8 int4/int8 schemes: growth over schemes3                           [≤ 0.4 GB]
Prints one JSON object (MiB, and the ratios and differences the targets are stated in).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, measure_child  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
THREE = "int8-channel,int4-g128,int4-channel"
EIGHT = "int8-channel,int8-g128,int8-channel-asym,int4-g128,int4-channel,int4-g32,int4-g64-asym,int4-g128-asym"
CASES = {
    "default": [],
    "ctx2048": ["--ctx", "2048", "--max-tokens", "2048", "--schemes", THREE],
    "schemes3": ["--max-tokens", "1024", "--schemes", THREE],
    "schemes8": ["--max-tokens", "1024", "--schemes", EIGHT],
}
TARGET_MIB = {"default": 1.7 * 1024, "ctx2048": 2.5 * 1024}


def measure(args: list[str], model: str | None) -> dict:
    """Run one quantize-compare in a child; returns its wall seconds, peak RSS (MiB) and mean KL per scheme."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [
            sys.executable,
            "-m",
            "infoeval",
            "quantize-compare",
            *(["--model", model] if model else []),
            *args,
            "--json",
            str(out),
            "-q",
        ]
        wall, peak = measure_child(cmd)
        data = json.loads(out.read_text())
    return {
        "args": " ".join(args) or "(none)",
        "peak_rss_mib": round(peak, 1),
        "wall_s": round(wall, 1),
        "scored_tokens": data["reference"]["tokens"],
        "stored_mib": {v["name"]: round(v["quantization"].get("stored_bytes", 0) / 2**20, 1) for v in data["variants"]},
        "kl_mean": {v["name"]: v["metrics"]["kl_mean"] for v in data["variants"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="default: the built-in model")
    ap.add_argument("--cases", default=",".join(CASES))
    add_save(ap)
    a = ap.parse_args()
    runs = {name: measure(CASES[name], a.model) for name in a.cases.split(",")}
    out = {"benchmark": "memory", "model": a.model or "built-in default", "runs": runs}
    for name, limit in TARGET_MIB.items():
        if name in runs:
            out[f"{name}_target_mib"] = round(limit, 1)
            out[f"{name}_meets_target"] = runs[name]["peak_rss_mib"] <= limit
    if "schemes3" in runs and "schemes8" in runs:
        growth = runs["schemes8"]["peak_rss_mib"] - runs["schemes3"]["peak_rss_mib"]
        out["growth_3_to_8_schemes_mib"] = round(growth, 1)
        out["growth_meets_target"] = growth <= 0.4 * 1024
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
