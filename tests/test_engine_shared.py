"""Shared batches: the decoder blocks run once per batch of windows and role, the head and the reducer window by
window. Checked against the window-by-window run, bit for bit, on real (tiny) transformers models with quantized
variants, with a quantized head, with windows that score different positions, and through the fallback for a
model whose forward does more after its head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoeval import engine
from infoeval.comparison import compare as compare_pipeline
from infoeval.engine import roles
from infoeval.engine.roles import linears_row_by_row
from infoeval.errors import RuntimeFailure
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import Window, llamacpp_windows, rolling_windows
from infoeval.models import load_model
from infoeval.quant import apply
from infoeval.quant.schemes import parse_scheme

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


def test_plan_shared_groups_runs_of_one_length_within_the_token_budget():
    ws = [Window(i, 4 * i, 4, 0 if i == 0 else 2, 4 if i == 0 else 2) for i in range(5)] + [Window(5, 20, 3, 0, 3)]
    batches = engine.plan_shared(ws, 12)
    assert [[w.index for w in b.windows] for b in batches] == [[0, 1, 2], [3, 4], [5]]
    assert [b.shared for b in batches] == [True, True, False]
    assert [b.rows for b in batches] == [slice(0, 8), slice(8, 12), slice(12, 15)]  # 4 + 2 + 2, 2 + 2, 3
    assert [b.rows for b in engine.each_window(batches[0])] == [slice(0, 4), slice(4, 6), slice(6, 8)]
    assert all(not b.shared for b in engine.plan_shared(ws, 4))  # one window per batch: plain batches


def _stream(model, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


def _both(model, stream, windows, variants, prefix_id, tokens):
    """The lockstep columns from shared batches and from window-by-window batches."""
    reducer = compare_pipeline.lockstep_reducer([v.name for v in variants])
    roles = {"reference": model, **{v.name: apply.WithVariant(model, v) for v in variants}}
    shared = engine.run(roles, stream, engine.plan_shared(windows, tokens), prefix_id, reducer)
    plain = engine.run(roles, stream, engine.plan(windows), prefix_id, reducer)
    return shared, plain


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen3_dir"])
def test_shared_batches_give_the_window_by_window_bits(fixture, request):
    model = load_model(str(request.getfixturevalue(fixture)), CPU, torch.float32).model
    stream = _stream(model, 200)
    variants = [
        apply.quantize_variant(model, parse_scheme("int4-g32")),
        apply.quantize_variant(model, parse_scheme("int8-channel"), include=["lm_head"]),
    ]
    for windows, prefix in [(rolling_windows(len(stream), 48, 32), None), (llamacpp_windows(len(stream), 48, True), 0)]:
        shared, plain = _both(model, stream, windows, variants, prefix, 3 * 48)
        _assert_same(shared, plain)
    assert engine.splits(model, stream[None, :8])


def test_a_shared_batch_dequantizes_each_layer_once(tiny_llama_dir, monkeypatch):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    stream = _stream(model, 161, seed=1)
    variant = apply.quantize_variant(model, parse_scheme("int4-g32"))
    calls = []
    original = apply.DequantBuffers.dequantize
    monkeypatch.setattr(
        apply.DequantBuffers, "dequantize", lambda self, packed: calls.append(packed) or original(self, packed)
    )
    forwards = []
    windows = rolling_windows(len(stream), 40)  # 4 windows of 40 inputs
    reducer = compare_pipeline.lockstep_reducer([variant.name])
    roles = {"reference": model, variant.name: apply.WithVariant(model, variant)}
    engine.run(roles, stream, engine.plan_shared(windows, 160), None, reducer, on_forward=lambda: forwards.append(1))
    assert len(calls) == len(variant.weights)  # once per layer for the 4 windows, not 4 times
    assert len(forwards) == len(windows) * len(roles)


def test_a_shared_batch_gives_the_heaps_free_pages_back_between_the_blocks_and_the_heads(tiny_llama_dir, monkeypatch):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    stream = _stream(model, 161, seed=2)
    variant = apply.quantize_variant(model, parse_scheme("int4-g32"))
    events = []
    monkeypatch.setattr(engine.heap, "release_freed_memory", lambda: events.append("trim") or True)
    monkeypatch.setattr(
        apply.DequantBuffers,
        "dequantize",
        lambda self, packed, f=apply.DequantBuffers.dequantize: events.append("blocks") or f(self, packed),
    )
    reducer = compare_pipeline.lockstep_reducer([variant.name])
    roles = {"reference": model, variant.name: apply.WithVariant(model, variant)}
    windows = rolling_windows(len(stream), 40)  # 4 windows of 40 inputs: 2 shared batches of 2
    engine.run(roles, stream, engine.plan_shared(windows, 80), None, reducer, on_forward=lambda: events.append("head"))
    compact = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
    assert compact == ["blocks", "trim", "head", "blocks", "trim", "head"], compact


class _Scaled(torch.nn.Module):
    """A causal LM whose forward soft-caps the head's logits, c·tanh(z/c), as Gemma 2 does."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def set_output_embeddings(self, head):
        self.inner.set_output_embeddings(head)

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        out.logits = 3.0 * torch.tanh(out.logits / 3.0)
        return out


