"""A KV cache that does not copy itself at every step: ``engine.new_cache``'s DynamicCache with its full-attention
layers writing into buffers allocated once for the segment's length.

transformers' DynamicLayer appends a step's keys and values with ``torch.cat``, which copies the whole cache: at
32 rows × 384 cached tokens of SmolLM2 that is about 0.6 GB read and written per step, on top of the weights and
the attention's own reads (a step took 330 ms instead of 240 ms here). The layers below return views of the
filled part of their buffers instead; the numbers are the same (the attention reads the same values).
Encoder and decoder both use it, so it is part of the one code path whatever it does to the numbers. Without
transformers' layered caches (older versions) it is the plain DynamicCache.
"""

from __future__ import annotations

import torch

from infoeval import engine


def _layer_class():
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # transformers without per-layer caches
        return None, None

    class BufferedLayer(DynamicLayer):
        """Keys and values of one layer in (B, heads, max_len, head_dim) buffers; ``keys`` is the filled view."""

        def __init__(self, max_len: int):
            super().__init__()
            self.max_len = max_len

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            shape = (*key_states.shape[:2], self.max_len, key_states.shape[-1])
            self._k = torch.empty(shape, dtype=key_states.dtype, device=self.device)
            self._v = torch.empty((*shape[:3], value_states.shape[-1]), dtype=value_states.dtype, device=self.device)
            self.keys, self.values = self._k[:, :, :0], self._v[:, :, :0]
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.keys.shape[-2]
            m = n + key_states.shape[-2]
            if m > self.max_len:
                raise ValueError(f"the cache holds {self.max_len} positions; {m} were asked for")
            self._k[:, :, n:m] = key_states
            self._v[:, :, n:m] = value_states
            self.keys, self.values = self._k[:, :, :m], self._v[:, :, :m]
            return self.keys, self.values

    return DynamicLayer, BufferedLayer


def step_cache(model, max_len: int):
    """``engine.new_cache(model)`` whose plain full-attention layers keep ``max_len`` positions in place."""
    cache = engine.new_cache(model)
    plain, buffered = _layer_class()
    layers = getattr(cache, "layers", None)
    if plain is not None and layers:
        cache.layers = [buffered(max_len) if type(layer) is plain else layer for layer in layers]
    return cache
