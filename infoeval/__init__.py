"""infoeval: information-theoretic measurements of quantized, distilled and draft language models.

The Python API (``infoeval.api``) is imported when first used: ``infoeval.compare(...)`` runs quantize-compare,
``infoeval.compress_bits(...)`` compress-bits, ``infoeval.reference``/``gate``/``quantize`` the CI gate, and so on:
one function per command that measures (``infoeval.api``); ``infoeval.load(path)`` reads a result back."""

__version__ = "0.2.0"
_API = (
    "compare",
    "compress_bits",
    "reference",
    "gate",
    "quantize",
    "sensitivity",
    "mix",
    "spec_accept",
    "distill",
    "spec_decode",
    "temperature",
    "mutual_info",
    "kl_fit",
    "load",
)


def __getattr__(name: str):
    if name in _API:
        from infoeval import api

        return getattr(api, name)
    if name in ("UsageError", "DataError"):
        from infoeval import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'infoeval' has no attribute {name!r}")
