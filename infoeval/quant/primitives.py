"""Pure tensor maths for fake (quantize → dequantize) weight quantization.

Conventions (tools disagree, so they are spelled out):

| mode       | codes q                  | scale s                         | zero point z                | ŵ         |
|------------|--------------------------|---------------------------------|-----------------------------|-----------|
| symmetric  | −(2^(b−1)−1) … 2^(b−1)−1 | max|w| / (2^(b−1)−1)            | 0                           | s·q       |
| asymmetric | 0 … 2^b−1                | (max(w,0) − min(w,0)) / (2^b−1) | clamp(round(−min/s),0,qmax) | s·(q − z) |

with q = clamp(round(w/s) + z, qmin, qmax) and round = round-half-to-even (``torch.round``). The symmetric
range is *restricted* (int8: −127…127, int4: −7…7), so 0 is exact and the grid is symmetric; the asymmetric
range always contains 0 (min ≤ 0 ≤ max), so zero weights stay exactly zero. A block whose weights are all
zero gets s = 1 (all codes equal z, ŵ = 0). For every weight |w − ŵ| ≤ s/2.

Block sizes (``block_size`` in torchao's terms) for a weight of shape (out, in):

| granularity   | one (s, z) per                    | blocks per row    |
|---------------|-----------------------------------|-------------------|
| per-channel   | row (1, in)                       | 1                 |
| per-group(N)  | (1, N) along the input dimension  | ceil(in / N)      |

When N does not divide ``in`` the last group of each row has ``in mod N`` columns and its own scale: the row
is padded with zeros to a multiple of N, which changes neither max|w| nor min(w, 0)/max(w, 0) of that group,
and the padding is cut off again.
"""

from __future__ import annotations

import math

import torch

from infoeval.quant.schemes import Scheme


