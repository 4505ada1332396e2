"""The hidden-state reference (``reference --format hidden``): the head applied to the stored states gives the
reference's logits, so a gate against it is exact: KL(p‖p) = 0 for the reference itself, a brute-force KL for a
quantized candidate, and every metric equal to quantize-compare's on the same tokens; the head in the file or
only its sha256; the refusals (a head that does not give the logits, a candidate whose head differs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from tiny_models import as_json, build_tiny_llama, scored_log_probs

import infoeval
from infoeval.errors import UsageError
from infoeval.gating import hidden
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import parse_limits
from infoeval.gating.reference_file import read_reference
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.models.head import head_of

pytestmark = pytest.mark.usefixtures("one_thread")
LAX = {"max_kl_mean": 10.0, "min_top1": 0.0}
TOKENS, CTX = 300, 64
METRICS = ("kl_mean", "kl_p99", "kl_max", "top1", "tv_mean", "rkl_mean", "ppl", "nll_mean")


def _reference(model_dir, text, out, fmt="hidden", head="stored"):
    return as_json(
        build_reference(
            ModelSettings(str(model_dir), "cpu", "float32"),
            TextSettings(text=text, max_tokens=TOKENS),
            WindowSettings(ctx=CTX),
            out,
            top_k=16,
            tail_samples=32,
            fmt=fmt,
            head=head,
        )
    )


def _gate(ref, candidate=None, scheme=None, **kw):
    settings = GateSettings(ref, candidate, scheme, tuple(parse_limits(LAX)), **kw)
    return as_json(run_gate(settings, ModelSettings(candidate or "", "cpu", "float32")))


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def case(request, tiny_llama_dir, tiny_qwen3_dir, tiny_text, tmp_path_factory):
    model_dir = tiny_llama_dir if request.param == "llama" else tiny_qwen3_dir
    d = tmp_path_factory.mktemp(f"hidden-{request.param}")
    (d / "text.txt").write_text(tiny_text, encoding="utf-8")
    info = _reference(model_dir, d / "text.txt", d / "ref.safetensors")
    return model_dir, d, info


def test_the_file_holds_the_states_and_the_head(case):
    model_dir, d, info = case
    ref = read_reference(d / "ref.safetensors")
    model = infoeval.models.load_model(str(model_dir), torch.device("cpu"), torch.float32).model
    head = head_of(model)
    assert ref.kind == "hidden" and ref.dist is None and ref.hidden.shape == (ref.n, head.weight.shape[1])
    assert ref.head.digest() == head.digest() == ref.meta["head_sha256"] == info["hidden"]["head_sha256"]
    assert torch.equal(ref.head.weight, head.weight) and info["hidden"]["hidden_dtype"] == "float32"
    # 4·d bytes of states and 16 of ids and statistics a position, 4 a token of the stream, the head once
    per_position = 4 * head.weight.shape[1] + 16 + 4 * ref.stream_ids.numel() / ref.n
    head_bytes = head.weight.numel() * 4
    assert info["file_bytes"] - head_bytes <= ref.n * per_position + 16_384  # + header and metadata


def test_the_reference_against_itself_is_exactly_zero(case):
    model_dir, d, info = case
    result, cols = _gate(d / "ref.safetensors", str(model_dir))
    m = result["metrics"]
    assert m["kl_mean"] == 0.0 and m["kl_max"] == 0.0 and m["tv_mean"] == 0.0 and m["top1"] == 1.0
    assert m["kl_lower_mean"] == m["kl_mean"]
    np.testing.assert_array_equal(cols["variant"]["nll"], cols["reference"]["nll"])


def test_a_quantized_candidate_equals_quantize_compare(case):
    """The gate's metrics from the stored states equal quantize-compare's on the same tokens (same windows)."""
    model_dir, d, info = case
    result, cols = _gate(d / "ref.safetensors", None, "int4-g32")
    compared = infoeval.compare(
        str(model_dir), schemes="int4-g32", text=d / "text.txt", max_tokens=TOKENS, ctx=CTX, device="cpu", floor="off"
    ).to_json()
    want = compared["variants"][0]["metrics"]
    for k in METRICS:
        assert result["metrics"][k] == pytest.approx(want[k], rel=1e-6, abs=1e-9), k
    assert result["reference"]["ppl"] == pytest.approx(compared["reference"]["ppl"], rel=1e-6)


def test_a_quantized_candidate_matches_brute_force_kl(case):
    """KL(p‖q) per position against float64 log-softmax of both models' own logits."""
    from transformers import AutoModelForCausalLM

    from infoeval.quant.apply import fake_quantize_
    from infoeval.quant.schemes import parse_scheme

    model_dir, d, info = case
    result, cols = _gate(d / "ref.safetensors", None, "int8-channel")
    ref = read_reference(d / "ref.safetensors")
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    quant = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    fake_quantize_(quant, parse_scheme("int8-channel"))
    kl = [
        (lp.exp() * (lp - lq)).sum(-1)
        for (_, lp), (_, lq) in zip(scored_log_probs(base, ref), scored_log_probs(quant, ref))
    ]
    np.testing.assert_allclose(cols["variant"]["kl"], torch.cat(kl).numpy(), atol=2e-6, rtol=1e-4)


