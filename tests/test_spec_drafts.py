"""Building drafts/students: truncated layers (shared weights, exact at full depth), fake-quantized copies
(swapped in, equal to an in-place quantized deep copy), other models (tokenizer checked)."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import build_tiny_llama

from infoeval.engine import new_cache
from infoeval.errors import SchemeError, UsageError
from infoeval.models import load_model
from infoeval.quant.apply import fake_quantize_
from infoeval.quant.schemes import parse_scheme
from infoeval.speculative.drafts import DraftSettings, build_draft, n_layers, truncated

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    return load_model(str(tiny_llama_dir), CPU, torch.float32)


@pytest.fixture(scope="module")
def ids(llama, tiny_text):
    return torch.tensor([llama.tokenizer(tiny_text[:400]).input_ids])


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("which", ["llama", "qwen3"])
def test_full_depth_reproduces_the_target_exactly(which, tiny_llama_dir, tiny_qwen3_dir, tiny_text):
    lm = load_model(str(tiny_llama_dir if which == "llama" else tiny_qwen3_dir), CPU, torch.float32)
    x = torch.tensor([lm.tokenizer(tiny_text[:300]).input_ids])
    depth = n_layers(lm.model)
    assert depth == 2
    draft = build_draft(lm, DraftSettings(layers=depth), CPU, torch.float32)
    assert torch.equal(_logits(draft, x), _logits(lm.model, x))


def test_truncated_shares_weights_and_leaves_the_target_alone(llama, ids):
    before = _logits(llama.model, ids)
    d = truncated(llama.model, 1)
    assert d is not llama.model and d.model is not llama.model.model
    assert len(d.model.layers) == 1 and len(llama.model.model.layers) == 2
    assert d.model.layers[0] is llama.model.model.layers[0]  # the same module objects: no weight copied
    assert d.lm_head is llama.model.lm_head and d.model.norm is llama.model.model.norm
    assert d.model.embed_tokens is llama.model.model.embed_tokens
    target_ptrs = {p.data_ptr() for p in llama.model.parameters()}
    assert all(p.data_ptr() in target_ptrs for p in d.parameters())
    assert d.config.num_hidden_layers == 1 and llama.model.config.num_hidden_layers == 2
    assert len(new_cache(d).layers) == 1 and len(new_cache(llama.model).layers) == 2  # its own, shorter KV cache
    one = _logits(d, ids)
    assert not torch.allclose(one, before)
    assert torch.equal(_logits(llama.model, ids), before)


def test_truncated_equals_running_the_first_layers_by_hand(llama, ids):
    """Embeddings → block 0 → final norm → head, computed here directly from the target's modules."""
    m = llama.model
    with torch.inference_mode():
        out = m.model(input_ids=ids, output_hidden_states=True, use_cache=False)
        h1 = out.hidden_states[1]  # after block 0
        want = m.lm_head(m.model.norm(h1))
    assert torch.allclose(_logits(truncated(m, 1), ids), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "n,message",
    [
        (0, "draft_layers 0 is not allowed; give a number of decoder layers ≥ 1"),
        (-1, "draft_layers -1 is not allowed; give a number of decoder layers ≥ 1"),
        (3, "draft_layers 3 is out of range; the model has 2 decoder layers, allow 1 … 2"),
    ],
)
def test_layers_out_of_range(llama, n, message):
    with pytest.raises(UsageError) as e:
        build_draft(llama, DraftSettings(layers=n), CPU, torch.float32)
    assert str(e.value) == message


def test_student_layers_message(llama):
    with pytest.raises(UsageError, match="student_layers 5"):
        build_draft(llama, DraftSettings(layers=5, role="student"), CPU, torch.float32)


def test_scheme_draft_equals_a_quantized_deep_copy(llama, ids):
    before = _logits(llama.model, ids)
    weights = {k: v.clone() for k, v in llama.model.state_dict().items()}
    draft = build_draft(llama, DraftSettings(scheme="int4-g32"), CPU, torch.float32)
    ref = copy.deepcopy(llama.model)
    fake_quantize_(ref, parse_scheme("int4-g32"))
    assert torch.equal(_logits(draft, ids), _logits(ref, ids))
    assert not torch.equal(_logits(draft, ids), before)  # the draft really runs quantized weights …
    assert draft.model is llama.model  # no copy: the quantized weights are swapped in per call
    assert draft.info["quantization"]["layers_quantized"] == 14
    # … and swaps them out again: after building and calling the draft, the target is what it was before
    assert torch.equal(_logits(llama.model, ids), before)
    after = llama.model.state_dict()
    assert after.keys() == weights.keys() and all(torch.equal(after[k], w) for k, w in weights.items())


def test_other_model_with_the_same_tokenizer(llama, ids, tmp_path):
    other_dir = build_tiny_llama(tmp_path / "other", seed=1)
    draft = build_draft(llama, DraftSettings(model=str(other_dir)), CPU, torch.float32)
    assert draft.info["kind"] == "model" and draft.model is not llama.model
    assert _logits(draft, ids).shape == _logits(llama.model, ids).shape


def test_other_model_with_another_tokenizer_is_refused(llama, tiny_qwen3_dir):
    with pytest.raises(UsageError, match="tokenizer"):
        build_draft(llama, DraftSettings(model=str(tiny_qwen3_dir)), CPU, torch.float32)


@pytest.mark.parametrize(
    "ds,match",
    [
        (DraftSettings(), "exactly one"),
        (DraftSettings(scheme="int4-g32", layers=1), "exactly one"),
        (DraftSettings(model="x", role="student"), None),
    ],
)
def test_settings_check(ds, match):
    if match is None:
        ds.check()  # one option: fine (the model is only looked for later)
        assert ds.kind == "model"
        return
    with pytest.raises(UsageError, match=match):
        ds.check()


def test_bad_scheme_fails_before_loading():
    with pytest.raises(SchemeError):
        DraftSettings(scheme="int4-chanel").check()
