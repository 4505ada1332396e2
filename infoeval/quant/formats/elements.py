"""Element formats: the values one stored weight can take, and rounding a float32 tensor onto them. Pure tensor maths.

| element  | bits | exponent, mantissa | bias | largest | smallest subnormal | as in                         |
|----------|-----:|--------------------|-----:|--------:|-------------------:|-------------------------------|
| fp8-e4m3 | 8    | 4, 3 (no inf)      | 7    | 448     | 2^-9               | OCP FP8, ``float8_e4m3fn``    |
| fp8-e5m2 | 8    | 5, 2               | 15   | 57,344  | 2^-16              | OCP FP8, ``float8_e5m2``      |
| fp6-e2m3 | 6    | 2, 3 (no inf, NaN) | 1    | 7.5     | 2^-3               | OCP MX, ``float6_e2m3fn``     |
| fp6-e3m2 | 6    | 3, 2 (no inf, NaN) | 3    | 28      | 2^-4               | OCP MX, ``float6_e3m2fn``     |
| fp4-e2m1 | 4    | 2, 1 (no inf, NaN) | 1    | 6       | 0.5                | OCP MX, NVFP4, ``float4_e2m1fn`` |
| nf4      | 4    | a table of 16      | –    | 1       | –                  | QLoRA's NormalFloat (bitsandbytes) |

Rounding is to nearest, ties to even (IEEE 754's default, which ml_dtypes, torch's casts and the kernels use), or
ties toward zero (``ties="zero"``: ggml's MXFP4, which picks the first of two equally near values); magnitudes
past the largest value saturate to it, as the kernels' ``satfinite`` conversions do (ml_dtypes' E4M3 would give
NaN above 464, and torch's eager E5M2 cast gives inf). A value's sign is kept, so a small negative weight rounds
to −0.0.

For a float element with m mantissa bits and smallest normal exponent e_min = 1 − bias, a magnitude a lies in the
binade 2^e ≤ a < 2^(e+1) with e = max(⌊log2 a⌋, e_min), whose values are spaced 2^(e−m) apart: the rounded value
is the nearest multiple of 2^(e−m) (``round_element_`` has float32's own addition find it), and a value that
rounds up to 2^(e+1) lands on the next binade's first value, as it should.

>>> round_element(torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.2]), ELEMENTS["fp4-e2m1"])
tensor([ 0.0000,  1.0000,  1.0000,  2.0000,  2.0000,  4.0000,  4.0000,  6.0000, -0.0000])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

NF4_VALUES = (  # bitsandbytes' NF4 code book (QLoRA, appendix E): quantiles of N(0, 1), scaled to [-1, 1]
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.2461123913526535,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)


@dataclass(frozen=True)
class Element:
    """One element format: ``bits`` stored per weight, ``largest`` finite magnitude, and either a float layout
    (``exponent_bits``, ``mantissa_bits``, ``bias``) or a code book (``table``)."""

    name: str
    bits: int
    largest: float
    exponent_bits: int = 0
    mantissa_bits: int = 0
    bias: int = 0
    table: tuple[float, ...] = ()

    @property
    def emax(self) -> int:
        """⌊log2⌋ of the largest value (OCP MX's emax_elem: 8 for E4M3, 2 for E2M1)."""
        return math.floor(math.log2(self.largest))

    @property
    def ml_dtypes_name(self) -> str | None:
        """The ml_dtypes type holding this element (the tests' reference), or None for a code book."""
        return {
            "fp8-e4m3": "float8_e4m3fn",
            "fp8-e5m2": "float8_e5m2",
            "fp6-e2m3": "float6_e2m3fn",
            "fp6-e3m2": "float6_e3m2fn",
            "fp4-e2m1": "float4_e2m1fn",
        }.get(self.name)


ELEMENTS = {
    e.name: e
    for e in (
        Element("fp8-e4m3", 8, 448.0, 4, 3, 7),
        Element("fp8-e5m2", 8, 57344.0, 5, 2, 15),
        Element("fp6-e2m3", 6, 7.5, 2, 3, 1),
        Element("fp6-e3m2", 6, 28.0, 3, 2, 3),
        Element("fp4-e2m1", 4, 6.0, 2, 1, 1),
        Element("nf4", 4, 1.0, table=NF4_VALUES),
    )
}


def round_element(x: torch.Tensor, element: Element, ties: str = "even") -> torch.Tensor:
    """``x`` (float32, finite) rounded onto ``element``'s values, saturating at ±largest: a new float32 tensor."""
    return round_element_(x.clamp(-element.largest, element.largest), element, ties)


def round_element_(q: torch.Tensor, element: Element, ties: str = "even") -> torch.Tensor:
    """``q`` (float32, finite, already clamped to ±largest) rounded onto ``element``'s values in place; returns q.

    Ties to even use float32's own rounding: with step = 2^(e−m) the spacing of q's binade (e = max(⌊log2|q|⌋,
    e_min)) and c = ±step·2^23, the sum q + c lies in c's binade, whose spacing is exactly step, so the hardware's
    round-to-nearest-even of that one addition is the element's rounding, and subtracting c again is exact. Both
    c and step come from q's exponent bits (integer operations): four passes over q, no ``frexp`` or ``ldexp``."""
    if element.table:
        return q.copy_(_nearest_in_table(q, element.table))
    m, e_min = element.mantissa_bits, 1 - element.bias
    exponent = q.view(torch.int32).bitwise_and(0x7F800000).clamp_(min=(127 + e_min) << 23)  # 2^e, as float32 bits
    if ties == "even":
        c = exponent.add_((23 - m) << 23).view(torch.float32).copysign_(q)  # ±2^(e − m + 23)
        return q.add_(c).sub_(c).copysign_(c)  # copysign keeps −0.0 for a small negative value
    step = exponent.sub_(m << 23).view(torch.float32).copysign_(q)  # ±2^(e − m), the sign of q
    return q.div_(step).sub_(0.5).ceil_().mul_(step)  # ties toward zero: ⌈|q| / step − ½⌉ · step, signed


def _nearest_in_table(x: torch.Tensor, table: tuple[float, ...]) -> torch.Tensor:
    """The nearest value of a sorted code book (``nf4_index``)."""
    values = torch.tensor(table, dtype=torch.float32, device=x.device)
    return values[nf4_index(x, values).long()]


def nf4_index(x: torch.Tensor, values: torch.Tensor, chunk: int = 1 << 18) -> torch.Tensor:
    """Index (uint8) of the nearest code-book value: the number of midpoints between neighbours that lie below x (a
    value exactly on a midpoint goes to the lower neighbour, as ``torch.bucketize(..., right=False)`` puts it).
    Counted a chunk of elements at a time, so each of the 15 comparisons reads a cache-sized slice (twice as fast
    as a binary search per element)."""
    midpoints = ((values[1:] + values[:-1]) / 2).tolist()
    flat = x.reshape(-1)
    index = torch.zeros(flat.numel(), dtype=torch.uint8, device=x.device)
    above = torch.empty(min(chunk, flat.numel()), dtype=torch.bool, device=x.device)
    for start in range(0, flat.numel(), chunk):
        part, count = flat[start : start + chunk], index[start : start + chunk]
        for midpoint in midpoints:
            count.add_(torch.gt(part, midpoint, out=above[: part.numel()]))
    return index.view(x.shape)
