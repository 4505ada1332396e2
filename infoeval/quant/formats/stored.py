"""A layer's weight held in a shipped format (``presets.Format``): one byte per element and its blocks' float32
multipliers (and offsets), from which each forward pass dequantizes the very bits ``rounding.fake_quantize`` gives.

The elements are kept in a one-byte dtype that holds every value of the format exactly: E4M3 for E4M3, E5M2 for
E5M2 and E3M2 (each E3M2 value is an E5M2 value), int8 for GGUF's integer codes, ggml's doubled E2M1 values, and
the E2M1 and E2M3 values times 2 and 8 (``_codes``), the code book's index for NF4. Casting them back to float32
is exact, so ŵ = values · multiplier (+ offset) is the same float32 arithmetic as the format's own dequantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infoeval.quant.formats.elements import ELEMENTS, NF4_VALUES, nf4_index
from infoeval.quant.formats.presets import Format
from infoeval.quant.formats.rounding import check_finite, dequantize_blocks, quantize_blocks, to_blocks
from infoeval.quant.formats.scaling import absmax_scale

ALIGN = 64


SCALED_TO_INT8 = {"fp4-e2m1": 2.0, "fp6-e2m3": 8.0}  # element → the power of two that makes its values integers


def code_dtype(fmt: Format) -> torch.dtype:
    """The one-byte dtype a format's elements are kept in: the one whose cast to float32 is fastest among those
    that hold every value exactly (torch casts int8 and E5M2 to float32 several times faster than E4M3)."""
    if fmt.element == "nf4":
        return torch.uint8
    if fmt.element.startswith("int") or fmt.convention == "gguf-mxfp4" or fmt.element in SCALED_TO_INT8:
        return torch.int8
    return torch.float8_e5m2 if fmt.element in ("fp8-e5m2", "fp6-e3m2") else torch.float8_e4m3fn


@dataclass(frozen=True)
class FormatWeight:
    """One (out, in) weight in ``fmt``: ``codes`` (blocks, block size) in ``code_dtype``, ``multiplier`` and
    ``offset`` (blocks, 1) float32, the blocks' ``layout`` (``rounding.to_blocks``) and the dequantized dtype."""

    fmt: Format
    codes: torch.Tensor
    multiplier: torch.Tensor
    offset: torch.Tensor | None
    layout: tuple
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        parts = (self.codes, self.multiplier, self.offset)
        return sum(t.numel() * t.element_size() for t in parts if t is not None)

    def values(self) -> torch.Tensor:
        if self.codes.dtype == torch.uint8:  # NF4: the code book's index
            return torch.tensor(NF4_VALUES, dtype=torch.float32, device=self.codes.device)[self.codes.long()]
        return self.codes.to(torch.float32)

    def materialize(self) -> torch.Tensor:
        """ŵ in the weight's dtype (a new tensor, for one forward pass)."""
        w = dequantize_blocks(self.values(), self.multiplier, self.offset, self.layout)
        return w if self.dtype == torch.float32 else w.to(self.dtype)


def encode(w: torch.Tensor, fmt: Format) -> tuple[FormatWeight, torch.Tensor]:
    """The stored weight, and ŵ (float32, contiguous) as it dequantizes: made once, from the same blocks."""
    if fmt.element == "nf4":
        return _encode_code_book(w, fmt)
    values, multiplier, offset, layout = quantize_blocks(w.detach().to(torch.float32), fmt)
    codes, kept = _codes(values, multiplier, fmt)
    stored = FormatWeight(fmt, codes, kept, offset, layout, w.dtype)
    return stored, dequantize_blocks(values, multiplier, offset, layout, inplace=True)


def _codes(values: torch.Tensor, multiplier: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor]:
    """The elements in ``code_dtype`` and the multiplier they dequantize with. E2M1 and E2M3 values times 2 and 8
    are integers of int8, kept with the multiplier divided by the same power of two: (k · v) · (m / k) is the same
    real product as v · m, so its float32 rounding, ŵ, is the same. Where m / k would lose a bit (m below 2^−123),
    the values are kept as E4M3 with m itself."""
    factor = SCALED_TO_INT8.get(fmt.element) if fmt.convention != "gguf-mxfp4" else None
    if factor is None:
        return values.to(code_dtype(fmt)), multiplier
    kept = multiplier / factor
    if not torch.equal(kept * factor, multiplier):
        return values.to(torch.float8_e4m3fn), multiplier
    return values.mul(factor).to(torch.int8), kept


def _encode_code_book(w: torch.Tensor, fmt: Format) -> tuple[FormatWeight, torch.Tensor]:
    """NF4: each block's absmax scale, the nearest code-book value's index (searched once), ŵ = table[index] · s:
    the same bits as ``absmax`` with the code book's rounding."""
    x = w.detach().to(torch.float32)
    check_finite(x, fmt)
    blocks, layout = to_blocks(x, fmt.block)
    scale = absmax_scale(blocks, ELEMENTS["nf4"])
    table = torch.tensor(NF4_VALUES, dtype=torch.float32, device=x.device)
    codes = nf4_index(torch.div(blocks, scale).clamp_(-1.0, 1.0), table)
    stored = FormatWeight(fmt, codes, scale, None, layout, w.dtype)
    return stored, dequantize_blocks(table[codes.long()], scale, None, layout, inplace=True)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def stored_nbytes(fmt: Format, shape: tuple[int, int]) -> int:
    """Bytes a ``FormatWeight`` of an (out, in) weight keeps: a byte per (padded) element, 4 per multiplier and
    offset, each tensor rounded up to 64 bytes (the memory plan's estimate)."""
    rows, cols = fmt.block
    blocks = fmt.blocks(shape)
    per_block = (rows or int(shape[0])) * (cols or int(shape[1]))
    return _aligned(blocks * per_block) + _aligned(4 * blocks) * (2 if fmt.offset_bits else 1)
