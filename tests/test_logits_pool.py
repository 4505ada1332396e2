"""Logits in reused buffers (logits_pool.py): the same bits as nn.Linear, a buffer handed out again only once
nobody holds it, and engine runs whose columns are those of fresh tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from infoeval import engine
from infoeval.engine import logits_pool
from infoeval.engine.logits_pool import LogitsPool, pooled_head
from infoeval.input.windows import rolling_windows


class _Headed(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.head = torch.nn.Linear(24, 97, bias=bias)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(97, 24, generator=g))
            if bias:
                self.head.bias.copy_(torch.randn(97, generator=g))

    def get_output_embeddings(self):
        return self.head


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", ["2d", "3d", "3d-strided", "batch"])
def test_pooled_head_gives_the_bits_of_linear(bias, shape, dtype):
    g = torch.Generator().manual_seed(1)
    x = {"2d": torch.randn(13, 24, generator=g), "3d": torch.randn(1, 13, 24, generator=g),
         "3d-strided": torch.randn(1, 40, 24, generator=g).to(dtype)[:, ::3], "batch": torch.randn(3, 13, 24, generator=g)}[shape]  # fmt: skip
    m = _Headed(bias).to(dtype)
    x = x.to(dtype)  # a no-op on the strided view, already of this dtype
    expected = torch.nn.functional.linear(x, m.head.weight, m.head.bias)
    pool = LogitsPool()
    with torch.inference_mode(), pooled_head(m, pool):
        assert "forward" in vars(m.head)
        got = m.head(x)
        again = m.head(x)
    assert "forward" not in vars(m.head)  # restored
    assert got.shape == expected.shape and torch.equal(got, expected) and torch.equal(again, expected)
    assert x.is_contiguous() == (shape != "3d-strided")
    pooled = not (bias and shape == "3d-strided")  # at::linear adds a bias after the product there: left alone
    assert (got.data_ptr() in {buf.data_ptr() for buf, _ in pool._buffers}) == pooled
    assert got.data_ptr() != again.data_ptr() or not pooled  # got was still held: another buffer


def test_a_held_buffer_is_never_handed_out_again():
    pool = LogitsPool(limit=2)
    a = pool.take(10, torch.float32, torch.device("cpu"))
    a.fill_(1.0)
    b = pool.take(10, torch.float32, torch.device("cpu"))  # a is held: a second buffer
    assert a.data_ptr() != b.data_ptr()
    view = a[3:5]
    del a
    assert pool.take(10, torch.float32, torch.device("cpu")) is None  # a's storage is still viewed; limit reached
    del view, b
    c = pool.take(12, torch.float32, torch.device("cpu"))  # both free again; the first grows to 12
    d = pool.take(10, torch.float32, torch.device("cpu"))
    assert c.numel() == 12 and d.numel() == 10 and c.data_ptr() != d.data_ptr() and pool.reused >= 1


def test_no_pool_for_heads_it_cannot_serve():
    m = _Headed(False)
    m.head.register_forward_hook(lambda *a: None)
    with pooled_head(m, LogitsPool()):
        assert "forward" not in vars(m.head)
    with pooled_head(torch.nn.Linear(2, 2), LogitsPool()):  # no get_output_embeddings: nothing to do
        pass


def _keeps_first_role(step: engine.Step) -> dict:
    """Holds the reference's logits while it asks for the other roles (as quantize-compare's reducer does)."""
    ref = step.logits["ref"]
    kept = ref.clone()
    out = {}
    for role in ("a", "b"):
        lq = torch.log_softmax(step.logits[role].float(), -1)
        out[f"nll_{role}"] = -lq.gather(-1, step.targets[..., None])[..., 0].reshape(-1)
        assert torch.equal(ref, kept)  # the reference's buffer was not written over
    lp = torch.log_softmax(ref.float(), -1)
    out["nll_ref"] = -lp.gather(-1, step.targets[..., None])[..., 0].reshape(-1)
    return out


def test_engine_columns_equal_those_of_fresh_logits(tiny_llama_dir, monkeypatch):
    models = {}
    for k, role in enumerate(("ref", "a", "b")):
        m = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(1e-3 * k * torch.randn(p.shape, generator=torch.Generator().manual_seed(k)))
        models[role] = m
    stream = torch.randint(0, models["ref"].config.vocab_size, (90,), generator=torch.Generator().manual_seed(0))
    batches = engine.plan(rolling_windows(len(stream), 32))
    takes = []
    real = LogitsPool.take
    monkeypatch.setattr(LogitsPool, "take", lambda self, *a: takes.append(1) or real(self, *a))
    pooled = engine.run(models, stream, batches, None, _keeps_first_role)
    assert len(takes) == 3 * len(batches)
    monkeypatch.setattr(logits_pool, "_use_count", None)  # no pool: fresh tensors
    fresh = engine.run(models, stream, batches, None, _keeps_first_role)
    assert len(takes) == 3 * len(batches)
    for key in ("nll_ref", "nll_a", "nll_b"):
        np.testing.assert_array_equal(pooled[key], fresh[key])

