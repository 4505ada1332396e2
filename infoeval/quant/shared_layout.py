"""Where a quantizer elsewhere writes each encoded weight: fixed regions of a flat byte buffer, laid out from the
weights' shapes alone, so that the writer and the readers agree on them before anything is encoded: one buffer
per rank for the ranks (``quant/rank_share.py``).

Every (scheme, weight) gets one region per stored field of ``codes._encode`` (codes, scales, zero points,
and room for the most −0 positions an int8 weight may list), 64-byte aligned. ``write`` copies an encoding
into its regions and returns the record (codes dtype, −0 count) that ``read`` needs to view it back as a
PackedWeight; ``SharedLayout.release`` hands back the pages of the regions nobody took.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Hashable

import torch

from infoeval.quant.codes import MAX_NEGATIVE_ZEROS, PackedWeight
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


def regions(fields: dict[Hashable, dict[str, int]]) -> tuple[dict[Hashable, dict[str, tuple[int, int]]], int]:
    """Consecutive ``ALIGN``-aligned regions for the fields (field → bytes) of each key, in order: key → field →
    (offset, bytes), and the bytes they span."""
    layout, end = {}, 0
    for key, sizes in fields.items():
        layout[key] = {}
        for field_, n in sizes.items():
            layout[key][field_] = (end, n)
            end += -(-n // ALIGN) * ALIGN
    return layout, end


View = Callable[[str, torch.dtype, int], torch.Tensor]  # (field, dtype, count) → the region's first count elements


def region_view(buffer: torch.Tensor, fields: dict[str, tuple[int, int]]) -> View:
    """The view function of one weight's regions (``fields``: field → (offset, bytes)) in a flat uint8 buffer."""

    def view(field_: str, dtype: torch.dtype, count: int) -> torch.Tensor:
        offset, _ = fields[field_]
        return buffer[offset : offset + count * dtype.itemsize].view(dtype)

    return view


def write(view: View, packed: PackedWeight) -> dict:
    """Copy an encoding's fields into its regions; returns what ``read`` needs besides the layout."""
    parts = {"codes": packed.codes, "scale": packed.scale, "zero": packed.zero, "negative_zeros": packed.negative_zeros}
    for field_, t in parts.items():
        if t is not None:
            view(field_, t.dtype, t.numel()).copy_(t.reshape(-1))
    negative = None if packed.negative_zeros is None else packed.negative_zeros.numel()
    return {"codes_dtype": str(packed.codes.dtype), "negative_zeros": negative}


def read(view: View, shape: tuple[int, int], scheme: Scheme, dtype: torch.dtype, record: dict) -> PackedWeight:
    """The PackedWeight ``write`` stored for a weight of ``shape`` and ``dtype``: views of its regions, no copy."""
    out_f, in_f = shape
    sizes = field_sizes(shape, scheme)  # bytes: codes are one byte each, scales four
    codes_dtype = torch.int8 if record["codes_dtype"] == "torch.int8" else torch.uint8
    negative = record["negative_zeros"]
    return PackedWeight(
        codes=view("codes", codes_dtype, sizes["codes"]),
        scale=view("scale", torch.float32, sizes["scale"] // 4).view(out_f, -1),
        zero=None if scheme.symmetric else view("zero", torch.uint8, sizes["zero"]).view(out_f, -1),
        negative_zeros=None if negative is None else view("negative_zeros", torch.int32, negative),
        shape=(out_f, in_f), dtype=dtype, bits=scheme.bits, group_size=scheme.group_size, symmetric=scheme.symmetric,
    )  # fmt: skip


def mapping(nbytes: int) -> tuple[mmap.mmap, torch.Tensor]:
    """A shared anonymous mapping, and a uint8 tensor over it: what a forked child writes there, the parent reads."""
    mapped = mmap.mmap(-1, max(nbytes, 1))
    return mapped, torch.frombuffer(mapped, dtype=torch.uint8)


class SharedLayout:
    """The regions of every (scheme, weight), and each scheme's shared mapping."""

    def __init__(self, shapes: dict[str, tuple[int, int]], schemes: list[Scheme]):
        self.layout: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}  # (scheme, key) → field → (offset, bytes)
        self.mappings, self.buffers = {}, {}
        for s in schemes:
            placed, n = regions({key: field_sizes(shape, s) for key, shape in shapes.items()})
            self.layout |= {(s.name, key): fields for key, fields in placed.items()}
            self.mappings[s.name], self.buffers[s.name] = mapping(n)

    def view(self, scheme: str, key: str) -> View:
        """The view function of the regions of (``scheme``, ``key``)."""
        return region_view(self.buffers[scheme], self.layout[scheme, key])

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
