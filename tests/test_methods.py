"""Method-qualified schemes (``hqq:int4-g64``): parsing and its one-line errors, a variant equal to the library
run directly on a fresh copy, the reference left untouched, bits read from what the library stores, the SQNR read
through the module, and the CLI (quantize-compare and gate)."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest
import torch
from cli_run import run_cli

from infoeval.errors import UsageError
from infoeval.quant.methods import BACKENDS, is_method, parse_method
from infoeval.quant.methods.variant import build_method_variant, effective_weight, sqnr_db, stored_bytes
from infoeval.quant.variant_settings import parse_schemes

HAS_HQQ = importlib.util.find_spec("hqq") is not None
needs_hqq = pytest.mark.skipif(not HAS_HQQ, reason="hqq is not installed (pip install 'infoeval[hqq]')")


def _cli(args, cwd):
    return run_cli(args, cwd=cwd)


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()


def _ids():
    return torch.randint(3, 500, (2, 24), generator=torch.Generator().manual_seed(0))


def _logits(m, ids):
    """Logits as the engine computes them: in inference mode (quanto's tensors are made in it and need it)."""
    with torch.inference_mode():
        return m(input_ids=ids).logits


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope:int4", "unknown quantization backend 'nope'"),
        ("hqq:int9", "is not an hqq scheme"),
        ("hqq:int4-g12", "is not an hqq scheme"),
        ("hqq:fp8", "is not an hqq scheme"),
    ],
)
def test_bad_method_schemes_are_one_line_usage_errors(text, message):
    if text.startswith("hqq") and not HAS_HQQ:
        pytest.skip("hqq is not installed")
    with pytest.raises(UsageError, match=message) as err:
        parse_method(text)
    assert "\n" not in str(err.value)


def test_a_missing_library_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hqq" else real(name, *a))
    with pytest.raises(
        UsageError, match=r"needs the hqq package, which is not installed: pip install 'infoeval\[hqq\]'"
    ):
        parse_method("hqq:int4-g64")


@needs_hqq
def test_one_parse_takes_plain_schemes_and_methods_in_their_order():
    parsed = parse_schemes(" int8-channel, hqq:int4-g64 ,int4-g128,HQQ:int8-channel")
    names = ["int8-channel", "hqq:int4-g64", "int4-g128", "hqq:int8-channel"]
    assert [s.name for s in parsed] == names and parse_schemes(parsed) == parse_schemes(names) == parsed
    methods = [s for s in parsed if is_method(s.name)]
    assert (
        [(m.bits, m.group_size) for m in methods] == [(4, 64), (8, None)]
        and is_method("hqq:int4")
        and not is_method("int4-g128")
    )
    assert parse_method("hqq:int3").settings == {"nbits": 3, "group_size": 64}
    with pytest.raises(UsageError, match="listed twice"):
        parse_schemes("hqq:int4-g64,hqq:int4-g64")
    assert set(BACKENDS) >= {"hqq"}


def test_effective_weight_of_a_plain_linear_is_its_weight():
    lin = torch.nn.Linear(40, 24, bias=True)
    torch.nn.init.normal_(lin.bias)
    w = effective_weight(lin, 40, lin.weight, rows=16)  # several blocks of identity rows
    torch.testing.assert_close(w, lin.weight.detach(), atol=1e-6, rtol=0)
    assert sqnr_db(lin.weight, lin.weight) is None
    assert sqnr_db(torch.ones(4), torch.full((4,), 0.9)) == pytest.approx(20.0)  # 10·log10(4 / (4·0.01))


