"""The tiny offline test models load through the Auto classes, are non-trivial and are deterministic."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import VOCAB_SIZE, build_tiny_llama, build_tiny_qwen3
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

MODELS = ["tiny_llama_dir", "tiny_qwen3_dir"]


@pytest.fixture(scope="module")
def loaded(request, tiny_llama_dir, tiny_qwen3_dir):
    cache = {}

    def get(name):
        if name not in cache:
            folder = {"tiny_llama_dir": tiny_llama_dir, "tiny_qwen3_dir": tiny_qwen3_dir}[name]
            cache[name] = (AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder))
        return cache[name]

    return get


def _ids(tok, text, n=256):
    return torch.tensor([tok(text, add_special_tokens=False, verbose=False).input_ids[:n]])


@pytest.mark.parametrize("name", MODELS)
def test_folder_holds_safetensors_and_fast_tokenizer(name, request):
    folder = request.getfixturevalue(name)
    assert (folder / "model.safetensors").is_file()
    assert (folder / "tokenizer.json").is_file()
    assert (folder / "config.json").is_file()
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["vocab_size"] == VOCAB_SIZE and cfg["tie_word_embeddings"] is False


@pytest.mark.parametrize("name", MODELS)
def test_tokenizer_is_fast_and_round_trips(name, loaded, tiny_text):
    _, tok = loaded(name)
    assert tok.is_fast
    assert len(tok) == VOCAB_SIZE
    enc = tok(tiny_text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    assert tok.decode(enc.input_ids) == tiny_text
    offsets = enc["offset_mapping"]
    assert len(offsets) == len(enc.input_ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(tiny_text)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))  # contiguous, no trimming
    assert "".join(tiny_text[s:e] for s, e in offsets) == tiny_text
    assert len(tiny_text) / len(enc.input_ids) > 1.8  # the BPE merges do compress
    unicode = "naïve café — ∑ 日本 🙂"
    assert tok.decode(tok(unicode, add_special_tokens=False).input_ids) == unicode


def test_llama_tokenizer_special_tokens(loaded):
    _, tok = loaded("tiny_llama_dir")
    assert (tok.bos_token, tok.bos_token_id) == ("<bos>", 0)
    assert (tok.eos_token, tok.eos_token_id) == ("<eos>", 1)
    assert (tok.pad_token, tok.pad_token_id) == ("<pad>", 2)
    with_special = tok("hello world").input_ids
    assert with_special[0] == 0 and with_special[1:] == tok("hello world", add_special_tokens=False).input_ids


def test_qwen3_tokenizer_has_no_bos(loaded):
    _, tok = loaded("tiny_qwen3_dir")
    assert tok.bos_token is None and tok.bos_token_id is None
    assert (tok.eos_token, tok.eos_token_id) == ("<|endoftext|>", 0)
    assert tok.pad_token_id == 0
    assert tok("hello world").input_ids == tok("hello world", add_special_tokens=False).input_ids


@pytest.mark.parametrize("name", MODELS)
def test_model_logits_finite_and_shaped(name, loaded, tiny_text):
    model, tok = loaded(name)
    ids = _ids(tok, tiny_text, 64)
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], VOCAB_SIZE)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", MODELS)
def test_model_is_not_uniform_and_beats_uniform(name, loaded, tiny_text):
    model, tok = loaded(name)
    ids = _ids(tok, tiny_text)
    with torch.no_grad():
        lp = model(ids).logits.log_softmax(-1)[0]
    log_v = math.log(VOCAB_SIZE)
    entropy = -(lp.exp() * lp).sum(-1).mean().item()
    nll = -lp[:-1].gather(-1, ids[0, 1:, None]).mean().item()
    assert entropy < 0.9 * log_v
    assert nll < log_v  # held-out text is predicted better than by a uniform guess


def test_qwen3_shapes_leave_partial_groups(tiny_qwen3_dir, tiny_llama_dir):
    q = AutoConfig.from_pretrained(tiny_qwen3_dir)
    assert (q.model_type, q.hidden_size, q.intermediate_size, q.head_dim) == ("qwen3", 96, 160, 24)
    assert q.hidden_size % 64 and q.intermediate_size % 64 and (q.num_attention_heads * q.head_dim) % 64
    ll = AutoConfig.from_pretrained(tiny_llama_dir)
    assert (ll.model_type, ll.hidden_size, ll.intermediate_size) == ("llama", 64, 128)


@pytest.mark.parametrize("builder", [build_tiny_llama, build_tiny_qwen3], ids=["llama", "qwen3"])
def test_same_seed_same_weights(builder, tmp_path):
    a, b, c = builder(tmp_path / "a", seed=0), builder(tmp_path / "b", seed=0), builder(tmp_path / "c", seed=1)
    wa, wb, wc = (load_file(str(d / "model.safetensors")) for d in (a, b, c))
    assert wa.keys() == wb.keys() == wc.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_not_causal_folder_is_refused(not_causal_dir):
    assert AutoConfig.from_pretrained(not_causal_dir).model_type == "distilbert"
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForCausalLM.from_pretrained(not_causal_dir)
