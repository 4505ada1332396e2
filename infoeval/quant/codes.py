"""Integer storage of a quantized weight, and its exact dequantization: pure tensor maths.

A quantized (out, in) weight is kept as its integer codes q, float32 scales s (out, G) and, for asymmetric
schemes, uint8 zero points z (out, G) (see primitives.py for q, s, z). Dequantizing gives back
``fake_quantize(w, scheme)`` bit for bit: ŵ = s·q (symmetric) or s·(q − z) (asymmetric), one float32
multiplication, then a cast to the weight's dtype.

Storage of the codes, flattened in row-major order (n = out·in):

| bits | symmetric                                                   | asymmetric          |
|------|-------------------------------------------------------------|---------------------|
| 5–8  | int8 q, plus the int32 positions of the codes that are −0   | uint8 q             |
|      | (when at most n/64 are); else sign-magnitude like below     |                     |
| 2–4  | one nibble: sign·2^3 + |q|, two per byte (sign-magnitude)   | one nibble: q       |

Two per byte: byte j holds code j in its low nibble and code j + h in its high nibble, h = ceil(n/2), so
each nibble position unpacks into one contiguous half of the weight. The sign of a zero code matters because
fake_quantize makes −0.0 (round(w/s) of a small negative w, times s): at 8 bits about 0.6% of a real model's
codes, at 4 bits about 9%. Few: the int8 codes go through one cast and one multiplication, then −0.0 is
written at the listed positions. Many: sign-magnitude codes keep the sign bit.

Dequantizing a sign-magnitude code goes through float16: the int16 with the sign in bit 15 and |q| in the low
bits (bits 4–6 for nibbles) is the float16 subnormal ±|q|·2^−24 (±|q|·2^−20), exact, −0.0 included; in
float32 it is multiplied by s·2^24 (s·2^20), an exact power-of-two scaling of s, so each product is the
correctly rounded s·q, bit for bit. Worked example (int4, one row, s = 0.1): w = (−0.3, −0.01, 0, 0.7)
has q = (−3, −0, 0, 7), nibbles (0b1011, 0b1000, 0, 7), bytes (0b1011, 0b0111_1000); unpacked to int16
(0x8030, 0x8000) and (0, 0x0070), i.e. 2^−20·(−3, −0, 0, 7); times s·2^20 gives (−0.3, −0.0, 0.0, 0.7).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infoeval.quant.formats import stored as stored_format
from infoeval.quant.formats.presets import Format
from infoeval.quant.primitives import float_codes
from infoeval.quant.schemes import Scheme

_SIGN_MAG_8 = 0x807F - 0x10000  # int16 mask: bit 15 (sign) and bits 0–6 (|q|)
_SIGN_MAG_4 = 0x8070 - 0x10000  # int16 mask: bit 15 (sign) and bits 4–6 (|q| of a nibble)
MAX_NEGATIVE_ZEROS = 1 / 64  # listed −0 positions (4 bytes each) cost at most 1/16 of the int8 codes


@dataclass(frozen=True)
class PackedWeight:
    """One quantized (out, in) weight: flat ``codes`` (int8 two's complement, or uint8 sign-magnitude or
    unsigned; see the module docstring), ``scale`` float32 (out, G), ``zero`` uint8 (out, G) or None
    (symmetric), ``negative_zeros`` int32 flat positions of −0 codes (int8 codes only); ``dtype`` is the
    dequantized weight's."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    negative_zeros: torch.Tensor | None
    shape: tuple[int, int]
    dtype: torch.dtype
    bits: int
    group_size: int | None
    symmetric: bool

    @property
    def device(self) -> torch.device:
        return self.codes.device

    @property
    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def group(self) -> int:
        """Columns per block: the row (per channel, or a group ≥ in) or the group size."""
        return self.shape[1] if self.group_size is None else min(self.group_size, self.shape[1])

    @property
    def nibbles(self) -> bool:
        return self.bits <= 4

    @property
    def sign_magnitude(self) -> bool:
        return self.symmetric and self.codes.dtype == torch.uint8

    @property
    def nbytes(self) -> int:
        """Stored bytes: codes (with the −0 positions) + scales + zero points."""
        parts = (self.codes, self.negative_zeros, self.scale, self.zero)
        return sum(t.numel() * t.element_size() for t in parts if t is not None)


