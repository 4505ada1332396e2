"""compress' and decompress' typed results: what their JSON holds, read back by ``infoeval.load``."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.output.results import Result


@dataclass(frozen=True)
class CompressResult(Result):
    """compress: sizes, the ideal and the achieved bits, the overhead by cause, xz/zstd, throughput."""

    input: dict
    output: dict
    mode: str
    reason: str | None
    layout: dict
    bits: dict
    bits_per_byte: dict
    overhead: dict
    compressors: tuple[dict, ...]
    throughput: dict
    exactness: dict | None
    FAMILY = "compress"


@dataclass(frozen=True)
class DecompressResult(Result):
    """decompress: sizes, tokens, throughput and the environment differences that --force let through."""

    input: dict
    output: dict
    mode: str
    tokens: int
    throughput: dict
    forced: tuple[str, ...]
    FAMILY = "decompress"
