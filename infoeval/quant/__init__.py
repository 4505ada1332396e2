"""Fake (quantize-dequantize) weight quantization."""

from infoeval.quant.schemes import Scheme, parse_scheme

__all__ = ["Scheme", "parse_scheme"]
