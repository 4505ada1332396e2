"""The rolling protocol: windows of at most ``ctx`` tokens every ``stride`` tokens over one stream, each scoring the
targets no earlier window scored (the default).

    stream s0 … s7 (s0: the prefix token, or the text's first token: context only), ctx 4, stride 2:
    window 0: inputs s0 s1 s2 s3  → scores s1 s2 s3 s4
    window 1: inputs s2 s3 s4 s5  → scores s5 s6 (s3, s4 were scored: context only)
    window 2: inputs s4 s5 s6     → scores s7

    >>> [(w.start, w.length, w.first_scored, w.n_scored) for w in rolling_windows(8, 4, 2)]
    [(0, 4, 0, 4), (2, 4, 2, 2), (4, 3, 2, 1)]

``--max-tokens N`` keeps the first N scored targets (the stream cut to N + 1 tokens). Any window can be evaluated
alone, so ``--until-se`` and ``--sequential`` visit them in any order.
"""

from __future__ import annotations

from infoeval.input.protocols.base import WindowRules
from infoeval.input.tokens import TokenStream, truncate
from infoeval.input.windows import Window, rolling_windows


class Rolling(WindowRules):
    name = "rolling"
    summary = "windows of at most ctx tokens every stride tokens; each scores the targets not scored before"
    takes_stride = True
    anytime = True

    def tokens_needed(self, text_settings, window_settings, has_prefix: bool) -> int | None:
        if text_settings.max_tokens is None:
            return None
        return text_settings.max_tokens + 1 - has_prefix  # scored targets + the first token, which is context only

    def windows(self, stream: TokenStream, text_settings, window_settings) -> tuple[TokenStream, list[Window], str]:
        if text_settings.max_tokens is not None:
            stream = truncate(stream, text_settings.max_tokens + 1)
        windows = rolling_windows(len(stream), window_settings.ctx, window_settings.stride)
        rule = (
            f"rolling: windows of at most {window_settings.ctx} tokens every "
            f"{window_settings.stride or window_settings.ctx} tokens; each window scores the "
            "targets not scored before (the last logit predicts the token after the window); stream token 0 "
            "is context only"
        )
        return stream, windows, rule
