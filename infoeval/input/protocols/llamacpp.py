"""The llama.cpp protocol: llama-perplexity's chunks, so that its PPL and KL figures are llama.cpp's own.

The text (one trailing newline stripped, as llama-perplexity reads it) is tokenized once; ⌊N / ctx⌋
non-overlapping chunks of ctx tokens (the last partial chunk dropped; a text needs two chunks at least); the
first token of each chunk is replaced by BOS when BOS is added; each chunk scores its second half, tokens
ctx/2 + 1 … ctx − 1 (predicted from positions ctx/2 … ctx − 2):

    ctx 8, one chunk:  [BOS] t1 t2 t3 | t4 t5 t6 t7   → scores t5 t6 t7 (first_scored 4, n_scored 3)

    >>> [(w.start, w.length, w.first_scored, w.n_scored) for w in llamacpp_windows(17, 8, True)]
    [(0, 8, 4, 3), (8, 8, 4, 3)]

``--max-tokens N`` keeps the first ⌊N / scored-per-chunk⌋ chunks. Chunks are independent, so ``--until-se`` and
``--sequential`` visit them in any order.
"""

from __future__ import annotations

from infoeval.errors import UsageError, spell
from infoeval.input.protocols.base import WindowRules
from infoeval.input.text import Text, strip_one_trailing_newline
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import Window, llamacpp_windows


def _per_chunk(ctx: int) -> int:
    """Targets one chunk scores: ctx − 1 − ⌊ctx / 2⌋."""
    return ctx - 1 - ctx // 2


class LlamaCpp(WindowRules):
    name = "llama.cpp"
    summary = "llama-perplexity's chunks of ctx tokens, BOS first when added, each scoring its second half"
    anytime = True
    llamacpp_positions = True

    def text(self, text: Text) -> Text:
        return strip_one_trailing_newline(text)

    def prefix(self, policy: str, loaded) -> tuple[int | None, str]:
        """BOS or none, as llama.cpp decides it: the GGUF's add_bos_token (else the tokenizer's) for auto."""
        tok = loaded.info.tokenizer
        if policy == "eos":
            raise UsageError(f"{spell('prefix')} eos is not part of the llama.cpp protocol; use auto, bos or none")
        if policy == "auto":
            gguf = loaded.info.gguf_add_bos
            add = tok.add_bos_token if gguf is None else gguf
            rule = "GGUF tokenizer.ggml.add_bos_token" if gguf is not None else "tokenizer add_bos_token"
        else:
            add, rule = policy == "bos", f"{spell('prefix')} {policy}"
        if add and tok.bos_id is None:
            raise UsageError(f"{spell('prefix')} bos: the tokenizer has no BOS token; use {spell('prefix')} none")
        return (tok.bos_id if add else None), f"{'BOS' if add else 'no BOS'} ({rule})"

    def tokens_needed(self, text_settings, window_settings, has_prefix: bool) -> int | None:
        if text_settings.max_tokens is None:
            return None
        chunks = max(2, text_settings.max_tokens // _per_chunk(window_settings.ctx))  # llama.cpp needs two chunks
        return chunks * window_settings.ctx - has_prefix

    def windows(self, stream: TokenStream, text_settings, window_settings) -> tuple[TokenStream, list[Window], str]:
        ctx, max_chunks = window_settings.ctx, None
        if text_settings.max_tokens is not None:
            max_chunks = text_settings.max_tokens // _per_chunk(ctx)
            if max_chunks < 1:
                raise UsageError(
                    f"{spell('max_tokens')} {text_settings.max_tokens} is fewer than the {_per_chunk(ctx)} tokens one "
                    "llama.cpp chunk scores"
                )
        windows = llamacpp_windows(len(stream), ctx, stream.prefix_id is not None, max_chunks)
        rule = (
            f"llama.cpp: {len(windows)} non-overlapping chunks of {ctx} tokens (last partial chunk dropped), "
            "first token of each chunk replaced by BOS when BOS is added, tokens "
            f"{ctx // 2 + 1}…{ctx - 1} of each chunk scored; one trailing newline stripped from the text"
        )
        return stream, windows, rule