def test_a_model_that_does_more_after_its_head_goes_window_by_window(tiny_llama_dir):
    model = _Scaled(load_model(str(tiny_llama_dir), CPU, torch.float32).model)
    stream = _stream(model, 120, seed=2)
    assert not engine.splits(model, stream[None, :8])
    shared, plain = _both(model, stream, rolling_windows(len(stream), 40), [], None, 120)
    _assert_same(shared, plain)
    lp = torch.log_softmax(model(input_ids=stream[None, :40], use_cache=False).logits[0].float(), -1)
    np.testing.assert_allclose(shared["nll"][:40], -lp.gather(-1, stream[1:41, None])[:, 0].detach().numpy(), rtol=1e-6)


def _biased_llama() -> torch.nn.Module:
    """A 2-layer Llama whose attention and MLP Linear layers have (non-zero) biases: the addmm path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0, 0.1)
    return model


def test_shared_batches_of_a_model_with_biases_give_the_window_by_window_bits():
    model = _biased_llama()
    stream = _stream(model, 130, seed=4)
    variants = [apply.quantize_variant(model, parse_scheme("int4-g16-asym"))]
    shared, plain = _both(model, stream, rolling_windows(len(stream), 32), variants, None, 96)
    _assert_same(shared, plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_row_by_row_linears_are_the_bits_of_one_sequence_at_a_time(dtype, bias):
    """Each sequence of a batch is the very product nn.Linear makes for that sequence alone, for contiguous
    inputs (one output, written sequence by sequence) and strided ones (the concatenating fallback)."""
    torch.manual_seed(5)
    lin = torch.nn.Linear(40, 24, bias=bias).to(dtype)
    holder = torch.nn.Sequential(lin)
    x = torch.randn(3, 17, 40, dtype=dtype)
    strided = torch.randn(3, 40, 17, dtype=dtype).transpose(1, 2)
    with torch.no_grad():
        alone = [
            [torch.nn.functional.linear(t[k : k + 1], lin.weight, lin.bias) for k in range(3)] for t in (x, strided)
        ]
        with linears_row_by_row(holder):
            batched = [lin(x), lin(strided), lin(x[:1])]
            assert torch.equal(lin(x), batched[0])  # the second batch of a shape: after the check
    for got, want in zip(batched, alone):
        assert got.dtype == dtype and got.shape == (3, 17, 24)
        assert torch.equal(got, torch.cat(want))
    assert torch.equal(batched[2], alone[0][0])
    assert "forward" not in vars(lin)  # the plain forward is back after the block


def _emulated_blas(monkeypatch, blocks_the_batch_differently: bool) -> list[int]:
    """``roles``' linear replaced by a BLAS whose one product of a batch gives exactly the per-sequence bits, or
    one whose batched products are off by about an ulp (blocked differently); returns the batch size of each call."""
    monkeypatch.setattr(roles, "_SAME_BITS", {})
    calls = []

    def linear(x, w, b=None):
        calls.append(x.shape[0] if x.dim() == 3 else 1)
        if x.dim() < 3 or x.shape[0] == 1:
            return torch.nn.functional.linear(x, w, b)
        out = torch.cat([torch.nn.functional.linear(x[k : k + 1], w, b) for k in range(x.shape[0])])
        return out * (1 + 2**-22) if blocks_the_batch_differently else out

    monkeypatch.setattr(roles, "_linear", linear)
    return calls


@pytest.mark.parametrize("differs", [False, True])
def test_a_batch_goes_as_one_product_only_where_that_product_gave_the_bits_of_one_sequence_at_a_time(
    monkeypatch, differs
):
    """The first batch of a shape goes sequence by sequence and is checked against one product of the batch; later
    batches of that shape go as one product where it gave the very bits, and sequence by sequence where it did not."""
    calls = _emulated_blas(monkeypatch, differs)
    torch.manual_seed(7)
    w, b = torch.randn(24, 40), torch.randn(24)
    inputs = [torch.randn(3, 17, 40) for _ in range(3)]
    for x in inputs:
        got = roles.batched_linear(x, w, b)
        assert torch.equal(got, torch.cat([torch.nn.functional.linear(x[k : k + 1], w, b) for k in range(3)]))
    # one check on the first batch; then one product per batch where it agreed, none where it did not
    assert calls == ([3] if differs else [3, 3, 3])
    assert list(roles._SAME_BITS.values()) == [not differs]


def test_the_check_is_made_again_for_another_shape_or_thread_count(monkeypatch):
    calls = _emulated_blas(monkeypatch, False)
    w = torch.randn(24, 40)
    threads = torch.get_num_threads()
    for shape, n in [
        ((3, 17, 40), threads),
        ((3, 17, 40), threads),
        ((2, 17, 40), threads),
        ((3, 17, 40), threads + 1),
    ]:
        torch.set_num_threads(n)
        try:
            roles.batched_linear(torch.randn(shape), w, None)
        finally:
            torch.set_num_threads(threads)
    assert calls == [3, 3, 2, 3] and len(roles._SAME_BITS) == 3  # checked, used, checked (a new shape), checked
    assert roles.batched_linear(torch.randn(1, 5, 40), w, None).shape == (1, 5, 24) and calls[-1] == 1  # one sequence


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("poisoned", [(0, "reference"), (1, "int4-g32")])
def test_the_lockstep_reducer_fails_on_non_finite_logits_in_place_of_the_engine(
    tiny_llama_dir, bad, shared, poisoned, monkeypatch
):
    """quantize-compare leaves the finiteness check to its reducer (no pass over the logits): one bad logit of
    one model in one window fails with the engine's own line, on both paths, for NaN, +inf and −inf."""
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    stream = _stream(model, 120, seed=6)
    windows = rolling_windows(len(stream), 40)
    variants = [apply.quantize_variant(model, parse_scheme("int4-g32"))]
    window, role = poisoned
    target = window * 2 + (role != "reference")  # the heads run window by window: reference, then the variant
    calls = []

    def poison(module, args, out):
        if out.shape[-2] != 40:  # engine.splits's probe, not a window
            return out
        calls.append(1)
        if len(calls) - 1 == target:
            out = out.clone()
            out[0, 7, 3] = bad
        return out

    monkeypatch.setattr(compare_pipeline, "SHARED_TOKENS", 120 if shared else 0)
    model.get_output_embeddings().register_forward_hook(poison)  # a fresh model per test
    with pytest.raises(RuntimeFailure, match=f"^{role} produced non-finite logits in window {window}$"):
        compare_pipeline.run_lockstep(
            model, TokenStream(stream, np.ones(len(stream), np.int64), None), windows, variants
        )
    assert len(calls) == target + 1  # it failed on that very window
