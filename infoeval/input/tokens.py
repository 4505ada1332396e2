"""Text → token stream, with the UTF-8 bytes each token covers (for bits per byte)."""

from __future__ import annotations

from collections.abc import Sequence
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


def _tokenize(text: str, tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """Ids and character start offsets of ``text`` (no special tokens)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    starts = np.array([o[0] for o in enc["offset_mapping"]], dtype=np.int64)
    return ids, starts


def _stream(text: str, ids: np.ndarray, starts: np.ndarray, end_char: int, prefix_id: int | None) -> TokenStream:
    """Bytes per token from the character start offsets; the last token ends at ``end_char``."""
    if ids.size == 0:
        raise DataError("the text is empty after tokenization; give a text with some content")
    byte_of = _byte_offsets(text)
    starts = np.maximum.accumulate(starts)  # offsets of trimmed whitespace can go backwards
    starts[0] = 0
    bounds = byte_of[np.append(starts, end_char)]
    nbytes = np.diff(bounds)
    if prefix_id is not None:
        ids = np.concatenate([[prefix_id], ids])
        nbytes = np.concatenate([[0], nbytes])
    return TokenStream(torch.from_numpy(ids), nbytes.astype(np.int64), prefix_id)


# Tokenizing only a prefix: the ids of text[:c] can differ from those of the whole text only near the cut (a
# word or whitespace run split by it), so we keep the first n of many more tokens and check that cutting the
# text at a second, later point gives the very same first n + 1 ids and offsets.
_MARGIN_TOKENS = 64
_CHARS_PER_TOKEN = 6


def encode(text: str, tokenizer, prefix_id: int | None = None, max_tokens: int | None = None) -> TokenStream:
    """Tokenize ``text`` without special tokens (a fast tokenizer is needed for offsets), count bytes per
    token, and put ``prefix_id`` (e.g. BOS) in front when given.

    With ``max_tokens`` only the first ``max_tokens`` text tokens are returned, and only as much of the text
    as they need is tokenized (verified against a second, longer cut; the whole text if the check fails).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("the tokenizer is not a fast (Rust) tokenizer; infoeval needs its offsets to count bytes")
    if max_tokens is not None:
        stream = _encode_prefix(text, tokenizer, prefix_id, max_tokens)
        if stream is not None:
            return stream
    ids, starts = _tokenize(text, tokenizer)
    stream = _stream(text, ids, starts, len(text), prefix_id)
    return stream if max_tokens is None else truncate(stream, max_tokens + (prefix_id is not None))


def _encode_prefix(text: str, tokenizer, prefix_id: int | None, n: int) -> TokenStream | None:
    """The first n tokens from a prefix of the text, or None when the text must be tokenized whole."""
    want = n + _MARGIN_TOKENS
    cut = want * _CHARS_PER_TOKEN
    while True:
        if cut >= len(text):
            return None
        ids, starts = _tokenize(text[:cut], tokenizer)
        if ids.size >= want:
            break
        cut = min(len(text), 2 * cut)
    cut2 = min(len(text), cut + cut // 4 + 1)
    ids2, starts2 = _tokenize(text[:cut2], tokenizer)
    k = n + 1  # the token after the last kept one fixes the last kept token's byte count
    if ids2.size < k or not (np.array_equal(ids[:k], ids2[:k]) and np.array_equal(starts[:k], starts2[:k])):
        return None
    return _stream(text, ids[:n], starts[:n], int(np.maximum.accumulate(starts[:k])[-1]), prefix_id)


def truncate(stream: TokenStream, n_tokens: int) -> TokenStream:
    """The first n_tokens tokens of the stream."""
    return TokenStream(stream.ids[:n_tokens], stream.nbytes[:n_tokens], stream.prefix_id)


def default_special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text by default (``add_special_tokens=True``), found on a probe."""
    plain = list(tokenizer("a", add_special_tokens=False, verbose=False)["input_ids"])
    full = list(tokenizer("a", verbose=False)["input_ids"])
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    raise DataError(
        "cannot tell which special tokens the tokenizer adds by default (its encodings of a probe disagree)"
    )


def text_tokens(
    text: str, tokenizer, front: Sequence[int] = (), back: Sequence[int] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Ids and UTF-8 bytes per token of ``text`` (as ``encode`` counts them), between the special ids ``front`` and
    ``back`` (0 bytes each); an empty text gives only the special ids."""
    ids, nbytes = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if text:
        ids, starts = _tokenize(text, tokenizer)
        if ids.size:
            starts = np.maximum.accumulate(starts)
            starts[0] = 0
            nbytes = np.diff(_byte_offsets(text)[np.append(starts, len(text))])
    specials = (np.asarray(front, np.int64), np.asarray(back, np.int64))
    ids = np.concatenate([specials[0], ids, specials[1]])
    nbytes = np.concatenate([np.zeros(len(front), np.int64), nbytes, np.zeros(len(back), np.int64)])
    return ids.astype(np.int64), nbytes.astype(np.int64)


def token_texts(tokenizer, ids) -> dict[int, str]:
    """id → the text the token decodes to on its own, for every distinct id in ``ids`` (for the report page; a
    byte-level piece of a longer character decodes to U+FFFD)."""
    return {int(i): tokenizer.decode([int(i)]) for i in np.unique(np.asarray(ids, dtype=np.int64))}
