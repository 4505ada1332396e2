"""Shipped quantized checkpoints as gate candidates: each format that installs here, saved by its library from
the tiny Llama, loads offline through that library and computes exactly the library's own model; provenance
records its format and the bits per weight of its stored tensors; the same method in process gives the same KL;
a missing library, a tokenizer that is not the reference's, a --scheme on top and a load the library refuses are
each one line (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_run import run_cli
from shipped_formats import SAVERS, library_model
from tiny_models import as_json, requires_smollm2, tiny_reference

from infoeval.errors import DataError, DeviceError, UsageError
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import parse_limits
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.models import load_model
from infoeval.models.shipped import FORMATS

CPU, F32 = torch.device("cpu"), torch.float32
LAX = tuple(parse_limits({"max_kl_mean": 10.0, "min_top1": 0.0}))
FORMAT = {
    "bnb": "bitsandbytes",
    "torchao": "torchao",
    "hqq": "hqq",
    "quanto": "quanto",
    "autoround": "auto-round",
    "gptq": "gptq",
    "awq": "awq",
    "compressed": "compressed-tensors",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_llama_dir):
    root, made = tmp_path_factory.mktemp("shipped"), {}

    def get(name: str):
        if name not in made:
            fmt = FORMATS[FORMAT[name.split("-")[0]]]
            if not any(_installed(p) for p in fmt.packages):
                pytest.skip(f"{fmt.distribution} is not installed")
            made[name] = SAVERS[name][0](tiny_llama_dir, root / name)
        return made[name]

    return get


def _installed(package: str) -> bool:
    from infoeval.quant.methods import installed

    return installed(package)


@pytest.fixture(scope="module")
def ref_file(tmp_path_factory, tiny_llama_dir, tiny_text):
    return tiny_reference(tmp_path_factory.mktemp("shipped-ref"), tiny_llama_dir, tiny_text, 200)


def _gate(ref, candidate=None, scheme=None):
    settings = GateSettings(ref, candidate and str(candidate), scheme, LAX, floor="off")
    return as_json(run_gate(settings, ModelSettings(str(candidate or ""), "cpu", "float32")))[0]


@pytest.mark.parametrize("name", sorted(SAVERS))
def test_each_format_gates_and_computes_the_library_model(name, saved, ref_file, tiny_llama_dir):
    folder = saved(name)
    result = _gate(ref_file, folder)
    q = result["candidate"]["quantization"]
    assert q["source"] == "checkpoint" and q["format"] == FORMATS[FORMAT[name.split("-")[0]]].name
    assert q["layers_quantized"] == 14 and 4 < q["bits_per_weight"] < 9  # 2 blocks × 7 Linear; lm_head as it was
    assert q["library_version"] and q["config"]
    assert 0 < result["metrics"]["kl_mean"] < 1
    ids = torch.tensor([[0, 17, 33, 250, 4, 99, 120, 7, 300, 8]])
    with torch.inference_mode():
        ours = load_model(str(folder), CPU, F32).model(ids).logits
        theirs = library_model(name, folder)(ids).logits
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("name", ["bnb-nf4", "bnb-int8", "torchao-int8"])
def test_a_saved_checkpoint_matches_the_same_method_in_process(name, saved, ref_file):
    checkpoint, in_process = _gate(ref_file, saved(name)), _gate(ref_file, scheme=SAVERS[name][2])
    assert checkpoint["metrics"]["kl_mean"] == pytest.approx(in_process["metrics"]["kl_mean"], rel=1e-5)


def test_compressed_tensors_matches_the_fake_quantization_it_stores(saved, ref_file):
    checkpoint, fake = _gate(ref_file, saved("compressed-int4-g64")), _gate(ref_file, scheme="int4-g64")
    assert checkpoint["metrics"]["kl_mean"] == pytest.approx(fake["metrics"]["kl_mean"], rel=1e-5)
    assert checkpoint["candidate"]["quantization"]["group_size"] == 64


def test_llm_int8_bits_per_weight_in_closed_form(saved, tiny_llama_dir):
    """LLM.int8() stores an int8 code per weight, a float32 scale per output row and a one-byte format flag."""
    from transformers import AutoModelForCausalLM

    q = load_model(str(saved("bnb-int8")), CPU, F32).info.quantization
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    shapes = [m.weight.shape for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    bits = sum(8 * o * i + 32 * o + 8 for o, i in shapes) / sum(o * i for o, i in shapes)
    assert q["bits_per_weight"] == pytest.approx(bits, rel=1e-12) and q["stored_bytes"] * 8 == pytest.approx(
        bits * q["params_quantized"]
    )


@requires_smollm2
def test_gguf_q4_1_stores_five_bits_per_weight():
    """Q4_1: blocks of 32 four-bit codes with a float16 scale and a float16 minimum, 20 bytes per 32 weights."""
    from infoeval.models.files import builtin_gguf
    from infoeval.models.stored_bits import gguf_bits

    bits = gguf_bits(builtin_gguf("smollm2-135m"))
    assert bits["bits_per_weight"] == 5.0 and bits["tensor_types"]["Q4_1"] == bits["layers_quantized"] == 30 * 7


def test_a_missing_library_names_the_extra(saved, monkeypatch):
    folder = saved("bnb-int8")
    monkeypatch.setattr("infoeval.models.shipped._installed", lambda package: False)
    with pytest.raises(
        UsageError,
        match=r"bitsandbytes checkpoint, which needs bitsandbytes \(not installed\): pip install 'infoeval\[bnb\]'",
    ):
        load_model(str(folder), CPU, F32)


def test_a_load_the_library_refuses_is_one_line(saved, ref_file, monkeypatch):
    folder = saved("bnb-int8")

    def refuse(*a, **k):
        raise RuntimeError("no kernel for this device\nsecond line")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)
    with pytest.raises(
        DeviceError, match=r"^the bitsandbytes checkpoint '.*' did not load on cpu: no kernel for this device$"
    ):
        load_model(str(folder), CPU, F32)


def test_a_tokenizer_that_is_not_the_references_is_refused(saved, ref_file, tmp_path, tiny_qwen3_dir):
    folder = tmp_path / "other-tokenizer"
    shutil.copytree(saved("bnb-int8"), folder)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_qwen3_dir / f, folder / f)
    with pytest.raises(DataError, match="tokenizer .* differs from the reference's"):
        _gate(ref_file, folder)


def test_scheme_on_a_shipped_checkpoint_is_refused(saved, ref_file):
    with pytest.raises(UsageError, match="already a bitsandbytes checkpoint"):
        _gate(ref_file, saved("bnb-int8"), scheme="int8-channel")


def test_cli_gate_of_a_shipped_checkpoint_prints_its_format(saved, ref_file, tmp_path, monkeypatch):
    folder = saved("bnb-nf4")
    out = tmp_path / "gate.json"
    r = run_cli(
        [
            "gate",
            str(folder),
            "-r",
            str(ref_file),
            "--floor",
            "off",
            "--max-kl-mean",
            "10",
            "--min-top1",
            "0",
            "--json",
            str(out),
        ]
    )
    assert r.returncode in (0, 1), r.stderr  # passed or failed the default limits: not a usage error
    assert "bitsandbytes nf4, 4." in r.stdout
    assert json.loads(out.read_text())["candidate"]["model"]["quantization"]["format"] == "bitsandbytes"
    monkeypatch.setattr("infoeval.models.shipped._installed", lambda package: False)
    r = run_cli(["gate", str(folder), "-r", str(ref_file), "--floor", "off"])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "pip install 'infoeval[bnb]'" in r.stderr


@pytest.mark.slow
@requires_smollm2
def test_a_gguf_candidate_records_its_tensor_types(tmp_path):
    """The built-in GGUF gated against a reference of itself: KL 0, and its Q4_1 bits in the candidate's record."""
    from infoeval.models.files import builtin_gguf

    ref = tmp_path / "ref.safetensors"
    build_reference(
        ModelSettings("smollm2-135m", "cpu", "float32"),
        TextSettings(max_tokens=128),
        WindowSettings(ctx=64),
        ref,
        top_k=16,
        tail_samples=32,
        seed=0,
    )
    result = _gate(ref, builtin_gguf("smollm2-135m"))
    q = result["candidate"]["quantization"]
    assert q["format"] == "gguf" and q["bits_per_weight"] == 5.0 and q["tensor_types"]["Q4_1"] == 210
    assert result["metrics"]["kl_mean"] == pytest.approx(0, abs=1e-4)  # through the file's rounding


