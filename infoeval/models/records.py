"""What a loaded model is recorded as: the model and tokenizer objects (``LoadedModel``) and their provenance
(``ModelInfo``, ``TokenizerInfo``), whichever way they were loaded (a file, a folder, the hub, an object in memory)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenizerInfo:
    cls: str  # the tokenizer's class ("class" in JSON)
    source: str  # how it was made: from which folder, GGUF file or hub id
    vocab_size: int
    bos_id: int | None
    bos_token: str | None
    eos_id: int | None
    add_bos_token: bool

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        return {"class": d.pop("cls"), **d}


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded: the spec as given, where from (kind, path, sha256 of the weights or hub revision), the
    architecture, dtype, device, parameter count and tokenizer."""

    spec: str
    kind: str  # "gguf", "folder" or "hub"
    dtype: str
    device: str
    architecture: str
    model_type: str
    n_parameters: int
    tokenizer: TokenizerInfo
    path: str | None = None
    sha256: str | None = None
    revision: str | None = None
    cache: str | None = None
    gguf_add_bos: bool | None = None
    quantization: dict | None = None  # a shipped quantized checkpoint's format and stored bits (models/shipped.py)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "tokenizer": self.tokenizer.to_json()
        }


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo


def tokenizer_info(tok, source: str) -> TokenizerInfo:
    """What the run records of a tokenizer: its class, where it came from, its size and its BOS handling."""
    bos = getattr(tok, "bos_token_id", None)
    return TokenizerInfo(
        cls=type(tok).__name__,
        source=source,
        vocab_size=len(tok),
        bos_id=bos,
        bos_token=getattr(tok, "bos_token", None),
        eos_id=getattr(tok, "eos_token_id", None),
        # transformers 5 drops add_bos_token when saving a tokenizer.json, so ask the tokenizer itself
        add_bos_token=bos is not None and tok("a").input_ids[:1] == [bos],
    )
