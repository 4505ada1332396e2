"""Benchmark: quantize-compare against 4 plain forward passes over the same windows; peak RSS vs corpus size.

    python benchmarks/quantize_compare.py [--tokens 8192,32768] [--model smollm2-135m] [--data-dir ../shared/data]

For each token count, fresh processes run (``--repeats`` pairs, alternating; the fastest of each kind counts,
the usual estimator on a shared, noisy machine) on WikiText-2 test with ctx 512 and the default three schemes:
  * "compare": the whole quantize-compare pipeline as the CLI runs it (load, tokenize, quantize, lockstep
    evaluation, metrics) — its wall time and peak RSS;
  * "plain":   the same model and windows, 4 plain forward passes per window (full logits, no statistics) —
    the floor that any tool doing reference + 3 variants must pay.
It prints one JSON object: the ratios compare/plain (targets: wall ≤ 1.10, eval loop ≤ 1.05), tokens/s, and peak RSS at
each size (target: flat from 8k to 32k tokens). Both measurements come from the same run on the same machine. The eval
loop's own split (``engine.Clock``) is given against plain too: its forward passes (decoder blocks, heads, dequantizing)
and its per-position statistics, so a run shows which of the two moved.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]


def child(mode: str, tokens: int, model: str, data_dir: str) -> dict:
    import torch

    from infoeval.comparison.compare import quantize_compare
    from infoeval.input.prepare import Reporter, prepare
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
    from infoeval.quant.variant_settings import VariantSettings

    model_settings = ModelSettings(model=model)
    text_settings = TextSettings(dataset="wikitext-2", data_dir=Path(data_dir), max_tokens=tokens)
    window_settings = WindowSettings(ctx=512)
    t0 = time.perf_counter()
    if mode == "compare":
        result = quantize_compare(model_settings, text_settings, window_settings, VariantSettings(), Reporter())[
            0
        ].to_json()
        wall = time.perf_counter() - t0
        out = {
            "wall_s": wall,
            "timings": result["timings"],
            "scored_tokens": result["reference"]["tokens"],
            "kl_mean": {v["name"]: v["metrics"]["kl_mean"] for v in result["variants"]},
        }
    else:
        p = prepare(model_settings, text_settings, window_settings, Reporter())
        from infoeval.input.windows import window_inputs

        model_ = p.loaded.model
        t1 = time.perf_counter()
        with torch.inference_mode():
            for w in p.windows:
                ids = window_inputs(p.stream.ids, w, None)
                for _ in range(4):
                    model_(input_ids=ids, use_cache=False).logits.sum()
        fwd = time.perf_counter() - t1
        out = {
            "forward_s": fwd,
            "setup_s": t1 - t0,
            "scored_tokens": p.protocol.scored_tokens,
            "windows": len(p.windows),
        }
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(mode: str, tokens: int, model: str, data_dir: str) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--tokens", str(tokens), "--model", model, "--data-dir", data_dir]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--repeats", type=int, default=2, help="pairs of runs per size; the fastest of each kind counts")
    ap.add_argument("--child", choices=["compare", "plain"])
    add_save(ap)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, int(a.tokens), a.model, a.data_dir)))
        return
    import torch

    runs = []
    for n in (int(x) for x in a.tokens.split(",")):
        plains, comps = [], []
        for _ in range(a.repeats):  # alternate the two kinds, so slow spells of a shared machine hit both
            plains.append(run_child("plain", n, a.model, a.data_dir))
            comps.append(run_child("compare", n, a.model, a.data_dir))
        plain = min(plains, key=lambda r: r["forward_s"])
        comp = min(comps, key=lambda r: r["wall_s"])
        loop = comp["timings"]["quantize_s"] + comp["timings"]["eval_s"]
        runs.append(
            {
                "tokens": n,
                "scored_tokens": comp["scored_tokens"],
                "windows": plain["windows"],
                "compare_wall_s": round(comp["wall_s"], 2),
                "compare_timings_s": {k: round(v, 2) for k, v in comp["timings"].items()},
                "plain_4x_forward_s": round(plain["forward_s"], 2),
                "ratio_wall_vs_plain": round(comp["wall_s"] / plain["forward_s"], 3),
                "ratio_quantize_and_eval_vs_plain": round(loop / plain["forward_s"], 3),
                "ratio_eval_vs_plain": round(comp["timings"]["eval_s"] / plain["forward_s"], 3),
                **{
                    f"ratio_eval_{part}_vs_plain": round(comp["timings"][f"eval_{part}_s"] / plain["forward_s"], 3)
                    for part in ("forward", "statistics")
                    if f"eval_{part}_s" in comp["timings"]
                },  # CPU only
                "tokens_per_s": round(comp["scored_tokens"] / comp["wall_s"], 1),
                "peak_rss_mib": round(max(r["peak_rss_mib"] for r in comps), 1),
                "plain_peak_rss_mib": round(plain["peak_rss_mib"], 1),
                "kl_mean": comp["kl_mean"],
                "all_plain_4x_forward_s": [round(r["forward_s"], 2) for r in plains],
                "all_compare_wall_s": [round(r["wall_s"], 2) for r in comps],
            }
        )
    out = {
        "benchmark": "quantize_compare",
        "model": a.model,
        "text": "wikitext-2 test",
        "ctx": 512,
        "schemes": "int8-channel,int4-g128,int4-channel",
        "torch_threads": torch.get_num_threads(),
        "target_ratio_wall_vs_plain": 1.10,
        "target_ratio_eval_vs_plain": 1.05,
        "runs": runs,
    }
    if len(runs) >= 2:
        out["peak_rss_growth"] = round(runs[-1]["peak_rss_mib"] / runs[0]["peak_rss_mib"], 3)
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
