"""Benchmark: data parallelism on this machine's CPU cores — 2 ranks × 1 thread (torchrun, gloo) against 1 process ×
2 threads, the same quantize-compare on the same 16 windows (ctx 512, 3 schemes).

    python benchmarks/ranks.py [--model smollm2-135m] [--tokens 8192] [--repeats 1]

Both kinds run as the user runs them (fresh `infoeval` processes, alternating); the fastest of each counts. Prints
one JSON object: wall seconds of each, their ratio (target ≤ 1.10), whether the summary numbers agree (bit for
bit: identical; otherwise the largest relative difference, float32 rounding since the thread counts differ) and
the bytes rank 0 received per scored position in the gather.
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

ROOT = Path(__file__).resolve().parents[1]


def run(kind: str, args: list[str]) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    if kind == "ranks":
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "infoeval"]
        env |= {"OMP_NUM_THREADS": "1"}
    else:
        launch = [sys.executable, "-m", "infoeval"]
        env |= {"OMP_NUM_THREADS": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*launch, *args, "--json", str(out), "-q"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{kind} failed: {proc.stderr[-2000:]}")
        return wall, json.loads(out.read_text())


def _numbers(data: dict) -> dict[str, float]:
    flat = {f"reference/{k}": v for k, v in data["reference"].items()}
    for v in data["variants"]:
        flat |= {f"{v['name']}/{k}": x for k, x in v["metrics"].items()}
    return {k: float(x) for k, x in flat.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="default: the built-in model")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=1)
    add_save(ap)
    a = ap.parse_args()
    args = [
        "quantize-compare",
        *(["--model", a.model] if a.model else []),
        "--ctx",
        "512",
        "--max-tokens",
        str(a.tokens),
    ]
    walls: dict[str, list[float]] = {"process": [], "ranks": []}
    results = {}
    for _ in range(a.repeats):
        for kind in walls:
            wall, results[kind] = run(kind, args)
            walls[kind].append(wall)
    one, two = _numbers(results["process"]), _numbers(results["ranks"])
    rel = max(
        (abs(one[k] - two[k]) / abs(one[k]) for k in one if one[k] not in (0.0,) and one[k] == one[k]), default=0.0
    )
    par = results["ranks"]["provenance"]["parallel"]
    out = {
        "benchmark": "ranks",
        "windows": results["process"]["provenance"]["protocol"]["windows"],
        "scored_tokens": results["process"]["reference"]["tokens"],
        "one_process_2_threads_s": round(min(walls["process"]), 2),
        "two_ranks_1_thread_s": round(min(walls["ranks"]), 2),
        "ratio_ranks_vs_process": round(min(walls["ranks"]) / min(walls["process"]), 3),
        "target_ratio": 1.10,
        "summary_identical": one == two,
        "summary_max_rel_diff": rel,
        "gathered_bytes": par["gathered_bytes"],
        "gathered_bytes_per_scored_position": round(par["gathered_bytes"] / max(1, par["gathered_rows"]), 1),
        "all_walls_s": {k: [round(w, 2) for w in v] for k, v in walls.items()},
    }
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