def pack_nibbles(c: torch.Tensor) -> torch.Tensor:
    """Flat uint8 codes < 16 → ceil(n/2) bytes, byte j = c[j] + 16·c[j + h] (h = ceil(n/2); odd n: pad 0).

    Example: (1, 2, 3, 4, 5) → h = 3, bytes (1 + 16·4, 2 + 16·5, 3 + 16·0) = (65, 82, 3).
    """
    h = (c.numel() + 1) // 2
    hi = torch.zeros(h, dtype=torch.uint8, device=c.device)
    hi[: c.numel() - h] = c[h:]
    return c[:h] | (hi << 4)


def unpack_nibbles(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of pack_nibbles: the n flat uint8 codes."""
    return torch.cat([packed & 15, packed >> 4])[:n]


_NEGATIVE_ZERO_BITS = -(2**31)  # −0.0 seen as an int32


def _symmetric_codes(q: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(flat codes, −0 positions or None) of symmetric float32 codes q (out, in), −0.0 included; see the table
    in the module docstring."""
    if bits > 4:
        positions = (q.view(torch.int32) == _NEGATIVE_ZERO_BITS).reshape(-1).nonzero().squeeze(1)
        if positions.numel() <= MAX_NEGATIVE_ZEROS * q.numel():
            return q.to(torch.int8).reshape(-1), positions.to(torch.int32)
    sign = torch.signbit(q).view(torch.uint8)
    flat = q.to(torch.int8).abs_().view(torch.uint8).bitwise_or_(sign << (3 if bits <= 4 else 7)).reshape(-1)
    return (pack_nibbles(flat) if bits <= 4 else flat), None


def _encode(w: torch.Tensor, scheme: Scheme) -> tuple[PackedWeight, torch.Tensor, torch.Tensor]:
    """The stored weight, and the float codes and zero points it was made from (``float_codes``)."""
    q, scale, zero = float_codes(w, scheme)  # (out, G, g), zero-padded
    out_f, in_f = int(w.shape[0]), int(w.shape[1])
    rows = q.reshape(out_f, -1)[:, :in_f]  # a view: strided when the last group is padded
    negative_zeros = None
    if scheme.symmetric:
        codes, negative_zeros = _symmetric_codes(rows, scheme.bits)
        if not torch.isfinite(scale * 2.0**24).all():
            raise ValueError("weights too large to store: a scale times 2^24 overflows float32")
    else:
        flat = rows.to(torch.uint8).reshape(-1)
        codes = pack_nibbles(flat) if scheme.bits <= 4 else flat
    packed = PackedWeight(
        codes=codes,
        scale=scale.contiguous(),
        zero=None if scheme.symmetric else zero.to(torch.uint8).contiguous(),
        negative_zeros=negative_zeros,
        shape=(out_f, in_f),
        dtype=w.dtype,
        bits=scheme.bits,
        group_size=scheme.group_size,
        symmetric=scheme.symmetric,
    )
    return packed, q, zero


def encode(w: torch.Tensor, scheme: Scheme) -> PackedWeight:
    """Quantize a 2-D weight (``float_codes``) and store its codes. The sign bit of a symmetric code is that of
    w: q = round(w/s) has the sign of w, and is −0 where w is negative (or −0.0) and rounds to zero, which is
    where fake_quantize gives ŵ = −0.0."""
    return _encode(w, scheme)[0]


def encode_dequantized(w: torch.Tensor, scheme: Scheme) -> tuple[PackedWeight | torch.Tensor, torch.Tensor]:
    """``encode``, and ŵ (out, in) in the weight's dtype: the bits ``dequantize`` gives, made from the float
    codes (s·q, or s·(q − z)) with no unpacking (a strided float32 view when the last group is padded). A 16-bit
    float scheme (bf16, fp16) stores the weight cast to its dtype (round to nearest even; the weight itself when
    it already has that dtype), and ŵ is that cast back to the weight's dtype."""
    if isinstance(scheme, Format):  # a shipped format: one byte per element and its blocks' scales
        stored, w_hat = stored_format.encode(w, scheme)
        return stored, w_hat if w.dtype == torch.float32 else w_hat.to(w.dtype)
    if scheme.fmt:
        stored = w.to(getattr(torch, scheme.dtype_name))
        return stored, stored.to(w.dtype)
    pw, q, zero = _encode(w, scheme)
    if not pw.symmetric:
        q.sub_(zero.unsqueeze(-1))  # q − z as fake_quantize subtracts it (a −0.0 zero point included)
    w_hat = q.mul_(pw.scale.unsqueeze(-1)).reshape(pw.shape[0], -1)[:, : pw.shape[1]]
    return pw, w_hat if pw.dtype == torch.float32 else w_hat.to(pw.dtype)


def scratch_sizes(packed: PackedWeight) -> dict[tuple[str, torch.dtype], int]:
    """Elements of each flat scratch buffer (kind, dtype) ``dequantize_into`` needs: float32 always (the
    result), int16 for sign-magnitude codes, uint8 for nibbles."""
    n = packed.numel
    sizes = {("f32", torch.float32): n}
    if packed.sign_magnitude:
        sizes["i16", torch.int16] = n
    if packed.nibbles:
        sizes["u8", torch.uint8] = n
    return sizes


def _per_block_(op, w: torch.Tensor, t: torch.Tensor, g: int) -> None:
    """In place ``op(block, its value)`` for every block of g columns of w (out, in) and t (out, G); a shorter
    last group is one more strided call, not an extra pass over the weight."""
    out_f, in_f = w.shape
    full = in_f // g
    if full == t.shape[1]:  # g divides in (one block per row included)
        op(w.view(out_f, full, g), t.unsqueeze(-1))
        return
    op(w[:, : full * g].unflatten(1, (full, g)), t[:, :full].unsqueeze(-1))  # full ≥ 1: g ≤ in
    op(w[:, full * g :], t[:, full:])


def _signed_to_f32(packed: PackedWeight, f32: torch.Tensor, i16: torch.Tensor, u8: torch.Tensor | None) -> float:
    """Sign-magnitude codes → f32 as float16 subnormals ±|q|·2^−k; returns 2^k."""
    n = packed.numel
    if packed.nibbles:
        h = packed.codes.numel()
        torch.bitwise_left_shift(packed.codes, 4, out=u8[:h])  # low nibble → bits 4–7
        i16[:h].copy_(u8[:h].view(torch.int8))  # sign-extends bit 7 into bit 15
        i16[h:n].copy_(packed.codes[: n - h].view(torch.int8))
        i16[:n].bitwise_and_(_SIGN_MAG_4)
        f32.copy_(i16[:n].view(torch.float16))
        return 2.0**20
    i16[:n].copy_(packed.codes.view(torch.int8))
    i16[:n].bitwise_and_(_SIGN_MAG_8)
    f32.copy_(i16[:n].view(torch.float16))
    return 2.0**24


def dequantize_into(
    packed: PackedWeight, f32: torch.Tensor, i16: torch.Tensor | None = None, u8: torch.Tensor | None = None
) -> torch.Tensor:
    """ŵ in float32, written into the flat buffer ``f32`` (≥ n elements; i16 and u8 as ``scratch_sizes``);
    returns the contiguous (out, in) view of its first n elements."""
    n = packed.numel
    flat = f32[:n]
    w = flat.view(packed.shape)
    if packed.sign_magnitude:
        k = _signed_to_f32(packed, flat, i16, u8)
        _per_block_(torch.Tensor.mul_, w, packed.scale * k, packed.group)
        return w
    if packed.symmetric:  # int8 codes
        flat.copy_(packed.codes)
        _per_block_(torch.Tensor.mul_, w, packed.scale, packed.group)
        if packed.negative_zeros.numel():
            flat[packed.negative_zeros] = -0.0
        return w
    if packed.nibbles:
        h = packed.codes.numel()
        torch.bitwise_and(packed.codes, 15, out=u8[:h])
        torch.bitwise_right_shift(packed.codes[: n - h], 4, out=u8[h:n])
        flat.copy_(u8[:n])
    else:
        flat.copy_(packed.codes)
    _per_block_(torch.Tensor.sub_, w, packed.zero.to(torch.float32), packed.group)  # q − z: exact small integers
    _per_block_(torch.Tensor.mul_, w, packed.scale, packed.group)
    return w


def dequantize(packed: PackedWeight) -> torch.Tensor:
    """ŵ as a new contiguous (out, in) tensor of the weight's dtype, equal to ``fake_quantize(w, scheme)``."""
    bufs = {
        kind: torch.empty(n, dtype=dtype, device=packed.device) for (kind, dtype), n in scratch_sizes(packed).items()
    }
    w = dequantize_into(packed, bufs["f32"], bufs.get("i16"), bufs.get("u8"))
    return w if packed.dtype == torch.float32 else w.to(packed.dtype)
