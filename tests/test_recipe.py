"""Bits-per-weight accounting, recipe files (parse, validate, write, apply), mixed variants and the exports of a
mix (llama.cpp tensor types, compressed-tensors config_groups)."""

from __future__ import annotations

import math
import re
import sys
from fractions import Fraction

import numpy as np
import pytest
import tomllib
import torch

from infoeval.errors import UsageError
from infoeval.mixing import export
from infoeval.quant import codes
from infoeval.quant.apply import quantize_variant, recipe_variant
from infoeval.quant.bits import average_bits, bits_per_weight, layer_bits, packed_bits
from infoeval.quant.recipe import Recipe, parse_recipe, read_recipe, recipe_toml, write_recipe
from infoeval.quant.schemes import parse_scheme

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------ bits accounting
@pytest.mark.parametrize(
    "name,in_f,expected",
    [
        ("int4-g128", 1536, Fraction(4) + Fraction(16, 128)),
        ("int4-g128", 576, Fraction(4) + Fraction(5 * 16, 576)),  # 4 full groups and one of 64, each with a scale
        ("int4-g128-asym", 1024, Fraction(4) + Fraction(16 + 4, 128)),
        ("int8-channel", 576, Fraction(8) + Fraction(16, 576)),
        ("int3-g64-asym", 100, Fraction(3) + Fraction(2 * (16 + 3), 100)),
        ("int2-g256", 64, Fraction(2) + Fraction(16, 64)),  # one group shorter than N per row
    ],
)
def test_bits_per_weight_closed_form(name, in_f, expected):
    assert bits_per_weight(parse_scheme(name), in_f) == expected


def test_layer_bits_counts_every_row():
    s = parse_scheme("int4-g128")
    assert layer_bits(s, (3, 576)) == 3 * (576 * 4 + 5 * 16)
    assert average_bits([(s, (3, 576)), (parse_scheme("int8-channel"), (2, 100))]) == Fraction(
        3 * (576 * 4 + 80) + 2 * (800 + 16), 3 * 576 + 200
    )


@pytest.mark.parametrize(
    "name", ["int4-g32", "int4-g128", "int4-channel", "int4-g64-asym", "int8-channel", "int8-g128-asym", "int4-g100"]
)
def test_bits_equal_the_packed_codes_where_codes_fill_their_storage(name):
    w = torch.randn(6, 576, generator=torch.Generator().manual_seed(0))
    s = parse_scheme(name)
    pw = codes.encode(w, s)
    assert packed_bits(pw) == layer_bits(s, tuple(w.shape))
    assert pw.scale.numel() == 6 * math.ceil(576 / (s.group_size or 576))  # one scale per counted group


@pytest.mark.parametrize(
    "name,storage", [("int3-g128", 4), ("int2-channel", 4), ("int5-g64", 8), ("int6-g128-asym", 8)]
)
def test_bits_of_narrower_codes_count_their_width_not_their_storage(name, storage):
    w = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    s = parse_scheme(name)
    # the stored zero points count b bits either way; only the codes' storage differs
    assert packed_bits(codes.encode(w, s)) - layer_bits(s, (4, 256)) == w.numel() * (storage - s.bits)


# ------------------------------------------------------------------------------------------ recipe files
def _recipe(**kw) -> Recipe:
    units = (
        ("model.layers.*.mlp.down_proj", parse_scheme("int8-channel")),
        ("model.layers.0.*", parse_scheme("int5-g128")),
    )
    return Recipe(
        kw.get("units", units),
        kw.get("default", parse_scheme("int4-g128")),
        kw.get("metadata", {"budget": 4.25, "by": "type"}),
        kw.get("name", "r"),
    )


def test_recipe_round_trip(tmp_path):
    r = _recipe()
    path = tmp_path / "r.toml"
    write_recipe(path, r, "a comment\nover two lines")
    back = read_recipe(path)
    assert back == r
    assert parse_recipe(tomllib.loads(recipe_toml(r)), name="r") == r
    assert [p.name for p in tmp_path.iterdir()] == ["r.toml"]  # no temporary file left


