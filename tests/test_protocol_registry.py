"""The window-protocol registry (``infoeval.input.protocols``): each registered protocol answers what the rest of
infoeval asks of it, and the rolling protocol's answers equal the window maths they stand for."""

from __future__ import annotations

import doctest

import pytest
import torch

from infoeval.errors import UsageError
from infoeval.input import protocols
from infoeval.input.protocols import base, registered, rolling
from infoeval.input.settings import DEFAULT_PROTOCOL, TextSettings, WindowSettings, default_ctx
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import rolling_windows


def test_every_registered_protocol_is_a_known_name_with_a_one_line_rule():
    assert list(protocols.REGISTRY) == ["rolling", "llama.cpp", "lm-eval", "gptq"]
    for name, rules in protocols.REGISTRY.items():
        assert rules.name == name and isinstance(rules, base.WindowRules)
        assert rules.summary and "\n" not in rules.summary and len(rules.summary) <= 120
        assert rules.cuts_itself or not rules.reads_documents  # only ``cut`` receives the documents
    assert [default_ctx(name) for name in protocols.REGISTRY] == [512, 512, 512, 2048]
    with pytest.raises(UsageError, match="unknown protocol 'x'; allowed: rolling, llama.cpp, lm-eval, gptq"):
        WindowSettings(protocol="x")
    with pytest.raises(UsageError, match=r"^stride cannot be set with protocol gptq \(only rolling windows take"):
        WindowSettings(ctx=8, stride=4, protocol="gptq")
    assert registered("rolling") is protocols.REGISTRY["rolling"]
    assert WindowSettings().protocol == DEFAULT_PROTOCOL == next(iter(protocols.REGISTRY)) == "rolling"


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
    with pytest.raises(UsageError, match="prefix bos: the tokenizer has no BOS token"):
        base.resolve_prefix("bos", None, 2)


def test_llamacpp_answers_and_cuts_llama_perplexitys_chunks():
    from infoeval.input.protocols import llamacpp
    from infoeval.input.windows import llamacpp_windows

    r = registered("llama.cpp")
    assert r.anytime and not r.takes_stride and doctest.testmod(llamacpp).failed == 0
    window = WindowSettings(ctx=8, protocol="llama.cpp")
    stream, windows, rule = r.windows(_stream(40), TextSettings(max_tokens=None), window)
    assert len(stream) == 40 and windows == llamacpp_windows(40, 8, True) and len(windows) == 5
    assert r.windows(_stream(40), TextSettings(max_tokens=9), window)[1] == llamacpp_windows(40, 8, True, 3)
    with pytest.raises(UsageError, match="max_tokens 2 is fewer than the 3 tokens one llama.cpp chunk scores"):
        r.windows(_stream(40), TextSettings(max_tokens=2), window)
    # a budget asks for whole chunks, two at least (llama-perplexity refuses fewer)
    assert r.tokens_needed(TextSettings(max_tokens=3), window, True) == 2 * 8 - 1
    assert r.tokens_needed(TextSettings(max_tokens=30), window, False) == 10 * 8
    assert "one trailing newline stripped" in rule


class _Tok:
    def __init__(self, bos, eos, add_bos):
        self.bos_id, self.eos_id, self.add_bos_token = bos, eos, add_bos


class _Loaded:
    def __init__(self, bos=1, eos=2, add_bos=True, gguf_add_bos=None):
        self.info = type("Info", (), {"tokenizer": _Tok(bos, eos, add_bos), "gguf_add_bos": gguf_add_bos})()


def test_llamacpp_prefix_follows_the_gguf_then_the_tokenizer():
    r = registered("llama.cpp")
    assert r.prefix("auto", _Loaded(add_bos=True)) == (1, "BOS (tokenizer add_bos_token)")
    assert r.prefix("auto", _Loaded(add_bos=True, gguf_add_bos=False)) == (
        None,
        "no BOS (GGUF tokenizer.ggml.add_bos_token)",
    )
    assert r.prefix("none", _Loaded())[0] is None and r.prefix("bos", _Loaded(add_bos=False))[0] == 1
    with pytest.raises(UsageError, match="prefix eos is not part of the llama.cpp protocol"):
        r.prefix("eos", _Loaded())
    with pytest.raises(UsageError, match="the tokenizer has no BOS token"):
        r.prefix("bos", _Loaded(bos=None))
    assert registered("rolling").prefix("auto", _Loaded(bos=None))[0] == 2  # the generic policy: EOS without a BOS


def test_until_accepts_the_anytime_protocols_only():
    from infoeval.comparison.until import check_protocol

    for name in ("rolling", "llama.cpp"):
        check_protocol(name)
    with pytest.raises(UsageError, match="until_se works with protocol rolling or llama.cpp, not gptq"):
        check_protocol("gptq")


