"""The entropy coder: constriction's range coder (32-bit words, 64-bit state) over the integer frequencies of
``frequencies``, with a shorter ending than constriction's own.

Counts in, counts out. constriction's lazy categorical model (``Categorical(perfect=False)``) turns float weights
p_i into cumulative counts ⌊Σ_{j<i} p_j · s⌋ + i with s = (M − n) / Σ p. Given p_i = f_i − 1 for counts f_i ≥ 1
summing to M, s = 1 exactly and every sum is an integer below 2^53, so the coder uses exactly the counts f_i.

The ending. constriction seals a stream by writing one whole 32-bit word of the final interval (plus a zero word
at times): 16 bits too many on average. The final interval [L, L + r) is known from ``RangeEncoder.pos()``; any
point in it decodes the whole message, and the decoder reads zeros after the end of its data. So the stream
ends with the point of [L, L + r) that has the most trailing zero bits, written big-endian without its trailing
zero bytes: about −log₂ r + 1 bits, rounded up to a byte.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np

from infoeval.codec.frequencies import PRECISION

WORD_BITS, STATE_BITS = 32, 64


def coder_name() -> str:
    return f"constriction {metadata.version('constriction')} range coder (u32 words, u64 state, {PRECISION}-bit counts)"


def _weights(freqs: np.ndarray) -> np.ndarray:
    """constriction's float weights for integer counts f ≥ 1: f − 1 (see the module's docstring)."""
    return np.ascontiguousarray(freqs, dtype=np.float64) - 1.0


class Encoder:
    """One range-coded stream; ``encode`` appends symbols, ``finish`` returns the stream's bytes."""

    def __init__(self):
        import constriction

        self._coder = constriction.stream.queue.RangeEncoder()
        self._model = constriction.stream.model.Categorical(perfect=False)

    def encode(self, symbols: np.ndarray, freqs: np.ndarray) -> None:
        """Append ``symbols`` (n,), each with its own row of counts ``freqs`` (n, k)."""
        if len(symbols):
            self._coder.encode(np.ascontiguousarray(symbols, dtype=np.int32), self._model, _weights(freqs))

    def finish(self) -> bytes:
        words = self._coder.get_compressed()
        if words.size == 0:
            return b""
        position, (lower, rng) = self._coder.pos()
        return shortest_ending(words, position, lower, rng)


def shortest_ending(words: np.ndarray, position: int, lower: int, rng: int) -> bytes:
    """The stream ``words`` (constriction's sealed output) re-ended with the point of the final interval that has
    the most trailing zeros, as big-endian bytes without trailing zero bytes.

    ``position`` words precede the coder's 64-bit window, whose interval is [lower, lower + rng). In a frame of
    position + 2 words constriction's sealed point X lies in [L, L + 2^32) with L ≡ lower (mod 2^64), which
    fixes L = X − ((X − lower) mod 2^64).
    """
    frame = WORD_BITS * (position + 2)
    if len(words) > position + 2:
        raise ValueError("unexpected stream layout")
    x = int.from_bytes(np.asarray(words, dtype=">u4").tobytes(), "big") << (WORD_BITS * (position + 2 - len(words)))
    low = x - ((x - lower) % (1 << STATE_BITS))
    if not 0 <= x - low < (1 << WORD_BITS) or rng < (1 << WORD_BITS):
        raise ValueError("the sealed point is not where the coder's state says")
    high = low + rng
    for k in range(frame, -1, -1):
        point = -(-low >> k) << k  # the least multiple of 2^k that is ≥ low
        if point < high:
            break
    return point.to_bytes(frame // 8, "big").rstrip(b"\0")


class Decoder:
    """Reads the symbols of one stream back, given the same counts in the same order."""

    def __init__(self, data: bytes):
        import constriction

        padded = data + b"\0" * (-len(data) % 4)
        words = np.frombuffer(padded, dtype=">u4").astype(np.uint32)
        self._coder = constriction.stream.queue.RangeDecoder(words)
        self._model = constriction.stream.model.Categorical(perfect=False)

    def decode(self, freqs: np.ndarray) -> np.ndarray:
        """One symbol per row of counts ``freqs`` (n, k)."""
        if freqs.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self._coder.decode(self._model, _weights(freqs)), dtype=np.int64)