def test_a_head_left_to_the_candidate(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "text.txt").write_text(tiny_text, encoding="utf-8")
    stored = _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "stored.safetensors")
    shared = _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "shared.safetensors", head="candidate")
    ref = read_reference(tmp_path / "shared.safetensors")
    assert ref.head is None and not shared["hidden"]["head_stored"]
    assert stored["file_bytes"] - shared["file_bytes"] >= ref.hidden.shape[1] * stored["vocab_size"] * 4
    a, _ = _gate(tmp_path / "stored.safetensors", None, "int4-g32")
    b, _ = _gate(tmp_path / "shared.safetensors", None, "int4-g32")
    assert a["metrics"] == b["metrics"]
    other = build_tiny_llama(tmp_path / "other", seed=1)  # the same tokenizer, another head
    with pytest.raises(UsageError, match="head differs .* format hidden head stored"):
        _gate(tmp_path / "shared.safetensors", str(other))
    assert _gate(tmp_path / "stored.safetensors", str(other))[0]["metrics"]["kl_mean"] > 0


def test_a_recipe_that_quantizes_the_head(tiny_llama_dir, tiny_text, tmp_path):
    """A candidate whose recipe quantizes lm_head computes with that head (swapped in for each forward pass): the
    stored-head reference gates it with the brute-force KL of the model quantized for good, and a reference that
    leaves the head to the candidate refuses it (its head is no longer the reference's)."""
    from transformers import AutoModelForCausalLM

    from infoeval.quant.apply import recipe_variant, swap_in
    from infoeval.quant.recipe import Recipe, write_recipe
    from infoeval.quant.schemes import parse_scheme

    (tmp_path / "text.txt").write_text(tiny_text, encoding="utf-8")
    _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "stored.safetensors")
    _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "shared.safetensors", head="candidate")
    recipe = Recipe((("lm_head", parse_scheme("int4-g32")),), parse_scheme("int8-channel"), {}, "head")
    write_recipe(tmp_path / "head.toml", recipe)
    result, cols = _gate(tmp_path / "stored.safetensors", recipe=tmp_path / "head.toml")
    assert "lm_head" in {r["name"] for r in result["candidate"]["quantization"]["layers"] if r["action"] == "quantized"}
    ref = read_reference(tmp_path / "stored.safetensors")
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    quant = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    swap_in(quant, recipe_variant(quant, recipe))
    kl = [
        (lp.exp() * (lp - lq)).sum(-1)
        for (_, lp), (_, lq) in zip(scored_log_probs(base, ref), scored_log_probs(quant, ref))
    ]
    np.testing.assert_allclose(cols["variant"]["kl"], torch.cat(kl).numpy(), atol=2e-6, rtol=1e-4)
    with pytest.raises(UsageError, match="head differs"):
        _gate(tmp_path / "shared.safetensors", recipe=tmp_path / "head.toml")


def test_a_head_that_misses_the_logits_is_refused(tiny_llama_dir, tiny_text, tmp_path, monkeypatch):
    (tmp_path / "text.txt").write_text(tiny_text, encoding="utf-8")
    scaled = lambda model: dataclasses.replace(head_of(model), scale=1.01)  # noqa: E731
    monkeypatch.setattr(hidden, "head_of", scaled)
    with pytest.raises(UsageError, match="format hidden cannot run on LlamaForCausalLM.*use format topk"):
        _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "ref.safetensors")
    assert not (tmp_path / "ref.safetensors").exists()


def test_bad_format_and_head_are_usage_errors(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "text.txt").write_text(tiny_text, encoding="utf-8")
    with pytest.raises(UsageError, match="format logits is not allowed; give one of topk, hidden"):
        _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "r.safetensors", fmt="logits")
    with pytest.raises(UsageError, match="head shared is not allowed; give one of stored, candidate"):
        _reference(tiny_llama_dir, tmp_path / "text.txt", tmp_path / "r.safetensors", head="shared")


def test_positions_sequential_and_baseline_on_a_hidden_reference(case, tmp_path):
    model_dir, d, info = case
    ref = d / "ref.safetensors"
    result, cols = _gate(ref, None, "int4-g32", top_k=5)
    top = cols["reference_top"]
    assert top["top_ids"].shape == (result["reference"]["tokens"], 5)
    assert (np.diff(top["top_p"], axis=1) <= 0).all() and (top["top_p"].sum(1) <= 1 + 1e-6).all()
    stored = read_reference(ref)
    p = torch.softmax(stored.head(stored.hidden).double(), -1)
    chosen = p.gather(-1, torch.from_numpy(top["top_ids"][:, :1]).long())[:, 0]
    np.testing.assert_array_equal(chosen.numpy(), p.amax(-1).numpy())  # a most likely token (ties: any of them)
    np.testing.assert_allclose(top["top_p"][:, 0], p.amax(-1).numpy(), rtol=1e-5)
    seq = infoeval.gate(reference=ref, scheme="int4-g32", sequential=True, max_kl_mean=10.0, device="cpu")
    assert seq.to_json()["metrics"]["kl_lower_mean"] == seq.to_json()["metrics"]["kl_mean"]
    infoeval.gate(reference=ref, scheme="int8-channel", max_kl_mean=10.0, device="cpu").save(tmp_path)
    judged = infoeval.gate(
        reference=ref, scheme="int4-g32", max_kl_mean=10.0, baseline=tmp_path / "result.json", device="cpu"
    )
    assert judged.to_json()["baseline"] is not None


