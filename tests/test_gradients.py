"""The one backward pass (``engine/gradients.py``): each weight's gradient against torch's own autograd of the whole
window's logits, whatever the head's chunks (one row, a few, all), with a head tied to the embeddings; each handed
over and let go; the model left as it was; the sensitivity proxy's sums the same chunked or not (the same draws)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from infoeval.engine import gradients
from infoeval.quant import codes
from infoeval.quant.schemes import parse_scheme
from infoeval.sensitivities.proxy import fisher_sums

pytestmark = pytest.mark.usefixtures("one_thread")
NAMES = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "lm_head"]


def _model(folder, tied: bool):
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    if tied:  # the head is the embeddings' tensor: its gradient sums the head's and the embeddings'
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def _expected(model, inputs, loss, names):
    modules = dict(model.named_modules())
    weights = [modules[n].weight for n in names]
    for w in weights:
        w.requires_grad_(True)
    out = torch.autograd.grad(loss(model(input_ids=inputs).logits[0], None)[0], weights)
    for w in weights:
        w.requires_grad_(False)
    return out


def _close(got, want, what=""):
    """Equal but for float32 rounding: a one-row chunk's product is a matrix-vector one, rounded otherwise."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), msg=what or None)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 10_000])
def test_weight_grads_hands_over_each_gradient_and_leaves_the_model_as_it_was(tiny_llama_dir, tied, rows):
    model = _model(tiny_llama_dir, tied)
    modules = dict(model.named_modules())
    inputs = torch.arange(1, 25)[None]

    def loss(z, drawn):
        return torch.log_softmax(z.float(), -1)[:, 7].sum() + (z.float() ** 2).mean(-1).sum(), None

    expected = _expected(model, inputs, loss, NAMES)
    marker = torch.ones_like(modules["lm_head"].weight)
    modules["lm_head"].weight.grad = marker  # a .grad of the caller's own: kept
    got, alive = {}, []
    flags = [p.requires_grad for p in model.parameters()]

    def each(name, g):
        got[name] = g.clone()
        alive.append(sum(p.grad is not None for p in model.parameters()))

    gradients.weight_grads(model, inputs, inputs.shape[1], loss, NAMES, each, rows=rows)
    assert sorted(got) == sorted(NAMES)
    for n, e in zip(NAMES, expected):
        _close(got[n], e, n)
    assert max(alive) == 1  # the one being handed over: none kept
    assert modules["lm_head"].weight.grad.data_ptr() == marker.data_ptr()
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters() if p is not modules["lm_head"].weight)


def test_only_the_head_wanted(tiny_qwen3_dir):
    """No block weight asked for: the blocks need no gradient, the head's still adds up over its chunks."""
    model = _model(tiny_qwen3_dir, tied=False)
    inputs = torch.arange(3, 40)[None]

    def loss(z, drawn):
        return -torch.log_softmax(z.float(), -1)[:, 2].sum(), None

    (expected,) = _expected(model, inputs, loss, ["lm_head"])
    got = {}
    gradients.weight_grads(
        model, inputs, inputs.shape[1], loss, ["lm_head"], lambda n, g: got.update({n: g.clone()}), 4
    )
    _close(got["lm_head"], expected)


def test_a_model_whose_logits_are_not_its_heads_takes_the_whole_window(tiny_llama_dir, monkeypatch):
    model = _model(tiny_llama_dir, tied=False)
    inputs = torch.arange(1, 25)[None]
    seen = []

    def loss(z, drawn):
        seen.append(z.shape[0])
        return torch.log_softmax(z.float(), -1)[:, 7].sum(), None

    (expected,) = _expected(model, inputs, loss, ["lm_head"])
    seen.clear()
    monkeypatch.setattr(gradients, "splits", lambda model, probe: False)
    got = {}
    gradients.weight_grads(
        model, inputs, inputs.shape[1], loss, ["lm_head"], lambda n, g: got.update({n: g.clone()}), 4
    )
    assert seen == [24]
    _close(got["lm_head"], expected)


@pytest.mark.parametrize("tied", [False, True])
def test_the_proxys_sums_are_the_same_chunked_or_whole(tiny_llama_dir, tied, monkeypatch):
    """The sampled NLL's draws are made row after row in the forward pass and given back in the backward pass: every
    chunking gives the sums of the whole window's logits (a different draw would move them by far more)."""
    from infoeval.input.windows import rolling_windows

    model = _model(tiny_llama_dir, tied)
    ids = torch.randint(1, model.config.vocab_size, (200,), generator=torch.Generator().manual_seed(0))
    windows = rolling_windows(200, 64, 32)
    modules = dict(model.named_modules())
    packed = {
        s: {n: codes.encode(modules[n].weight.data, parse_scheme(s)) for n in NAMES}
        for s in ("int4-g32", "int8-channel")
    }
    whole = fisher_sums(model, ids, windows, None, packed, seed=1, rows=10_000)
    for rows in (3, 16):
        chunked = fisher_sums(model, ids, windows, None, packed, seed=1, rows=rows)
        for s in packed:
            for n in NAMES:
                assert chunked[s][n] == pytest.approx(whole[s][n], rel=1e-5), (rows, s, n)
    monkeypatch.setattr(gradients, "splits", lambda model, probe: False)
    plain = fisher_sums(model, ids, windows, None, packed, seed=1)
    assert all(plain[s][n] == pytest.approx(whole[s][n], rel=1e-5) for s in packed for n in NAMES)
    other = fisher_sums(model, ids, windows, None, packed, seed=2, rows=3)
    assert any(other[s][n] != pytest.approx(whole[s][n], rel=1e-3) for s in packed for n in NAMES)
