"""The engine's block-level stage: the decoder blocks' inputs of a forward pass, and forwards that start at a
block. Like ``engine.py``, the only code here that runs a model (through ``engine.forward_logits``).

A change inside decoder block ℓ leaves blocks 0 … ℓ−1 unchanged, so its logits can be computed from the
reference's input of block ℓ (the hidden states entering it, with the keyword arguments the model passed to
its blocks: position embeddings (rotary cos/sin), attention mask, position ids):

    capture:       model(inputs) with forward pre-hooks on the chosen blocks  → logits, {ℓ: (h_ℓ, kwargs_ℓ)}
    forward_from:  h = h_ℓ;  h = block_j(h, **kwargs_j) for j = ℓ … L−1;  logits = head(norm(h)[:, kept])

which is, operation for operation, what the model's own forward does after block ℓ (``tests/test_sensitivity``
checks equality on Llama and Qwen3). Memory: a captured block input is (B, T, hidden) in the model's dtype,
e.g. 512 × 576 × 4 B = 1.2 MB per block and window for SmolLM2 in float32 (35 MB for all 30 blocks).

``FromBlock`` and ``Capturing`` are engine roles (callables like a model), so the engine's loop, finite check
and progress count apply to the block-level forwards as to any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from infoeval.engine import forward
from infoeval.errors import RuntimeFailure
from infoeval.quant.apply import swapped
from infoeval.quant.selection import decoder_prefix


@dataclass(frozen=True)
class Decoder:
    """Where a causal LM keeps its decoder blocks, final norm and head."""

    prefix: str  # e.g. "model.layers"
    layers: Sequence[torch.nn.Module]
    norm: torch.nn.Module
    head: torch.nn.Module


def decoder(model) -> Decoder:
    """The blocks (the largest ModuleList), the final norm (``<base>.norm``) and the head of ``model``; a
    RuntimeFailure when the model is not laid out so (then run without the block cache)."""
    prefix = decoder_prefix(model)
    modules = dict(model.named_modules())
    base = modules.get(prefix.rsplit(".", 1)[0]) if prefix and "." in prefix else None
    norm = getattr(base, "norm", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if prefix is None or norm is None or head is None:
        raise RuntimeFailure(
            f"{type(model).__name__}: no decoder blocks + final norm + head found; "
            "run without the block cache (--no-block-cache)"
        )
    return Decoder(prefix, modules[prefix], norm, head)


@dataclass
class BlockInputs:
    """The inputs of some decoder blocks for one batch: ``hidden[ℓ]`` (B, T, hidden) and ``kwargs[ℓ]``."""

    input_ids: torch.Tensor
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    kwargs: dict[int, dict] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(h.numel() * h.element_size() for h in self.hidden.values())


def capture(model, inputs: torch.Tensor, keep, blocks: Iterable[int]) -> tuple[torch.Tensor, BlockInputs]:
    """The model's logits of the kept positions of ``inputs`` (B, T), the hidden inputs of ``blocks`` and the
    keyword arguments of every block (references to the model's own tensors: masks may differ per block)."""
    dec = decoder(model)
    out = BlockInputs(inputs)

    wanted = set(blocks)

    def hook(index):
        def pre(module, args, kwargs):
            if index in wanted:
                out.hidden[index] = args[0] if args else kwargs["hidden_states"]
            out.kwargs[index] = {k: v for k, v in kwargs.items() if k != "hidden_states"}

        return pre

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    try:
        logits = forward.forward_logits(model, inputs, keep)
    finally:
        for h in handles:
            h.remove()
    return logits, out


def _keep(hidden: torch.Tensor, keep) -> torch.Tensor:
    """The kept positions (B, n, hidden): the last ``keep`` for an int (0: all), these positions for a tensor."""
    return hidden[:, slice(-keep, None) if isinstance(keep, int) else keep, :]


def forward_from(model, cached: BlockInputs, start: int, keep) -> torch.Tensor:
    """Logits (B, n, V) of the kept positions, running blocks ``start`` … L−1, the final norm and the head from
    the captured input of block ``start`` (``start`` = L: the head alone is not supported)."""
    dec = decoder(model)
    if start not in cached.hidden:
        raise RuntimeFailure(f"internal error: the input of block {start} was not captured")
    h = cached.hidden[start]
    for i in range(start, len(dec.layers)):
        h = dec.layers[i](h, **cached.kwargs[i])
        h = h[0] if isinstance(h, tuple) else h
    return dec.head(_keep(dec.norm(h), keep))


def _kept(kept: dict):
    """The kept positions from the one keyword ``engine.forward_logits`` passes them by."""
    (keep,) = kept.values()
    return keep


class Capturing:
    """An engine role: the model itself, keeping the inputs of ``blocks`` of the latest forward in ``.cached``."""

    def __init__(self, model, blocks: Iterable[int]):
        self.model, self.blocks, self.cached = model, tuple(sorted(set(blocks))), None

    def __call__(self, input_ids, use_cache=False, **kept):
        logits, self.cached = capture(self.model, input_ids, _kept(kept), self.blocks)
        return SimpleNamespace(logits=logits)


class FromBlock:
    """An engine role: the model with ``variant`` swapped in, run from the input of block ``start`` that
    ``source`` captured for the same inputs (ask ``source`` first in each batch)."""

    def __init__(self, source: Capturing, variant, start: int):
        self.model, self.source, self.variant, self.start = source.model, source, variant, start

    def __call__(self, input_ids, use_cache=False, **kept):
        cached = self.source.cached
        if cached is None or cached.input_ids is not input_ids:
            raise RuntimeFailure("internal error: block inputs asked before the reference of the same batch")
        with swapped(self.model, self.variant):
            return SimpleNamespace(logits=forward_from(self.model, cached, self.start, _kept(kept)))
