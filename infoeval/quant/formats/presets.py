"""The number formats the field ships, as named presets: each an element format, a scale format and a granularity,
rounded by one convention (``scaling.py``, ``ggml_blocks.py``), and a frozen spec, ``Format``, parsed once.

Presets (element; scale; block; bits per weight; what each matches bit for bit; docs/formats.md has the table):

* fp8, fp8-tensor, fp8-b128, fp8-e5m2: E4M3 (E5M2) elements, an fp32 scale amax / largest per row, per tensor or per
  128 × 128 block (DeepSeek-V3's layout); 8 + 32/in, 8 + 32/(out·in), 8 + 32/16,384; compressed-tensors' FP8_DYNAMIC,
  FP8 and FP8_BLOCK weights (x / s, rounded, saturated at ±448), which vLLM's fp8 kernels read.
* mxfp8, mxfp6, mxfp6-e3m2, mxfp4: E4M3, E2M3, E3M2, E2M1 elements, an E8M0 scale per 32; 8.25, 6.25, 6.25, 4.25;
  torchao's ``to_mx`` with OCP MX 1.0's FLOOR scale; ``-rceil``: NVIDIA's RCEIL scale (torchao's RCEIL).
* nvfp4: E2M1 elements, an E4M3 scale per 16 and an fp32 one per tensor; 4.5 + 32/(out·in); compressed-tensors'
  NVFP4 (llm-compressor's export, what vLLM loads: s = E4M3 / g); ``nvfp4@torchao``: torchao's ``nvfp4_quantize``
  with ``per_tensor_amax_to_scale`` (s = t · E4M3).
* nf4-g64: QLoRA's NF4 code book, an fp32 absmax per 64; 4.5.
* q8_0, q4_0, q4_1, q5_0, q5_1: llama.cpp's blocks of 32 with fp16 scales; 8.5, 4.5, 5, 5.5, 6; the gguf package's
  ``quants.quantize``; gguf-mxfp4: ggml's MXFP4 (ties toward zero); 4.25.

A block or group that does not divide a layer: FP8's row and 128 × 128 blocks are zero-padded (a zero changes no
block's amax), as compressed-tensors pads them; the other formats have no partial block (torchao, compressed-tensors
and llama.cpp refuse one), so such a layer is refused, naming what divides it.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from infoeval.errors import SchemeError


@dataclass(frozen=True)
class Format:
    """One shipped number format: ``element`` (``elements.ELEMENTS``, or ``int<b>`` for GGUF's integer codes) of
    ``bits`` each; per block of ``block`` (rows, columns; None: the whole dimension) one scale of ``scale_bits``
    (plus ``offset_bits`` for a stored minimum) and, per tensor, ``tensor_bits``; rounded by ``convention``;
    ``matches``: the implementation it agrees with bit for bit. ``padded``: a block that does not divide a layer is
    zero-padded (else the layer is refused)."""

    name: str
    element: str
    bits: int
    scale: str
    scale_bits: int
    block: tuple[int | None, int | None]
    convention: str
    matches: str
    offset_bits: int = 0
    tensor_bits: int = 0
    padded: bool = False

    group_size = None  # not an integer group: the shared reports read it
    symmetric = True
    fmt = None

    @property
    def granularity(self) -> str:
        rows, cols = self.block
        if rows is None and cols is None:
            return "per-tensor"
        if rows == 1 and cols is None:
            return "per-channel"
        return f"per-block({rows}x{cols})" if rows != 1 else f"per-block({cols})"

    def blocks(self, shape: tuple[int, int]) -> int:
        """Blocks of an (out, in) weight (a padded last block counted)."""
        rows, cols = self.block
        return math.ceil(shape[0] / (rows or shape[0])) * math.ceil(shape[1] / (cols or shape[1]))

    def layer_bits(self, shape: tuple[int, int]) -> int:
        """Exact stored bits of an (out, in) weight: elements, block scales (and minima), the tensor's scale."""
        out_f, in_f = int(shape[0]), int(shape[1])
        return (
            out_f * in_f * self.bits
            + self.blocks((out_f, in_f)) * (self.scale_bits + self.offset_bits)
            + (self.tensor_bits)
        )

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "bits": self.bits,
            "group_size": None,
            "symmetric": True,
            "element": self.element,
            "scale": self.scale,
            "block": list(self.block),
            "granularity": self.granularity,
            "convention": self.convention,
            "matches": self.matches,
            "rounding": "round-half-away-from-zero" if self.name == "q8_0" else "as its convention",
        }


