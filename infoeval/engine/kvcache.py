"""KV caches for token-by-token forward passes: a fresh cache for a model, cropping it, and the keyword a
model's forward takes it by."""

from __future__ import annotations

import inspect


def new_cache(model):
    """An empty DynamicCache for ``model`` (a truncated draft gets one with its own number of layers)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()


def crop_to(cache, length: int) -> None:
    """Keep the first ``length`` cached positions (a negative count removes from the end in every version)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def cache_kw(model) -> str:
    fwd = getattr(model, "forward", None) or model.model.forward
    params = inspect.signature(fwd).parameters
    return "cache" if "cache" in params else "past_key_values"