def test_the_cli_writes_and_gates_a_hidden_reference(tiny_llama_dir, tiny_text, tmp_path, capsys):
    from infoeval.cli import main

    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    ref = tmp_path / "ref.safetensors"
    run = ["--text", tmp_path / "t.txt", "--ctx", "64", "--max-tokens", "300", "--device", "cpu"]
    assert main(["reference", tiny_llama_dir, "-o", ref, "--format", "hidden", "--head", "candidate", *run]) == 0
    out = capsys.readouterr().out
    assert "Hidden-state reference" in out and "the candidate's (sha256)" in out
    code = main(["gate", "--reference", ref, "--scheme", "int4-g32", "--max-kl-mean", "1", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "hidden-state reference (exact)" in out and "KL lower bound" not in out
    assert main(["reference", tiny_llama_dir, "-o", ref, "--format", "logits", *run]) == 2
    assert "--format 'logits' is not allowed; give one of topk, hidden" in capsys.readouterr().err


def _tiny_gemma2(folder):
    """A 1-layer Gemma 2 with final logit soft-capping (cap 2: the cap moves every logit visibly)."""
    from tiny_models import _save, make_tokenizer
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tok = make_tokenizer(bos=True)
    config = Gemma2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=2.0,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return _save(Gemma2ForCausalLM(config), tok, folder)


def test_gemmas_soft_capped_head_is_part_of_the_head(tiny_text, tmp_path, monkeypatch):
    from infoeval.models import head as head_module

    model_dir = _tiny_gemma2(tmp_path / "gemma2")
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    info = _reference(model_dir, tmp_path / "t.txt", tmp_path / "ref.safetensors")
    assert info["hidden"]["head"]["softcap"] == 2.0
    m = _gate(tmp_path / "ref.safetensors", str(model_dir))[0]["metrics"]
    assert m["kl_mean"] == 0.0 and m["top1"] == 1.0
    monkeypatch.setattr(head_module, "SOFTCAP_KEYS", ())  # a head that ignores the cap misses the logits
    with pytest.raises(UsageError, match="cannot run on Gemma2ForCausalLM"):
        _reference(model_dir, tmp_path / "t.txt", tmp_path / "ref2.safetensors")


def test_a_head_left_to_a_candidate_of_another_dtype_names_both(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    _reference(tiny_llama_dir, tmp_path / "t.txt", tmp_path / "ref.safetensors", head="candidate")
    settings = GateSettings(tmp_path / "ref.safetensors", None, None, tuple(parse_limits(LAX)))
    with pytest.raises(UsageError, match="head is float32 and the candidate's bfloat16.*dtype float32"):
        run_gate(settings, ModelSettings("", "cpu", "bfloat16"))


def test_head_candidate_needs_the_hidden_format(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    with pytest.raises(UsageError, match="head candidate needs format hidden"):
        _reference(tiny_llama_dir, tmp_path / "t.txt", tmp_path / "r.safetensors", fmt="topk", head="candidate")


def test_the_markdown_summary_says_the_kl_is_exact(case):
    from infoeval.gating.ci_summary import markdown

    model_dir, d, info = case
    text = markdown(_gate(d / "ref.safetensors", None, "int4-g32")[0])
    assert "KL exact, from the reference's stored hidden states" in text and "tail samples" not in text


def test_every_step_after_the_head_is_part_of_it():
    from infoeval.models.head import OutputHead

    w, h = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), torch.randn(2, 3)
    z = h @ w.T
    assert torch.equal(OutputHead(w, None, None, None, 8.0)(h), z / 8.0)  # Granite's logits_scaling
    assert torch.equal(OutputHead(w, None, 0.5, None)(h), z * 0.5)  # Cohere's logit_scale
    assert OutputHead(w, None, None, None, 8.0).digest() != OutputHead(w, None, None, None).digest()


def test_the_report_page_of_a_gate_on_a_hidden_reference(case, tmp_path):
    from infoeval.cli import main

    model_dir, d, info = case
    page = tmp_path / "page.html"
    args = ["gate", "--reference", d / "ref.safetensors", "--scheme", "int4-g32", "--max-kl-mean", "1"]
    assert main([*args, "--device", "cpu", "--topk", "3", "--html", page, "-q"]) in (0, 1)
    assert page.stat().st_size > 10_000 and "<html" in page.read_text(encoding="utf-8")[:500].lower()
