"""AutoRound (``autoround:int4-g128``) and its calibration text: the chunks drawn from the held-out text, the
overlap check against a brute force, a variant whose modules and logits equal AutoRound run directly (quantize,
export, load with its kernels) on the same chunks, bits equal to the checkpoint's tensors, and the CLI."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from cli_run import run_cli

from infoeval.errors import UsageError
from infoeval.input.text import Text, python_docs
from infoeval.input.tokens import encode
from infoeval.quant.methods.calibration import OVERLAP_RUN, Calibration, calibration_samples, chunk_starts, shared_runs
from infoeval.quant.variant_settings import CalibrationSettings

HAS_AUTOROUND = importlib.util.find_spec("auto_round") is not None
needs_autoround = pytest.mark.skipif(
    not HAS_AUTOROUND, reason="auto-round is not installed (pip install 'infoeval[autoround]')"
)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


@pytest.fixture(scope="module")
def docs() -> Text:
    """30 000 characters of python-docs prose: no passage repeats within it."""
    return Text(python_docs()[100_000:130_000], "file", None)


def _read(stream):
    """What the evaluation reads: its token ids and the bytes they cover."""
    return stream.ids.numpy(), int(stream.nbytes.sum())


@pytest.mark.parametrize(
    ("n", "seqlen", "samples", "seed"), [(10, 3, 2, 0), (1000, 64, 15, 1), (1000, 64, 15, 2), (64, 64, 1, 0)]
)
def test_chunk_starts_are_distinct_aligned_chunks_inside_the_text(n, seqlen, samples, seed):
    starts = chunk_starts(n, seqlen, samples, seed)
    assert len(starts) == samples == len(set(starts.tolist())) and list(starts) == sorted(starts)
    assert all(s % seqlen == 0 and s + seqlen <= n for s in starts)
    assert chunk_starts(n, seqlen, samples, seed).tolist() == starts.tolist()  # seeded
    with pytest.raises(ValueError):
        chunk_starts(n, seqlen, n // seqlen + 1, seed)


def test_different_seeds_draw_different_chunks():
    assert chunk_starts(10_000, 10, 20, 1).tolist() != chunk_starts(10_000, 10, 20, 2).tolist()


@pytest.mark.parametrize("seed", range(5))
def test_shared_runs_equals_a_brute_force(seed):
    rng = np.random.default_rng(seed)
    evaluated = rng.integers(0, 3, 300)  # a small alphabet: short runs repeat often
    chunks = rng.integers(0, 3, (4, 20))
    for run in (3, 5, 8):
        grams = {tuple(evaluated[i : i + run]) for i in range(len(evaluated) - run + 1)}
        brute = sum(tuple(row[i : i + run]) in grams for row in chunks for i in range(len(row) - run + 1))
        assert shared_runs(evaluated, chunks, run) == brute
    assert shared_runs(np.arange(100), np.arange(40, 80)[None, :], run=32) == 9
    assert shared_runs(np.arange(100), np.arange(100, 140)[None, :], run=32) == 0


def test_the_default_calibration_is_the_text_after_the_evaluated_tokens(docs, tokenizer):
    stream = encode(docs.text, tokenizer, max_tokens=1000)
    cal = calibration_samples(CalibrationSettings(samples=6, seqlen=64, seed=3), docs, *_read(stream), tokenizer)
    skip = int(stream.nbytes.sum())
    held_out = np.asarray(
        tokenizer(docs.text.encode()[skip:].decode(), add_special_tokens=False, verbose=False)["input_ids"]
    )
    starts = chunk_starts(len(held_out), 64, 6, 3)
    assert torch.equal(cal.samples, torch.from_numpy(np.stack([held_out[s : s + 64] for s in starts])))
    pv = cal.provenance
    assert (
        pv["held_out"]
        and pv["offset_bytes"] == skip > 0
        and pv["sha256"] == docs.sha256
        and pv["chunk_starts"] == starts.tolist()
    )
    assert (pv["samples"], pv["seqlen"], pv["seed"], pv["overlap_runs"]) == (6, 64, 3, 0)
    import hashlib

    assert pv["tokens_sha256"] == hashlib.sha256(cal.samples.numpy().astype("<i8").tobytes()).hexdigest()


def test_calibration_that_repeats_the_evaluated_tokens_is_refused(docs, tokenizer, tmp_path):
    stream = encode(docs.text, tokenizer, max_tokens=2000)
    twice = tmp_path / "twice.txt"
    twice.write_text(docs.text, encoding="utf-8")  # another name for the evaluated text: all of it is drawn from
    settings = CalibrationSettings(text=str(twice), samples=8, seqlen=64)
    with pytest.raises(UsageError, match=rf"repeat the evaluated tokens \(\d+ runs of {OVERLAP_RUN} tokens\)") as err:
        calibration_samples(settings, Text(docs.text + " ", "file", None), *_read(stream), tokenizer)
    assert "\n" not in str(err.value) and "calibration_overlap" in str(err.value)
    allowed = calibration_samples(
        CalibrationSettings(text=str(twice), samples=8, seqlen=64, allow_overlap=True), docs, *_read(stream), tokenizer
    )
    assert (
        allowed.provenance["overlap_runs"] > 0
        and allowed.provenance["overlap_allowed"]
        and not allowed.provenance["held_out"]
    )


def test_too_little_held_out_text_is_one_line(docs, tokenizer):
    stream = encode(docs.text, tokenizer)  # the whole text is evaluated
    with pytest.raises(UsageError, match=r"calibration needs 4 × 64 tokens and the 0 bytes of .* hold 0") as err:
        calibration_samples(CalibrationSettings(samples=4, seqlen=64), docs, *_read(stream), tokenizer)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kw", "message"), [({"samples": 0}, "calibration_samples 0"), ({"seqlen": 4}, "calibration_seqlen 4")]
)
def test_bad_calibration_settings(kw, message):
    """The field's name as each front end spells it: the keyword in Python, the option on the command line."""
    from infoeval.errors import flag_spelling

    with pytest.raises(UsageError, match=f"^{message}"):
        CalibrationSettings(**kw)
    with flag_spelling(), pytest.raises(UsageError, match="^--" + message.replace("_", "-")):
        CalibrationSettings(**kw)


