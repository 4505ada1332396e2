"""Benchmark: the noise floor and bfloat16 on the CPU (issue 48): SmolLM2-135M, the default text and schemes, in
float32 and in bfloat16.

    python benchmarks/floor.py [--max-tokens 8192] [--dtypes float32,bfloat16] [--save]
    python benchmarks/floor.py --markdown benchmarks/results/floor.json   # the docs' table

Per dtype, each a fresh process: the default ``infoeval quantize-compare`` (its sampled floor) and the same run
with ``--floor off``; then the dtype's own cost, the float32 reference against the same model computed in
bfloat16 (``infoeval reference --dtype float32``, then ``infoeval gate --dtype bfloat16`` with no candidate and no
scheme). Figures: the floor's mean KL ± SE, P99 and top-1 disagreement per dtype; each scheme's mean KL, P99 and
× floor per dtype; the bfloat16 cost; the wall seconds of each run and the bfloat16 / float32 ratio of the
default runs; the floor's share of the default run's wall time (its own forward passes and statistics,
``timings.floor_s``, over the run's wall seconds), and the wall ratio with and without the floor; the CPU flags
found (avx512_bf16, amx_bf16). The rule for the ``auto`` dtype on a CPU (issue 48): bfloat16 only if it is at
least 1.5× faster and its floor at most a tenth of int8-channel's float32 mean KL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2")
ENV = os.environ | {"HF_HUB_OFFLINE": "1"}


def cpu_flags() -> list[str]:
    """The bfloat16-related flags of /proc/cpuinfo's first processor (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return [f for f in FLAGS if f in have]


def infoeval(args: list, folder: Path, result: bool = True) -> tuple[dict | None, float]:
    """One fresh ``infoeval`` process (with ``result``, writing its JSON to ``folder``); (the result, its wall
    seconds)."""
    out = folder / f"r{len(list(folder.iterdir()))}.json"
    t0 = time.perf_counter()
    json_args = ["--json", out] if result else []
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", *map(str, args), *json_args, "-q"], env=ENV, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"infoeval {' '.join(map(str, args))} failed:\n{proc.stderr[-2000:]}")
    return (json.loads(out.read_text(encoding="utf-8")) if result else None), wall


def dtype_figures(dtype: str, max_tokens: int, folder: Path) -> dict:
    common = ["quantize-compare", "--dtype", dtype, "--max-tokens", max_tokens]
    run, wall = infoeval(common, folder)
    _, wall_off = infoeval([*common, "--floor", "off"], folder)
    floor = run["floor"]
    return {
        "wall_s": wall,
        "wall_s_floor_off": wall_off,
        "wall_ratio_floor_on_off": wall / wall_off,
        "floor_s": run["timings"].get("floor_s"),
        "floor_share_of_wall": run["timings"].get("floor_s", 0.0) / wall,
        "floor_windows": len(floor["windows"]),
        "windows": floor["windows_of_run"],
        "floor": floor["metrics"],
        "schemes": {
            v["name"]: {
                "kl_mean": v["metrics"]["kl_mean"],
                "kl_se": v["metrics"]["kl_se"],
                "kl_p99": v["metrics"]["kl_p99"],
                "top1": v["metrics"]["top1"],
                **floor["variants"][v["name"]],
            }
            for v in run["variants"]
        },
    }


def dtype_cost(max_tokens: int, folder: Path) -> dict:
    """The float32 reference against the same model computed in bfloat16 (gate, no candidate, no scheme)."""
    ref = folder / "reference.safetensors"
    infoeval(["reference", "--dtype", "float32", "--max-tokens", max_tokens, "--out", ref], folder, result=False)
    gate, wall = infoeval(["gate", "--reference", ref, "--dtype", "bfloat16", "--floor", "off"], folder)
    m = gate["metrics"]
    return {
        "kl_mean": m["kl_mean"],
        "kl_se": m["kl_se"],
        "kl_p99": m["kl_p99"],
        "top1": m["top1"],
        "top1_disagree": 1 - m["top1"],
        "wall_s": wall,
    }


def decision(f: dict) -> dict:
    """The rule for ``auto`` on a CPU: bfloat16 at least 1.5× faster and its floor ≤ int8-channel's float32 KL / 10."""
    speed = f["float32"]["wall_s"] / f["bfloat16"]["wall_s"]
    floor, int8 = f["bfloat16"]["floor"]["kl_mean"], f["float32"]["schemes"]["int8-channel"]["kl_mean"]
    fast, fine = speed >= 1.5, floor <= int8 / 10
    return {
        "bf16_speedup": speed,
        "bf16_floor_over_int8_fp32": floor / int8,
        "fast_enough": fast,
        "floor_small_enough": fine,
        "auto_on_cpu": "bfloat16" if fast and fine else "float32",
    }


def markdown(record: dict) -> str:
    """The table of docs/metrics.md (Resolution) from a saved record."""
    f = record["figures"]
    dtypes = [d for d in ("float32", "bfloat16") if d in f]
    lines = ["| | " + " | ".join(dtypes) + " |", "|---|" + "---:|" * len(dtypes)]

    def row(label, get):
        lines.append(f"| {label} | " + " | ".join(get(f[d]) for d in dtypes) + " |")

    row("floor mean KL (nats)", lambda d: f"{d['floor']['kl_mean']:.3g} ± {d['floor']['kl_se']:.2g}")
    row("floor KL P99", lambda d: f"{d['floor']['kl_p99']:.3g}")
    row("floor top-1 disagreement", lambda d: f"{100 * d['floor']['top1_disagree']:.2f} %")
    for name in f[dtypes[0]]["schemes"]:
        row(
            f"{name} mean KL (× floor)",
            lambda d, n=name: f"{d['schemes'][n]['kl_mean']:.3g} ({d['schemes'][n]['x_floor']:.0f}×)",
        )
        row(f"{name} KL P99", lambda d, n=name: f"{d['schemes'][n]['kl_p99']:.3g}")
    row("wall seconds (default run)", lambda d: f"{d['wall_s']:.0f}")
    row("floor's share of the wall time", lambda d: f"{100 * d['floor_share_of_wall']:.1f} %")
    if "bfloat16_cost" in f:
        c = f["bfloat16_cost"]
        lines.append("")
        lines.append(
            "bfloat16's own cost (float32 reference, the model computed in bfloat16): mean KL "
            f"{c['kl_mean']:.3g} ± {c['kl_se']:.2g}, "
            f"P99 {c['kl_p99']:.3g}, top-1 disagreement {100 * c['top1_disagree']:.2f} %."
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    add_save(ap)
    ap.add_argument("--markdown", type=Path, default=None, help="print the table of a saved record and stop")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return
    out: dict = {"benchmark": "floor", "cpu_flags": cpu_flags()}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            out[dtype] = dtype_figures(dtype, args.max_tokens, Path(tmp))
        if "bfloat16" in out:
            out["bfloat16_cost"] = dtype_cost(args.max_tokens, Path(tmp))
    if "float32" in out and "bfloat16" in out:
        out["bf16_over_fp32_wall"] = out["bfloat16"]["wall_s"] / out["float32"]["wall_s"]
        out["decision"] = decision(out)
    emit(__file__, out, args.save, args=args)


if __name__ == "__main__":
    main()
