"""reference → gate → quantize on tiny random models: the file round trip, failing closed on mismatch and
corruption (exit 2), pass/fail exit codes, JUnit/markdown files, and quantize → transformers → same logits."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
import torch
from cli_run import run_cli
from tiny_models import as_json, scored_log_probs

from infoeval.errors import DataError, UsageError
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import parse_limits
from infoeval.gating.reference_file import read_reference
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.quant.apply import fake_quantize_
from infoeval.quant.schemes import parse_scheme

ENV = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}
LAX = {"max_kl_mean": 10.0, "min_top1": 0.0}


@pytest.fixture(scope="module")
def ref_file(tmp_path_factory, tiny_llama_dir, tiny_text):
    d = tmp_path_factory.mktemp("gate")
    (d / "text.txt").write_text(tiny_text, encoding="utf-8")
    out = d / "ref.safetensors"
    info = as_json(
        build_reference(
            ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
            TextSettings(text=d / "text.txt", max_tokens=300),
            WindowSettings(ctx=64),
            out,
            top_k=16,
            tail_samples=32,
            seed=0,
        )
    )
    return out, info


def _gate(ref, candidate=None, scheme=None, limits=LAX, **kw):
    gate_settings = GateSettings(ref, candidate, scheme, tuple(parse_limits(limits)), **kw)
    return as_json(run_gate(gate_settings, ModelSettings(candidate or "", "cpu", "float32")))


def test_reference_file_contents(ref_file):
    out, info = ref_file
    ref = read_reference(out)
    assert ref.n == 300 == info["reference"]["tokens"]
    assert ref.dist.top_ids.shape == (300, 16) and ref.dist.tail_ids.shape == (300, 32)
    assert torch.equal(ref.target_ids, torch.cat([ref.stream_ids[w.target_slice] for w in ref.windows]))
    # top-K sorted, target log-prob consistent with the entropy bound, tail mass below the top-K's last entry
    assert (ref.dist.top_logp[:, :-1] >= ref.dist.top_logp[:, 1:]).all()
    assert (ref.target_logp <= 0).all() and (ref.entropy >= 0).all()
    assert info["bytes_per_position"] < 0.01 * info["llama_cpp_bytes_per_position"] * 49152 / info["vocab_size"]
    assert ref.meta["provenance"]["text"]["sha256"] and ref.meta["tokenizer_fingerprint"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # a plain open()'s mode, not the temporary file's 0o600
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_reference_model_against_itself_is_exact(ref_file, tiny_llama_dir):
    """The reference model as candidate: KL = TV = 0, top-1 = 1, PPL ratio 1 — through the file's rounding."""
    result, cols = _gate(ref_file[0], str(tiny_llama_dir))
    m = result["metrics"]
    assert result["passed"]
    assert abs(m["kl_mean"]) < 2e-4 and abs(m["tv_mean"]) < 2e-3 and m["top1"] == 1.0
    assert m["ppl_ratio"] == pytest.approx(1.0, abs=1e-6)
    assert m["ppl"] == pytest.approx(result["reference"]["ppl"], rel=1e-6)


def test_scheme_candidate_matches_brute_force(ref_file, tiny_llama_dir):
    """--scheme on the reference's model: NLLs equal a direct forward of the fake-quantized model, and the
    KL estimate is close to the exact mean KL (the coarse bound below it)."""
    from transformers import AutoModelForCausalLM

    result, cols = _gate(ref_file[0], None, "int4-g32")
    ref = read_reference(ref_file[0])
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    fake_quantize_(model, parse_scheme("int4-g32"))
    nll, kl = [], []
    for (w, lq), (_, lp) in zip(scored_log_probs(model, ref), scored_log_probs(base, ref)):
        nll.append(-lq.gather(-1, ref.stream_ids[w.target_slice, None])[:, 0])
        kl.append((lp.exp() * (lp - lq)).sum(-1))
    nll, kl = torch.cat(nll), torch.cat(kl)
    torch.testing.assert_close(torch.from_numpy(cols["variant"]["nll"]).double(), nll, atol=1e-4, rtol=1e-4)
    m = result["metrics"]
    assert m["kl_lower_mean"] <= kl.mean().item() + 1e-5
    assert m["kl_mean"] == pytest.approx(kl.mean().item(), rel=0.05)