_TORCHAO_FLOOR = "torchao to_mx, ScaleCalculationMode.FLOOR (OCP MX 1.0)"
_TORCHAO_RCEIL = "torchao to_mx, ScaleCalculationMode.RCEIL"
_GGUF = "the gguf package's quants.quantize / dequantize"


def _mx(name: str, element: str, bits: int, rceil: bool) -> Format:
    return Format(
        name, element, bits, "e8m0", 8, (1, 32), "mx-rceil" if rceil else "mx-floor",
        _TORCHAO_RCEIL if rceil else _TORCHAO_FLOOR,
    )  # fmt: skip


def _ggml(name: str, bits: int, offset: bool) -> Format:
    return Format(name, f"int{bits}", bits, "fp16", 16, (1, 32), name, _GGUF, offset_bits=16 if offset else 0)


_MX = (("mxfp8", "fp8-e4m3", 8), ("mxfp6", "fp6-e2m3", 6), ("mxfp6-e3m2", "fp6-e3m2", 6), ("mxfp4", "fp4-e2m1", 4))

PRESETS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("fp8", "fp8-e4m3", 8, "fp32", 32, (1, None), "absmax", "compressed-tensors FP8_DYNAMIC", padded=True),
        Format("fp8-tensor", "fp8-e4m3", 8, "fp32", 32, (None, None), "absmax", "compressed-tensors FP8", padded=True),
        Format(
            "fp8-b128", "fp8-e4m3", 8, "fp32", 32, (128, 128), "absmax", "compressed-tensors FP8_BLOCK", padded=True
        ),
        Format("fp8-e5m2", "fp8-e5m2", 8, "fp32", 32, (1, None), "absmax", "compressed-tensors (E5M2)", padded=True),
        *(_mx(n + s, e, b, s == "-rceil") for n, e, b in _MX for s in ("", "-rceil")),
        Format("nvfp4", "fp4-e2m1", 4, "e4m3+fp32", 8, (1, 16), "nvfp4", "compressed-tensors NVFP4", tensor_bits=32),
        Format(
            "nvfp4@torchao",
            "fp4-e2m1",
            4,
            "e4m3+fp32",
            8,
            (1, 16),
            "nvfp4-torchao",
            "torchao nvfp4_quantize (per_tensor_amax_to_scale)",
            tensor_bits=32,
        ),  # fmt: skip
        Format("nf4-g64", "nf4", 4, "fp32", 32, (1, 64), "absmax", "QLoRA's NF4 code book (nearest value)"),
        _ggml("q8_0", 8, False),
        _ggml("q4_0", 4, False),
        _ggml("q4_1", 4, True),
        _ggml("q5_0", 5, False),
        _ggml("q5_1", 5, True),
        Format("gguf-mxfp4", "fp4-e2m1", 4, "e8m0", 8, (1, 32), "gguf-mxfp4", "the gguf package's MXFP4"),
    )
}


def _base(name: str) -> str | None:
    """The preset a name extends with a suffix (the longest preset the name starts with, then - or @)."""
    bases = [p for p in PRESETS if name.startswith(p) and len(name) > len(p) and name[len(p)] in "-@"]
    return max(bases, key=len) if bases else None


def parse_format(text: str) -> Format | None:
    """A preset by name (case-insensitive), or None where the name is no format's (an integer scheme's, say);
    a preset with a suffix it does not take is a usage error naming those it takes."""
    name = text.strip().lower()
    if name in PRESETS:
        return PRESETS[name]
    base = _base(name)
    if base is None:
        return None
    takes = sorted(p for p in PRESETS if p.startswith(base) and p != base and p[len(base)] in "-@")
    allowed = f"allowed: {', '.join(takes)}" if takes else f"it takes no suffix (allowed: {base})"
    raise SchemeError(f"format '{text}': {base} has no convention '{name[len(base) :]}'; {allowed}")


def close_format(name: str) -> str | None:
    """The preset closest to a mistyped name, if any is close."""
    close = difflib.get_close_matches(name.strip().lower(), list(PRESETS), n=1, cutoff=0.6)
    return close[0] if close else None
