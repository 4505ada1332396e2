"""Scheme value objects and the parser for names such as ``int4-g128`` or ``int3-g64-asym``.

Grammar (case-insensitive)::

    int<bits>-<granularity>[-sym|-asym]
    bits         2 … 8
    granularity  channel        one scale per output channel (row of the weight matrix)
                 g<N>           one scale per group of N consecutive input columns, N ≥ 4;
                                the last group of a row is shorter when N does not divide it
    default      symmetric (absmax), no zero point
    bf16 | fp16      the weight rounded to bfloat16 / float16 (round to nearest even), nothing else: the cost of
                     shipping the checkpoint at 16 bits, 16 bits per weight, no scales

Shipped formats (FP8, MX, NVFP4, NF4, GGUF blocks) are named presets: ``formats/presets.py``.

Examples: ``int8-channel``, ``int4-g128``, ``int4-channel``, ``int3-g64-asym``, ``bf16``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from infoeval.errors import SchemeError
from infoeval.quant.formats.presets import PRESETS, Format, parse_format

MIN_BITS, MAX_BITS = 2, 8
MIN_GROUP = 4
DEFAULT_SCHEMES = "int8-channel,int4-g128,int4-channel"

FLOAT_FORMATS = {"bf16": "bfloat16", "fp16": "float16"}  # scheme name → torch dtype name
_PATTERN = re.compile(r"^int(\d+)-(channel|g(\d+))(?:-(sym|asym))?$")
_KNOWN = [
    f"int{b}-{g}{s}"
    for b in (8, 6, 5, 4, 3, 2)
    for g in ("channel", "g32", "g64", "g128", "g256")
    for s in ("", "-asym")
] + list(FLOAT_FORMATS)


@dataclass(frozen=True)
class Scheme:
    """One fake-quantization scheme; ``group_size`` None means per output channel. ``fmt`` "bf16" or "fp16": a
    16-bit float scheme (the weight cast to that dtype; ``bits`` 16, no group, no scale)."""

    bits: int
    group_size: int | None
    symmetric: bool = True
    fmt: str | None = None

    @property
    def dtype_name(self) -> str | None:
        """The torch dtype name of a 16-bit float scheme ("bfloat16", "float16"), else None."""
        return FLOAT_FORMATS[self.fmt] if self.fmt else None

    @property
    def name(self) -> str:
        if self.fmt:
            return self.fmt
        gran = "channel" if self.group_size is None else f"g{self.group_size}"
        return f"int{self.bits}-{gran}" + ("" if self.symmetric else "-asym")

    @property
    def qmin(self) -> int:
        """Smallest integer code: −(2^(b−1)−1) symmetric (restricted range), 0 asymmetric."""
        return -(2 ** (self.bits - 1) - 1) if self.symmetric else 0

    @property
    def qmax(self) -> int:
        """Largest integer code: 2^(b−1)−1 symmetric, 2^b−1 asymmetric."""
        return 2 ** (self.bits - 1) - 1 if self.symmetric else 2**self.bits - 1

    @property
    def granularity(self) -> str:
        return "per-channel" if self.group_size is None else f"per-group({self.group_size})"

    def as_dict(self) -> dict:
        if self.fmt:
            return {
                "name": self.name,
                "bits": 16,
                "group_size": None,
                "symmetric": True,
                "format": self.dtype_name,
                "rounding": "round-to-nearest-even",
            }
        return {
            "name": self.name,
            "bits": self.bits,
            "group_size": self.group_size,
            "symmetric": self.symmetric,
            "qmin": self.qmin,
            "qmax": self.qmax,
            "rounding": "round-half-to-even",
        }


def parse_scheme(text: str) -> Scheme | Format:
    """Parse one weight format's name: a shipped format's preset (``formats/presets.py``: fp8, mxfp4, nvfp4, q4_0, …)
    or an integer scheme; raise SchemeError with the allowed forms (and a close match) otherwise."""
    name = text.strip().lower()
    shipped = parse_format(name)
    if shipped is not None:
        return shipped
    if name in FLOAT_FORMATS:
        return Scheme(bits=16, group_size=None, fmt=name)
    if re.match(r"^(bf16|fp16)-", name):
        raise SchemeError(
            f"scheme '{text}': {name[:4]} takes no group, bit or symmetry option; allowed: bf16, fp16 alone"
        )
    m = _PATTERN.match(name)
    if not m:
        close = difflib.get_close_matches(name, _KNOWN + list(PRESETS), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise SchemeError(
            f"unknown quantization scheme '{text}'{hint}; allowed: int<bits>-channel or int<bits>-g<N>, "
            f"optionally -asym, or bf16 / fp16, e.g. int8-channel, int4-g128, int3-g64-asym, bf16; or a shipped "
            f"format: {', '.join(PRESETS)}"
        )
    bits = int(m.group(1))
    if not MIN_BITS <= bits <= MAX_BITS:
        raise SchemeError(f"scheme '{text}': {bits} bits is not supported; bits must be {MIN_BITS} to {MAX_BITS}")
    group = int(m.group(3)) if m.group(3) is not None else None
    if group is not None and group < MIN_GROUP:
        raise SchemeError(f"scheme '{text}': group size {group} is too small; it must be an integer ≥ {MIN_GROUP}")
    return Scheme(bits=bits, group_size=group, symmetric=m.group(4) != "asym")


def is_weight_scheme(spec) -> bool:
    """Whether a spec is one of infoeval's own weight formats (an integer or 16-bit scheme, or a shipped format)."""
    return isinstance(spec, (Scheme, Format))


def check_unique(schemes: list) -> list:
    """``schemes`` as they are, or a usage error naming those listed twice."""
    names = [s.name for s in schemes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemeError(f"scheme listed twice: {', '.join(dupes)}; list each scheme once")
    return schemes
