"""bitsandbytes (the ``bitsandbytes`` package): 4-bit NF4/FP4 with a float32 absmax per block (optionally itself
quantized, "double quantization"), and LLM.int8(). Each selected ``nn.Linear`` becomes bitsandbytes' own
``Linear4bit`` or ``Linear8bitLt`` holding ``Params4bit``/``Int8Params`` (its public modules, which transformers'
``BitsAndBytesConfig`` puts in place), quantized when placed on the layer's device; its forward runs
bitsandbytes' kernels (on a CPU, its CPU backend).

Specs: ``nf4``, ``fp4`` (blocks of 64, bitsandbytes' default), ``nf4-g<N>``/``fp4-g<N>`` (N a power of two
from 64 to 4096), each with ``-dq`` for double quantization; ``int8`` (LLM.int8(): int8 codes with a scale per
output channel, activation outliers above 6.0 computed apart, as transformers' default threshold).
"""

from __future__ import annotations

import re

import torch

from infoeval.errors import UsageError

_SPEC = re.compile(r"^(?:(int8)|(nf4|fp4)(?:-g(\d+))?(-dq)?)$")
BLOCKS = (64, 128, 256, 512, 1024, 2048, 4096)
THRESHOLD = 6.0  # LLM.int8()'s outlier threshold, transformers' BitsAndBytesConfig default


def parse(spec: str, text: str) -> tuple[dict, int, int | None]:
    """(bitsandbytes' settings, bits, block size) of a spec such as ``nf4-g64-dq``."""
    m = _SPEC.match(spec)
    block = int(m.group(3)) if m and m.group(3) else 64
    if not m or block not in BLOCKS:
        raise UsageError(
            f"'{text}' is not a bnb scheme; give bnb:nf4, bnb:fp4, optionally -g<N> (N in "
            f"{', '.join(map(str, BLOCKS))}) "
            "and -dq (double quantization), or bnb:int8 (bnb:nf4-g64-dq)"
        )
    if m.group(1):
        return {"kind": "int8", "threshold": THRESHOLD}, 8, None
    return {"kind": m.group(2), "blocksize": block, "double_quant": bool(m.group(4))}, 4, block


def quantize_linear(linear: torch.nn.Linear, settings: dict) -> torch.nn.Module:
    """bitsandbytes' module for ``linear`` (its weight copied, then quantized on the layer's device)."""
    import bitsandbytes as bnb

    w, bias = linear.weight, linear.bias is not None
    if settings["kind"] == "int8":
        module = bnb.nn.Linear8bitLt(
            linear.in_features, linear.out_features, bias=bias, has_fp16_weights=False, threshold=settings["threshold"]
        )
        module.weight = bnb.nn.Int8Params(w.detach().clone().cpu(), requires_grad=False, has_fp16_weights=False)
    else:
        dq = settings["double_quant"]
        module = bnb.nn.Linear4bit(
            linear.in_features,
            linear.out_features,
            bias=bias,
            compute_dtype=w.dtype,
            compress_statistics=dq,
            quant_type=settings["kind"],
        )
        module.weight = bnb.nn.Params4bit(
            w.detach().clone().cpu(),
            requires_grad=False,
            quant_type=settings["kind"],
            blocksize=settings["blocksize"],
            compress_statistics=dq,
        )
    if bias:
        module.bias = torch.nn.Parameter(linear.bias.detach().clone().cpu(), requires_grad=False)
    return module.to(w.device)
