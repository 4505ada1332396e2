"""Weights made when a forward pass needs them, from the reference's own: a variant that stores no codes.

A lazy variant's quantized layer holds its source weight (the reference's tensor, shared, not copied) and its
scheme; just before each forward pass ``apply.swapped`` asks it for the weight (``materialize``), which is
``primitives.fake_quantize(w, scheme)``: the bits the stored codes would dequantize to (``codes`` module), so a
lazy variant computes what its stored twin computes, for no memory beyond one layer's temporaries. The noise
floor's weights are made the same way (``floor.NoisyWeight``). The cost is quantizing each layer at each pass
instead of dequantizing it; a shared batch of windows pays it once.

>>> from infoeval.quant.schemes import parse_scheme
>>> w = torch.tensor([[0.6, -1.0, 0.26, 0.0]])
>>> LazyWeight(w, parse_scheme("int4-channel")).materialize()  # s = 1/7: q = round(7·w) = (4, −7, 2, 0)
tensor([[ 0.5714, -1.0000,  0.2857,  0.0000]])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infoeval.quant.formats.presets import Format
from infoeval.quant.formats.rounding import fake_quantize as format_fake_quantize
from infoeval.quant.primitives import fake_quantize
from infoeval.quant.schemes import Scheme


@dataclass(frozen=True)
class LazyWeight:
    """One layer of a lazy variant: its source weight and its scheme."""

    source: torch.Tensor
    scheme: Scheme

    def materialize(self) -> torch.Tensor:
        """The fake-quantized weight, in the source's dtype (a 16-bit float scheme: the weight cast to it and back)."""
        if isinstance(self.scheme, Format):
            return format_fake_quantize(self.source, self.scheme)
        if self.scheme.fmt:
            return self.source.to(getattr(torch, self.scheme.dtype_name)).to(self.source.dtype)
        return fake_quantize(self.source, self.scheme)
