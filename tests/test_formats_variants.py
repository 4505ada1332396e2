"""Shipped formats as variants: a model's layers in mxfp4, nvfp4, q4_0 or fp8 compute with the weights
``rounding.fake_quantize`` gives (stored and lazy alike), with their exact bits per weight; the one-line refusals."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from infoeval.errors import SchemeError
from infoeval.models import load_model
from infoeval.quant import apply
from infoeval.quant.bits import average_bits
from infoeval.quant.formats.rounding import fake_quantize
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.variant_settings import parse_schemes

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "q4_0", "fp8", "nf4-g64", "mxfp6-rceil", "mxfp6-e3m2", "mxfp8"])
def test_a_format_variant_computes_with_its_fake_quantized_weights(tiny_llama_dir, name):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    fmt = parse_scheme(name)
    stored, lazy = apply.build_variants(model, [fmt]) + apply.build_variants(model, [fmt], lazy=True)
    modules = dict(model.named_modules())
    quantized = [r.name for r in stored.layers if r.quantized]
    assert quantized
    for n in quantized:
        want = fake_quantize(modules[n].weight.data, fmt)
        assert torch.equal(stored.weights[n].materialize(), want) and torch.equal(lazy.weights[n].materialize(), want)
    shapes = [(fmt, tuple(modules[n].weight.shape)) for n in quantized]
    assert stored.bits_per_weight() == float(average_bits(shapes))
    ids = torch.randint(3, model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        a = apply.WithVariant(model, stored)(input_ids=ids).logits
        b = apply.WithVariant(model, lazy)(input_ids=ids).logits
        plain = model(input_ids=ids).logits
    assert torch.equal(a, b) and not torch.equal(a, plain)
    assert torch.equal(model(input_ids=ids).logits, plain)  # the reference keeps its own weights


def test_exact_bits_per_weight():
    assert parse_scheme("mxfp4").layer_bits((4, 64)) == 4 * 64 * 4 + 8 * 8
    assert Fraction(parse_scheme("q4_0").layer_bits((1, 64)), 64) == Fraction(9, 2)
    assert Fraction(parse_scheme("q8_0").layer_bits((1, 64)), 64) == Fraction(17, 2)
    assert parse_scheme("nvfp4").layer_bits((16, 16)) == 256 * 4 + 16 * 8 + 32
    assert parse_scheme("fp8-b128").layer_bits((128, 128)) == 128 * 128 * 8 + 32


def test_formats_and_integers_in_one_list_and_the_unknown_name():
    assert [s.name for s in parse_schemes("int4-g128, MXFP4, nvfp4@torchao")] == ["int4-g128", "mxfp4", "nvfp4@torchao"]
    with pytest.raises(SchemeError, match="did you mean .nvfp4."):
        parse_scheme("nvfp3")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_weight_is_refused_naming_the_layer(bad):
    from infoeval.errors import DataError
    from infoeval.quant.formats.rounding import check_layer

    w = torch.randn(8, 64)
    check_layer(parse_scheme("mxfp4"), w, "model.layers.0.mlp.up_proj")  # finite: no error
    w[3, 5] = bad
    with pytest.raises(DataError, match=r"^layer model\.layers\.0\.mlp\.up_proj holds an inf or a NaN weight; mxfp4"):
        check_layer(parse_scheme("mxfp4"), w, "model.layers.0.mlp.up_proj")