@pytest.mark.parametrize(
    "text,message",
    [
        ('[units]\n"model.layers.*" = "int9-g128"\n', "9 bits is not supported"),
        ('[units]\n"model.layers.*" = "fp4"\n', "unknown quantization scheme"),
        ('[units]\n"model.layers.*" = 4\n', "must be a string"),
        ('[recipe]\ndefault = "int4-g128"\n[extra]\nx = 1\n', "unknown table or key 'extra'"),
        ("[recipe]\nbudget = 4\n", "unknown key 'budget' in [recipe]"),
        ("[metadata]\nx = 1\n", "names no unit and no default"),
        ('[units]\n" " = "int4-g128"\n', "a unit name is empty"),
        ("units = 3\n", "[units] must be a table"),
    ],
)
def test_bad_recipe_text_is_a_usage_error(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(message)):
        read_recipe(path)


def test_missing_or_invalid_recipe_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        read_recipe(tmp_path / "none.toml")
    (tmp_path / "x.toml").write_text("[units\n", encoding="utf-8")
    with pytest.raises(UsageError, match="not valid TOML"):
        read_recipe(tmp_path / "x.toml")


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()


def _same_codes(a, b) -> bool:
    if a.keys() != b.keys():
        return False
    for name in a:
        x, y = a[name], b[name]
        for f in ("codes", "scale", "zero", "negative_zeros"):
            u, v = getattr(x, f), getattr(y, f)
            if (u is None) != (v is None) or (u is not None and not torch.equal(u, v)):
                return False
    return True


@pytest.mark.parametrize(
    "units,default",
    [((), "int4-g32"), ((("model.layers.*", "int4-g32"),), None), ((("*proj", "int4-g32"),), "int4-g32")],
)
def test_one_scheme_recipe_is_the_plain_scheme_bit_for_bit(llama, units, default):
    s = parse_scheme("int4-g32")
    plain = quantize_variant(llama, s)
    mixed = recipe_variant(
        llama,
        Recipe(tuple((p, parse_scheme(x)) for p, x in units), parse_scheme(default) if default else None, {}, "one"),
    )
    assert _same_codes(plain.weights, mixed.weights)
    assert [r.quantized for r in plain.layers] == [r.quantized for r in mixed.layers]
    assert mixed.name == "one" and mixed.summary()["bits_per_weight"] == plain.summary()["bits_per_weight"]


def test_recipe_assigns_each_layer_its_scheme(llama):
    r = Recipe(
        (
            ("model.layers.*.mlp.down_proj", parse_scheme("int8-channel")),
            ("model.layers.0.self_attn.*", parse_scheme("int5-g128")),
            ("lm_head", parse_scheme("int8-channel")),
        ),
        parse_scheme("int4-g32"),
        {},
        "r",
    )
    v = recipe_variant(llama, r, exclude=("model.layers.1.self_attn.q_proj",))
    got = {n: v.scheme_of(n).name for n in v.weights}
    assert got["model.layers.1.mlp.down_proj"] == "int8-channel"
    assert got["model.layers.0.self_attn.q_proj"] == "int5-g128"
    assert got["model.layers.1.mlp.up_proj"] == "int4-g32"  # default
    assert got["lm_head"] == "int8-channel"  # a unit outside the decoder blocks is quantized
    assert "model.layers.1.self_attn.q_proj" not in got  # --exclude wins
    for name, pw in v.weights.items():  # each layer encoded with its own scheme
        assert torch.equal(
            codes.dequantize(pw),
            codes.dequantize(codes.encode(dict(llama.named_modules())[name].weight.data, v.scheme_of(name))),
        )
    assert v.summary()["scheme"]["mixed"] is True


