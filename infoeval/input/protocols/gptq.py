"""The gptq protocol's token stream: the GPTQ string tokenized once with the tokenizer's default special tokens
(``tokenizer(text)``), windows from ``windows.gptq_windows``.

Its figure (GPTQ's ``llama_eval``, AutoAWQ's ``evaluate_perplexity``): ``ppl`` = exp(mean over windows of each
window's mean NLL), which equals exp(mean NLL) since every window scores ctx − 1 tokens.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from infoeval.errors import UsageError, spell
from infoeval.input.documents import gptq_text
from infoeval.input.protocols.base import Cut, FigureTable, WindowRules
from infoeval.input.tokens import TokenStream, default_special_tokens, text_tokens
from infoeval.input.windows import gptq_windows


def gptq_specials(policy: str, tokenizer, bos: int | None, eos: int | None) -> tuple[list[int], list[int], str]:
    """The special ids around the GPTQ string: the tokenizer's defaults (``--prefix auto``), BOS, EOS or none."""
    if policy == "auto":
        front, back = default_special_tokens(tokenizer)
        return (
            front,
            back,
            f"the tokenizer's default special tokens ({front or 'none'} before, {back or 'none'} after the text)",
        )
    if policy == "none":
        return [], [], "none (--prefix none)"
    tid = bos if policy == "bos" else eos
    if tid is None:
        raise UsageError(f"{spell('prefix')} {policy}: the tokenizer has no {policy.upper()} token; use auto or none")
    return [tid], [], f"{policy.upper()} once at the start (--prefix {policy})"


def gptq_cut(
    text: str, tokenizer, policy: str, bos: int | None, eos: int | None, ctx: int, max_tokens: int | None
) -> Cut:
    """The string tokenized once, ⌊N / ctx⌋ windows of ctx tokens (at most ⌊max_tokens / (ctx − 1)⌋, at least one)."""
    front, back, desc = gptq_specials(policy, tokenizer, bos, eos)
    ids, nbytes = text_tokens(text, tokenizer, front, back)
    available = len(ids) // ctx
    windows = gptq_windows(len(ids), ctx, None if max_tokens is None else max(1, max_tokens // (ctx - 1)))
    used = len(windows) * ctx
    stream = TokenStream(torch.from_numpy(ids[:used]), nbytes[:used], front[0] if front else None)
    rule = (
        f"gptq: the text tokenized once, {available} non-overlapping windows of {ctx} tokens (the remainder, "
        f"{len(ids) - available * ctx} tokens, dropped), tokens 1…{ctx - 1} of each window scored; PPL = exp(mean "
        f"over windows of each window's mean NLL)"
    )
    summary = {
        "windows_available": available,
        "windows_scored": len(windows),
        "complete": len(windows) == available,
        "special_tokens": {"before": front, "after": back},
    }
    return Cut(stream, windows, front[0] if front else None, desc, rule, len(ids), summary)


def gptq_figures(nll: np.ndarray, window: np.ndarray) -> dict:
    """GPTQ's PPL: exp of the mean over windows of each window's mean NLL."""
    _, inverse = np.unique(window, return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(nll, np.float64))
    means = sums / np.bincount(inverse)
    return {"ppl": math.exp(float(means.mean())), "windows": int(means.size), "nll_mean": float(means.mean())}


class Gptq(WindowRules):
    name = "gptq"
    summary = "the GPTQ papers' evaluation: the text tokenized once, non-overlapping windows of ctx tokens"
    default_ctx = 2048  # the GPTQ/AWQ papers' sequence length
    figure_table = FigureTable(
        "gptq figures",
        "GPTQ/AWQ: exp(mean over windows of each window's mean NLL)",
        (("PPL", "ppl", 4), ("windows", "windows", 4)),
    )
    cuts_itself = True

    def text(self, text):
        return gptq_text(text)

    def cut(self, text, docs, loaded, text_settings, window_settings) -> Cut:
        info = loaded.info.tokenizer
        return gptq_cut(
            text.text,
            loaded.tokenizer,
            window_settings.prefix,
            info.bos_id,
            info.eos_id,
            window_settings.ctx,
            text_settings.max_tokens,
        )

    def tokenized_whole(self, cut: Cut) -> bool:
        return True  # the string is tokenized whole, then cut to the budget

    def figures(self, nll, identity, documents) -> dict:
        return gptq_figures(nll, identity["window"])
