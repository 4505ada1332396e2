"""Bytes → token ids that give the very same bytes back, cut into segments and groups.

The decoder never tokenizes: it turns decoded ids back into text with the tokenizer's ``decode``. So a file can be
coded with the model only when ``decode(encode(file)) == file``, byte for byte; the check runs on every file.
It fails for bytes that are not UTF-8 and for tokenizers that normalise text (Unicode forms, spaces, unknown
characters); such a file is stored with xz instead, or refused.

    ids:       t0 t1 … t511 | t512 … t1023 | … | t15872 … t15936          ctx = 512
    segments:  0             1                  31 (65 tokens)             each coded after the start token only
    groups:    segments 0 … 31 stepped together as one batch               group size 32
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def decode_ids(tokenizer, ids) -> bytes:
    """The UTF-8 bytes of token ids, as the decoder produces them."""
    ids = [int(i) for i in ids]
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).encode("utf-8")


@dataclass(frozen=True)
class Tokenized:
    """Token ids that decode to the file exactly, or why there are none."""

    ids: np.ndarray | None
    reason: str | None = None


def _first_difference(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.frombuffer(a[:n], np.uint8) != np.frombuffer(b[:n], np.uint8))
    return int(diff[0]) if diff.size else n


def tokenize_exactly(raw: bytes, tokenizer) -> Tokenized:
    """The file's token ids (no special tokens added) when the tokenizer gives the file back byte for byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Tokenized(None, f"the file is not UTF-8 text (byte {e.start:,} cannot be decoded)")
    ids = np.asarray(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int64)
    back = decode_ids(tokenizer, ids)
    if back != raw:
        return Tokenized(
            None,
            f"the tokenizer does not give the file back (first difference at byte {_first_difference(raw, back):,})",
        )
    return Tokenized(ids)


def split(ids: np.ndarray, ctx: int) -> list[np.ndarray]:
    """Consecutive segments of at most ``ctx`` tokens.

    >>> [s.tolist() for s in split(np.arange(5), 2)]
    [[0, 1], [2, 3], [4]]
    """
    return [ids[i : i + ctx] for i in range(0, len(ids), ctx)]


def groups(n_segments: int, size: int) -> list[range]:
    """Consecutive runs of ``size`` segments (the last may be shorter).

    >>> groups(5, 2)
    [range(0, 2), range(2, 4), range(4, 5)]
    """
    return [range(i, min(n_segments, i + size)) for i in range(0, n_segments, size)]


def start_token(bos_id: int | None, eos_id: int | None) -> int:
    """The token every segment is coded after: BOS, else EOS, else id 0.

    >>> start_token(None, 0), start_token(1, 2), start_token(None, None)
    (0, 1, 0)
    """
    return next((i for i in (bos_id, eos_id) if i is not None), 0)
