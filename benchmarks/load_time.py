"""Benchmark: loading the built-in GGUF model cold (transformers dequantizes it) and warm (from infoeval's
safetensors cache), each in a fresh process with an empty or filled INFOEVAL_CACHE.

    python benchmarks/load_time.py [--model smollm2-135m] [--repeats 2]

Prints JSON: seconds for imports, the cold load (which also writes the cache) and warm loads, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _record import add_save, emit  # benchmarks/_record.py


def child(model: str) -> dict:
    t0 = time.perf_counter()
    import torch

    from infoeval.models import load_model

    t1 = time.perf_counter()
    loaded = load_model(model, torch.device("cpu"), torch.float32)
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "load_s": t2 - t1, "kind": loaded.info.kind}


def run(model: str, cache: str) -> dict:
    env = dict(os.environ, INFOEVAL_CACHE=cache)
    out = subprocess.run(
        [sys.executable, __file__, "--child", model], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child")
    add_save(ap)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    with tempfile.TemporaryDirectory() as cache:
        cold = run(a.model, cache)
        warm = [run(a.model, cache) for _ in range(a.repeats)]
    best = min(w["load_s"] for w in warm)
    emit(
        __file__,
        {
            "benchmark": "load_time",
            "model": a.model,
            "cold_load_s": round(cold["load_s"], 2),
            "warm_load_s": [round(w["load_s"], 2) for w in warm],
            "import_s": round(min(w["import_s"] for w in warm), 2),
            "cold_over_warm": round(cold["load_s"] / best, 1),
        },
        a.save,
        args=a,
    )


if __name__ == "__main__":
    main()
