"""Text → token stream, with the UTF-8 bytes each token covers (for bits per byte)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infoeval.errors import DataError


@dataclass(frozen=True)
class TokenStream:
    """Token ids (optionally after one prefix token) and the UTF-8 bytes of the text each token covers.

    ``nbytes`` partitions the text: token i covers the bytes from its start offset to the next token's start
    (the prefix token covers none), so the bytes of any run of tokens add up exactly.
    """

    ids: torch.Tensor  # (L,) int64
    nbytes: np.ndarray  # (L,) int64
    prefix_id: int | None

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def _byte_offsets(text: str) -> np.ndarray:
    """byte_of[c] = UTF-8 byte offset of character c, with byte_of[len(text)] = total bytes."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    starts = np.flatnonzero((raw & 0xC0) != 0x80)
    return np.append(starts, raw.size).astype(np.int64)


def encode(text: str, tokenizer, prefix_id: int | None = None) -> TokenStream:
    """Tokenize ``text`` without special tokens (a fast tokenizer is needed for offsets), count bytes per
    token, and put ``prefix_id`` (e.g. BOS) in front when given."""
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("the tokenizer is not a fast (Rust) tokenizer; infoeval needs its offsets to count bytes")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    offsets = enc["offset_mapping"]
    if ids.size == 0:
        raise DataError("the text is empty after tokenization; give a text with some content")
    byte_of = _byte_offsets(text)
    starts = np.array([o[0] for o in offsets], dtype=np.int64)
    starts = np.maximum.accumulate(starts)  # offsets of trimmed whitespace can go backwards
    starts[0] = 0
    bounds = byte_of[np.append(starts, len(text))]
    nbytes = np.diff(bounds)
    if prefix_id is not None:
        ids = np.concatenate([[prefix_id], ids])
        nbytes = np.concatenate([[0], nbytes])
    return TokenStream(torch.from_numpy(ids), nbytes.astype(np.int64), prefix_id)


def truncate(stream: TokenStream, n_tokens: int) -> TokenStream:
    """The first n_tokens tokens of the stream."""
    return TokenStream(stream.ids[:n_tokens], stream.nbytes[:n_tokens], stream.prefix_id)
