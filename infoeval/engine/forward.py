"""The model calls themselves: a window's forward pass (``forward_logits``, THE forward pass every evaluation goes
through), the next-token logits after a prompt, and the cached, token-by-token forwards of sampling and exact entropy
coding. The only module that calls a model; the window loop (``engine.run``) and the shared-block passes call it
through this module's attribute, so one replacement (a test's injected fault) reaches every pass."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from infoeval.engine.kvcache import cache_kw, new_cache
from infoeval.errors import RuntimeFailure


def forward_logits(model, inputs: torch.Tensor, keep: torch.Tensor | int) -> torch.Tensor:
    """THE forward pass: logits of the kept positions of ``inputs`` (B, T) → (B, n, V), no cache."""
    return model(input_ids=inputs, use_cache=False, logits_to_keep=keep).logits


@torch.inference_mode()
def last_logits(model, inputs: torch.Tensor) -> torch.Tensor:
    """Next-token logits after each row of ``inputs`` (B, T) → (B, V)."""
    return forward_logits(model, inputs, 1)[:, -1]


# ---- cached, token-by-token forwards (sampling) ------------------------------------------------------------
class CachedModel:
    """A model fed token by token with its own KV cache; counts and times its forward passes."""

    def __init__(self, model):
        self.model = model  # a module or a callable wrapper with a .config and a .model
        self.cache = new_cache(model)
        self.kw = cache_kw(model)
        self.calls = 0
        self.seconds = 0.0

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def logits(self, ids: torch.Tensor, keep: int, finish: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Feed ``ids`` (1-D) after the cached tokens; ``finish`` of the last ``keep`` logits (keep, V). The
        time counted includes ``finish`` (which should copy to the host, so that the device has finished)."""
        t0 = time.perf_counter()
        out = self.model(input_ids=ids[None], use_cache=True, logits_to_keep=keep, **{self.kw: self.cache})
        result = finish(out.logits[0, -keep:])
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return result


# ---- batched cached stepping (exact entropy coding) ---------------------------------------------------------
@torch.inference_mode()
def step_logits(model, cache, ids: torch.Tensor) -> torch.Tensor:
    """Feed one token per row, ``ids`` (B,), after the rows' cached tokens (every row as long as the others) and
    return the next-token logits (B, V), checked finite. A row's numbers depend on the shape of its batch, so a
    caller that needs the very same numbers twice (an entropy coder's encoder and decoder) steps the same rows
    together both times."""
    out = model(input_ids=ids[:, None], use_cache=True, logits_to_keep=1, **{cache_kw(model): cache})
    logits = out.logits[:, -1]
    if not torch.isfinite(logits.sum()):
        raise RuntimeFailure(f"the model produced non-finite logits at cached position {cache.get_seq_length() - 1}")
    return logits
