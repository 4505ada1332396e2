"""A quantized variant: its layers' integer codes and scales keyed by module name, the report of every Linear
layer, and what it stores. One scheme for every layer (``quantize_variant``), or a mix where each layer has its
own scheme (``layer_schemes``, e.g. from a recipe: ``quant/recipe.py``)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from infoeval.quant import codes
from infoeval.quant.bits import average_bits
from infoeval.quant.codes import PackedWeight
from infoeval.quant.schemes import Scheme


@dataclass(frozen=True)
class LayerReport:
    name: str
    shape: tuple[int, ...]
    quantized: bool
    reason: str
    sqnr_db: float | None = None
    tied_to: str | None = None
    scheme: str | None = None  # set in a mix: the layer's own scheme

    def as_dict(self) -> dict:
        out = {
            "name": self.name,
            "shape": list(self.shape),
            "action": "quantized" if self.quantized else "skipped",
            "reason": self.reason,
            "sqnr_db": self.sqnr_db,
            "tied_to": self.tied_to,
        }
        return out | ({"scheme": self.scheme} if self.scheme is not None else {})


@dataclass(frozen=True)
class QuantizedVariant:
    """A scheme's quantized weights (codes and scales), keyed by module name, and the report of every Linear
    layer. A weight given as a full tensor instead of a PackedWeight is used as it is. A mix has ``label`` (its
    name) and ``layer_schemes`` (module name → scheme); ``scheme`` is then its most common scheme."""

    scheme: Scheme
    weights: dict[str, PackedWeight | torch.Tensor]
    layers: tuple[LayerReport, ...]
    label: str | None = None
    layer_schemes: Mapping[str, Scheme] | None = None
    stored_bytes: int | None = None  # a lazy variant's (``quant/lazy.py``): what its codes would store

    @functools.cached_property
    def scratch(self) -> dict[tuple[str, torch.device, torch.dtype], int]:
        """Elements of each shared buffer (kind, device, dtype) that dequantizing any of its layers needs."""
        need: dict[tuple[str, torch.device, torch.dtype], int] = {}
        for w in self.weights.values():
            if isinstance(w, PackedWeight):
                sizes = codes.scratch_sizes(w) | ({("out", w.dtype): w.numel} if w.dtype != torch.float32 else {})
                for (kind, dtype), n in sizes.items():
                    need[kind, w.device, dtype] = max(n, need.get((kind, w.device, dtype), 0))
        return need

    @property
    def nbytes(self) -> int:
        """Bytes the variant stores: codes + scales + zero points of every quantized layer (lazy: would store)."""
        if self.stored_bytes is not None:
            return self.stored_bytes
        return sum(w.nbytes for w in self.weights.values())  # PackedWeight, FormatWeight and tensors alike

    @property
    def name(self) -> str:
        return self.label or self.scheme.name

    @property
    def n_quantized(self) -> int:
        return sum(1 for r in self.layers if r.quantized)

    @property
    def n_skipped(self) -> int:
        return sum(1 for r in self.layers if not r.quantized)

    def scheme_of(self, layer: str) -> Scheme:
        """The scheme a quantized layer was quantized with."""
        return self.scheme if self.layer_schemes is None else self.layer_schemes[layer]

    def bits_per_weight(self) -> float | None:
        """Stored bits per quantized weight with float16 scales (``quant/bits.py``); None when nothing is quantized."""
        q = [(self.scheme_of(r.name), r.shape) for r in self.layers if r.quantized]
        return float(average_bits(q)) if q else None

    def summary(self) -> dict:
        q = [r for r in self.layers if r.quantized]
        params = sum(int(torch.Size(r.shape).numel()) for r in q)
        sq = [r.sqnr_db for r in q if r.sqnr_db is not None]
        scheme = self.scheme.as_dict()
        if self.layer_schemes is not None:
            counts = Counter(self.layer_schemes[r.name].name for r in q)
            scheme = {"name": self.name, "mixed": True, "layers_per_scheme": dict(sorted(counts.items()))}
        return {
            "scheme": scheme,
            "layers_quantized": len(q),
            "layers_skipped": self.n_skipped,
            "params_quantized": params,
            "stored_bytes": self.nbytes,
            "bits_per_weight": self.bits_per_weight(),
            "sqnr_db_min": min(sq) if sq else None,
            "sqnr_db_mean": sum(sq) / len(sq) if sq else None,
            "layers": [r.as_dict() for r in self.layers],
        }
