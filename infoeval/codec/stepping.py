"""The one code path of the encoder and the decoder: the segments of a group stepped together, token by token.

    cache = step_cache(longest); feed = [start token] × B     B segments of one group, as one batch
    for t in 0 … (longest segment − 1):
        logits = engine.step_logits(model, cache, feed)             (B, V), the same shapes on both sides
        rows   = the segments longer than t
        w      = exp(z − max z) of their logits, (n, H, K) float64  (frequencies.level_weights)
        bucket = side(counts of Σ_K w)                              the encoder codes the known bucket,
        place  = side(counts of w[bucket])                          the decoder reads it; then the place
        feed[rows] = bucket · K + place                             (a finished row keeps its last token)

The encoder knows the tokens; the decoder learns each one from the stream just before it feeds it to the
model, so both run the very same forward passes on the very same inputs. One stream per group holds, step by
step, the buckets of the group's live rows and then their places.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from infoeval import engine
from infoeval.codec.cache import step_cache
from infoeval.codec.coder import Decoder, Encoder
from infoeval.codec.frequencies import (
    bucket_width,
    code_bits,
    ideal_bits,
    level_weights,
    n_buckets,
    quantize,
)
from infoeval.errors import RuntimeFailure

# side(step, level, rows, counts) → symbols: level 0 the buckets, level 1 the places in the buckets
Side = Callable[[int, int, np.ndarray, np.ndarray], np.ndarray]


class OutOfVocabulary(RuntimeFailure):
    """The decoder read a token id that the model does not have: the stream or the environment is wrong."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows
        super().__init__(f"decoded token ids outside the vocabulary in rows {rows.tolist()}")


@dataclass(frozen=True)
class Coded:
    """One group's tokens (per segment) and, per segment, Σ −log₂ q (ideal) and Σ −log₂(f/M) (code) bits."""

    tokens: tuple[np.ndarray, ...]
    ideal_bits: np.ndarray
    code_bits: np.ndarray


def step_group(
    model, lengths: Sequence[int], start_id: int, vocab: int, side: Side, on_step: Callable[[], None] | None = None
) -> Coded:
    """Step the segments of one group (of ``lengths`` tokens each) together; ``side`` codes or decodes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    width = bucket_width(vocab)
    buckets = n_buckets(vocab, width)
    device = engine.model_device(model)
    longest = int(lengths.max(initial=0))
    cache = step_cache(model, max(1, longest))
    feed = torch.full((len(lengths),), start_id, dtype=torch.int64)
    tokens = np.zeros((len(lengths), longest), dtype=np.int64)
    ideal, code = np.zeros(len(lengths)), np.zeros(len(lengths))
    for t in range(tokens.shape[1]):
        logits = engine.step_logits(model, cache, feed.to(device))
        rows = np.flatnonzero(lengths > t)
        live = logits if len(rows) == len(lengths) else logits[torch.from_numpy(rows).to(logits.device)]
        w = level_weights(live, width, buckets)  # (n, H, K): only the rows still coding
        sums = w.sum(-1)
        f_hi = quantize(sums).numpy()
        hi = side(t, 0, rows, f_hi)
        f_lo = quantize(w[torch.arange(len(rows)), torch.from_numpy(hi)]).numpy()
        lo = side(t, 1, rows, f_lo)
        tok = hi * width + lo
        if (tok >= vocab).any():
            raise OutOfVocabulary(rows[tok >= vocab])
        tokens[rows, t] = tok
        ideal[rows] += ideal_bits(w, tok, sums)
        code[rows] += code_bits(f_hi, hi) + code_bits(f_lo, lo)
        feed[torch.from_numpy(rows)] = torch.from_numpy(tok)
        if on_step:
            on_step()
    return Coded(tuple(tokens[i, :n] for i, n in enumerate(lengths)), ideal, code)


def encode_group(
    model, segments: Sequence[np.ndarray], start_id: int, vocab: int, on_step: Callable[[], None] | None = None
) -> tuple[bytes, Coded]:
    """The stream of one group of token segments, and what was coded."""
    width = bucket_width(vocab)
    lengths = [len(s) for s in segments]
    padded = np.zeros((len(segments), max(lengths, default=0)), dtype=np.int64)
    for i, s in enumerate(segments):
        padded[i, : len(s)] = s
    encoder = Encoder()

    def encode(t: int, level: int, rows: np.ndarray, freqs: np.ndarray) -> np.ndarray:
        symbols = padded[rows, t] // width if level == 0 else padded[rows, t] % width
        encoder.encode(symbols, freqs)
        return symbols

    coded = step_group(model, lengths, start_id, vocab, encode, on_step)
    return encoder.finish(), coded


def decode_group(
    model, data: bytes, lengths: Sequence[int], start_id: int, vocab: int, on_step: Callable[[], None] | None = None
) -> Coded:
    """The token segments of one group, read from its stream."""
    decoder = Decoder(data)
    return step_group(model, lengths, start_id, vocab, lambda t, level, rows, freqs: decoder.decode(freqs), on_step)