def _blocks(w: torch.Tensor, group_size: int | None) -> tuple[torch.Tensor, int]:
    """Reshape (out, in) to (out, n_groups, group) with zero padding; return the padding added."""
    out_f, in_f = w.shape
    g = in_f if group_size is None else min(group_size, in_f)
    pad = (-in_f) % g
    if pad:
        w = torch.nn.functional.pad(w, (0, pad))
    return w.reshape(out_f, (in_f + pad) // g, g), pad  # (out, G, g)


def _scale_zero(blocks: torch.Tensor, scheme: Scheme) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block scale s and zero point z (both float32, shape (out, G)) of float32 blocks (out, G, g)."""
    if scheme.symmetric:
        # max|w| = max(max w, −min w) exactly, with no |w| copy (two reductions: torch.aminmax was 8× slower)
        scale = torch.maximum(blocks.amax(dim=-1), blocks.amin(dim=-1).neg_()).div_(scheme.qmax)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        return scale, torch.zeros_like(scale)
    lo = blocks.amin(dim=-1).clamp(max=0.0)
    hi = blocks.amax(dim=-1).clamp(min=0.0)
    scale = (hi - lo) / scheme.qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.clamp(torch.round(-lo / scale), 0, scheme.qmax)
    return scale, zero


def _codes(blocks: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, scheme: Scheme) -> torch.Tensor:
    """q = clamp(round(w/s) + z, qmin, qmax) as float32 blocks (a new tensor: its sign is w's, −0.0 included)."""
    q = torch.div(blocks, scale.unsqueeze(-1)).round_()
    if not scheme.symmetric:
        q.add_(zero.unsqueeze(-1))
    return q.clamp_(scheme.qmin, scheme.qmax)


def quantize_codes(w: torch.Tensor, scheme: Scheme) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer codes, scales and zero points of a 2-D weight.

    Returns ``codes`` (int32, shape (out, in)), ``scale`` (float32) and ``zero`` (int32), both (out, G).
    """
    q, scale, zero = float_codes(w, scheme)
    return q.reshape(q.shape[0], -1)[:, : w.shape[1]].to(torch.int32), scale, zero.to(torch.int32)


def float_codes(w: torch.Tensor, scheme: Scheme) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The codes of a 2-D weight as float32 blocks (out, G, g) (the last group zero-padded: reshape to (out, G·g)
    and cut to ``in`` columns), and the float32 scales and zero points (out, G)."""
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    blocks, _ = _blocks(w.detach().to(torch.float32), scheme.group_size)  # (out, G, g)
    scale, zero = _scale_zero(blocks, scheme)
    return _codes(blocks, scale, zero, scheme), scale, zero


def dequantize_codes(
    codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int | None
) -> torch.Tensor:
    """ŵ = s·(q − z), broadcasting each (s, z) over its block; returns float32 of the codes' shape."""
    in_f = codes.shape[1]
    blocks, _ = _blocks(codes.to(torch.float32), group_size)  # (out, G, g)
    w = (blocks - zero.unsqueeze(-1).to(torch.float32)) * scale.unsqueeze(-1)
    return w.reshape(w.shape[0], -1)[:, :in_f]


def fake_quantize(w: torch.Tensor, scheme: Scheme) -> torch.Tensor:
    """Quantize then dequantize a 2-D weight, ŵ = s·(q − z); the result has w's dtype and device.

    Same arithmetic as ``dequantize_codes(*quantize_codes(w))``, without the integer round trip.
    """
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    out_f, in_f = w.shape
    blocks, _ = _blocks(w.detach().to(torch.float32), scheme.group_size)  # (out, G, g)
    scale, zero = _scale_zero(blocks, scheme)
    q = _codes(blocks, scale, zero, scheme)
    if not scheme.symmetric:  # symmetric zero points are 0: skip two passes over the weight
        q.sub_(zero.unsqueeze(-1))
    w_hat = q.mul_(scale.unsqueeze(-1))
    # contiguous: cutting the padding off leaves a strided view, which would slow every matmul with it
    return w_hat.reshape(out_f, -1)[:, :in_f].to(dtype=w.dtype).contiguous()


SPLIT_SUM = 32768  # elements: torch sums a 1-D tensor at least this long in one chunk per thread (its grain)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A contiguous float32 tensor as a 2-D tensor of rows, whose row sums torch computes one thread per row (the
    same bits for any number of threads): the weight's own rows; a single row as rows of 64 (zero-padded: +0.0
    is exact in a sum of squares)."""
    if t.dim() == 2 and t.shape[0] > 1:
        return t
    flat = t.reshape(-1)
    if flat.numel() % 64:
        flat = torch.nn.functional.pad(flat, (0, -flat.numel() % 64))
    return flat.view(-1, 64)


def sum_of_squares(t: torch.Tensor) -> float:
    """Σt² of a contiguous float32 tensor, overwriting it with t²: float32 row sums (torch.sum's cascade), then
    their float64 sum, so the result does not depend on the number of threads (a whole-tensor float32 sum
    is split between threads, each split rounded its own way): a weight quantized in another process, on one
    thread, gets the very same SQNR. Past ``SPLIT_SUM`` rows (where torch would split the float64 sum too) the
    row sums are added exactly (``math.fsum``)."""
    rows = _rows(t.pow_(2)).sum(-1)
    if rows.numel() >= SPLIT_SUM:
        return math.fsum(rows.tolist())
    return rows.double().sum().item()


def signal_power(w: torch.Tensor) -> float:
    """Σw² in float32 row sums added in float64 (``sum_of_squares``), as ``sqnr_db`` sums the noise."""
    return sum_of_squares(w.detach().to(torch.float32, memory_format=torch.contiguous_format, copy=True))  # one copy


def sqnr_db(w: torch.Tensor, w_hat: torch.Tensor, signal: float | None = None, overwrite: bool = False) -> float:
    """Signal-to-quantization-noise ratio 10·log10(Σw² / Σ(w − ŵ)²) in dB; +inf when exact. ``signal``: Σw² when
    already known (``signal_power(w)``: one weight quantized by several schemes); ``overwrite``: a contiguous float32
    ŵ may receive w − ŵ (no new tensor; the same bits).

    Both sums are float32 row sums (torch.sum's cascade, relative rounding ~log2(in)·ε) added in float64
    (``sum_of_squares``): the same bits whatever the number of threads, within 1e-5 dB of a float64 sum (a
    float64 accumulation converts every term and took 3× as long).
    """
    w = w.detach().float()
    w_hat = w_hat.detach()
    out = w_hat if overwrite and w_hat.dtype == torch.float32 and w_hat.is_contiguous() else None
    noise = sum_of_squares(torch.sub(w, w_hat.float(), out=out))
    signal = signal_power(w) if signal is None else signal
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)