@needs_hqq
@pytest.mark.parametrize("spec", ["int4-g32", "int8-channel", "int3-g64"])
def test_hqq_variant_is_the_library_on_a_fresh_copy(model, spec):
    from hqq.core.quantize import BaseQuantizeConfig, HQQBackend, HQQLinear

    ids = _ids()
    before = _logits(model, ids)
    scheme = parse_method(f"hqq:{spec}")
    variant = build_method_variant(model, scheme)
    torch.testing.assert_close(_logits(model, ids), before, atol=0, rtol=0)  # the reference is untouched
    fresh = copy.deepcopy(model)
    HQQLinear.set_backend(HQQBackend.PYTORCH)
    names = [r.report.name for r in variant.layers if r.report.quantized]
    assert names and all(n.startswith("model.layers.") for n in names)
    for name in names:
        parent, _, child = name.rpartition(".")
        linear = fresh.get_submodule(name)
        config = BaseQuantizeConfig(nbits=scheme.settings["nbits"], group_size=scheme.settings["group_size"])
        setattr(
            fresh.get_submodule(parent),
            child,
            HQQLinear(linear, quant_config=config, compute_dtype=torch.float32, device="cpu"),
        )
    assert torch.equal(_logits(variant.model, ids), _logits(fresh, ids))
    # the parameters it did not quantize are the reference's own tensors, not copies
    assert variant.model.get_input_embeddings().weight is model.get_input_embeddings().weight


@needs_hqq
@pytest.mark.parametrize(
    ("spec", "bits", "group"),
    [("int4-g32", 4, 32), ("int4-g64", 4, 64), ("int8-channel", 8, None), ("int2-g16", 2, 16)],
)
def test_hqq_bits_are_what_it_stores(model, spec, bits, group):
    variant = build_method_variant(model, parse_method(f"hqq:{spec}"))
    extra = []
    for layer in (x for x in variant.layers if x.report.quantized):
        out, inp = layer.report.shape
        groups = out * inp // group if group else out
        codes_and_meta = out * inp * bits / 8 + 2 * 4 * groups  # codes, then a float32 scale and zero point per group
        extra.append(layer.stored_bytes - codes_and_meta)
        module = variant.model.get_submodule(layer.report.name)
        assert (
            layer.stored_bytes == stored_bytes(module)
            and module.W_q.numel() * module.W_q.element_size() == out * inp * bits / 8
        )
    assert len(set(extra)) == 1 and 0 <= extra[0] < 256  # the same few bytes of settings per layer, nothing else
    quantized = [x.report.shape for x in variant.layers if x.report.quantized]
    params = sum(o * i for o, i in quantized)
    core = (
        sum(o * i * (bits + 64 / (group or i)) for o, i in quantized) / params
    )  # codes + 2 × 32 bits per group (a row per channel)
    summary = variant.summary()
    assert summary["bits_per_weight"] == pytest.approx(8 * summary["stored_bytes"] / params)
    assert summary["bits_per_weight"] == pytest.approx(core + 8 * extra[0] * len(quantized) / params)
    assert summary["scheme"]["backend"] == "hqq" and summary["scheme"]["library_version"] and summary["quantize_s"] > 0


