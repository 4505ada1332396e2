"""llama.cpp's legacy GGUF blocks of 32 weights (``ggml-quants.c``'s reference quantizers), and ggml's MXFP4: the
same ``(values, multiplier, offset)`` contract as ``scaling.py``. Pure tensor maths, in float32 throughout.

* Q8_0: d = amax / 127, q = roundf(x / d) (halves away from zero), ŵ = d·q; 8.5 bits per weight.
* Q4_0, Q5_0: d = m / −8 (−16), q = min(15 (31), trunc(x / d + 8.5 (16.5))), ŵ = d·(q − 8 (16)); 4.5, 5.5.
* Q4_1, Q5_1: d = (max − min) / 15 (31), q = min(15 (31), trunc((x − min) / d + 0.5)), ŵ = d·q + min; 5, 6.
* MXFP4: d = 2^(⌊log2 amax⌋ − 2) (E8M0), each weight the nearest of d·{0, ±½, …, ±6}, the first on a tie
  (toward zero); 4.25.

d and min are stored as fp16 (E8M0 for MXFP4), so ŵ uses them rounded; the codes use them unrounded.
m is the block's value of largest magnitude, with its sign (the first such). "x / d" is x · (1 / d), the reciprocal
taken once per block, as the C code does; a zero d gives codes of 0 (1 / d taken as 0). The products and sums are
float32 operations each rounded on its own: the gguf package's numpy quantizers compute them so. llama.cpp's C
built with fused multiply-adds (``-march=native`` on a CPU with FMA) rounds ``x·id + 8.5`` once, which can move a
code by one on a value within one rounding of a code boundary (``docs/formats.md``).
"""

from __future__ import annotations

import torch

from infoeval.quant.formats.elements import Element, round_element_

MXFP4_DOUBLED = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # ggml's kvalues_mxfp4: E2M1 values × 2


def _fp16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float16).to(torch.float32)


def _reciprocal(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d == 0, 0.0, 1.0 / d)


def _codes(q: torch.Tensor) -> torch.Tensor:
    """Codes as the C casts leave them where 1 / d overflowed (d subnormal): any code, since such a block's fp16 d
    is 0 and each ŵ is 0 whatever its code; 0 here, so that no inf or NaN reaches ŵ."""
    return torch.nan_to_num_(q, nan=0.0, posinf=0.0, neginf=0.0)


def _signed_max(x: torch.Tensor) -> torch.Tensor:
    """The first value of largest magnitude in each block, with its sign (numpy's ``argmax`` of |x|)."""
    return torch.take_along_dim(x, x.abs().argmax(dim=-1, keepdim=True), dim=-1)


def _round_away_(t: torch.Tensor) -> torch.Tensor:
    """roundf in place: to nearest, halves away from zero (gguf's ``np_roundf``: sign · (⌊|t|⌋ +
    ⌊2·(|t| − ⌊|t|⌋)⌋)), as trunc(t) + trunc(2·(t − trunc(t))), each step exact; t is finite (``_codes`` has run)."""
    whole = t.trunc()
    return t.sub_(whole).mul_(2).trunc_().add_(whole)


def q8_0(x: torch.Tensor, element=None, amax=None):
    d = _amax_blocks(x) / 127
    q = _round_away_(_codes(x * _reciprocal(d)))
    return q, _fp16(d), None


def _amax_blocks(x: torch.Tensor) -> torch.Tensor:
    return torch.maximum(x.amax(dim=-1, keepdim=True), x.amin(dim=-1, keepdim=True).neg_())


def _symmetric(x: torch.Tensor, half: int):
    """Q4_0 (half 8) and Q5_0 (half 16): d = m / −half, q = min(2·half − 1, trunc(x·id + half + ½))."""
    d = _signed_max(x) / -half
    q = _codes(torch.mul(x, _reciprocal(d)).add_(half + 0.5).trunc_()).clamp_(0, 2 * half - 1)
    return q.sub_(half), _fp16(d), None


def _offset(x: torch.Tensor, top: int):
    """Q4_1 (top 15) and Q5_1 (top 31): d = (max − min) / top, q = min(top, trunc((x − min)·id + ½))."""
    hi, lo = x.amax(dim=-1, keepdim=True), x.amin(dim=-1, keepdim=True)
    d = (hi - lo) / top
    q = _codes(torch.sub(x, lo).mul_(_reciprocal(d)).add_(0.5).trunc_()).clamp_(0, top)
    return q, _fp16(d), _fp16(lo)


def q4_0(x, element=None, amax=None):
    return _symmetric(x, 8)


def q5_0(x, element=None, amax=None):
    return _symmetric(x, 16)


def q4_1(x, element=None, amax=None):
    return _offset(x, 15)


def q5_1(x, element=None, amax=None):
    return _offset(x, 31)


def e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """ggml's ``GGML_E8M0_TO_FP32_HALF``: 2^(e − 128) from its float32 bits (0x00200000 << e below e = 2)."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, torch.bitwise_left_shift(torch.full_like(e, 0x00200000), e), (e - 1) << 23)
    return bits.view(torch.float32)


def mxfp4_ggml(x: torch.Tensor, element: Element, amax=None):
    """ggml's MXFP4: e = ⌊log2 amax⌋ − 2 + 127 (0 for a zero block), d = 2^(e − 128), each weight the first of the
    doubled E2M1 values k (``MXFP4_DOUBLED``) whose |d·k − x| is least; ŵ = d·k. The first least is the smaller in
    magnitude, so this is E2M1 rounding of x / 2d with ties toward zero (x / 2d is exact: a power of two), times 2:
    no (block, 16) table of errors is made."""
    a = _amax_blocks(x)
    e = torch.where(a > 0, torch.floor(torch.log2(a)) - 2 + 127, 0.0).to(torch.uint8)
    d = e8m0_half(e)
    k = round_element_(torch.div(x, 2 * d).clamp_(-element.largest, element.largest), element, ties="zero").mul_(2)
    return k, d, None


GGML = {"q8_0": q8_0, "q4_0": q4_0, "q4_1": q4_1, "q5_0": q5_0, "q5_1": q5_1, "gguf-mxfp4": mxfp4_ggml}
