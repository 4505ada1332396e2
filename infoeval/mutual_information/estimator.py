"""Bipartite mutual information of a text as a model sees it (the L²M paper's direct estimator).

For a block of L tokens split at m = L/2 into a past X = b₁…b_m and a future Y = b_{m+1}…b_L::

    marginal     H(Y)   ≈ Σ_j −log₂ q(y_j | s, y_<j)        inputs  s  y₁ … y_{m−1}        (m tokens)
    conditional  H(Y|X) ≈ Σ_j −log₂ q(y_j | s, X, y_<j)     inputs  s  x₁ … x_m  y₁ … y_{m−1}  (L tokens)
    I(X; Y)      ≈ H(Y) − H(Y|X)                            bits, one number per block

where s is the model's start token (BOS, else EOS). Both sums are cross-entropies of the same observed Y, so
the per-block difference is paired and its mean over blocks has a small standard error. The estimate is what
the model captures: the model's cross-entropies bound the true entropies from above, and the difference is a
lower bound on the text's mutual information in the L²M paper's sense only as far as the model uses its
context as well as it predicts without it (see the README for the assumptions).

Blocks are cut from the text in order without overlap, and the blocks of every length start at the same
places: block k covers text tokens k·S … k·S + L − 1 with S = the longest length (stream positions 1 + k·S …,
the start token being position 0). So every length is measured on the same stretches of text (the lengths are
paired, which the bootstrap of β keeps), and the short lengths are spread over the whole sampled text rather
than crowded at its start. Each batch is reduced at once to per-token NLLs of Y; no (tokens × vocabulary)
tensor outlives its batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from infoeval import engine
from infoeval.errors import DataError, UsageError, spell
from infoeval.input.windows import Window
from infoeval.measure.stats import LN2, iid_mean_se

MODEL = "the model"
DEFAULT_LENGTHS = "16,32,64,128,256,512,1024,2048"
DEFAULT_BLOCKS = 8
DEFAULT_BATCH_TOKENS = 4096
RULE = (
    "block k of length L = text tokens k·S … k·S+L−1, S the longest length (non-overlapping, in text order, the same "
    "starts for every L); X = first L/2, Y = last L/2; H(Y): Y scored after the start token only; H(Y|X): Y scored "
    "after the start token and X; I = H(Y) − H(Y|X) summed over Y's tokens, in bits"
)


def parse_lengths(text: str) -> tuple[int, ...]:
    """'16,32,64' → (16, 32, 64), sorted; every length even and ≥ 2, no repeats."""
    try:
        lengths = [int(p) for p in str(text).split(",") if p.strip()]
    except ValueError:
        raise UsageError(
            f"{spell('lengths')} '{text}' is not a comma-separated list of integers, e.g. {DEFAULT_LENGTHS}"
        ) from None
    bad = [n for n in lengths if n < 2 or n % 2]
    if not lengths or bad:
        raise UsageError(f"{spell('lengths')} '{text}': every length must be an even integer ≥ 2 (split in two halves)")
    if len(set(lengths)) != len(lengths):
        raise UsageError(f"{spell('lengths')} '{text}' repeats a length")
    return tuple(sorted(lengths))


def blocks_per_length(n_tokens: int, lengths: Sequence[int], n_blocks: int) -> dict[int, int]:
    """How many blocks of each length fit in ``n_tokens`` text tokens (at most n_blocks), block k starting at
    k·S with S = max(lengths).

    >>> blocks_per_length(100, [16, 64], 4)  # starts 0 and 64: [0, 16) and [64, 80) fit, [64, 128) does not
    {16: 2, 64: 1}
    """
    stride = max(lengths)
    return {length: 0 if n_tokens < length else min(n_blocks, (n_tokens - length) // stride + 1) for length in lengths}


def cut_blocks(text_ids: torch.Tensor, length: int, count: int, stride: int) -> torch.Tensor:
    """Blocks k = 0 … count−1 of ``length`` tokens starting at k·stride, shape (count, length)."""
    return torch.stack([text_ids[k * stride : k * stride + length] for k in range(count)])


def check_blocks(counts: dict[int, int], n_tokens: int) -> None:
    """Every length needs at least 2 blocks (a standard error needs two)."""
    short = [length for length, n in counts.items() if n < 2]
    if short:
        raise DataError(
            f"{spell('lengths')} {','.join(map(str, short))}: fewer than 2 blocks fit in the {n_tokens:,} text tokens "
            "available; "
            f"use shorter lengths, a longer text or a larger {spell('max_tokens')}"
        )


def check_max_positions(lengths: Sequence[int], max_positions: int | None) -> None:
    """The conditional pass feeds L tokens (start token + X + all of Y but its last token)."""
    if max_positions is not None and max(lengths) > max_positions:
        raise UsageError(
            f"{spell('lengths')} {max(lengths)} exceeds the model's {max_positions} positions "
            "(max_position_embeddings); "
            f"use lengths ≤ {max_positions}"
        )


def block_windows(n_blocks: int, length: int, stride: int) -> tuple[list[Window], list[Window]]:
    """The two passes over blocks k = 0 … n−1 at stream positions 1 + k·stride (the start token at 0), as windows
    whose first input is replaced by the start token:

        marginal     inputs s y₁ … y_{m−1}          stream[k·S + m : k·S + L]   all m logits scored
        conditional  inputs s x₁ … x_m y₁ … y_{m−1}  stream[k·S : k·S + L]        the last m logits scored
    """
    m = length // 2
    marginal = [Window(k, k * stride + m, m, 0, m, True) for k in range(n_blocks)]
    conditional = [Window(k, k * stride, length, m, m, True) for k in range(n_blocks)]
    return marginal, conditional


def _nll_reducer(step: engine.Step) -> dict:
    """−ln q of the targets (B, k) from the batch's logits (B, k, V), in float32, flattened row by row."""
    logits = step.logits[MODEL]
    b, k = step.targets.shape
    nll = F.cross_entropy(logits.reshape(b * k, -1).float(), step.targets.reshape(-1), reduction="none")
    return {"nll": nll.double()}


