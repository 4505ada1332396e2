"""Packed variants (integer codes, dequantized layer by layer in the forward pass) against full fake-quantized
float copies, on SmolLM2-135M (CPU, float32): stored MiB per scheme, and the seconds of one forward pass of 512
tokens with the variant swapped in either way. Prints one JSON object.

    python benchmarks/dequant.py [--tokens 512] [--repeats 5] [--threads N] [--schemes int8-channel,int4-g128,...]

Times are the minimum over ``repeats`` runs, the two ways interleaved (a shared machine is noisy); the
logits of the two ways are checked to be identical.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from _record import add_save, emit  # benchmarks/_record.py

from infoeval.models import load_model
from infoeval.quant.apply import WithVariant, dequant_buffers, quantize_variant
from infoeval.quant.primitives import fake_quantize
from infoeval.quant.schemes import parse_scheme

MIB = 2**20


@contextlib.contextmanager
def full_copy_swapped(model: torch.nn.Module, full: dict[str, torch.nn.Parameter]):
    """The previous way: whole fake-quantized Parameters swapped in for the block."""
    modules = dict(model.named_modules())
    originals = {name: modules[name].weight for name in full}
    try:
        for name, param in full.items():
            modules[name].weight = param
        yield model
    finally:
        for name, param in originals.items():
            modules[name].weight = param


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@torch.inference_mode()
def bench_scheme(model, name: str, ids: torch.Tensor, repeats: int) -> dict:
    variant = quantize_variant(model, parse_scheme(name))
    modules = dict(model.named_modules())
    fp32_bytes = sum(modules[n].weight.numel() * 4 for n in variant.weights)
    full = {
        n: torch.nn.Parameter(fake_quantize(modules[n].weight, variant.scheme), requires_grad=False)
        for n in variant.weights
    }
    packed_model = WithVariant(model, variant)

    def packed():
        return packed_model(input_ids=ids).logits

    def copied():
        with full_copy_swapped(model, full):
            return model(input_ids=ids).logits

    identical = torch.equal(packed(), copied())
    bufs = dequant_buffers(model)
    bufs.reserve(variant)
    t_packed = t_full = t_dequant = float("inf")
    for _ in range(repeats):  # interleaved, so that both see the same machine load
        t_packed = min(t_packed, _best(packed, 1))
        t_full = min(t_full, _best(copied, 1))
        t_dequant = min(t_dequant, _best(lambda: [bufs.dequantize(w) for w in variant.weights.values()], 1))
    return {
        "stored_mib": round(variant.nbytes / MIB, 2),
        "fp32_mib": round(fp32_bytes / MIB, 2),
        "stored_fraction": round(variant.nbytes / fp32_bytes, 4),
        "forward_packed_s": round(t_packed, 4),
        "forward_full_copy_s": round(t_full, 4),
        "ratio_packed_over_full": round(t_packed / t_full, 3),
        "dequant_all_layers_s": round(t_dequant, 4),
        "logits_identical": identical,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--schemes", default="int8-channel,int4-g128,int4-g32-asym")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    add_save(ap)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model("smollm2-135m", torch.device("cpu"), torch.float32).model
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    out = {
        "model": "smollm2-135m",
        "device": "cpu",
        "dtype": "float32",
        "tokens": args.tokens,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "schemes": {},
    }
    for name in args.schemes.split(","):
        out["schemes"][name] = bench_scheme(model, name, ids, args.repeats)
    emit(__file__, out, args.save, args=args, indent=1)


if __name__ == "__main__":
    main()