def test_tokenizer_mismatch_fails_closed(ref_file, tiny_qwen3_dir):
    with pytest.raises(DataError, match="tokenizer .* differs"):
        _gate(ref_file[0], str(tiny_qwen3_dir))


def test_corrupt_truncated_and_foreign_files_fail_closed(ref_file, tmp_path):
    raw = ref_file[0].read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(raw[: len(raw) // 2])
    flipped = bytearray(raw)
    flipped[-100] ^= 0xFF
    (tmp_path / "flip.safetensors").write_bytes(bytes(flipped))
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    meta = json.loads(header["__metadata__"]["infoeval"])
    meta["format_version"] = 999
    header["__metadata__"]["infoeval"] = json.dumps(meta)
    new = json.dumps(header).encode()
    new += b" " * ((8 - len(new) % 8) % 8)
    (tmp_path / "version.safetensors").write_bytes(len(new).to_bytes(8, "little") + new + raw[8 + header_len :])
    for name, words in [
        ("trunc", "corrupt or truncated"),
        ("flip", "checksum"),
        ("foreign", "not an infoeval reference"),
        ("version", "format"),
        ("missing", "does not exist"),
    ]:
        with pytest.raises(DataError, match=words):
            read_reference(tmp_path / f"{name}.safetensors")


def _cli(args, cwd):
    return run_cli(args, cwd=cwd, env=ENV)


@pytest.mark.slow  # several command-line subprocesses
def test_cli_exit_codes_junit_markdown_and_baseline(ref_file, tiny_llama_dir, tmp_path):
    ref = ref_file[0]
    ok = _cli(
        [
            "gate",
            tiny_llama_dir,
            "-r",
            ref,
            "--scheme",
            "int8-channel",
            "--max-kl-mean",
            "1",
            "--min-top1",
            "0.5",
            "--max-ppl-ratio",
            "1.5",
            "--max-kl-p99",
            "5",
            "--max-bpb-increase",
            "1",
            "--junit",
            tmp_path / "j.xml",
            "--markdown",
            tmp_path / "m.md",
            "--json",
            tmp_path / "r.json",
            "-q",
        ],
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    cases = ET.parse(tmp_path / "j.xml").getroot().findall("./testsuite/testcase")
    assert len(cases) == 5 and all(c.find("failure") is None for c in cases)
    assert "PASS" in (tmp_path / "m.md").read_text()
    bad = _cli(
        [
            "gate",
            tiny_llama_dir,
            "-r",
            ref,
            "--scheme",
            "int2-channel",
            "--max-kl-mean",
            "1e-6",
            "--junit",
            tmp_path / "j2.xml",
            "-q",
            "--json",
            tmp_path / "r2.json",
        ],
        tmp_path,
    )
    assert bad.returncode == 1, bad.stderr
    assert any(c.find("failure") is not None for c in ET.parse(tmp_path / "j2.xml").getroot().iter("testcase"))
    worse = _cli(
        [
            "gate",
            tiny_llama_dir,
            "-r",
            ref,
            "--scheme",
            "int3-channel",
            "--max-kl-mean",
            "10",
            "--min-top1",
            "0",
            "--max-ppl-ratio",
            "100",
            "--max-kl-p99",
            "100",
            "--max-bpb-increase",
            "100",
            "--baseline",
            tmp_path / "r.json",
            "-q",
            "--json",
            tmp_path / "r3.json",
        ],
        tmp_path,
    )
    assert worse.returncode == 1 and json.loads((tmp_path / "r3.json").read_text())["baseline"]["rows"]
    for args, words in [
        (["gate", tiny_llama_dir, "-r", tmp_path / "nope.safetensors"], "does not exist"),
        (["gate", tiny_llama_dir, "-r", ref, "--limits", tmp_path / "m.md"], "not valid TOML"),
        (["gate", tiny_llama_dir, "-r", ref, "--max-top1-agreement", "1"], "No such option"),
    ]:
        r = _cli(args, tmp_path)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "typo.toml").write_text("[limits]\nmax_kl_meen = 0.1\n")
    r = _cli(["gate", tiny_llama_dir, "-r", ref, "--limits", tmp_path / "typo.toml"], tmp_path)
    assert r.returncode == 2 and "unknown gate limit 'max_kl_meen'" in r.stderr


@pytest.mark.parametrize("fmt", ["fake", "pack-quantized"])
def test_quantize_refuses_a_checkpoint_with_no_layer_quantized(fmt, tiny_llama_dir, tmp_path):
    """exclude '*' leaves nothing to quantize: one usage line before anything is written (it once crashed on the
    summary line after writing the whole checkpoint)."""
    from infoeval.gating.checkpoint import quantize_checkpoint

    settings = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    with pytest.raises(UsageError, match=r"no layer left to quantize: .* exclude \['\*'\] leave none of the model's"):
        quantize_checkpoint(settings, "int4-g32", tmp_path / "q", exclude=("*",), fmt=fmt)
    assert list(tmp_path.iterdir()) == []


def test_quantize_roundtrip_same_logits(tiny_llama_dir, tmp_path):
    """quantize → AutoModelForCausalLM.from_pretrained → the same logits as in-memory fake quantization."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infoeval.gating.checkpoint import quantize_checkpoint, saved_scheme

    out = tmp_path / "q"
    info = quantize_checkpoint(
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"), "int4-g32", out, include=("lm_head",)
    )
    assert info["layers_quantized"] > 0 and saved_scheme(out) == "int4-g32"
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    fake_quantize_(ref, parse_scheme("int4-g32"), include=("lm_head",))
    ids = torch.arange(1, 60)[None]
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, ref(ids).logits)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(tiny_llama_dir).get_vocab()
    report = json.loads((out / "infoeval-quantization.json").read_text())
    assert len(report["quantization"]["layers"]) >= info["layers_quantized"]
    with pytest.raises(UsageError, match="already exists"):
        quantize_checkpoint(ModelSettings(str(tiny_llama_dir), "cpu", "float32"), "int8-channel", out)


def test_pack_quantized_roundtrip_same_logits(tiny_llama_dir, tmp_path):
    """--format pack-quantized: real int4 codes that transformers (with compressed-tensors) loads back into a
    model computing exactly the in-memory fake quantization; files smaller than the fake checkpoint's."""
    pytest.importorskip("compressed_tensors")
    from transformers import AutoModelForCausalLM

    from infoeval.gating.checkpoint import quantize_checkpoint

    model_settings = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    info = quantize_checkpoint(model_settings, "int4-g32", tmp_path / "p", fmt="pack-quantized")
    quantize_checkpoint(model_settings, "int4-g32", tmp_path / "f")
    assert info["format"] == "pack-quantized"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "p", dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    fake_quantize_(ref, parse_scheme("int4-g32"))
    ids = torch.arange(1, 60)[None]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ref(ids).logits, atol=1e-5, rtol=1e-5)
    size = lambda d: sum(f.stat().st_size for f in d.glob("*.safetensors"))  # noqa: E731
    assert size(tmp_path / "p") < size(tmp_path / "f")
    for scheme, words in [
        ("int8-channel", "symmetric int4 schemes only"),
        ("int4-g48", "not a multiple of 48"),
        ("int4-g32-asym", "symmetric int4 schemes only"),
    ]:
        with pytest.raises(UsageError, match=words):
            quantize_checkpoint(model_settings, scheme, tmp_path / scheme, fmt="pack-quantized")


def test_a_reference_without_tail_samples_gates(tiny_llama_dir, tiny_text, tmp_path):
    """--tail-samples 0 (allowed: the tail is then its mass alone) writes a reference the gate reads."""
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    out = tmp_path / "ref.safetensors"
    build_reference(
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        TextSettings(text=tmp_path / "t.txt", max_tokens=200),
        WindowSettings(ctx=32),
        out,
        top_k=8,
        tail_samples=0,
        seed=0,
    )
    assert read_reference(out).dist.tail_ids.shape[-1] == 0
    gs = GateSettings(out, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 1.0})))
    result, _ = as_json(run_gate(gs, ModelSettings("", "cpu", "float32")))
    assert result["passed"] and result["metrics"]["kl_mean"] >= 0
