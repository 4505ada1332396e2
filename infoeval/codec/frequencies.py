"""From a model's next-token logits to the integer frequencies of the range coder: deterministic, every symbol
non-zero, each distribution summing to exactly M = 2^24 (the precision of constriction's categorical models).

Two levels. The logits' V ids are cut into H = ⌈V / K⌉ buckets of K = 2^⌈log₂ √V⌉ consecutive ids (SmolLM2:
V = 49 152, K = 256, H = 192; the last bucket is padded with zero-probability ids). A token t is coded as its
bucket t // K, then as its place t % K inside that bucket:

    q(t) = q(bucket) · q(t | bucket)        so        −log₂ q(t) = −log₂ q(bucket) − log₂ q(t | bucket)

Each of the two distributions is quantised by ``quantize``: n weights w summing to S become counts

    f_i = 1 + ⌊w_i / S · R⌋,     R = M − n             (every symbol keeps at least one count)
    the rest, M − Σ f_i (between 0 and n − 1), goes to the largest weight (the first one on ties).

Cost: f_i ≥ 1 + ⌊w_i R / S⌋ > w_i R / S, so a symbol coded with f_i / M costs less than
−log₂(w_i / S) + log₂(M / (M − n)) bits. Per token that is at most

    log₂(M / (M − H)) + log₂(M / (M − K))  bits above −log₂ q(t)      (``cost_bound_bits``)

which is 3.9·10⁻⁵ bits for SmolLM2, against 4.2·10⁻³ bits (log₂(M / (M − V))) for one level over all 49 152 ids:
0.1 % of SmolLM2's ~3.7 bits per token on Python prose, which is this coder's whole budget.

The weights are w = exp(z − max z) of the float32 (or bfloat16) logits z taken to float64 on the CPU, so the counts
are a fixed function of the logits: the encoder and the decoder get the same counts whenever they get the same
logits.
"""

from __future__ import annotations

import math

import numpy as np
import torch

PRECISION = 24  # constriction's default categorical models: probabilities are multiples of 2^-24
TOTAL = 1 << PRECISION


def bucket_width(vocab: int) -> int:
    """K = 2^⌈log₂ √V⌉, the bucket width for a vocabulary of V ids (at least 2).

    >>> bucket_width(49152), bucket_width(512), bucket_width(151936)
    (256, 32, 512)
    """
    return max(2, 1 << math.ceil(math.log2(math.sqrt(vocab))))


def n_buckets(vocab: int, width: int) -> int:
    """H = ⌈V / K⌉ (at least 2, so that both levels are real distributions).

    >>> n_buckets(49152, 256), n_buckets(3, 2)
    (192, 2)
    """
    return max(2, -(-vocab // width))


def quantize(weights: torch.Tensor, total: int = TOTAL) -> torch.Tensor:
    """Integer frequencies (…, n) int64 ≥ 1 summing to ``total`` along the last axis, from non-negative float64
    weights (…, n) (any scale; a row that sums to 0 or to infinity counts as uniform).

    Worked example, total = 16 (n = 3, R = 13): w = [0.7, 0.2, 0.1] → 1 + ⌊[9.1, 2.6, 1.3]⌋ = [10, 3, 2], 15
    counts, the missing one goes to the largest weight: [11, 3, 2].

    >>> quantize(torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.0, 5.0]], dtype=torch.float64), 16).tolist()
    [[11, 3, 2], [1, 1, 14]]
    """
    w = weights.to(torch.float64)
    n = w.shape[-1]
    if n < 2 or n > total // 2:
        raise ValueError(f"cannot quantize {n} symbols onto {total} counts")
    s = w.sum(-1, keepdim=True)
    ok = torch.isfinite(s) & (s > 0)
    w = torch.where(ok, w, torch.ones_like(w))
    s = torch.where(ok, s, torch.full_like(s, float(n)))
    f = 1 + torch.floor(w / s * float(total - n)).to(torch.int64)
    rest = total - f.sum(-1, keepdim=True)  # 0 ≤ rest < n (a float rounding that overshoots is taken back here too)
    return f.scatter_add(-1, w.argmax(-1, keepdim=True), rest)


def cost_bound_bits(*alphabet_sizes: int, total: int = TOTAL) -> float:
    """The most bits a quantised code of one token can spend above −log₂ q: Σ log₂(M / (M − n)) over its levels.

    >>> round(cost_bound_bits(192, 256), 7)
    3.85e-05
    """
    return sum(math.log2(total / (total - n)) for n in alphabet_sizes)


def level_weights(logits: torch.Tensor, width: int, buckets: int) -> torch.Tensor:
    """exp(z − max z) of logits (n, V) as float64 on the CPU, zero-padded to (n, H, K) (written in place into the
    padded buffer: one pass over the vocabulary, no padded copy)."""
    z = logits.detach().to("cpu", torch.float64)
    e = torch.zeros(z.shape[0], buckets * width, dtype=torch.float64)
    torch.exp(z - z.max(-1, keepdim=True).values, out=e[:, : z.shape[-1]])
    return e.view(z.shape[0], buckets, width)


def ideal_bits(weights: torch.Tensor, tokens: np.ndarray, bucket_sums: torch.Tensor | None = None) -> np.ndarray:
    """−log₂ q(token) of each row from the (n, H, K) weights of ``level_weights``: log₂ Σ w − log₂ w_token (Σ w from
    the rows' ``bucket_sums`` (n, H) where given: H sums, not V)."""
    flat = weights.reshape(weights.shape[0], -1)
    picked = flat[torch.arange(flat.shape[0]), torch.from_numpy(np.asarray(tokens, dtype=np.int64))]
    total = flat.sum(-1) if bucket_sums is None else bucket_sums.sum(-1)
    return (torch.log2(total) - torch.log2(picked)).numpy()


def code_bits(freqs: np.ndarray, symbols: np.ndarray) -> np.ndarray:
    """−log₂(f_symbol / M) of each row: the code length the range coder aims at."""
    f = freqs[np.arange(freqs.shape[0]), symbols].astype(np.float64)
    return PRECISION - np.log2(f)
