"""The 16-bit schemes bf16 and fp16: the reference's weights rounded to that dtype and nothing else, checked
against casting the weights by hand (logits bit for bit), with their exact bits and their one-line refusals."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch

from infoeval.errors import SchemeError
from infoeval.models import load_model
from infoeval.quant import apply
from infoeval.quant.bits import average_bits, layer_bits
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.variant_settings import parse_schemes

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.parametrize("name", ["bf16", "fp16", " BF16 ", "Fp16"])
def test_parse_16_bit_schemes(name):
    s = parse_scheme(name)
    key = name.strip().lower()
    assert (s.name, s.bits, s.group_size, s.fmt) == (key, 16, None, key)
    assert s.as_dict()["format"] == {"bf16": "bfloat16", "fp16": "float16"}[key]
    assert s.as_dict()["bits"] == 16


@pytest.mark.parametrize("text", ["bf16-g128", "fp16-channel", "bf16-asym", "fp16-int4"])
def test_16_bit_schemes_take_no_options(text):
    with pytest.raises(SchemeError) as e:
        parse_scheme(text)
    msg = str(e.value)
    assert "\n" not in msg and "allowed: bf16, fp16 alone" in msg and text in msg


def test_16_bit_bits_are_16_per_weight_exactly():
    for name in DTYPES:
        s = parse_scheme(name)
        assert layer_bits(s, (3, 576)) == 3 * 576 * 16
        assert average_bits([(s, (3, 576)), (parse_scheme("int4-g128"), (3, 576))]) == Fraction(
            16 * 3 * 576 + layer_bits(parse_scheme("int4-g128"), (3, 576)), 2 * 3 * 576
        )
    assert [s.name for s in parse_schemes("bf16,int8-channel,fp16")] == ["bf16", "int8-channel", "fp16"]
    with pytest.raises(SchemeError, match="listed twice"):
        parse_schemes("bf16,BF16")


def _cast_by_hand(model, names, dtype):
    """A copy of ``model`` whose Linear layers ``names`` hold their weights cast to ``dtype`` and back."""
    twin = copy.deepcopy(model)
    modules = dict(twin.named_modules())
    with torch.no_grad():
        for n in names:
            modules[n].weight.copy_(modules[n].weight.to(dtype).to(modules[n].weight.dtype))
    return twin


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_16_bit_variant_equals_casting_the_weights(tiny_llama_dir, name):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    (variant,) = apply.build_variants(model, [parse_scheme(name)])
    quantized = [r.name for r in variant.layers if r.quantized]
    assert quantized and all(variant.weights[n].dtype == DTYPES[name] for n in quantized)
    assert variant.nbytes == 2 * sum(variant.weights[n].numel() for n in quantized)
    assert variant.bits_per_weight() == 16.0
    assert all(r.sqnr_db is not None and r.sqnr_db > 40 for r in variant.layers if r.quantized)
    ids = torch.randint(3, model.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        got = apply.WithVariant(model, variant)(input_ids=ids).logits
        want = _cast_by_hand(model, quantized, DTYPES[name])(input_ids=ids).logits
        plain = model(input_ids=ids).logits
    assert torch.equal(got, want)
    assert not torch.equal(got, plain)  # the cast did change something
    # the reference keeps its own weights after the variant ran
    assert torch.equal(model(input_ids=ids).logits, plain)


def test_16_bit_fake_quantize_in_place(tiny_llama_dir):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    report = apply.fake_quantize_(model, parse_scheme("fp16"))
    modules = dict(model.named_modules())
    for r in report.layers:
        if r.quantized:
            w = modules[r.name].weight
            assert w.dtype == torch.float32 and torch.equal(w, before[r.name].half().float())


def test_bf16_scheme_in_a_bf16_model_is_the_reference(tiny_llama_dir):
    """bf16 of a model already in bfloat16 stores the weights themselves: the variant is the reference, bit for bit."""
    model = load_model(str(tiny_llama_dir), CPU, torch.bfloat16).model
    (variant,) = apply.build_variants(model, [parse_scheme("bf16")])
    modules = dict(model.named_modules())
    assert all(
        variant.weights[r.name].data_ptr() == modules[r.name].weight.data_ptr() for r in variant.layers if r.quantized
    )
    ids = torch.randint(3, model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        assert torch.equal(apply.WithVariant(model, variant)(input_ids=ids).logits, model(input_ids=ids).logits)
