"""Benchmark: the shipped number formats (``infoeval/quant/formats``), what quantizing in each costs.

    python benchmarks/formats.py [--part all|quantize|pass] [--layers 28] [--repeats 2] [--save]

``--part quantize``: the Linear weights of one Qwen3-0.6B decoder layer (q 2048×1024, k and v 1024×1024, o
1024×2048, gate and up 3072×1024, down 1024×3072; seeded Gaussian weights, float32) encoded ``--layers`` times
(the model's 28 layers: 440 M weights) in every preset and in int4-g128, as a quantized variant encodes them
(the stored codes and ŵ, ``codes.encode_dequantized``). Each figure is the best of ``--repeats`` passes; every
format's ratio to int4-g128 is taken in the same run. Target: each ≤ 2×.

``--part pass``: SmolLM2-135M (the built-in model, float32) with each variant swapped in, one forward pass over a
batch of 4 × 256 tokens of the default text, the best of ``--repeats`` + 1 passes after a warm-up: the wall of a
pass of a variant as quantize-compare runs it (its stored weights dequantized for the pass). Target: each ≤ 1.10×
int4-g128's, in the same run.
"""

from __future__ import annotations

import argparse
import time

import torch
from _record import add_save, emit  # benchmarks/_record.py

from infoeval.quant.codes import encode_dequantized
from infoeval.quant.formats.presets import PRESETS
from infoeval.quant.schemes import parse_scheme

QWEN3_06B_LAYER = ((2048, 1024), (1024, 1024), (1024, 1024), (1024, 2048), (3072, 1024), (3072, 1024), (1024, 3072))
BASELINE = "int4-g128"


def _encode_seconds(weights: list[torch.Tensor], scheme, layers: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(layers):
            for w in weights:
                encode_dequantized(w, scheme)
        best = min(best, time.perf_counter() - t0)
    return best


def quantize_part(layers: int, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(shape, generator=gen) * 0.02 for shape in QWEN3_06B_LAYER]
    n = layers * sum(w.numel() for w in weights)
    base = _encode_seconds(weights, parse_scheme(BASELINE), layers, repeats)
    rows = {BASELINE: {"seconds": round(base, 3), "ratio": 1.0}}
    for name in PRESETS:
        s = _encode_seconds(weights, parse_scheme(name), layers, repeats)
        rows[name] = {"seconds": round(s, 3), "ratio": round(s / base, 2)}
    over = sorted(k for k, r in rows.items() if r["ratio"] > 2.0)
    return {"weights": n, "baseline": BASELINE, "formats": rows, "target_ratio": 2.0, "over_target": over}


def _pass_seconds(model, variant, ids: torch.Tensor, repeats: int) -> float:
    from infoeval.quant import apply

    with torch.inference_mode():
        run = apply.WithVariant(model, variant)
        run(input_ids=ids)  # warm-up
        best = float("inf")
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            run(input_ids=ids)
            best = min(best, time.perf_counter() - t0)
    return best


def pass_part(repeats: int) -> dict:
    from infoeval.input.text import load_text
    from infoeval.models import load_model
    from infoeval.quant import apply

    loaded = load_model("smollm2-135m", torch.device("cpu"), torch.float32)
    text = load_text(None).text
    ids = torch.tensor(loaded.tokenizer(text[:200_000])["input_ids"][: 4 * 256]).reshape(4, 256)
    names = [BASELINE, *PRESETS]
    seconds = {}
    for name in names:
        (variant,) = apply.build_variants(loaded.model, [parse_scheme(name)])
        seconds[name] = _pass_seconds(loaded.model, variant, ids, repeats)
        del variant
    base = seconds[BASELINE]
    rows = {k: {"seconds": round(v, 4), "ratio": round(v / base, 3)} for k, v in seconds.items()}
    over = sorted(k for k, r in rows.items() if r["ratio"] > 1.10)
    return {"model": "smollm2-135m", "batch": [4, 256], "formats": rows, "target_ratio": 1.10, "over_target": over}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "quantize", "pass"), default="all")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--repeats", type=int, default=2)
    add_save(ap)
    args = ap.parse_args()
    out = {}
    if args.part in ("all", "quantize"):
        out["quantize"] = quantize_part(args.layers, args.repeats)
    if args.part in ("all", "pass"):
        out["pass"] = pass_part(args.repeats)
    emit(__file__, out, args.save, args=args)


if __name__ == "__main__":
    main()