@pytest.mark.parametrize(
    "units,message",
    [
        ((("model.layers.9.*", "int4-g32"),), "matches no Linear layer"),
        (
            (("model.layers.0.*", "int4-g32"), ("*.mlp.down_proj", "int8-channel")),
            "overlap on model.layers.0.mlp.down_proj",
        ),
    ],
)
def test_recipe_units_checked_against_the_model(llama, units, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        recipe_variant(llama, Recipe(tuple((p, parse_scheme(x)) for p, x in units), None, {}, "r"))


def test_overlapping_units_with_one_scheme_are_fine(llama):
    r = Recipe((("model.layers.0.*", parse_scheme("int4-g32")), ("*.mlp.*", parse_scheme("int4-g32"))), None, {}, "r")
    assert len(recipe_variant(llama, r).weights) == 10  # block 0's 7 layers + block 1's 3 mlp layers


def _main(args, monkeypatch, capsys) -> tuple[int, str, str]:
    from infoeval.cli import main

    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = main()
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", ["quantize-compare", "gate", "quantize"])
@pytest.mark.parametrize(
    "text,message",
    [
        ('[units]\n"model.layers.7.*" = "int4-g32"\n', "matches no Linear layer"),
        ('[units]\n"model.layers.0.*" = "int4-g32"\n"*down_proj" = "int8-channel"\n', "overlap"),
        ('[units]\n"model.layers.0.*" = "int4-g33x"\n', "unknown quantization scheme"),
    ],
)
def test_bad_recipes_exit_2_with_one_line(command, text, message, tiny_llama_dir, tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(text, encoding="utf-8")
    common = {
        "quantize-compare": [
            tiny_llama_dir,
            "--recipe",
            recipe,
            "--max-tokens",
            "64",
            "--ctx",
            "32",
            "--out-dir",
            tmp_path / "o",
        ],
        "gate": [tiny_llama_dir, "--reference", tmp_path / "missing.safetensors", "--recipe", recipe],
        "quantize": [tiny_llama_dir, "--recipe", recipe, "--out", tmp_path / "q"],
    }[command]
    if command == "gate":
        from infoeval.gating.gate import build_reference
        from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

        build_reference(
            ModelSettings(str(tiny_llama_dir)),
            TextSettings(max_tokens=64),
            WindowSettings(ctx=32),
            tmp_path / "missing.safetensors",
            8,
            4,
        )
    code, out, err = _main([command, *common], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("infoeval: error: ") and message in lines[0], err
    assert f"recipe '{recipe}'" in lines[0], err  # the file, as given
    assert not (tmp_path / "o").exists() and not (tmp_path / "q").exists()


def test_quantize_recipe_writes_the_mixed_weights(tiny_llama_dir, tmp_path, llama):
    from safetensors.torch import load_file

    from infoeval.gating.checkpoint import quantize_checkpoint, saved_scheme
    from infoeval.input.settings import ModelSettings

    path = tmp_path / "mixed.toml"
    write_recipe(
        path, _recipe(default=parse_scheme("int4-g32"), units=(("model.layers.0.*", parse_scheme("int8-channel")),))
    )
    info = quantize_checkpoint(
        ModelSettings(str(tiny_llama_dir), device="cpu"), "int8-channel", tmp_path / "q", recipe=path
    )
    assert info["scheme"] == "mixed" and saved_scheme(tmp_path / "q") == "mixed"
    saved = load_file(tmp_path / "q" / "model.safetensors")
    v = recipe_variant(llama, read_recipe(path))
    for name, pw in v.weights.items():
        assert torch.equal(saved[f"{name}.weight"], codes.dequantize(pw)), name
    with pytest.raises(UsageError, match="format fake"):
        quantize_checkpoint(
            ModelSettings(str(tiny_llama_dir), device="cpu"),
            "int4-g32",
            tmp_path / "p",
            recipe=path,
            fmt="pack-quantized",
        )


# ------------------------------------------------------------------------------------------ exports
def test_gguf_names():
    assert export.gguf_name("model.layers.12.self_attn.o_proj") == "blk.12.attn_output.weight"
    assert export.gguf_name("model.layers.0.mlp.gate_proj") == "blk.0.ffn_gate.weight"
    assert export.gguf_name("model.embed_tokens") is None


def test_tensor_type_file_syntax_and_patterns_match_one_tensor_each():
    names = [
        f"model.layers.{i}.{t}" for i in (1, 10, 11) for t in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")
    ]
    schemes = [parse_scheme(s) for s in ("int4-g32", "int8-channel", "int3-g128")]
    assignment = {n: schemes[i % 3] for i, n in enumerate(names)}
    out = export.tensor_types(assignment, dict.fromkeys(names, 576))
    entries = out["text"].split()  # llama-quantize reads whitespace-separated pattern=type entries
    assert len(entries) == len(names)
    gguf = [export.gguf_name(n) for n in names]
    for entry, module in zip(entries, names):
        pattern, _, gtype = entry.partition("=")
        assert re.fullmatch(r"[a-z0-9_]+", gtype)
        hits = [g for g in gguf if re.search(pattern, g)]  # llama.cpp: std::regex_search, first match wins
        assert hits == [export.gguf_name(module)]
        assert gtype == export.ggml_type(assignment[module])[0].lower()
    assert out["base_type"] in ("Q4_0", "Q8_0", "Q3_K")
    assert all("Q3_K" in f for f in out["fallback"])  # 576 is not a multiple of 256
    assert export.tensor_types({"model.norm_proj": schemes[0]}, {"model.norm_proj": 64})["text"] is None


def test_config_groups_parse_in_compressed_tensors():
    ct = pytest.importorskip("compressed_tensors.quantization")
    assignment = {
        "model.layers.0.mlp.down_proj": parse_scheme("int8-channel"),
        "model.layers.0.mlp.up_proj": parse_scheme("int4-g32"),
        "model.layers.1.mlp.up_proj": parse_scheme("int4-g64-asym"),
    }
    out = export.config_groups(assignment, dict.fromkeys(assignment, 576), [*assignment, "lm_head"])
    cfg = ct.QuantizationConfig(**{k: v for k, v in out["config"].items() if k != "quant_method"})
    assert sum(len(g.targets) for g in cfg.config_groups.values()) == 3 and cfg.ignore == ["lm_head"]
    assert {g.weights.num_bits for g in cfg.config_groups.values()} == {8, 4}
    assert export.config_groups({"a": parse_scheme("int4-g128")}, {"a": 576}, ["a"])["config"] is None


def test_gate_recipe_judges_the_mix(tiny_llama_dir, tmp_path):
    from infoeval.comparison.compare import quantize_compare
    from infoeval.gating.gate import GateSettings, build_reference, run_gate
    from infoeval.gating.limits import parse_limits
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
    from infoeval.quant.variant_settings import VariantSettings

    model_settings, text_settings, window_settings = (
        ModelSettings(str(tiny_llama_dir), device="cpu"),
        TextSettings(max_tokens=128),
        WindowSettings(ctx=64),
    )
    path = tmp_path / "mixed.toml"
    write_recipe(
        path, _recipe(default=parse_scheme("int4-g32"), units=(("model.layers.1.*", parse_scheme("int3-g64")),))
    )
    build_reference(model_settings, text_settings, window_settings, tmp_path / "ref.safetensors", 16, 8)
    gate_settings = GateSettings(
        tmp_path / "ref.safetensors", None, None, tuple(parse_limits({"max_kl_mean": 10.0})), recipe=path
    )
    result, _ = run_gate(gate_settings, ModelSettings("", device="cpu"))
    qc, _ = quantize_compare(
        model_settings, text_settings, window_settings, VariantSettings(schemes="", recipes=(path,))
    )
    assert result.candidate["quantization"]["scheme"]["mixed"] is True
    assert result.metrics["ppl"] == pytest.approx(qc.variants[0].metrics["ppl"], rel=1e-6)
    assert result.metrics["top1"] == qc.variants[0].metrics["top1"]
    with pytest.raises(UsageError, match="give one"):
        GateSettings(tmp_path / "ref.safetensors", None, "int4-g32", (), recipe=path)


def test_one_scheme_recipe_gives_the_plain_schemes_numbers(tiny_qwen3_dir, tmp_path):
    from infoeval.comparison.compare import quantize_compare
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
    from infoeval.quant.variant_settings import VariantSettings

    path = tmp_path / "same.toml"
    path.write_text('[recipe]\ndefault = "int4-g64"\n', encoding="utf-8")  # partial last groups on every Qwen3 layer
    qc, cols = quantize_compare(
        ModelSettings(str(tiny_qwen3_dir), device="cpu"),
        TextSettings(max_tokens=128),
        WindowSettings(ctx=64),
        VariantSettings(schemes="int4-g64", recipes=(path,)),
    )
    plain, same = qc.variants
    assert same.name == "same" and plain.metrics == same.metrics
    for k in cols.variants["int4-g64"]:
        assert np.array_equal(cols.variants["int4-g64"][k], cols.variants["same"][k])
    with pytest.raises(UsageError, match="two variants are named 'int4-g64'"):
        (tmp_path / "int4-g64.toml").write_text('[recipe]\ndefault = "int4-g64"\n', encoding="utf-8")
        quantize_compare(
            ModelSettings(str(tiny_qwen3_dir), device="cpu"),
            TextSettings(max_tokens=64),
            WindowSettings(ctx=64),
            VariantSettings(schemes="int4-g64", recipes=(tmp_path / "int4-g64.toml",)),
        )
