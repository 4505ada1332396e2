"""Frozen settings objects, one per stage, built by the CLI and passed to the library."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.models import DEFAULT_MODEL
from infoeval.quant.schemes import DEFAULT_SCHEMES

PROTOCOLS = ("rolling", "llama.cpp")
PREFIXES = ("auto", "bos", "eos", "none")


@dataclass(frozen=True)
class ModelSettings:
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None


@dataclass(frozen=True)
class TextSettings:
    text: Path | None = None
    dataset: str | None = None
    data_dir: Path | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class WindowSettings:
    ctx: int = 512
    stride: int | None = None  # None: = ctx
    protocol: str = "rolling"
    prefix: str = "auto"


@dataclass(frozen=True)
class VariantSettings:
    schemes: str = DEFAULT_SCHEMES
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
