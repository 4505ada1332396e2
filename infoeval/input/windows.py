"""Pure windowing: which tokens of a token stream are context and which are scored, each exactly once.

A *stream* is the token ids of the text, optionally preceded by one prefix token (BOS). Target positions are
1 … L−1: token 0 has nothing before it, so it is only ever context. A window feeds ``stream[start : start +
length]`` to the model; the logit at window position j predicts stream token ``start + j + 1`` — the last logit
predicts the token *after* the window, which is known, so a window of ctx inputs can score ctx tokens.

Rolling protocol (``--ctx C --stride S``, S ≤ C), with L = 11, C = 4, S = 4::

    stream    t0  t1  t2  t3  t4  t5  t6  t7  t8  t9  t10
    window 0  [in  in  in  in]                             scores t1 t2 t3 t4   (contexts 1..4 tokens)
    window 1                  [in  in  in  in]             scores t5 t6 t7 t8
    window 2                                  [in  in]     scores t9 t10

With S < C each window starts S tokens after the previous one and scores only the targets not yet scored,
so every scored token sees at least C − S + 1 tokens of context (except at the very start).

llama.cpp protocol (``llama-perplexity``): non-overlapping chunks of C tokens, the last partial chunk dropped,
the first token of each chunk replaced by BOS when the tokenizer adds one, and only the second half scored:
logits C/2 … C−2 predict chunk tokens C/2+1 … C−1 (C − 1 − C/2 tokens per chunk).

lm-eval protocol (lm-evaluation-harness's ``loglikelihood_rolling``: ``get_rolling_token_windows(context_len=1)``
then ``make_disjoint_window``): each document is its own stream ``P d0 d1 …`` (P the prefix token); the first
window scores up to C tokens after P, every later window scores the next up to C tokens and is filled with
earlier tokens of the same document up to C inputs. Document of 9 tokens, C = 4 (stream positions 0 … 9)::

    stream    P   d0  d1  d2  d3  d4  d5  d6  d7  d8
    window 0  [in  in  in  in]                         scores d0 d1 d2 d3   (contexts 1..4 tokens)
    window 1                  [in  in  in  in]         scores d4 d5 d6 d7
    window 2                      [in  in  in  in]     scores d8 only, after 4 tokens of context

Several documents are concatenated (``P a0 a1 P b0 …``); no window crosses into another document.

GPTQ protocol (GPTQ/AWQ's WikiText evaluation): ⌊L / C⌋ non-overlapping windows of C tokens of the stream
(the tokenizer's default special tokens at its start), logits 0 … C−2 scored, the remainder dropped::

    stream    t0  t1  t2  t3  t4  t5  t6  t7  t8  t9
    window 0  [in  in  in  in]                         scores t1 t2 t3
    window 1                  [in  in  in  in]         scores t5 t6 t7   (t8 t9 dropped)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from infoeval.errors import DataError, UsageError, spell

DEFAULT_CTX = 512  # --ctx when not given (a protocol may have its own: input/protocols)


def check_window_options(ctx: int, stride: int | None) -> None:
    """ctx ≥ 2 and 1 ≤ stride ≤ ctx (stride None means ctx)."""
    if ctx < 2:
        raise UsageError(f"{spell('ctx')} {ctx} is too small; it must be at least 2")
    if stride is not None and not 1 <= stride <= ctx:
        raise UsageError(f"{spell('stride')} {stride} is not allowed; it must be between 1 and {spell('ctx')} ({ctx})")


@dataclass(frozen=True)
class Window:
    """Inputs ``stream[start:start+length]``; logits first_scored … first_scored+n_scored−1 are scored."""

    index: int
    start: int
    length: int
    first_scored: int
    n_scored: int
    replace_first_with_bos: bool = False

    @property
    def first_target(self) -> int:
        """Stream position of the first scored token."""
        return self.start + self.first_scored + 1

    @property
    def target_slice(self) -> slice:
        return slice(self.first_target, self.first_target + self.n_scored)

    @property
    def logit_index(self) -> torch.Tensor:
        return torch.arange(self.first_scored, self.first_scored + self.n_scored)


def rolling_windows(n_tokens: int, ctx: int, stride: int | None = None) -> list[Window]:
    """Windows of at most ``ctx`` inputs starting every ``stride`` tokens; targets 1 … n_tokens−1 once each."""
    check_window_options(ctx, stride)
    stride = ctx if stride is None else stride
    if n_tokens < 2:
        raise DataError(f"the text has {n_tokens} token(s); at least 2 are needed to score one")
    windows: list[Window] = []
    next_target = 1
    start = 0
    while next_target < n_tokens:
        end = min(start + ctx, n_tokens - 1)  # inputs start … end−1 predict start+1 … end
        first_target = max(start + 1, next_target)
        windows.append(
            Window(
                index=len(windows),
                start=start,
                length=end - start,
                first_scored=first_target - start - 1,
                n_scored=end - first_target + 1,
            )
        )
        next_target = end + 1
        start += stride
    return windows


def llamacpp_windows(n_tokens: int, ctx: int, add_bos: bool, max_chunks: int | None = None) -> list[Window]:
    """llama-perplexity's chunks: n_tokens // ctx chunks of ctx tokens, second half scored."""
    if ctx < 4:
        raise UsageError(f"{spell('ctx')} {ctx} is too small for the llama.cpp protocol; it must be at least 4")
    if n_tokens < 2 * ctx:
        raise DataError(f"the text has {n_tokens} tokens; the llama.cpp protocol needs at least 2 × ctx = {2 * ctx}")
    n_chunks = n_tokens // ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first = ctx // 2
    return [
        Window(
            index=k,
            start=k * ctx,
            length=ctx,
            first_scored=first,
            n_scored=ctx - 1 - first,
            replace_first_with_bos=add_bos,
        )
        for k in range(n_chunks)
    ]


