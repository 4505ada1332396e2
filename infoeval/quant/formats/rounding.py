"""A weight in a shipped format (``presets.Format``): cut into its blocks, each block's scale and elements made by the
format's convention, and put back together: ``fake_quantize(w, fmt)`` is the weight its kernel computes with.

Blocks of (R, C) of an (out, in) weight: R consecutive rows × C consecutive columns (None: the whole dimension);
a format that pads (``Format.padded``) pads the weight with zeros to whole blocks and cuts the padding off again;
any other refuses a layer its blocks do not divide (``check_divides``). A weight that is not finite is refused:
no format stores an inf or a NaN weight the way it stores the others.
"""

from __future__ import annotations

import torch

from infoeval.errors import DataError, SchemeError
from infoeval.quant.formats.elements import ELEMENTS, Element
from infoeval.quant.formats.ggml_blocks import GGML
from infoeval.quant.formats.presets import Format
from infoeval.quant.formats.scaling import CONVENTIONS

INT_ELEMENT = Element("int", 8, 127.0)  # GGUF's integer codes: their conventions make them, not an element format


def element_of(fmt: Format) -> Element:
    return ELEMENTS.get(fmt.element, INT_ELEMENT)


def check_divides(fmt: Format, shape: tuple[int, int], layer: str = "weight") -> None:
    """A usage error when ``fmt``'s blocks do not divide an unpadded layer, naming the layer and what divides it."""
    rows, cols = fmt.block
    out_f, in_f = int(shape[0]), int(shape[1])
    if fmt.padded:
        return
    if cols and in_f % cols:
        raise SchemeError(
            f"{fmt.name}: layer {layer} has {in_f} inputs, not a multiple of its block of {cols}; {fmt.name} has no "
            "partial blocks: --exclude the layer, or use a format whose group divides it"
        )
    if rows and rows > 1 and out_f % rows:
        raise SchemeError(f"{fmt.name}: layer {layer} has {out_f} rows, not a multiple of its block of {rows} rows")


def check_layer(fmt: Format, w: torch.Tensor, layer: str) -> None:
    """A layer ``fmt`` can quantize: its blocks divide it (``check_divides``) and its weights are finite (else a
    data error naming the layer)."""
    check_divides(fmt, tuple(w.shape), layer)
    check_finite(w.detach(), fmt, layer)


def largest_magnitude(x: torch.Tensor) -> torch.Tensor:
    """max |x|, as a 0-d float32 tensor: NaN if x holds a NaN, inf if it holds an inf (two reductions, no copy)."""
    return torch.maximum(x.amax(), x.amin().neg()).to(torch.float32) if x.numel() else torch.zeros(())


def check_finite(x: torch.Tensor, fmt: Format, layer: str | None = None) -> torch.Tensor:
    """max |x| (``largest_magnitude``), or a data error (naming ``layer`` where given) if x holds an inf or a NaN."""
    amax = largest_magnitude(x)
    if torch.isfinite(amax):
        return amax
    if layer is not None:
        raise DataError(f"layer {layer} holds an inf or a NaN weight; {fmt.name} quantizes finite weights only")
    raise DataError(f"{fmt.name}: the weight holds an inf or a NaN; only finite weights can be quantized")


def to_blocks(x: torch.Tensor, block: tuple[int | None, int | None]) -> tuple[torch.Tensor, tuple]:
    """(n, R·C) blocks of a float32 (out, in) weight, zero-padded to whole blocks, and how to put them back."""
    out_f, in_f = x.shape
    rows, cols = block[0] or out_f, block[1] or in_f
    pad_r, pad_c = (-out_f) % rows, (-in_f) % cols
    if pad_r or pad_c:
        x = torch.nn.functional.pad(x, (0, pad_c, 0, pad_r))
    big_r, big_c = (out_f + pad_r) // rows, (in_f + pad_c) // cols
    if rows == 1:
        return x.reshape(big_r * big_c, cols), (out_f, in_f, rows, cols, big_r, big_c)
    blocks = x.reshape(big_r, rows, big_c, cols).transpose(1, 2).reshape(big_r * big_c, rows * cols)
    return blocks, (out_f, in_f, rows, cols, big_r, big_c)


def from_blocks(blocks: torch.Tensor, layout: tuple) -> torch.Tensor:
    """The contiguous (out, in) weight of ``to_blocks``' blocks, the padding cut off."""
    out_f, in_f, rows, cols, big_r, big_c = layout
    if rows == 1:
        w = blocks.reshape(big_r, big_c * cols)
    else:
        w = blocks.reshape(big_r, big_c, rows, cols).transpose(1, 2).reshape(big_r * rows, big_c * cols)
    return w[:out_f, :in_f].contiguous()


def quantize_blocks(x: torch.Tensor, fmt: Format):
    """``(values, multiplier, offset, layout)`` of a float32 (out, in) weight in ``fmt``."""
    amax = check_finite(x, fmt)
    blocks, layout = to_blocks(x, fmt.block)
    rule = CONVENTIONS.get(fmt.convention) or GGML[fmt.convention]
    values, multiplier, offset = rule(blocks, element_of(fmt), amax)
    return values, multiplier, offset, layout


def dequantize_blocks(values, multiplier, offset, layout, inplace: bool = False) -> torch.Tensor:
    """ŵ = values · multiplier (+ offset), as the format's source dequantizes it, as an (out, in) float32 weight
    (made in ``values``' own memory with ``inplace``)."""
    w = values.mul_(multiplier) if inplace else values * multiplier
    if offset is not None:
        w = w.add_(offset)
    return from_blocks(w, layout)


def fake_quantize(w: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Quantize then dequantize a 2-D weight in ``fmt``; the result has w's dtype and device."""
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    return dequantize_blocks(*quantize_blocks(w.detach().to(torch.float32), fmt), inplace=True).to(w.dtype)
