"""General-purpose compressors on exactly the bytes the model scored: compress-bits' and compress' baselines.

A language model with arithmetic coding needs Σ −log₂ q(token) bits (plus a few bits of coder overhead and,
unlike these compressors, the model itself): that is the "model" row these are compared with.
"""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np

COMPRESSORS = ("utf-8", "gzip -9", "bz2 -9", "xz -9", "zstd -19")


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=19).compress(data)


_FUNCS = {
    "utf-8": lambda d: d,
    "gzip -9": lambda d: gzip.compress(d, compresslevel=9, mtime=0),
    "bz2 -9": lambda d: bz2.compress(d, compresslevel=9),
    "xz -9": lambda d: lzma.compress(d, format=lzma.FORMAT_XZ, preset=9),
    "zstd -19": _zstd,
}


def compress_all(data: bytes) -> list[dict]:
    """Size of ``data`` under each compressor: bytes, bits and bits per input byte."""
    rows = []
    for name in COMPRESSORS:
        size = len(_FUNCS[name](data))
        rows.append(
            {
                "method": name,
                "bytes": size,
                "bits": 8 * size,
                "bits_per_byte": 8 * size / len(data) if data else float("nan"),
            }
        )
    return rows


def scored_bytes(p) -> bytes:
    """The UTF-8 bytes covered by the scored tokens, in order (the whole scored span for rolling windows)."""
    raw = p.text.text.encode("utf-8")
    starts = np.cumsum(p.stream.nbytes) - p.stream.nbytes
    pieces = []
    for w in p.windows:
        a, b = w.first_target, w.first_target + w.n_scored
        lo = int(starts[a])
        hi = int(starts[b - 1] + p.stream.nbytes[b - 1])
        pieces.append(raw[lo:hi])
    return b"".join(pieces)
