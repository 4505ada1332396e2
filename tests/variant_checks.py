"""Checks shared by the tests of encodings made elsewhere (a forked child, the ranks): the variants are bit for bit
those one process makes."""

from __future__ import annotations

import torch

FIELDS = ("codes", "scale", "zero", "negative_zeros")


def same_variants(a, b) -> None:
    """Two lists of variants hold the same stored weights (every field, dtype and shape) and the same layer reports
    (SQNR exactly)."""
    assert [v.name for v in a] == [v.name for v in b]
    for va, vb in zip(a, b):
        assert va.weights.keys() == vb.weights.keys()
        for name, pa in va.weights.items():
            pb = vb.weights[name]
            for f in FIELDS:
                ta, tb = getattr(pa, f), getattr(pb, f)
                assert (ta is None) == (tb is None), (va.name, name, f)
                if ta is not None:
                    assert ta.dtype == tb.dtype and ta.shape == tb.shape and torch.equal(ta, tb), (va.name, name, f)
            assert (pa.shape, pa.dtype, pa.bits, pa.group_size, pa.symmetric) == (
                pb.shape,
                pb.dtype,
                pb.bits,
                pb.group_size,
                pb.symmetric,
            )
        assert [r.as_dict() for r in va.layers] == [r.as_dict() for r in vb.layers], va.name  # SQNR exactly
