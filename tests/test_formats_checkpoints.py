"""Shipped formats written as checkpoints that their own libraries load: ``infoeval quantize --format
compressed-tensors`` folders (FP8 per channel, per tensor, in 128×128 blocks; NVFP4) hold the codes of the in-process
format, so compressed-tensors with transformers loads back ŵ, and gating the folder gives the in-process KL."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest
import torch
from cli_run import run_cli
from tiny_models import requires_smollm2

import infoeval
from infoeval.errors import UsageError
from infoeval.gating.checkpoint import quantize_checkpoint
from infoeval.input.settings import ModelSettings
from infoeval.models import load_model
from infoeval.quant.formats.rounding import fake_quantize
from infoeval.quant.schemes import parse_scheme

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(importlib.util.find_spec("compressed_tensors") is None, reason="needs compressed-tensors"),
]
CT_FORMATS = ("fp8", "fp8-tensor", "fp8-b128", "nvfp4")


@pytest.fixture(scope="module")
def folders(tiny_llama_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ct")
    return {
        name: quantize_checkpoint(
            ModelSettings(str(tiny_llama_dir), "cpu", "float32"), name, root / f"ct-{name}", fmt="compressed-tensors"
        )
        for name in CT_FORMATS
    }


def _linear_weights(model) -> dict[str, torch.Tensor]:
    return {n: m.weight.data for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"}


@pytest.mark.parametrize("name", CT_FORMATS)
def test_transformers_and_compressed_tensors_load_the_in_process_weights(tiny_llama_dir, folders, name):
    """The library's own load (transformers' compressed-tensors quantizer, decompressed by compressed-tensors)
    gives ŵ of ``fake_quantize`` bit for bit; NVFP4 in compressed-tensors' bfloat16, so ŵ rounded to bfloat16."""
    from transformers import AutoModelForCausalLM

    folder = folders[name]["out"]
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["quantization_config"]["format"] == ("nvfp4-pack-quantized" if name == "nvfp4" else "naive-quantized")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        loaded.hf_quantizer.compressor.decompress_model(loaded)
    source = _linear_weights(load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model)
    fmt = parse_scheme(name)
    for n, w in _linear_weights(loaded).items():
        want = fake_quantize(source[n], fmt)
        assert torch.equal(w, want.to(w.dtype)), n
        assert w.dtype == (torch.bfloat16 if name == "nvfp4" else torch.float32)


def test_gating_the_folders_gives_the_in_process_kl(tiny_llama_dir, folders, tiny_text, tmp_path):
    """infoeval loads each folder through its library (NVFP4 unpacked in float32) and measures it against the same
    reference: KL, P99 and top-1 of the folder equal those of the in-process format to ≤ 1e-6 relative."""
    text = tmp_path / "text.txt"
    text.write_text(tiny_text, encoding="utf-8")
    result = infoeval.compare(
        str(tiny_llama_dir),
        schemes=CT_FORMATS,
        checkpoints=tuple(folders[n]["out"] for n in CT_FORMATS),
        text=text,
        ctx=64,
        max_tokens=400,
        device="cpu",
    ).to_json()
    rows = {v["name"]: v["metrics"] for v in result["variants"]}
    for name in CT_FORMATS:
        ours, folder = rows[name], rows[f"ct-{name}"]
        assert ours["kl_mean"] > 0
        for key in ("kl_mean", "kl_p99", "top1", "ppl"):
            assert folder[key] == pytest.approx(ours[key], rel=1e-6, abs=0), (name, key)


@pytest.mark.parametrize(
    ("scheme", "words"),
    [("int4-g32", "stores fp8, fp8-tensor, fp8-b128, nvfp4, not int4-g32"), ("mxfp4", "not mxfp4")],
)
def test_a_format_compressed_tensors_does_not_store_is_refused(tiny_llama_dir, tmp_path, scheme, words):
    with pytest.raises(UsageError, match=words):
        quantize_checkpoint(
            ModelSettings(str(tiny_llama_dir), "cpu", "float32"), scheme, tmp_path / "x", fmt="compressed-tensors"
        )
    assert not (tmp_path / "x").exists()