@needs_autoround
@pytest.mark.parametrize(
    ("text", "settings"),
    [
        ("autoround:int4", {"bits": 4, "group_size": 128, "sym": True, "iters": 200, "amp": False}),
        ("autoround:int2-g64-asym-iters50", {"bits": 2, "group_size": 64, "sym": False, "iters": 50, "amp": False}),
        ("autoround:int8-channel", {"bits": 8, "group_size": -1, "sym": True, "iters": 200, "amp": False}),
    ],
)
def test_autoround_specs(text, settings):
    from infoeval.quant.methods import parse_method

    m = parse_method(text)
    assert (
        m.settings == settings
        and m.calibrated
        and m.group_size == (None if settings["group_size"] < 0 else settings["group_size"])
    )


@needs_autoround
@pytest.mark.parametrize("text", ["autoround:int5", "autoround:int4-g12", "autoround:int4-g0", "autoround:nf4"])
def test_bad_autoround_specs(text):
    from infoeval.quant.methods import parse_method

    with pytest.raises(UsageError, match="is not an autoround scheme") as err:
        parse_method(text)
    assert "\n" not in str(err.value)


def _direct(model_dir, samples: torch.Tensor, tmp_path, **settings):
    """AutoRound as its README calls it, on a fresh model, exported and loaded with its kernels."""
    from auto_round import AutoRound
    from torch._tensor_str import PRINT_OPTS
    from transformers import AutoModelForCausalLM, AutoRoundConfig, AutoTokenizer

    printing = {k: getattr(PRINT_OPTS, k) for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ar = AutoRound(
        model,
        AutoTokenizer.from_pretrained(model_dir),
        dataset=[r[None, :] for r in samples],
        nsamples=len(samples),
        seqlen=samples.shape[1],
        batch_size=8,
        seed=42,
        amp=False,
        enable_torch_compile=False,
        device_map="cpu",
        **settings,
    )
    ar.quantize()
    ar.save_quantized(str(tmp_path / "direct"), format="auto_round")
    torch.set_printoptions(**printing)  # AutoRound sets them for the whole process
    return AutoModelForCausalLM.from_pretrained(
        tmp_path / "direct", dtype=torch.float32, device_map="cpu", quantization_config=AutoRoundConfig(backend="auto")
    )


@pytest.fixture(scope="module")
def variant_and_direct(tiny_llama_dir, docs, tokenizer, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from infoeval.quant.methods import parse_method
    from infoeval.quant.methods.variant import build_method_variant

    stream = encode(docs.text, tokenizer, max_tokens=500)
    cal = calibration_samples(CalibrationSettings(samples=8, seqlen=64), docs, *_read(stream), tokenizer)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    before, printed = {k: v.clone() for k, v in model.state_dict().items()}, str(torch.tensor([0.123456, 1e-9]))
    variant = build_method_variant(
        model, parse_method("autoround:int4-g32-iters4"), tokenizer=tokenizer, calibration=cal
    )
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the reference is left as it was
    assert str(torch.tensor([0.123456, 1e-9])) == printed  # AutoRound sets torch's print options; they are put back
    direct = _direct(
        tiny_llama_dir, cal.samples, tmp_path_factory.mktemp("ar"), bits=4, group_size=32, sym=True, iters=4
    )
    return model, variant, direct, cal


@needs_autoround
def test_the_variant_is_autoround_run_directly(variant_and_direct):
    model, variant, direct, _ = variant_and_direct
    ids = torch.randint(3, 500, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for layer in variant.layers:
            if layer.report.quantized:
                x = torch.randn(5, layer.report.shape[1], generator=torch.Generator().manual_seed(1))
                assert torch.equal(
                    variant.model.get_submodule(layer.report.name)(x), direct.get_submodule(layer.report.name)(x)
                )
        ours, theirs, ref = (
            variant.model(input_ids=ids).logits,
            direct(input_ids=ids).logits,
            model(input_ids=ids).logits,
        )
    if direct.dtype == torch.float32:  # its PyTorch kernels (without auto-round-lib) make the loaded model float16
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    assert not torch.allclose(ours, ref, atol=1e-3)  # it did quantize


@needs_autoround
def test_autoround_bits_are_its_checkpoints_tensors(variant_and_direct):
    _, variant, _, cal = variant_and_direct
    q = [x for x in variant.layers if x.report.quantized]
    assert len(q) == 14 and all(x.details["kernel"] for x in q)
    for x in q:
        rows, cols = x.report.shape  # (out, in): codes in int32 words, zero points packed the same, float16 scales
        groups = cols // 32
        assert x.stored_bytes == rows * cols * 4 // 8 + groups * rows * 4 // 8 + groups * rows * 2
        assert x.report.sqnr_db is not None and 10 < x.report.sqnr_db < 40
    assert variant.bits_per_weight() == pytest.approx(4 + 4 / 32 + 16 / 32)
    s = variant.summary()
    assert s["calibration"] == cal.provenance and s["tune_s"] > 0 and s["quantize_s"] >= s["tune_s"] and s["kernel"]


@needs_autoround
def test_quantize_compare_takes_autoround_and_records_the_calibration(tmp_path, tiny_llama_dir, docs):
    text = tmp_path / "docs.txt"
    text.write_text(docs.text, encoding="utf-8")
    base = [
        "quantize-compare",
        str(tiny_llama_dir),
        "--text",
        str(text),
        "--max-tokens",
        "512",
        "--ctx",
        "128",
        "--schemes",
        "autoround:int4-g32-iters2",
        "--calibration-samples",
        "4",
        "--calibration-seqlen",
        "32",
    ]
    run = run_cli([*base, "--json", str(tmp_path / "r.json"), "--quiet"], cwd=tmp_path)  # in this process (cli_run.py)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads((tmp_path / "r.json").read_text())
    cal = data["provenance"]["calibration"]
    assert (
        cal["held_out"] and cal["sha256"] == docs.sha256 and (cal["samples"], cal["seqlen"], cal["seed"]) == (4, 32, 42)
    )
    assert (
        data["variants"][0]["quantization"]["calibration"] == cal
        and data["variants"][0]["quantization"]["scheme"]["library"] == "auto-round"
    )
    (tmp_path / "more.txt").write_text(
        "A preface.\n\n" + docs.text[:1200], encoding="utf-8"
    )  # within the evaluated tokens
    bad = run_cli([*base, "--calibration", str(tmp_path / "more.txt"), "--quiet"], cwd=tmp_path)
    assert (
        bad.returncode == 2
        and "repeat the evaluated tokens" in bad.stderr
        and len(bad.stderr.strip().splitlines()) == 1
    )
    ref = run_cli(
        [
            "reference",
            str(tiny_llama_dir),
            "--text",
            str(text),
            "--max-tokens",
            "512",
            "--ctx",
            "128",
            "-o",
            str(tmp_path / "ref.safetensors"),
            "-q",
        ],
        cwd=tmp_path,
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    gate = run_cli(
        [
            "gate",
            "--reference",
            str(tmp_path / "ref.safetensors"),
            "--scheme",
            "autoround:int4-g32-iters2",
            "--calibration-samples",
            "4",
            "--calibration-seqlen",
            "32",
            "--max-kl-mean",
            "10",
            "--min-top1",
            "0",
            "--max-kl-p99",
            "100",
            "--max-ppl-ratio",
            "10",
            "--max-bpb-increase",
            "10",
            "--json",
            str(tmp_path / "g.json"),
            "-q",
        ],
        cwd=tmp_path,
    )
    assert gate.returncode == 0, gate.stderr[-2000:]
    g = json.loads((tmp_path / "g.json").read_text())
    assert (
        g["candidate"]["quantization"]["calibration"]["tokens_sha256"] == cal["tokens_sha256"]
    )  # the same held-out chunks
    assert g["metrics"]["kl_mean"] == pytest.approx(
        data["variants"][0]["metrics"]["kl_mean"], rel=0.02
    )  # the gate reads a compact reference


@needs_autoround
def test_a_group_that_does_not_divide_the_rows_is_one_line_before_tuning(tiny_llama_dir, docs, tokenizer):
    from transformers import AutoModelForCausalLM

    from infoeval.quant.methods import parse_method
    from infoeval.quant.methods.variant import build_method_variant

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    cal = Calibration(torch.zeros(1, 8, dtype=torch.int64), {"seed": 0})
    with pytest.raises(UsageError, match="rows of 64, not a multiple of 48; give a group size that divides 64") as err:
        build_method_variant(model, parse_method("autoround:int4-g48"), tokenizer=tokenizer, calibration=cal)
    assert "\n" not in str(err.value)
