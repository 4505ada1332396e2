"""Where a forked quantizer writes each encoded weight: fixed regions of one shared anonymous mapping per scheme
(``quant/ahead.py``).

Every (scheme, weight) gets one region per stored field of ``codes._encode`` (codes, scales, zero points,
and room for the most −0 positions an int8 weight may list), 64-byte aligned, laid out from the weights'
shapes before the fork; the child writes them, the parent views them, and ``release`` hands back the
pages of the regions nobody took.
"""

from __future__ import annotations

import mmap

import torch

from infoeval.quant.codes import MAX_NEGATIVE_ZEROS
from infoeval.quant.schemes import Scheme

ALIGN = 64  # bytes between regions: a cache line, and a multiple of every element size


def field_sizes(shape: tuple[int, int], scheme: Scheme) -> dict[str, int]:
    """Bytes of each stored field of a weight of ``shape`` (``codes._encode``'s, with room for the most −0
    positions)."""
    out_f, in_f = shape
    n, g = out_f * in_f, in_f if scheme.group_size is None else min(scheme.group_size, in_f)
    blocks = out_f * -(-in_f // g)
    sizes = {"codes": (n + 1) // 2 if scheme.bits <= 4 else n, "scale": 4 * blocks}
    if not scheme.symmetric:
        sizes["zero"] = blocks
    elif scheme.bits > 4:
        sizes["negative_zeros"] = 4 * int(MAX_NEGATIVE_ZEROS * n)
    return sizes


def mapping(nbytes: int) -> tuple[mmap.mmap, torch.Tensor]:
    """A shared anonymous mapping, and a uint8 tensor over it: what a forked child writes there, the parent reads."""
    mapped = mmap.mmap(-1, max(nbytes, 1))
    return mapped, torch.frombuffer(mapped, dtype=torch.uint8)


class SharedLayout:
    """The regions of every (scheme, weight), and each scheme's shared mapping."""

    def __init__(self, shapes: dict[str, tuple[int, int]], schemes: list[Scheme]):
        self.layout: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}  # (scheme, key) → field → (offset, bytes)
        sizes = dict.fromkeys((s.name for s in schemes), 0)
        for key, shape in shapes.items():
            for s in schemes:
                fields = {}
                for field_, n in field_sizes(shape, s).items():
                    fields[field_] = (sizes[s.name], n)
                    sizes[s.name] += -(-n // ALIGN) * ALIGN
                self.layout[s.name, key] = fields
        self.mappings, self.buffers = {}, {}
        for name, n in sizes.items():
            self.mappings[name], self.buffers[name] = mapping(n)

    def view(self, scheme: str, key: str, field_: str, dtype: torch.dtype, count: int) -> torch.Tensor:
        """The first ``count`` elements of ``dtype`` of a region."""
        offset, _ = self.layout[scheme, key][field_]
        return self.buffers[scheme][offset : offset + count * dtype.itemsize].view(dtype)

    def release(self, taken: set[tuple[str, str]]) -> None:
        """Hand the whole pages inside the regions of every (scheme, key) not in ``taken`` back to the OS
        (``MADV_REMOVE``), and drop the buffers (views taken from them keep their mapping)."""
        page = mmap.PAGESIZE
        for (scheme, key), fields in self.layout.items():
            if (scheme, key) in taken or not fields or scheme not in self.mappings:
                continue
            first = min(offset for offset, _ in fields.values())
            last = max(offset + n for offset, n in fields.values())
            lo, hi = -(-first // page) * page, last // page * page
            if hi > lo and hasattr(mmap, "MADV_REMOVE"):
                self.mappings[scheme].madvise(mmap.MADV_REMOVE, lo, hi - lo)
        self.mappings, self.buffers = {}, {}