def test_lmeval_and_gptq_cut_the_text_themselves():
    lm, gptq = registered("lm-eval"), registered("gptq")
    assert lm.cuts_itself and lm.reads_documents and not lm.anytime and lm.default_ctx == 512
    assert gptq.cuts_itself and not gptq.reads_documents and not gptq.anytime and gptq.default_ctx == 2048
    assert not registered("rolling").cuts_itself and not registered("llama.cpp").reads_documents
    assert gptq.tokenized_whole(None) is True


def test_the_architecture_pages_example_protocol_works():
    """docs/architecture.md shows how to add a protocol; its example runs and scores each target at most once."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = re.search(r"\*\*Adding a window protocol\*\*.*?```python\n(.*?)```", page, re.S).group(1)
    space: dict = {}
    exec(compile(code, "architecture.md", "exec"), space)
    halves = space["Halves"]()
    assert isinstance(halves, base.WindowRules) and halves.name == "halves"
    stream, windows, rule = halves.windows(_stream(40), TextSettings(max_tokens=None), WindowSettings(ctx=8))
    targets = [w.start + w.first_scored + 1 + i for w in windows for i in range(w.n_scored)]
    assert targets == list(range(5, 5 + len(targets))) and targets[-1] <= 39  # the last halves, each once
    assert all(w.n_scored == 4 and w.length == 8 for w in windows) and rule.startswith("halves:")


def test_with_flag_names_the_protocols_an_error_allows():
    assert protocols.with_flag("anytime") == ["rolling", "llama.cpp"]
    assert protocols.with_flag("takes_stride") == ["rolling"]
    assert protocols.with_flag("reads_documents") == ["lm-eval"]
    assert protocols.with_flag("cuts_itself") == ["lm-eval", "gptq"]
    assert protocols.with_flag("llamacpp_positions") == ["llama.cpp"]


def test_the_protocols_with_figures_answer_them_from_the_nll_columns():
    """lm-eval's figures per document and GPTQ's per window, against brute force on a hand-made layout."""
    import math

    import numpy as np

    from infoeval.input.protocols.lmeval import DocumentLayout
    from infoeval.measure.protocol_metrics import protocol_figures

    nll = np.array([0.5, 1.0, 1.5, 2.0, 0.25, 0.75])
    identity = {"position": np.array([1, 2, 3, 5, 6, 7]), "window": np.array([0, 0, 0, 1, 1, 1])}
    docs = DocumentLayout(np.array([0, 4]), np.array([2, 3]), np.array([10, 20]), True, 2)
    lm = registered("lm-eval").figures(nll, identity, docs)
    ll = -(0.5 + 1.0 + 1.5) - (2.0 + 0.25 + 0.75)
    assert lm["loglikelihood"] == pytest.approx(ll) and lm["documents"] == 2
    assert lm["word_perplexity"] == pytest.approx(math.exp(-ll / 5))
    assert lm["bits_per_byte"] == pytest.approx(-ll / 30 / math.log(2))
    gptq = registered("gptq").figures(nll, identity, None)
    assert gptq["ppl"] == pytest.approx(math.exp((1.0 + 1.0) / 2)) and gptq["windows"] == 2
    for name in ("rolling", "llama.cpp"):
        rules = registered(name)
        assert rules.figure_table is None and protocol_figures(rules, None, None, identity, {"m": nll}) is None
        with pytest.raises(NotImplementedError):
            rules.figures(nll, identity, None)
    block = protocol_figures(registered("gptq"), {"complete": False}, None, identity, {"a": nll, "b": nll * 2})
    assert block["protocol"] == "gptq" and block["complete"] is False and set(block["figures"]) == {"a", "b"}
    keys = {key for _, key, _ in registered("lm-eval").figure_table.columns}
    assert keys <= set(lm) and {key for _, key, _ in registered("gptq").figure_table.columns} <= set(gptq)


def test_the_figure_table_is_laid_out_by_the_protocol(capsys):
    from rich.console import Console

    from infoeval.comparison.tables import print_protocol_figures

    figures = {"ppl": 12.3456789, "windows": 3, "nll_mean": 2.5}
    result = {"protocol_metrics": {"protocol": "gptq", "complete": False, "figures": {"reference": figures}}}
    console = Console(width=200, record=True)
    print_protocol_figures(console, result)
    text = console.export_text()
    assert "gptq figures" in text and "PPL" in text and "12.3457" in text and "NOT the whole protocol" in text
    print_protocol_figures(console, {"protocol_metrics": None})
    assert console.export_text() == ""
