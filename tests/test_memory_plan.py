"""The memory plan's inputs, checked against what the real objects hold: a model's shape from its config (meta
device) against the loaded model, a variant's stored bytes from the layer shapes against the quantized variant,
the dequantization buffers against the ones reserved; and the estimate made without loading any weight."""

from __future__ import annotations

import pytest
import torch

from infoeval.comparison import memory_plan
from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings
from infoeval.models import load_model
from infoeval.models.shapes import model_shape, shape_of_module
from infoeval.quant.apply import quantize_variant
from infoeval.quant.footprint import packed_nbytes, plan_nbytes, scratch_nbytes
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.selection import plan_layers
from infoeval.quant.variant_settings import VariantSettings

SCHEMES = (
    "int8-channel",
    "int4-g128",
    "int4-channel",
    "int4-g64",
    "int4-g32-asym",
    "int8-g64-asym",
    "int3-g32",
    "bf16",
)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def folder(request, tiny_llama_dir, tiny_qwen3_dir):
    return tiny_llama_dir if request.param == "llama" else tiny_qwen3_dir


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_shape_from_the_config_counts_what_the_loaded_model_holds(folder, dtype):
    model = load_model(str(folder), torch.device("cpu"), dtype).model
    shape = model_shape(str(folder), dtype)
    params = {id(p): p for p in model.parameters()}.values()
    assert shape.n_parameters == sum(p.numel() for p in params)
    assert shape.parameter_bytes == sum(p.numel() * p.element_size() for p in params)
    head = model.get_output_embeddings().weight
    assert (shape.vocab, shape.hidden) == tuple(head.shape)
    assert shape.head_tied == (head is model.get_input_embeddings().weight)
    assert shape.head_bytes == head.numel() * head.element_size()
    assert all(p.device.type == "meta" for p in shape.meta.parameters())  # no memory behind it


def test_a_tied_head_counts_once():
    from transformers import LlamaConfig

    from infoeval.models.shapes import shape_of_config

    kw = dict(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    tied, untied = (shape_of_config(LlamaConfig(**kw, tie_word_embeddings=t), torch.float32) for t in (True, False))
    assert untied.n_parameters - tied.n_parameters == 64 * 8
    assert tied.head_tied and not untied.head_tied


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_variants_bytes_from_the_shapes_equal_the_quantized_variants(folder, scheme):
    model = load_model(str(folder), torch.device("cpu"), torch.float32).model
    s = parse_scheme(scheme)
    variant = quantize_variant(model, s)
    negative_zeros = sum(
        w.negative_zeros.numel() * 4 for w in variant.weights.values() if getattr(w, "negative_zeros", None) is not None
    )
    meta = model_shape(str(folder)).meta
    layers = plan_layers(meta)
    plan = [(n, s if sel else None, r) for n, sel, r in layers]
    estimate, held = plan_nbytes(meta, plan, torch.float32), variant.nbytes - negative_zeros
    # the estimate counts each tensor of a layer 64-byte aligned, as storage.gather places it; nbytes does not
    assert 0 <= estimate - held < 3 * 64 * sum(sel for _, sel, _ in layers) or (s.fmt and estimate == held)
    buffers = sum(n * torch.empty((), dtype=key[2]).element_size() for key, n in variant.scratch.items())
    assert scratch_nbytes(meta, s, torch.float32, layers) == buffers


def test_packed_bytes_per_layer_closed_form():
    # (out, in) = (3, 100), int4 groups of 32: 4 groups per row (the last of 4 columns), 150 code bytes
    assert packed_nbytes(parse_scheme("int4-g32"), (3, 100), torch.float32) == 192 + 64
    assert packed_nbytes(parse_scheme("int4-g32-asym"), (3, 100), torch.float32) == 192 + 64 + 64
    assert packed_nbytes(parse_scheme("bf16"), (3, 100), torch.float32) == 600
    assert packed_nbytes(parse_scheme("bf16"), (3, 100), torch.bfloat16) == 0


def test_the_estimate_loads_no_weight_and_adds_its_parts(tiny_llama_dir, monkeypatch):
    import transformers

    def refuse(*a, **k):
        raise AssertionError("a weight was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    model = ModelSettings(model=str(tiny_llama_dir), device="cpu")
    three = memory_plan.estimate_run(model, VariantSettings(), 64)
    one = memory_plan.estimate_run(model, VariantSettings(schemes="int8-channel"), 64)
    assert three.total == sum(three.parts.values()) and three.plan == "lockstep"
    shape = model_shape(str(tiny_llama_dir))
    assert three.parts["weights"] == shape.parameter_bytes
    assert three.parts["logits"] == int(memory_plan.LOGIT_COPIES * 64 * shape.vocab * 4)
    assert 0 < one.parts["variants"] < three.parts["variants"]
    assert three.to_json()["peak_bytes"] == three.total


def test_a_bad_scheme_fails_before_any_shape_is_read(monkeypatch):
    monkeypatch.setattr(memory_plan, "model_shape", lambda *a, **k: pytest.fail("the model was read"))
    with pytest.raises(UsageError, match="int9"):
        memory_plan.estimate_run(ModelSettings(), VariantSettings(schemes="int9-channel"), 64)


def test_a_module_in_memory_has_its_shape(tiny_llama_dir):
    model = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model
    assert shape_of_module(model).parameter_bytes == model_shape(str(tiny_llama_dir)).parameter_bytes


def test_the_worked_examples_in_the_docstrings_hold():
    import doctest

    from infoeval.models import shapes
    from infoeval.quant import footprint

    assert doctest.testmod(shapes).failed == 0 and doctest.testmod(footprint).failed == 0
    assert doctest.testmod(shapes).attempted and doctest.testmod(footprint).attempted


def test_an_unknown_hub_id_offline_is_told_at_once(monkeypatch):
    import time

    from infoeval.errors import ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache and the hub cannot be reached"):
        model_shape("nobody/no-such-model")
    with pytest.raises(ModelLoadError, match="neither an existing file or folder nor a hub id"):
        model_shape("no such model")
    assert time.perf_counter() - t0 < 10  # no retries against an unreachable hub
