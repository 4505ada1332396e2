"""The bytes a variant holds in memory, computed from the layers' shapes before anything is quantized (for the memory
plan): per quantized (out, in) weight, what ``codes.PackedWeight`` keeps once ``storage.gather`` has put it in one
allocation (each tensor 64-byte aligned):

    codes   out·in bytes (5–8 bits), ⌈out·in / 2⌉ (2–4 bits: two nibbles a byte)
    scale   out·G float32,   G = 1 per channel, ⌈in / N⌉ for groups of N
    zero    out·G uint8 (asymmetric schemes only)

A 16-bit float scheme keeps the weight cast to its dtype (2 bytes a weight; nothing when the weight already has
that dtype). Not counted: the int8 codes' list of −0 positions (4 bytes each, data-dependent: about 1 % of the
weights for Gaussian ones, at most 1/64 of them by construction).

>>> from infoeval.quant.schemes import parse_scheme
>>> packed_nbytes(parse_scheme("int4-g128"), (4, 256), torch.float32)  # 512 code bytes + 8 scales, aligned
576
>>> packed_nbytes(parse_scheme("int8-channel"), (4, 256), torch.float32)  # 1,024 code bytes + 4 scales
1088
"""

from __future__ import annotations

import math

import torch

from infoeval.quant.bits import groups_per_row
from infoeval.quant.formats import stored as stored_format
from infoeval.quant.formats.presets import Format
from infoeval.quant.schemes import Scheme
from infoeval.quant.storage import _aligned


def packed_nbytes(scheme: Scheme, shape: tuple[int, int], dtype: torch.dtype) -> int:
    """Bytes one (out, in) weight of ``dtype`` keeps under ``scheme`` (the table above)."""
    out_f, in_f = int(shape[0]), int(shape[1])
    n = out_f * in_f
    if isinstance(scheme, Format):
        return stored_format.stored_nbytes(scheme, (out_f, in_f))
    if scheme.fmt:
        return 0 if getattr(torch, scheme.dtype_name) == dtype else 2 * n
    g = groups_per_row(scheme, in_f)
    codes = n if scheme.bits > 4 else math.ceil(n / 2)
    zero = 0 if scheme.symmetric else _aligned(out_f * g)
    return _aligned(codes) + _aligned(4 * out_f * g) + zero


def plan_nbytes(model: torch.nn.Module, plan, dtype: torch.dtype) -> int:
    """Bytes a variant of ``plan`` ((name, scheme or None, reason) per layer: ``quantize_plan``'s) keeps for
    ``model`` (its Linear layers' shapes; a model on the meta device will do)."""
    modules = dict(model.named_modules())
    return sum(
        packed_nbytes(scheme, tuple(modules[name].weight.shape), dtype)
        for name, scheme, _ in plan
        if scheme is not None
    )


def scratch_nbytes(model: torch.nn.Module, scheme: Scheme, dtype: torch.dtype, layers) -> int:
    """The shared dequantization buffers' bytes (``apply.DequantBuffers``) for the largest of ``layers`` ((name,
    selected, reason): ``selection.plan_layers``) that is quantized: its float32 weight, the int16 and uint8
    unpacking buffers where the scheme uses them, its cast to a 16-bit dtype."""
    modules = dict(model.named_modules())
    n = max((modules[name].weight.numel() for name, selected, _ in layers if selected), default=0)
    if isinstance(scheme, Format):  # the values and ŵ in float32 (and its cast), made for each forward pass
        return n * (8 + (0 if dtype == torch.float32 else 2))
    if scheme.fmt:
        return 0
    nibbles = scheme.bits <= 4  # symmetric nibbles are sign-magnitude: unpacked through int16 too
    per = 4 + (2 if nibbles and scheme.symmetric else 0) + (1 if nibbles else 0)
    return n * (per + (0 if dtype == torch.float32 else 2))
