"""The model's own forward up to its decoder layers, each replaced by a recorder (``engine/streaming.py``'s
capture): the first layer's input and what the model gives each layer (position embeddings, masks per layer type,
position ids), as GPTQ's layer pipelines capture them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infoeval.engine import forward
from infoeval.errors import RuntimeFailure


class _Captured(Exception):
    """Raised by the last layer's recorder: everything after the decoder layers is not needed."""


@dataclass
class Given:
    """One batch's input of the first layer and what the model gives each layer besides the hidden states."""

    hidden: torch.Tensor
    layers: list[tuple[tuple, dict]]


def capture(streamed, inputs: torch.Tensor) -> Given:
    """The model's own forward on ``inputs`` (B, T) up to its decoder layers, each replaced by a recorder."""
    layers, given, first = streamed.decoder.layers, [], []

    def recorder(index: int):
        def record(*args, **kwargs):
            hidden = args[0] if args else kwargs.pop("hidden_states")
            given.append((tuple(args[1:]), kwargs))
            if index == 0:
                first.append(hidden)
            if index == len(layers) - 1:
                raise _Captured
            return hidden

        return record

    for i, layer in enumerate(layers):
        layer.forward = recorder(i)
    try:
        forward.forward_logits(streamed.model, inputs, 1)
    except _Captured:
        pass
    finally:
        for layer in layers:
            del layer.forward
    if len(given) != len(layers):
        raise RuntimeFailure(f"internal error: {len(given)} of {len(layers)} decoder layers were called")
    return Given(first[0], given)
