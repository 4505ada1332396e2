"""compress-bits --verify-coding: the "arithmetic-coded" row, measured by a real round trip in memory."""

from __future__ import annotations

import time

from infoeval.codec import core
from infoeval.codec.compress import load_as
from infoeval.codec.container import pack, unpack
from infoeval.engine import model_device
from infoeval.errors import RuntimeFailure, spell
from infoeval.input.prepare import Reporter

GROUP = 32


def arithmetic_coded_row(loaded, data: bytes, ctx: int, reporter: Reporter | None = None) -> dict:
    """Compress ``data`` with the loaded model (segments of ``ctx`` tokens), decompress it, compare, and return a
    compressor row: the .iez file's bytes, bits and bits per byte, plus its payload and ideal bits."""
    archive, coding = core.encode_bytes(
        data, loaded, model_device(loaded.model), ctx, GROUP, load_as(loaded.info), "xz", reporter
    )
    blob = pack(archive)
    t0 = time.perf_counter()
    if core.decode_archive(*unpack(blob), loaded, reporter) != data:
        raise RuntimeFailure(f"{spell('verify_coding')}: the arithmetic-coded round trip did not give the bytes back")
    return {
        "method": "arithmetic-coded" if archive.header["mode"] == "model" else "arithmetic-coded (xz fallback)",
        "bytes": len(blob),
        "bits": 8 * len(blob),
        "bits_per_byte": 8 * len(blob) / len(data) if data else float("nan"),
        "payload_bits": coding.stream_bits,
        "ideal_bits": coding.ideal_bits,
        "tokens": coding.tokens,
        "round_trip": True,
        "compress_s": coding.seconds,
        "decompress_s": time.perf_counter() - t0,
        "note": archive.header.get("reason"),
    }
