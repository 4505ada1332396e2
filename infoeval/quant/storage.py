"""A variant's stored weights in one allocation per device.

Encoding a layer allocates temporaries several times the size of what it keeps (float codes, masks), and the
small tensors it keeps (codes, scales) would sit in the heap between the freed temporaries: the heap stays
fragmented, and how much of it the evaluation loop later finds resident depends on the order things were freed.
``gather`` moves every kept tensor of a variant into one flat byte buffer (views of it, each 64-byte aligned),
so a scheme costs its stored bytes and the heap holds only temporaries, which ``heap.release_freed_memory``
gives back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from infoeval.quant.codes import PackedWeight

ALIGN = 64  # bytes: a cache line, and a multiple of every element size
FIELDS = ("codes", "scale", "zero", "negative_zeros")


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def gather(weights: Mapping[str, PackedWeight | torch.Tensor]) -> dict[str, PackedWeight | torch.Tensor]:
    """The same weights, each PackedWeight's tensors copied into one flat uint8 buffer per device and replaced
    by views of it (same dtype, shape and values); anything else is passed through as it is."""
    kept = [
        (name, f, t)
        for name, pw in weights.items()
        if isinstance(pw, PackedWeight)
        for f in FIELDS
        if (t := getattr(pw, f)) is not None
    ]
    sizes: dict[torch.device, int] = {}
    for _, _, t in kept:
        sizes[t.device] = sizes.get(t.device, 0) + _aligned(t.numel() * t.element_size())
    buffers = {dev: torch.empty(n, dtype=torch.uint8, device=dev) for dev, n in sizes.items()}
    offsets = dict.fromkeys(buffers, 0)
    moved: dict[str, dict[str, torch.Tensor]] = {}
    for name, f, t in kept:
        start, n = offsets[t.device], t.numel() * t.element_size()
        moved.setdefault(name, {})[f] = buffers[t.device][start : start + n].view(t.dtype).view(t.shape).copy_(t)
        offsets[t.device] = start + _aligned(n)
    return {name: dataclasses.replace(pw, **moved[name]) if name in moved else pw for name, pw in weights.items()}
