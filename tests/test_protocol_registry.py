"""The window-protocol registry (``infoeval.input.protocols``): each registered protocol answers what the rest of
infoeval asks of it, and the rolling protocol's answers equal the window maths they stand for."""

from __future__ import annotations

import doctest

import pytest
import torch

from infoeval.errors import UsageError
from infoeval.input import protocols
from infoeval.input.protocols import base, registered, rolling
from infoeval.input.settings import PROTOCOLS, TextSettings, WindowSettings
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import rolling_windows


def test_every_registered_protocol_is_a_known_name_with_a_one_line_rule():
    assert protocols.REGISTRY and set(protocols.REGISTRY) <= set(PROTOCOLS)
    for name, rules in protocols.REGISTRY.items():
        assert rules.name == name and isinstance(rules, base.WindowRules)
        assert rules.summary and "\n" not in rules.summary and len(rules.summary) <= 120
    assert registered("rolling") is protocols.REGISTRY["rolling"] and registered("no such") is None


def test_rolling_answers():
    r = registered("rolling")
    assert r.takes_stride and r.anytime and r.default_ctx == 512
    assert doctest.testmod(rolling).failed == 0


def _stream(n: int, prefix: int | None = 7) -> TokenStream:
    return TokenStream(torch.arange(n), torch.ones(n, dtype=torch.int64).numpy(), prefix)


@pytest.mark.parametrize("max_tokens, stride", [(None, None), (20, None), (20, 3), (5, 2)])
def test_rolling_windows_are_the_window_maths_on_the_budget(max_tokens, stride):
    text, window = TextSettings(max_tokens=max_tokens), WindowSettings(ctx=8, stride=stride)
    stream, windows, rule = registered("rolling").windows(_stream(40), text, window)
    n = 40 if max_tokens is None else max_tokens + 1
    assert len(stream) == n and windows == rolling_windows(n, 8, stride)
    assert sum(w.n_scored for w in windows) == n - 1 and rule.startswith("rolling: windows of at most 8 tokens")


def test_rolling_tokens_needed_counts_the_scored_targets_and_the_first_token():
    r, window = registered("rolling"), WindowSettings(ctx=8)
    assert r.tokens_needed(TextSettings(max_tokens=None), window, True) is None
    assert r.tokens_needed(TextSettings(max_tokens=100), window, True) == 100  # the prefix token is the context
    assert r.tokens_needed(TextSettings(max_tokens=100), window, False) == 101  # the text's first token is


def test_the_generic_prefix_policies():
    assert base.resolve_prefix("auto", 1, 2)[0] == 1 and base.resolve_prefix("auto", None, 2)[0] == 2
    assert base.resolve_prefix("auto", None, None)[0] is None and base.resolve_prefix("none", 1, 2)[0] is None
    assert base.resolve_prefix("eos", 1, 2)[0] == 2
    with pytest.raises(UsageError, match="--prefix bos: the tokenizer has no BOS token"):
        base.resolve_prefix("bos", None, 2)