@needs_hqq
def test_quantize_compare_and_gate_take_method_schemes(tmp_path, tiny_llama_dir, tiny_text):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    text = ["--text", tmp_path / "t.txt", "--ctx", 32, "--max-tokens", 200]
    r = _cli(
        [
            "quantize-compare",
            tiny_llama_dir,
            *text,
            "--schemes",
            "int4-g32,hqq:int4-g32",
            "--json",
            tmp_path / "qc.json",
            "-q",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "Failed to load" not in r.stderr and "W1" not in r.stderr  # no library chatter
    qc = json.loads((tmp_path / "qc.json").read_text())
    assert [v["name"] for v in qc["variants"]] == ["int4-g32", "hqq:int4-g32"]
    hq = qc["variants"][1]
    assert (
        hq["quantization"]["scheme"]["backend"] == "hqq"
        and 0 < hq["metrics"]["kl_mean"] < 1
        and hq["quantization"]["sqnr_db_mean"] > 10
    )
    r = _cli(["reference", tiny_llama_dir, *text, "-o", tmp_path / "ref.safetensors", "-q"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = _cli(
        [
            "gate",
            "--reference",
            tmp_path / "ref.safetensors",
            "--scheme",
            "hqq:int4-g32",
            "--max-kl-mean",
            1,
            "--min-top1",
            0,
            "--max-kl-p99",
            100,
            "--max-ppl-ratio",
            10,
            "--max-bpb-increase",
            10,
            "--json",
            tmp_path / "g.json",
            "-q",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    gate = json.loads((tmp_path / "g.json").read_text())
    assert gate["candidate"]["scheme"] == "hqq:int4-g32" and gate["metrics"]["kl_mean"] == pytest.approx(
        hq["metrics"]["kl_mean"], rel=0.2
    )
    for bad, message in (("nope:int4", "unknown quantization backend"), ("hqq:int9", "not an hqq scheme")):
        r = _cli(["gate", "--reference", tmp_path / "ref.safetensors", "--scheme", bad, "-q"], tmp_path)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


HAS_QUANTO = importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("optimum.quanto") is not None
needs_quanto = pytest.mark.skipif(
    not HAS_QUANTO, reason="optimum-quanto is not installed (pip install 'infoeval[quanto]')"
)


@needs_quanto
@pytest.mark.parametrize("spec", ["int4", "int8", "int2", "float8"])
def test_quanto_variant_is_the_library_on_a_fresh_copy(model, spec):
    from optimum.quanto import freeze, qtypes, quantize

    ids = _ids()
    before = _logits(model, ids)
    scheme = parse_method(f"quanto:{spec}")
    variant = build_method_variant(model, scheme)
    torch.testing.assert_close(_logits(model, ids), before, atol=0, rtol=0)
    names = [r.report.name for r in variant.layers if r.report.quantized]
    fresh = copy.deepcopy(model)
    with torch.inference_mode():  # where the engine runs it
        quantize(fresh, weights=qtypes[scheme.settings["weights"]], include=names)  # quanto's whole-model API
        freeze(fresh)
    assert torch.equal(_logits(variant.model, ids), _logits(fresh, ids))
    assert variant.model.get_input_embeddings().weight is model.get_input_embeddings().weight


@needs_quanto
@pytest.mark.parametrize(
    ("spec", "bits", "shift"), [("int4", 4, True), ("int2", 2, True), ("int8", 8, False), ("float8", 8, False)]
)
def test_quanto_bits_are_what_it_stores(model, spec, bits, shift):
    variant = build_method_variant(model, parse_method(f"quanto:{spec}"))
    quantized = [x for x in variant.layers if x.report.quantized]
    params = sum(x.report.shape[0] * x.report.shape[1] for x in quantized)
    expected = 0
    for x in quantized:
        out, inp = x.report.shape
        groups = out * inp // x.details["group_size"] if x.details["group_size"] else out
        expected += (
            out * inp * bits / 8 + (2 if shift else 1) * 4 * groups + 2 * 4
        )  # codes, float32 scale (and shift), input/output scales
        assert x.details["group_size"] in (None, 128, 96, 64, 32)
    assert variant.summary()["stored_bytes"] == expected
    assert variant.summary()["bits_per_weight"] == pytest.approx(8 * expected / params)


HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
needs_torchao = pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is not installed (pip install 'infoeval[torchao]')")


@needs_torchao
@pytest.mark.parametrize("spec", ["int8", "int8-g32", "int4-g32", "int4-channel", "int2-g16", "float8"])
def test_torchao_variant_is_the_library_on_a_fresh_copy(model, spec):
    from torchao.quantization import quantize_

    from infoeval.quant.methods.torchao import config

    ids = _ids()
    before = _logits(model, ids)
    scheme = parse_method(f"torchao:{spec}")
    variant = build_method_variant(model, scheme)
    torch.testing.assert_close(_logits(model, ids), before, atol=0, rtol=0)
    names = set(r.report.name for r in variant.layers if r.report.quantized)
    fresh = copy.deepcopy(model)
    quantize_(fresh, config(scheme.settings), filter_fn=lambda m, fqn: fqn in names)  # torchao's whole-model API
    assert torch.equal(_logits(variant.model, ids), _logits(fresh, ids))
    assert not torch.equal(_logits(variant.model, ids), before)


@needs_torchao
@pytest.mark.parametrize(
    ("spec", "code_bits", "group", "zero"),
    [
        ("int8", 8, None, True),
        ("int8-g32", 8, 32, True),
        ("int4-g32", 8, 32, True),
        ("int3-channel", 8, None, True),
        ("float8", 8, None, False),
    ],
)
def test_torchao_bits_are_what_it_stores(model, spec, code_bits, group, zero):
    """torchao keeps int1–7 codes unpacked (an int8 each); integer codes have a float32 scale and an int8 zero point (0
    when symmetric) per group."""
    variant = build_method_variant(model, parse_method(f"torchao:{spec}"))
    quantized = [x.report.shape for x in variant.layers if x.report.quantized]
    params = sum(o * i for o, i in quantized)
    expected = sum(
        o * i * code_bits / 8 + (o * i // group if group else o) * (4 + (1 if zero else 0)) for o, i in quantized
    )
    assert variant.summary()["stored_bytes"] == expected
    assert variant.summary()["bits_per_weight"] == pytest.approx(8 * expected / params)


@pytest.mark.parametrize("text", ["torchao:int4", "torchao:int9-g32", "torchao:fp4", "torchao:int4-g0"])
def test_torchao_bad_specs(text):
    if not HAS_TORCHAO:
        pytest.skip("torchao is not installed")
    with pytest.raises(UsageError, match="is not a torchao scheme"):
        parse_method(text)


HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
needs_bnb = pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'infoeval[bnb]')")


@needs_bnb
@pytest.mark.parametrize("spec", ["nf4", "fp4", "nf4-dq", "int8"])  # blocks of 64: the tiny model's rows are 64 wide
def test_bnb_variant_is_the_library_on_a_fresh_copy(model, spec):
    """bitsandbytes' modules put in place the way transformers' BitsAndBytesConfig does (replace_with_bnb_linear),
    then quantized on the device."""
    import bitsandbytes as bnb

    ids = _ids()
    before = _logits(model, ids)
    scheme = parse_method(f"bnb:{spec}")
    variant = build_method_variant(model, scheme)
    torch.testing.assert_close(_logits(model, ids), before, atol=0, rtol=0)
    fresh = copy.deepcopy(model)
    s = scheme.settings
    for name in [r.report.name for r in variant.layers if r.report.quantized]:
        parent, _, child = name.rpartition(".")
        lin = fresh.get_submodule(name)
        if s["kind"] == "int8":
            q = bnb.nn.Linear8bitLt(
                lin.in_features, lin.out_features, bias=lin.bias is not None, has_fp16_weights=False, threshold=6.0
            )
            q.weight = bnb.nn.Int8Params(lin.weight.data, requires_grad=False, has_fp16_weights=False)
        else:
            q = bnb.nn.Linear4bit(
                lin.in_features,
                lin.out_features,
                bias=lin.bias is not None,
                compute_dtype=torch.float32,
                compress_statistics=s["double_quant"],
                quant_type=s["kind"],
            )
            q.weight = bnb.nn.Params4bit(
                lin.weight.data,
                requires_grad=False,
                quant_type=s["kind"],
                blocksize=s["blocksize"],
                compress_statistics=s["double_quant"],
            )
        if lin.bias is not None:
            q.bias = torch.nn.Parameter(lin.bias.data, requires_grad=False)
        setattr(fresh.get_submodule(parent), child, q.to("cpu"))
    # as from_pretrained leaves a model (bitsandbytes repacks 4-bit weights for its CPU kernel in eval mode)
    fresh.eval()
    assert torch.equal(_logits(variant.model, ids), _logits(fresh, ids))
    assert not torch.equal(_logits(variant.model, ids), before)


@needs_bnb
@pytest.mark.parametrize(("spec", "block", "double"), [("nf4", 64, False), ("fp4", 64, False), ("nf4-dq", 64, True)])
def test_bnb_bits_are_what_it_stores(model, spec, block, double):
    """4-bit codes, then per block a float32 absmax, or with double quantization a uint8 absmax and per 256 of
    those a float32 one and a 256-value float32 table; plus the 16-value code table and bitsandbytes' settings
    (serialized as JSON) per layer."""
    variant = build_method_variant(model, parse_method(f"bnb:{spec}"))
    extra = []
    for x in (x for x in variant.layers if x.report.quantized):
        out, inp = x.report.shape
        blocks = -(-out * inp // block)
        core = out * inp / 2 + (blocks + 4 * -(-blocks // 256) + 256 * 4 if double else 4 * blocks) + 16 * 4
        extra.append(x.stored_bytes - core)
    assert 0 < min(extra) and max(extra) - min(extra) <= 4 and max(extra) < 256, (
        extra
    )  # its settings as JSON: a layer's shape's digits


@needs_bnb
def test_bnb_int8_stores_int8_codes_and_a_scale_per_row(model):
    variant = build_method_variant(model, parse_method("bnb:int8"))
    for x in (x for x in variant.layers if x.report.quantized):
        out, inp = x.report.shape
        assert x.stored_bytes == out * inp + 4 * out + 1  # codes, the float32 row scales (SCB), the weight-format byte


@pytest.mark.parametrize("spec", ["fp8", "nf4-g32", "nf4-g100", "int4"])
def test_bnb_bad_specs(spec):
    if not HAS_BNB:
        pytest.skip("bitsandbytes is not installed")
    with pytest.raises(UsageError, match="is not a bnb scheme"):
        parse_method(f"bnb:{spec}")


@pytest.mark.parametrize(
    "spec",
    [
        s
        for s, ok in (
            ("hqq:int4-g32", HAS_HQQ),
            ("quanto:int4", HAS_QUANTO),
            ("torchao:int4-g32", HAS_TORCHAO),
            ("bnb:nf4", HAS_BNB),
        )
        if ok
    ],
)
def test_the_engine_runs_a_method_variant_as_its_own_role(model, spec):
    """Window by window the engine computes exactly the library's logits; a shared batch (several windows through
    the library's module at once) agrees to float rounding; and the library's modules keep their own forward."""
    import numpy as np

    from infoeval import engine
    from infoeval.comparison import compare as pipeline
    from infoeval.input.windows import rolling_windows

    variant = build_method_variant(model, parse_method(spec))
    stream = torch.randint(3, 500, (200,), generator=torch.Generator().manual_seed(1))
    windows = rolling_windows(len(stream), 32, 32)
    reducer = pipeline.lockstep_reducer([variant.name])
    roles = {"reference": model, variant.name: variant.model}
    plain = engine.run(roles, stream, engine.plan(windows), None, reducer)
    shared = engine.run(roles, stream, engine.plan_shared(windows, 96), None, reducer)
    nll = []
    for w in windows:
        ids = stream[w.start : w.start + w.length][None]
        lp = torch.log_softmax(_logits(variant.model, ids)[0, w.first_scored : w.first_scored + w.n_scored].float(), -1)
        nll.append(-lp.gather(-1, stream[w.first_target : w.first_target + w.n_scored, None])[:, 0])
    np.testing.assert_array_equal(plain[f"{variant.name}/nll"], torch.cat(nll).numpy())
    np.testing.assert_allclose(shared[f"{variant.name}/nll"], plain[f"{variant.name}/nll"], rtol=1e-4, atol=1e-5)


@needs_torchao
def test_torchao_groups_must_divide_the_rows(model):
    with pytest.raises(UsageError, match="multiple of the group size: this model has rows of 64, not a multiple of 48"):
        build_method_variant(model, parse_method("torchao:int4-g48"))
