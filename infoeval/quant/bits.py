"""Stored bits per weight of a scheme: the codes plus the scales and zero points a deployment format keeps.

Convention (GPTQ / AutoRound checkpoints, compressed-tensors, llama.cpp's ``d`` fields): scales are stored as
float16, 16 bits each; an asymmetric scheme's zero point is an integer of the codes' own width b (GPTQ packs its
``qzeros`` at the weight bit width). In memory infoeval keeps float32 scales and uint8 zero points
(``codes.PackedWeight``) so that dequantization is exact; this table counts what a checkpoint stores.

For an (out, in) weight with b-bit codes and G scales per row (G = 1 per channel, ⌈in / N⌉ for groups of N;
a shorter last group still has its own scale), the layer stores exactly

    bits = out · (in · b + G · (16 + z)),     z = 0 (symmetric) or b (asymmetric)

an integer, so sums over layers and budgets compare exactly. Per weight:

| scheme           | bits per weight                 | in = 576 (SmolLM2 hidden)  | in = 1536 |
|------------------|---------------------------------|----------------------------|-----------|
| int4-g128        | 4 + 16·⌈in/128⌉/in (4 + 16/128) | 4 + 80/576 = 4.1389        | 4.1250    |
| int4-g128-asym   | 4 + 20·⌈in/128⌉/in (4 + 20/128) | 4 + 100/576 = 4.1736       | 4.1563    |
| int3-g128        | 3 + 16·⌈in/128⌉/in              | 3.1389                     | 3.1250    |
| int5-g128        | 5 + 16·⌈in/128⌉/in              | 5.1389                     | 5.1250    |
| int8-channel     | 8 + 16/in                       | 8.0278                     | 8.0104    |
| int4-g32         | 4 + 16/32 = 4.5                 | 4.5                        | 4.5       |
| bf16, fp16       | 16 (the weight itself)          | 16                         | 16        |

(llama.cpp's Q4_0 block of 32 is 4.5 bits per weight, Q8_0's 8.5, Q4_1's 5.0 with an fp16 minimum.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

from infoeval.quant.formats.presets import Format
from infoeval.quant.schemes import Scheme

SCALE_BITS = 16  # float16 scales, as GPTQ checkpoints and llama.cpp blocks store them


def zero_point_bits(scheme: Scheme) -> int:
    """Bits of one stored zero point: 0 for a symmetric scheme, the code width for an asymmetric one."""
    return 0 if scheme.symmetric else scheme.bits


def groups_per_row(scheme: Scheme, in_features: int) -> int:
    """Scales per row: 1 per channel, else ⌈in / N⌉ (a shorter last group has its own scale).

    >>> from infoeval.quant.schemes import parse_scheme
    >>> groups_per_row(parse_scheme("int4-g128"), 576), groups_per_row(parse_scheme("int8-channel"), 576)
    (5, 1)
    """
    return 1 if scheme.group_size is None else math.ceil(in_features / scheme.group_size)


def layer_bits(scheme: Scheme, shape: tuple[int, int]) -> int:
    """Exact stored bits of an (out, in) weight: out · (in · b + G · (16 + z)).

    >>> from infoeval.quant.schemes import parse_scheme
    >>> layer_bits(parse_scheme("int4-g128"), (2, 256))  # 2 rows × (256·4 + 2 scales · 16)
    2112
    """
    out_f, in_f = int(shape[0]), int(shape[1])
    if isinstance(scheme, Format):  # a shipped format: its elements, block scales and tensor scale
        return scheme.layer_bits((out_f, in_f))
    if scheme.fmt:  # a 16-bit float weight: 16 bits each, no scales
        return out_f * in_f * 16
    return out_f * (in_f * scheme.bits + groups_per_row(scheme, in_f) * (SCALE_BITS + zero_point_bits(scheme)))


def bits_per_weight(scheme: Scheme, in_features: int) -> Fraction:
    """Exact bits per weight of a layer with ``in_features`` inputs (independent of its rows).

    >>> from infoeval.quant.schemes import parse_scheme
    >>> bits_per_weight(parse_scheme("int4-g128"), 1536), float(bits_per_weight(parse_scheme("int8-channel"), 576))
    (Fraction(33, 8), 8.027777777777779)
    """
    return Fraction(layer_bits(scheme, (1, in_features)), in_features)


def average_bits(pairs: Iterable[tuple[Scheme, tuple[int, int]]]) -> Fraction:
    """Weight-averaged stored bits per quantized weight of (scheme, shape) pairs: Σ bits / Σ weights."""
    total = weights = 0
    for scheme, shape in pairs:
        total += layer_bits(scheme, shape)
        weights += int(shape[0]) * int(shape[1])
    if not weights:
        raise ValueError("no quantized weights to average over")
    return Fraction(total, weights)


def packed_bits(packed) -> int:
    """Bits a ``codes.PackedWeight`` would store in a checkpoint, counted from its tensors: its code bytes
    (nibbles for 2–4 bits, bytes for 5–8; without the in-memory list of −0 positions), one float16 per scale,
    and b bits per zero point. Equals ``layer_bits`` for schemes of 4 or 8 bits, whose codes fill their
    storage exactly (an even number of weights for 4 bits)."""
    zeros = 0 if packed.zero is None else packed.zero.numel() * packed.bits
    return packed.codes.numel() * packed.codes.element_size() * 8 + packed.scale.numel() * SCALE_BITS + zeros
