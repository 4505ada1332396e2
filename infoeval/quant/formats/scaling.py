"""How each block of weights gets its scale, and its elements rounded: one function per convention, each following
its source's arithmetic operation for operation (the order of a division and a multiplication changes the last
bit), so that the dequantized weights agree bit for bit. Pure tensor maths.

Every function takes float32 blocks ``x`` (n, B) and the element format, and returns ``(values, multiplier,
offset)``: the elements (n, B) on the element's grid, the per-block multiplier (n, 1) and an additive per-block
offset (n, 1) or None, so that the dequantized weight is ``values · multiplier (+ offset)``, as its source
dequantizes it. ``amax`` is the whole tensor's largest magnitude (NVFP4's second-level scale).

* absmax: s = a / largest in fp32 (0 → ε), elements round(clamp(x / s)): compressed-tensors' FP8 weights.
* mx-floor: s = 2^(⌊log2 a⌋ − emax) from a's exponent bits, elements round(clamp(x / s)): OCP MX 1.0, torchao
  ``to_mx`` FLOOR.
* mx-rceil: s = 2^⌈log2(a / largest)⌉, elements round(clamp(x · 2^−e)): NVIDIA's recipe, torchao RCEIL.
* nvfp4: E4M3(g · a / 6) with g = 448·6 / amax, s = E4M3 / g, elements round(clamp(x / s)): compressed-tensors NVFP4.
* nvfp4-torchao: E4M3(max(a/6 / t, 2^−6)) with t = amax / (448·6), elements round(clamp(x · (1/t) / E4M3)),
  s = t · E4M3: torchao ``nvfp4_quantize``.
"""

from __future__ import annotations

import torch

from infoeval.quant.formats.elements import Element, round_element_

F32_MIN_NORMAL = 2.0**-126
E8M0_BIAS = 127
E4M3_MAX = 448.0


def _round(q: torch.Tensor, element: Element) -> torch.Tensor:
    """q (a new tensor) clamped to ±largest and rounded onto the element, in place."""
    return round_element_(q.clamp_(-element.largest, element.largest), element)


def _amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| of each block (n, 1), from its largest and smallest values (no |x| copy)."""
    return torch.maximum(x.amax(dim=-1, keepdim=True), x.amin(dim=-1, keepdim=True).neg_())


def absmax(x: torch.Tensor, element: Element, amax=None):
    """s = a / largest in float32 (compressed-tensors' symmetric float scale: amax over half of the range −largest …
    largest); a zero scale is replaced by float32's ε (compressed-tensors' guard); ŵ = round(clamp(x / s)) · s."""
    scale = absmax_scale(x, element)
    values = _round(torch.div(x, scale), element)
    return values, scale, None


def absmax_scale(x: torch.Tensor, element: Element) -> torch.Tensor:
    """``absmax``'s per-block scale (n, 1)."""
    scale = _amax(x).div_(element.largest)
    return torch.where(scale == 0, torch.finfo(torch.float32).eps, scale)


def e8m0_multiplier(biased: torch.Tensor) -> torch.Tensor:
    """2^(b − 127) of biased E8M0 exponents, as torchao's ``get_fp_scale`` makes it (``torch.pow`` in float32)."""
    two = torch.full_like(biased, 2.0, dtype=torch.float32)
    return torch.pow(two, biased.to(torch.int16) - E8M0_BIAS)


def mx_floor(x: torch.Tensor, element: Element, amax=None):
    """OCP MX's scale: X = 2^(⌊log2 a⌋ − emax), ⌊log2 a⌋ read from a's float32 exponent bits (−127 for a zero or
    subnormal amax), clamped to E8M0's −127 … 127; the elements are x / max(X, 2^−126), clamped and rounded
    (torchao ``to_mx``, ScaleCalculationMode.FLOOR)."""
    a = _amax(x)
    pow2 = torch.bitwise_right_shift(a.view(torch.int32), 23).bitwise_and_(0xFF) - E8M0_BIAS
    biased = (pow2 - element.emax).clamp_(-E8M0_BIAS, E8M0_BIAS + 1) + E8M0_BIAS
    scale = torch.bitwise_left_shift(biased.to(torch.int32), 23).view(torch.float32).clamp(min=F32_MIN_NORMAL)
    values = _round(torch.div(x, scale), element)
    return values, e8m0_multiplier(biased), None


def mx_rceil(x: torch.Tensor, element: Element, amax=None):
    """NVIDIA's MX scale: E = ⌈log2(a / largest)⌉ (clamped to −127 … 127), the elements x · 2^−E, clamped and rounded;
    a block whose E is −127 is multiplied by 1 (torchao ``_to_mx_rceil``, the CPU path)."""
    descale = _amax(x).div_(element.largest)
    biased = torch.ceil(torch.log2(descale)).clamp_(-E8M0_BIAS, E8M0_BIAS).add_(E8M0_BIAS).to(torch.uint8)
    reciprocal = torch.where(biased == 0, 1.0, torch.exp2(E8M0_BIAS - biased.to(torch.float32)))
    values = _round(torch.mul(x, reciprocal), element)
    return values, e8m0_multiplier(biased), None


def nvfp4_global(amax: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' global scale g = 448 · 6 / amax (amax at least float32's tiny; 1 where it overflows)."""
    a = amax.to(torch.float32).clamp(min=torch.finfo(torch.float32).tiny)
    return torch.nan_to_num(E4M3_MAX * 6.0 / a, nan=1.0, posinf=1.0, neginf=1.0)


def nvfp4(x: torch.Tensor, element: Element, amax: torch.Tensor):
    """NVFP4 as compressed-tensors (llm-compressor) writes it and vLLM reads it: the block's E4M3 scale is
    g · (a / 6), saturated at 448 (a zero scale becomes 0.125, E4M3's ε); the weight is divided by s = E4M3 / g,
    rounded to E2M1 and multiplied by s again."""
    g = nvfp4_global(amax)
    scaled = g * _amax(x).div_(element.largest)
    e4m3 = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    e4m3 = torch.where(e4m3 == 0, 0.125, e4m3)
    scale = e4m3 / g
    values = _round(torch.div(x, scale), element)
    return values, scale, None


def nvfp4_torchao(x: torch.Tensor, element: Element, amax: torch.Tensor):
    """NVFP4 as torchao quantizes it (``nvfp4_quantize`` with ``per_tensor_amax_to_scale``): t = amax / (448 · 6),
    the block's E4M3 scale (a / 6) / t clamped to 2^−6 … 448; the weight times (1 / t) / E4M3, rounded to E2M1;
    dequantized as values · (t · E4M3)."""
    t = amax.to(torch.float32) / (E4M3_MAX * element.largest)
    scaled = _amax(x).div_(element.largest) / t
    tiny = torch.finfo(torch.float8_e4m3fn).tiny
    e4m3 = scaled.clamp(min=tiny, max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    reciprocal = (1.0 / t) / e4m3
    values = _round(torch.mul(x, reciprocal), element)
    return values, t * e4m3, None


CONVENTIONS = {
    "absmax": absmax,
    "mx-floor": mx_floor,
    "mx-rceil": mx_rceil,
    "nvfp4": nvfp4,
    "nvfp4-torchao": nvfp4_torchao,
}