def test_the_cli_writes_a_compressed_tensors_folder(tiny_llama_dir, tmp_path):
    out = tmp_path / "fp8"
    r = run_cli(["quantize", str(tiny_llama_dir), "--scheme", "fp8", "--format", "compressed-tensors", "--out", out])
    assert r.returncode == 0, r.stderr
    assert "WARNING" not in r.stderr and "it/s" not in r.stderr  # compressed-tensors' notices and bars kept quiet
    report = json.loads((out / "infoeval-quantization.json").read_text(encoding="utf-8"))
    assert report["storage"].startswith("compressed-tensors") and report["provenance"]["format"] == "compressed-tensors"
    bad = run_cli(
        ["quantize", str(tiny_llama_dir), "--scheme", "q4_0", "--format", "compressed-tensors", "--out", tmp_path / "b"]
    )
    assert bad.returncode == 2 and "not q4_0" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("scheme", "words"),
    [
        ("q4_0", "re-quantizes a GGUF model"),  # a transformers folder as the source
        ("int4-g32", "stores q8_0, q4_0, q4_1, q5_0, q5_1, gguf-mxfp4, not int4-g32"),
        ("fp8", "not fp8"),
    ],
)
def test_a_gguf_request_it_cannot_write_is_refused_in_one_line(tiny_llama_dir, tmp_path, scheme, words):
    bad = run_cli(
        ["quantize", str(tiny_llama_dir), "--scheme", scheme, "--format", "gguf", "--out", tmp_path / "x.gguf"]
    )
    assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert not any(tmp_path.iterdir())


@requires_smollm2
@pytest.mark.parametrize(
    ("out", "extra", "words"),
    [("x.bin", [], "ends in .gguf"), ("x.gguf", ["--exclude", "*"], "are for the other formats")],
)
def test_gguf_output_and_selection_are_checked_before_reading(tmp_path, out, extra, words):
    bad = run_cli(["quantize", "smollm2-135m", "--scheme", "q8_0", "--format", "gguf", "--out", tmp_path / out, *extra])
    assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert not any(tmp_path.iterdir())


@requires_smollm2
@pytest.mark.slow
def test_a_written_gguf_loads_the_in_process_weights_and_kl(tmp_path):
    """SmolLM2 (Q4_1) re-quantized to Q4_0 by ``--format gguf``: transformers loads the file (gguf's dequantization)
    with each decoder matrix equal to ``fake_quantize`` of the reference's, bit for bit, and the file's KL, P99,
    top-1 and perplexity equal those of the in-process q4_0 to ≤ 1e-6 relative."""
    out = tmp_path / "smollm2-q4_0.gguf"
    r = run_cli(["quantize", "smollm2-135m", "--scheme", "q4_0", "--format", "gguf", "--out", out])
    assert r.returncode == 0, r.stderr
    cpu = torch.device("cpu")
    reference = _linear_weights(load_model("smollm2-135m", cpu, torch.float32).model)
    written = _linear_weights(load_model(str(out), cpu, torch.float32).model)
    assert written.keys() == reference.keys() and len(written) == 210
    fmt = parse_scheme("q4_0")
    for n, w in written.items():
        assert torch.equal(w, fake_quantize(reference[n], fmt)), n
    result = infoeval.compare(
        "smollm2-135m", schemes=("q4_0",), checkpoints=(str(out),), max_tokens=256, ctx=128, device="cpu"
    ).to_json()
    ours, file = (v["metrics"] for v in result["variants"])
    assert ours["kl_mean"] > 0
    for key in ("kl_mean", "kl_p99", "top1", "ppl"):
        assert file[key] == pytest.approx(ours[key], rel=1e-6, abs=0), key
