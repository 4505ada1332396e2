"""The codec's pure parts: integer counts and their cost bound (against brute force), the range coder with its
shorter ending, the file format's checks."""

from __future__ import annotations

import doctest
import itertools
import math
import zlib

import numpy as np
import pytest
import torch

from infoeval.codec import coder, container, frequencies, segments
from infoeval.codec.coder import Decoder, Encoder
from infoeval.codec.frequencies import TOTAL, cost_bound_bits, quantize


@pytest.mark.parametrize("module", [frequencies, segments])
def test_docstring_examples(module):
    assert doctest.testmod(module, raise_on_error=False).failed == 0


def _costs(w: np.ndarray, total: int) -> np.ndarray:
    """Bits above −log₂(w_i / Σ w) of every symbol under the quantised counts."""
    f = quantize(torch.from_numpy(w)[None], total)[0].numpy()
    assert f.sum() == total and f.min() >= 1
    with np.errstate(divide="ignore"):
        return -np.log2(f / total) + np.log2(w / w.sum())


def test_counts_are_positive_sum_to_the_total_and_are_deterministic():
    rng = np.random.default_rng(0)
    w = torch.from_numpy(rng.exponential(size=(64, 300)) ** rng.uniform(1, 30, size=(64, 1)))
    f = quantize(w)
    assert (f.sum(-1) == TOTAL).all() and (f >= 1).all()
    assert torch.equal(f, quantize(w.clone()))
    assert (quantize(torch.zeros(2, 5, dtype=torch.float64), 16) >= 3).all()  # an all-zero row counts as uniform


def test_cost_bound_holds_for_every_distribution_on_a_grid():
    """Brute force: every weight vector over {0…7}³ and {0…3}⁵ (total 16 and 64), every symbol with w > 0."""
    for n, top, total in ((3, 7, 16), (5, 3, 64), (4, 5, 32)):
        bound = cost_bound_bits(n, total=total)
        worst = 0.0
        for w in itertools.product(range(top + 1), repeat=n):
            w = np.asarray(w, dtype=np.float64)
            if w.sum() == 0:
                continue
            worst = max(worst, _costs(w, total)[w > 0].max())
        assert worst < bound, (n, worst, bound)
        assert worst > 0.5 * bound  # the bound is not loose by orders of magnitude


def test_cost_bound_holds_on_random_peaked_distributions():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 600))
        w = rng.exponential(size=n) ** rng.uniform(1, 40)
        costs = _costs(w, TOTAL)
        assert costs[w > 0].max() < cost_bound_bits(n)


def test_two_levels_cost_at_most_the_bound_per_token():
    """Bucket and place counts of real-looking logits: Σ code bits − Σ −log₂ q ≤ tokens · bound."""
    vocab = 49152
    k = frequencies.bucket_width(vocab)
    h = frequencies.n_buckets(vocab, k)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(16, vocab, generator=gen) * 4
    tokens = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0].numpy()
    w = frequencies.level_weights(logits, k, h)
    f_hi = quantize(w.sum(-1)).numpy()
    f_lo = quantize(w[torch.arange(16), torch.from_numpy(tokens // k)]).numpy()
    code = frequencies.code_bits(f_hi, tokens // k) + frequencies.code_bits(f_lo, tokens % k)
    ideal = frequencies.ideal_bits(w, tokens)
    exact = (torch.logsumexp(logits.double(), -1) - logits.double()[torch.arange(16), tokens]).numpy() / math.log(2)
    np.testing.assert_allclose(ideal, exact, rtol=1e-12)
    assert (code - ideal).max() < cost_bound_bits(h, k) < 4e-5


def _random_message(rng, n: int, k: int):
    f = quantize(torch.from_numpy(rng.exponential(size=(n, k)) ** rng.uniform(1, 10))).numpy()
    return f, np.array([rng.choice(k, p=row / row.sum()) for row in f])


def test_range_coder_round_trips_with_the_short_ending():
    rng = np.random.default_rng(2)
    extra = []
    for _ in range(200):
        f, sym = _random_message(rng, int(rng.integers(1, 300)), int(rng.integers(2, 200)))
        enc = Encoder()
        cut = len(sym) // 3
        enc.encode(sym[:cut], f[:cut])
        enc.encode(sym[cut:], f[cut:])
        data = enc.finish()
        dec = Decoder(data)
        assert np.array_equal(np.concatenate([dec.decode(f[:cut]), dec.decode(f[cut:])]), sym)
        extra.append(8 * len(data) - frequencies.code_bits(f, sym).sum())
    assert max(extra) < 10 and np.mean(extra) < 5  # constriction's own ending: 16 more bits on average


def test_the_coder_uses_exactly_the_integer_counts():
    """A symbol with count 1 of 2^24 costs 24 bits: 100 of them take 2 400 bits (+ < 1 byte of ending)."""
    enc = Encoder()
    enc.encode(np.ones(100, dtype=np.int64), np.array([[TOTAL - 1, 1]] * 100))
    assert 2400 <= 8 * len(enc.finish()) < 2408 + 8
    assert Encoder().finish() == b""


def test_short_ending_is_never_longer_than_constrictions():
    rng = np.random.default_rng(3)
    for _ in range(50):
        f, sym = _random_message(rng, 50, 40)
        enc = Encoder()
        enc.encode(sym, f)
        sealed = enc._coder.get_compressed()
        assert len(enc.finish()) <= 4 * len(sealed)
        assert np.array_equal(Decoder(np.asarray(sealed, ">u4").tobytes()).decode(f), sym)


# ---- the file format -------------------------------------------------------------------------------------
def _archive() -> container.Archive:
    header = {"mode": "model", "tokens": 10, "ctx": 4, "group": 2, "original": {"bytes": 5, "sha256": "x"}}
    return container.Archive(header, (b"abc", b"de"), (7, 8))


def test_pack_unpack_round_trip_and_implied_segments():
    a, crcs = container.unpack(container.pack(_archive()))
    assert a == _archive() and crcs == (zlib.crc32(b"abc"), zlib.crc32(b"de"))
    assert a.lengths() == [4, 4, 2] and list(a.group_segments(1)) == [2]


def test_every_truncation_and_trailing_bytes_are_bad_input():
    blob = container.pack(_archive())
    for cut in range(len(blob)):
        with pytest.raises(container.BadFile):
            container.unpack(blob[:cut])
    with pytest.raises(container.BadFile, match="unexpected"):
        container.unpack(blob + b"\0")


def test_damage_to_the_header_is_bad_input_and_to_a_stream_is_named():
    blob = bytearray(container.pack(_archive()))
    for i in range(8, len(blob) - 5):  # everything between the magic and the payload is under the table's crc32
        bad = blob.copy()
        bad[i] ^= 0x01
        with pytest.raises(container.BadFile):
            container.unpack(bytes(bad))
    blob[-1] ^= 0x01
    a, crcs = container.unpack(bytes(blob))
    assert a.damaged_groups(crcs) == [1]


def test_wrong_magic_and_version():
    blob = container.pack(_archive())
    with pytest.raises(container.BadFile, match="magic"):
        container.unpack(b"PK" + blob[2:])
    with pytest.raises(container.BadFile, match="version"):
        container.unpack(blob[:8] + b"\0\x02" + blob[10:])


def test_invalid_utf8_is_not_tokenized():
    assert segments.tokenize_exactly(b"ok \xff\xfe", tokenizer=None).reason.startswith("the file is not UTF-8")


def test_coder_name_names_the_library():
    assert coder.coder_name().startswith("constriction 0.")
