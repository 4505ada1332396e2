"""infoeval: information-theoretic measurements of quantized, distilled and draft language models."""

__version__ = "0.2.0"
