"""The K most likely tokens of each row of logits, with their probabilities, for the positions output and the
report page (what the model wanted to say instead).

``torch.topk`` over a 49k vocabulary costs ~15 ms per 512 rows on a CPU, a few % of a window's forward pass per
model. The K largest logits lie in the K blocks (of ``BLOCK`` tokens) with the largest block maxima: a block
holding one of the K largest has a maximum at least the K-th largest value, and at most K blocks can have
a maximum above it. So one pass of block maxima (an ``amax``, ~2.5 ms), a top-K over the blocks and a top-K over
the K·BLOCK logits they hold give the same values, at a fifth of the cost. Ties between equal logits may come out
in another order than ``torch.topk``'s (both are valid).

Probabilities: p_i = exp(z_i − logsumexp(z)). For the reference, logsumexp(z) = max + log_sum (``RefStats``); for
a variant, ``compare`` has max log q = −log_sum and the largest logit is the first of the top K, so
log q_i = z_i − z_(1) + max log q.
"""

from __future__ import annotations

import torch

BLOCK = 256


def top_k_logits(z: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, ids) of the k largest logits of every row of ``z`` (n, V), largest first, values as float32.

    >>> v, i = top_k_logits(torch.tensor([[0.0, 3.0, 1.0, 2.0]]), 2)
    >>> v.tolist(), i.tolist()
    ([[3.0, 2.0]], [[1, 3]])
    """
    n, v = z.shape
    k = min(k, v)
    full = v // BLOCK * BLOCK
    maxima = [z[:, :full].unflatten(1, (-1, BLOCK)).amax(-1)] if full else []
    if full < v:
        maxima.append(z[:, full:].amax(-1, keepdim=True))
    maxima = torch.cat(maxima, 1).float()
    blocks = maxima.topk(min(k, maxima.shape[1]), -1).indices  # (n, kb)
    raw = (blocks[:, :, None] * BLOCK + torch.arange(BLOCK, device=z.device)).flatten(1)  # (n, kb·BLOCK)
    inside = raw < v  # the last block may be short: its missing ids are masked
    ids = raw.clamp(max=v - 1)
    vals = z.gather(-1, ids).float().masked_fill_(~inside, float("-inf"))
    top = vals.topk(k, -1)
    return top.values, ids.gather(-1, top.indices)


def top_k_probs(
    z: torch.Tensor, k: int, *, log_normalizer: torch.Tensor | None = None, max_log_prob: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int32, probabilities float32) of the k most likely tokens of every row, given each row's
    logsumexp(z) (n,), or its largest log-probability (then logsumexp = largest logit − max log p).

    >>> ids, p = top_k_probs(torch.tensor([[0.0, 0.0]]), 1, max_log_prob=torch.tensor([-0.6931472]))
    >>> ids.tolist(), [round(x, 4) for x in p[0].tolist()]
    ([[0]], [0.5])
    """
    vals, ids = top_k_logits(z, k)
    if log_normalizer is None:
        log_normalizer = vals[:, 0] - max_log_prob.float()
    return ids.to(torch.int32), torch.exp(vals - log_normalizer[:, None].float())