@pytest.mark.slow
@requires_smollm2
def test_a_requantized_gguf_gates_at_its_closed_form_bits(tmp_path):
    """SmolLM2's blocks requantized to Q8_0 (a float16 scale per 32 int8 codes: 34 bytes per 32 weights, 8.5 bits)
    gate against the float reference with a small KL, and run as a quantize-compare checkpoint at the same KL."""
    from shipped_formats import requantize_gguf

    import infoeval
    from infoeval.models.files import builtin_gguf

    gguf = requantize_gguf(builtin_gguf("smollm2-135m"), tmp_path / "smollm2-Q8_0.gguf", "Q8_0")
    ref = tmp_path / "ref.safetensors"
    build_reference(
        ModelSettings("smollm2-135m", "cpu", "float32"),
        TextSettings(max_tokens=128),
        WindowSettings(ctx=64),
        ref,
        top_k=64,
        tail_samples=128,
        seed=0,
    )
    gated = _gate(ref, gguf)
    q = gated["candidate"]["quantization"]
    assert q["bits_per_weight"] == 8.5 and q["tensor_types"]["Q8_0"] == 211  # the 210 block matrices and the embeddings
    assert 0 < gated["metrics"]["kl_mean"] < 0.02
    compared = infoeval.compare("smollm2-135m", checkpoints=[gguf], max_tokens=128, ctx=64, floor="off").to_json()
    v = compared["variants"][0]
    assert v["name"] == "smollm2-Q8_0" and v["quantization"]["bits_per_weight"] == 8.5
    assert v["metrics"]["kl_mean"] == pytest.approx(
        gated["metrics"]["kl_mean"], rel=0.05
    )  # the gate's compact estimate