def score_blocks(
    model,
    blocks: torch.Tensor,
    start_id: int,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    on_batch: Callable[[], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token NLL (nats) of each block's second half, without and with the first half as context.

    ``blocks`` is (N, L) token ids. Returns (marginal, conditional), each (N, L/2) float64: row i, column j is
    −ln q(y_j | s, y_<j) and −ln q(y_j | s, X, y_<j). Blocks go through the model ``batch_tokens // L`` at a time.
    """
    n, length = blocks.shape
    stream = torch.cat([torch.tensor([start_id], dtype=blocks.dtype, device=blocks.device), blocks.reshape(-1)]).cpu()
    per_batch = max(1, batch_tokens // length)
    out = []
    for windows in block_windows(n, length, length):
        batches = engine.plan(windows, per_batch)
        cols = engine.run(
            {MODEL: model}, stream, batches, start_id, _nll_reducer, {"nll": np.float64}, on_forward=on_batch
        )
        out.append(cols["nll"].reshape(n, length // 2))
    return out[0], out[1]


@dataclass(frozen=True)
class LengthSummary:
    length: int
    blocks: int
    marginal_bits: np.ndarray  # (N,) H(Y) estimate per block
    conditional_bits: np.ndarray  # (N,) H(Y|X) estimate per block
    marginal_profile: np.ndarray  # (L/2,) mean bits at each offset of Y, over blocks
    conditional_profile: np.ndarray

    @property
    def mi_bits(self) -> np.ndarray:
        return self.marginal_bits - self.conditional_bits

    def row(self) -> dict:
        """The length's JSON/CSV numbers: I mean ± SE and the per-token view of Y, in bits."""
        m = self.length // 2
        mi, mi_se = iid_mean_se(self.mi_bits)
        hy, hy_se = iid_mean_se(self.marginal_bits / m)
        hyx, hyx_se = iid_mean_se(self.conditional_bits / m)
        return {
            "length": self.length,
            "blocks": self.blocks,
            "mi_bits": mi,
            "mi_bits_se": mi_se,
            "mi_bits_sd": float(self.mi_bits.std(ddof=1)),
            "mi_bits_per_token": mi / m,
            "marginal_bits_per_token": hy,
            "marginal_bits_per_token_se": hy_se,
            "conditional_bits_per_token": hyx,
            "conditional_bits_per_token_se": hyx_se,
        }


def summarize(length: int, marginal_nats: np.ndarray, conditional_nats: np.ndarray) -> LengthSummary:
    """Per-token NLLs (N, L/2) in nats → per-block sums and per-offset means in bits.

    Worked example: L = 4, one block with marginal NLLs (ln 4, ln 2) and conditional (0, ln 2) nats gives
    H(Y) = 3 bits, H(Y|X) = 1 bit, I = 2 bits.
    """
    return LengthSummary(
        length=length,
        blocks=int(marginal_nats.shape[0]),
        marginal_bits=marginal_nats.sum(1) / LN2,
        conditional_bits=conditional_nats.sum(1) / LN2,
        marginal_profile=marginal_nats.mean(0) / LN2,
        conditional_profile=conditional_nats.mean(0) / LN2,
    )


def estimate(
    model,
    text_ids: torch.Tensor,
    start_id: int,
    lengths: Sequence[int],
    n_blocks: int,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    on_batch: Callable[[], None] | None = None,
    on_length: Callable[[int, float], None] | None = None,
) -> list[LengthSummary]:
    """Cut ``text_ids`` (the text's tokens, no start token) into blocks for every length and score them."""
    import time

    counts = blocks_per_length(int(text_ids.shape[0]), lengths, n_blocks)
    check_blocks(counts, int(text_ids.shape[0]))
    out = []
    for length in lengths:
        t0 = time.perf_counter()
        blocks = cut_blocks(text_ids, length, counts[length], max(lengths))  # (N, L)
        out.append(summarize(length, *score_blocks(model, blocks, start_id, batch_tokens, on_batch)))
        if on_length:
            on_length(length, time.perf_counter() - t0)
    return out


def forwards_needed(counts: dict[int, int], batch_tokens: int) -> int:
    """Forward passes ``estimate`` makes (two per batch), for a progress bar."""
    return sum(2 * math.ceil(n / max(1, batch_tokens // length)) for length, n in counts.items())
