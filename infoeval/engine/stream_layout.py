"""Where a layer-streamed pass (``engine/streaming.py``) keeps what, as its memory plan decides (``plans.choose``):

    read_ahead  the next layer's tensors read (into host memory, in a thread) while one layer runs, so that the
                reads overlap the compute: one layer more in host memory
    parked      the windows' hidden states (and what the model gives each layer) kept in host memory between
                layers, each batch moved to the device for its layer and back: for a device that cannot hold
                every window's states at once; on the host itself there is nowhere else to keep them

Neither changes a number: the same operations on the same values (``tests/test_streaming.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StreamLayout:
    read_ahead: bool = True
    parked: bool = False

    def note(self) -> str:
        """What the plan gave up to fit its budget ('' where nothing)."""
        notes = []
        if not self.read_ahead:
            notes.append("no layer read ahead (the budget leaves no room for one)")
        if self.parked:
            notes.append("the hidden states kept in host memory between layers (they do not fit the device)")
        return "; ".join(notes)

    def to_json(self) -> dict:
        return {"read_ahead": self.read_ahead, "parked": self.parked}


FASTEST = StreamLayout()  # the layout a plan tries first (the default)


def layouts(device_type: str) -> list[StreamLayout]:
    """The layouts a plan tries, fastest first: on the host, without reading ahead next; on a device (where a layer
    read ahead waits in host memory) with the hidden states parked in host memory."""
    if device_type == "cpu":
        return [FASTEST, StreamLayout(read_ahead=False)]
    return [FASTEST, StreamLayout(parked=True)]


def moved(value, device: torch.device, memo: dict | None = None):
    """``value`` with every tensor in it (a tensor, or tuples, lists and dicts of them) on ``device``; anything
    else as it is. A tensor met twice (the same mask given to every layer) is moved once: ``memo``, by identity."""
    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = (value, value.to(device))  # the source kept, so that its id stays its own
        return memo[id(value)][1]
    if type(value) in (tuple, list):
        return type(value)(moved(v, device, memo) for v in value)
    if type(value) is dict:
        return {k: moved(v, device, memo) for k, v in value.items()}
    return value