def lmeval_windows(doc_lengths: Sequence[int], ctx: int) -> list[Window]:
    """lm-eval's rolling windows over concatenated documents; ``doc_lengths[d]`` = 1 (prefix token) + the
    document's tokens (a document of no tokens has length 0: lm-eval makes no window for it)."""
    check_window_options(ctx, None)
    windows: list[Window] = []
    offset = 0
    for length in doc_lengths:
        n = length - 1  # tokens to predict: all of the document's
        if n > 0:
            first = min(ctx, n)
            windows.append(Window(len(windows), offset, first, 0, first))
            predicted = first
            while predicted < n:
                k = min(n - predicted, ctx)
                end = predicted + k  # the window predicts stream tokens end−k+1 … end (stream = P + tokens)
                windows.append(Window(len(windows), offset + end - ctx, ctx, ctx - k, k))
                predicted = end
        offset += max(length, 0)
    if not windows:
        raise DataError("the documents have no tokens; at least one token is needed to score one")
    return windows


def gptq_windows(n_tokens: int, ctx: int, max_windows: int | None = None) -> list[Window]:
    """GPTQ's ⌊n_tokens / ctx⌋ windows of ctx tokens, each scoring its tokens 1 … ctx−1 (at most max_windows)."""
    check_window_options(ctx, None)
    n = n_tokens // ctx
    if n < 1:
        raise DataError(
            f"the text has {n_tokens} tokens; the gptq protocol needs at least one window of {spell('ctx')} {ctx}"
        )
    n = n if max_windows is None else min(n, max_windows)
    return [Window(k, k * ctx, ctx, 0, ctx - 1) for k in range(n)]


def window_inputs(stream: torch.Tensor, window: Window, bos_id: int | None) -> torch.Tensor:
    """The window's input ids, shape (1, length)."""
    ids = stream[window.start : window.start + window.length].clone()
    if window.replace_first_with_bos:
        if bos_id is None:
            raise UsageError("the window protocol replaces the first token by BOS, but the tokenizer has no BOS")
        ids[0] = bos_id
    return ids.unsqueeze(0)  # (1, T)


def window_targets(stream: torch.Tensor, window: Window) -> torch.Tensor:
    """The scored token ids, shape (n_scored,)."""
    return stream[window.target_slice]


def describe(windows: list[Window], n_tokens: int) -> dict:
    """Counts for the report: scored tokens, context-only tokens and the context each scored token had."""
    scored = sum(w.n_scored for w in windows)
    contexts = [c for w in windows for c in range(w.first_scored + 1, w.first_scored + 1 + w.n_scored)]
    return {
        "windows": len(windows),
        "stream_tokens": n_tokens,
        "scored_tokens": scored,
        "context_only_tokens": n_tokens - scored,
        "min_context": min(contexts),
        "mean_context": sum(contexts) / len(contexts),
        "max_context": max(contexts),
    }
