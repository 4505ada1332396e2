"""What compress reports: sizes, bits per byte, the overhead above Σ −log₂ q by cause, xz and zstd on the same
bytes, throughput.

    file bits = Σ −log₂ q                     ideal: the model's own code length for these tokens
              + (Σ −log₂(f/M) − Σ −log₂ q)    quantisation: integer counts instead of probabilities
              + (stream bits − Σ −log₂(f/M))  coder: the range coder's rounding and each stream's ending
              + (file bits − stream bits)     container: magic, header, segment and group tables
"""

from __future__ import annotations

import hashlib

from infoeval.codec.coder import coder_name
from infoeval.codec.container import Archive
from infoeval.codec.core import Coding
from infoeval.codec.frequencies import bucket_width, cost_bound_bits, n_buckets
from infoeval.measure.compressors import compress_all

COMPARED = ("xz -9", "zstd -19")


def rate(n_bytes: int, tokens: int, seconds: float | None) -> dict | None:
    """Seconds, bytes/s and tokens/s of a run (None when it did not run)."""
    if seconds is None:
        return None
    return {
        "seconds": seconds,
        "bytes_per_s": n_bytes / seconds if seconds else None,
        "tokens_per_s": tokens / seconds if seconds else None,
    }


def quantisation_bound(archive: Archive, tokens: int) -> float | None:
    """The most bits the integer counts can cost above Σ −log₂ q for ``tokens`` tokens (frequencies' bound)."""
    if archive.header["mode"] != "model":
        return None
    vocab = int(archive.header["exactness"]["vocab"])
    width = bucket_width(vocab)
    return tokens * cost_bound_bits(n_buckets(vocab, width), width)


def _per_byte(bits: float, n: int) -> float | None:
    return bits / n if n else None


def _overhead(file_bits: int, coding: Coding, bound: float | None) -> dict:
    ideal, code, stream = coding.ideal_bits, coding.code_bits, coding.stream_bits
    return {
        "quantisation_bits": code - ideal,
        "quantisation_bound_bits": bound,
        "coder_bits": stream - code,
        "container_bits": file_bits - stream,
        "total_bits": file_bits - ideal,
        "total_pct": 100 * (file_bits - ideal) / ideal if ideal else None,
        "payload_over_ideal": stream / ideal if ideal else None,
    }


def _compressors(raw: bytes, file_bits: int) -> list[dict]:
    rows = [r for r in compress_all(raw) if r["method"] in COMPARED] if raw else []
    return [{**r, "file_over_this": file_bits / r["bits"] if r["bits"] else None} for r in rows]


def summarize(raw: bytes, blob: bytes, archive: Archive, coding: Coding, decompress_s: float | None) -> dict:
    """CompressResult's fields (all but provenance and timings) for ``raw`` compressed into ``blob``."""
    n, file_bits = len(raw), 8 * len(blob)
    model = archive.header["mode"] == "model"
    return {
        "input": {"bytes": n, "sha256": hashlib.sha256(raw).hexdigest()},
        "output": {"bytes": len(blob)},
        "mode": archive.header["mode"],
        "reason": archive.header.get("reason"),
        "layout": {
            "tokens": coding.tokens,
            "segments": len(archive.lengths()),
            "groups": len(archive.streams),
            "ctx": archive.header.get("ctx"),
            "group": archive.header.get("group"),
            "bucket": archive.header.get("bucket"),
            "start_id": archive.header.get("start_id"),
            "coder": coder_name() if model else "xz -9",
        },
        "bits": {
            "ideal": coding.ideal_bits if model else None,
            "code": coding.code_bits if model else None,
            "payload": coding.stream_bits,
            "file": file_bits,
        },
        "bits_per_byte": {
            "achieved": _per_byte(file_bits, n),
            "payload": _per_byte(coding.stream_bits, n),
            "ideal": _per_byte(coding.ideal_bits, n) if model else None,
        },
        "overhead": _overhead(file_bits, coding, quantisation_bound(archive, coding.tokens)) if model else None,
        "compressors": tuple(_compressors(raw, file_bits)),
        "throughput": {
            "compress": rate(n, coding.tokens, coding.seconds),
            "decompress": rate(n, coding.tokens, decompress_s),
        },
        "exactness": archive.header.get("exactness"),
    }
