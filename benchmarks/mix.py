"""Benchmark: `infoeval mix` at uniform int4-g128's own bits, measured on held-out text (the measured target: mean KL
of the mix ≤ 0.7 × uniform int4-g128's at no more bits per weight).

    python benchmarks/mix.py [--model smollm2-135m] [--by type,block] [--tokens 8192] [--sweep-tokens 2048]
                             [--schemes int3-g128-asym,int4-g128,int4-g128-asym,int5-g128-asym,int8-channel]
                             [--sweep 3.5:6:0.25]

Each --by runs as a fresh `infoeval mix` process (the sensitivity sweep on the --sweep-tokens tokens right after
the --tokens measured ones, then the solver, then the mix and every uniform scheme on the measured tokens). Prints
one JSON object: per --by, the budget (int4-g128's exact stored bits), the mix's bits, predicted and measured mean
KL, uniform int4-g128's measured KL, their ratio and whether it meets ≤ 0.7, the additivity (measured / predicted)
of every measured variant, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.7


def run(by: str, a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            sys.executable,
            "-m",
            "infoeval",
            "mix",
            *(["--model", a.model] if a.model else []),
            "--schemes",
            a.schemes,
            "--budget-bits",
            "int4-g128",
            "--by",
            by,
            "--max-tokens",
            str(a.tokens),
            "--sweep-tokens",
            str(a.sweep_tokens),
            *(["--sweep", a.sweep] if a.sweep else []),
            "--out-dir",
            tmp,
            "-q",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"mix --by {by} failed: {proc.stderr[-2000:]}")
        data = json.loads((Path(tmp) / "result.json").read_text())
    s, tg = data["solutions"][0], data["target"]
    return {
        "by": by,
        "units": len(data["units"]),
        "budget_bits": s["budget_bits"],
        "mix_bits": s["bits_per_weight"],
        "solver": s["method"],
        "predicted_kl": s["predicted_kl"],
        "mix_kl": tg["mix_kl"],
        "int4_g128_kl": tg["uniform_kl"],
        "ratio": tg["ratio"],
        "meets_target": tg["ratio"] is not None
        and tg["ratio"] <= TARGET
        and s["bits_per_weight"] <= tg["uniform_bits"],
        "choice": s["choice"],
        "curve": [
            {
                k: r[k]
                for k in (
                    "name",
                    "kind",
                    "bits_per_weight",
                    "predicted_kl",
                    "measured_kl",
                    "measured_kl_se",
                    "additivity",
                )
            }
            for r in sorted(data["measured"], key=lambda r: r["bits_per_weight"])
        ],
        "held_out": data["held_out"],
        "wall_s": wall,
        "timings": data["timings"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="default: the built-in model")
    ap.add_argument("--by", default="type", help="comma-separated: type, block, linear")
    ap.add_argument("--schemes", default="int3-g128-asym,int4-g128,int4-g128-asym,int5-g128-asym,int8-channel")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--sweep-tokens", type=int, default=2048)
    ap.add_argument("--sweep", default=None, help="budgets START:STOP:STEP for the KL-vs-bits curve")
    add_save(ap)
    a = ap.parse_args()
    runs = [run(by, a) for by in a.by.split(",")]
    emit(__file__, {"target_ratio": TARGET, "runs": runs}, a.save, args=a)


if __name__ == "__main__":
    main()
