"""The lockstep loop and the pipelines around it, against brute force on the tiny offline models.

Every per-position column that ``run_lockstep`` / ``runs.quantize_compare`` produce is recomputed here the
slow, obvious way: tokenize the text ourselves, work out by hand which window scores which token, run our own
full forward pass (no ``logits_to_keep``), take our own ``log_softmax`` in float64 and index the target
ourselves. Variants are brute-forced from a deep copy of the model quantized *in place* with
``fake_quantize_`` (no weight swapping). The aggregated metrics are then recomputed from their definitions.
"""

from __future__ import annotations

import bz2
import copy
import gzip
import lzma
import math

import numpy as np
import pytest
import torch
import zstandard
from tiny_models import as_json

from infoeval.comparison import compare as compare_pipeline
from infoeval.comparison.compare import REF_COLUMNS, VARIANT_COLUMNS, run_lockstep
from infoeval.input import prepare as runs
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.compressors import COMPRESSORS, compress_all
from infoeval.models import load_model
from infoeval.quant.apply import fake_quantize_, quantize_variant
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.variant_settings import VariantSettings

CPU = torch.device("cpu")
LN2 = math.log(2.0)

# float32 pipeline vs float64 brute force on the same logits. Observed on the tiny models: NLL ≤ 1.2e-6,
# KL/reverse KL ≤ 2e-5 at KL ≈ 1 (3e-5 relative) and ≤ 1.5e-6 at small KL, TV ≤ 4e-7, entropy ≤ 3e-5.
NLL_ATOL = 2e-5
# entropies are float32 dot products over the vocabulary (accumulated sequentially): ~1e-5 nats at V = 512
ENT_ATOL = 1e-4
DIV_ATOL = 5e-6  # kl, rkl, tv: values from 1e-7 (int8) to ~1 (int2)
DIV_RTOL = 2e-4


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def text_file(tmp_path_factory, tiny_text):
    """tiny_text plus one trailing newline (which the llama.cpp protocol, and only it, strips)."""
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    path.write_bytes((tiny_text + "\n").encode("utf-8"))
    return path


def _settings(model_dir, text_file, ctx, stride=None, protocol="rolling", prefix="auto", max_tokens=None):
    return (
        ModelSettings(str(model_dir), "cpu", "float32"),
        TextSettings(text=text_file, max_tokens=max_tokens),
        WindowSettings(ctx, stride, protocol, prefix),
    )


def _prepare(model_dir, text_file, **kw):
    return runs.prepare(*_settings(model_dir, text_file, **kw), runs.Reporter())


# ------------------------------------------------------------------------------------------- brute force
def _text_ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False, verbose=False).input_ids)


def _expected_scoring(n: int, ctx: int, stride: int | None, protocol: str) -> list[tuple[int, int, int]]:
    """(target position t, window index k, window start) for every scored target, by the README's rules."""
    out = []
    if protocol == "rolling":
        s = stride or ctx
        for t in range(1, n):
            k = max(0, -(-(t - ctx) // s))  # first window whose end min(kS + C, n − 1) reaches t
            out.append((t, k, k * s))
    else:
        for k in range(n // ctx):
            out += [(k * ctx + j + 1, k, k * ctx) for j in range(ctx // 2, ctx - 1)]
    return out


@torch.no_grad()
def _brute_logprobs(model, ids: list[int], scoring, ctx: int, protocol: str, bos: int | None) -> torch.Tensor:
    """float64 log-probabilities (n_scored, V) of each scored target's distribution, from whole-window
    forward passes: window k feeds ids[start : start + ctx] (first token → BOS for llama.cpp when BOS is added)."""
    out = []
    by_window: dict[int, list[tuple[int, int]]] = {}
    for t, k, start in scoring:
        by_window.setdefault(k, []).append((t, start))
    for k in sorted(by_window):
        start = by_window[k][0][1]
        inp = list(ids[start : min(start + ctx, len(ids))])
        if protocol == "llama.cpp" and bos is not None:
            inp[0] = bos
        logits = model(input_ids=torch.tensor([inp])).logits[0].to(torch.float64)
        lp = torch.log_softmax(logits, dim=-1)
        for t, _ in by_window[k]:
            out.append(lp[t - start - 1])  # the logit of input t−1 predicts token t
    return torch.stack(out)


def _nll(lp: torch.Tensor, ids: list[int], positions) -> np.ndarray:
    return np.array([-float(lp[i, ids[t]]) for i, t in enumerate(positions)])


def _divergences(lp: torch.Tensor, lq: torch.Tensor) -> dict[str, np.ndarray]:
    p, q = lp.exp(), lq.exp()
    return {
        "kl": (p * (lp - lq)).sum(-1).numpy(),
        "rkl": (q * (lq - lp)).sum(-1).numpy(),
        "tv": (0.5 * (p - q).abs().sum(-1)).numpy(),
        "entropy": (-(q * lq).sum(-1)).numpy(),
    }


def _assert_top1(top1: np.ndarray, lp: torch.Tensor, lq: torch.Tensor) -> None:
    """top1 == (argmax q == argmax p); a disagreement is only allowed at a float32 near-tie."""
    expected = (lq.argmax(-1) == lp.argmax(-1)).numpy()
    for i in np.flatnonzero(top1.astype(bool) != expected):
        gap_p = float(lp[i].topk(2).values.diff().abs())
        gap_q = float(lq[i].topk(2).values.diff().abs())
        assert min(gap_p, gap_q) < 1e-5, f"top1 differs at row {i} without a near-tie"
    assert (top1.astype(bool) == expected).mean() > 0.99


# ---------------------------------------------------------- (a) + (b) reference NLL and positions vs brute force
REF_CASES = [
    pytest.param(16, None, "rolling", None, id="rolling-c16"),
    pytest.param(32, 8, "rolling", None, id="rolling-c32-s8"),
    pytest.param(17, 16, "rolling", None, id="rolling-c17-s16"),
    pytest.param(24, 1, "rolling", 300, id="rolling-c24-s1-max300"),
    pytest.param(64, None, "llama.cpp", None, id="llamacpp-c64"),
    pytest.param(33, None, "llama.cpp", None, id="llamacpp-c33"),
]


@pytest.mark.parametrize("ctx,stride,protocol,max_tokens", REF_CASES)
def test_reference_columns_equal_brute_force(tiny_llama_dir, text_file, ctx, stride, protocol, max_tokens):
    """Per-position NLL, entropy, argmax, token ids, windows, contexts and bytes equal an independent computation,
    and every scored position appears exactly once."""
    p = _prepare(tiny_llama_dir, text_file, ctx=ctx, stride=stride, protocol=protocol, max_tokens=max_tokens)
    tok, model = p.loaded.tokenizer, p.loaded.model
    text = text_file.read_text(encoding="utf-8")
    if protocol == "llama.cpp":
        assert text.endswith("\n")
        text = text[:-1]  # llama.cpp strips one trailing newline
    bos = tok.bos_token_id
    assert bos is not None and p.protocol.prefix_id == bos  # the tiny Llama adds BOS: auto → BOS, both protocols
    ids = [bos, *_text_ids(tok, text)]
    if max_tokens is not None:
        ids = ids[: max_tokens + 1]  # the prefix and the first max_tokens text tokens
    assert p.stream.ids.tolist() == ids

    cols = run_lockstep(model, p.stream, p.windows, (), p.protocol.prefix_id)
    ref = cols.reference
    assert set(ref) == set(REF_COLUMNS)
    scoring = _expected_scoring(len(ids), ctx, stride, protocol)
    positions = [t for t, _, _ in scoring]

    # (b) each scored position exactly once, in stream order, in the window that the rules say
    assert ref["position"].tolist() == positions
    assert len(set(ref["position"].tolist())) == len(positions) == cols.n
    if protocol == "rolling":
        assert positions == list(range(1, len(ids)))  # every token after the prefix, once
    else:
        n_chunks = len(ids) // ctx
        assert len(positions) == n_chunks * (ctx - 1 - ctx // 2)
    assert ref["window"].tolist() == [k for _, k, _ in scoring]
    assert ref["context"].tolist() == [t - start for t, _, start in scoring]
    assert ref["token_id"].tolist() == [ids[t] for t in positions]
    assert ref["bytes"].tolist() == p.stream.nbytes[positions].tolist()
    assert sum(w.n_scored for w in p.windows) == cols.n == p.protocol.scored_tokens
    for w in p.windows:  # the windows' own description agrees with the columns
        sel = ref["window"] == w.index
        assert ref["position"][sel].tolist() == list(range(w.first_target, w.first_target + w.n_scored))

    # (a) NLL, entropy and argmax against our own forward pass and float64 log_softmax
    lp = _brute_logprobs(model, ids, scoring, ctx, protocol, bos)
    np.testing.assert_allclose(ref["nll"], _nll(lp, ids, positions), rtol=0, atol=NLL_ATOL)
    np.testing.assert_allclose(ref["entropy"], (-(lp.exp() * lp).sum(-1)).numpy(), rtol=0, atol=ENT_ATOL)
    agree = ref["argmax"] == lp.argmax(-1).numpy()
    assert agree.mean() > 0.99
    assert ref["nll"].min() >= 0 and ref["nll"].mean() < math.log(len(tok))  # the tiny model beats uniform


def test_prefix_replaced_by_bos_in_every_llamacpp_chunk(tiny_llama_dir, text_file):
    """llama.cpp: chunk k starts at k·C and its first input is BOS; scoring with the original first token differs."""
    ctx = 32
    p = _prepare(tiny_llama_dir, text_file, ctx=ctx, protocol="llama.cpp")
    assert [w.start for w in p.windows] == [k * ctx for k in range(len(p.stream) // ctx)]
    assert all(w.replace_first_with_bos and w.length == ctx for w in p.windows)
    cols = run_lockstep(p.loaded.model, p.stream, p.windows, (), p.protocol.prefix_id)
    ids = p.stream.ids.tolist()
    scoring = _expected_scoring(len(ids), ctx, None, "llama.cpp")
    lp_no_bos = _brute_logprobs(p.loaded.model, ids, scoring, ctx, "llama.cpp", None)  # original first tokens
    differs = np.abs(cols.reference["nll"] - _nll(lp_no_bos, ids, [t for t, _, _ in scoring])) > 1e-3
    chunk_of = cols.reference["window"]
    assert not differs[chunk_of == 0].any()  # chunk 0 starts with BOS anyway
    assert differs[chunk_of > 0].any()  # the others really were fed BOS


# ------------------------------------------------------------------ (c) variant columns vs quantized copies
VARIANT_CASES = [
    # (model fixture, schemes, include, ctx, stride)
    pytest.param("tiny_llama_dir", "int8-channel,int4-g32,int3-g48-asym,int2-channel", (), 32, 16, id="llama"),
    pytest.param("tiny_llama_dir", "int4-channel", ("lm_head",), 64, None, id="llama-lm_head"),
    pytest.param("tiny_qwen3_dir", "int4-g64,int8-channel-asym", (), 48, None, id="qwen3-partial-groups"),
]


@pytest.fixture(scope="module")
def compared(request, tiny_llama_dir, tiny_qwen3_dir, text_file):
    """quantize_compare runs keyed by case id, each with the Prepared stream/windows (prepare is deterministic)."""
    cache = {}

    def get(model_name, schemes, include, ctx, stride):
        key = (model_name, schemes, include, ctx, stride)
        if key not in cache:
            model_dir = {"tiny_llama_dir": tiny_llama_dir, "tiny_qwen3_dir": tiny_qwen3_dir}[model_name]
            model_settings, text_settings, window_settings = _settings(model_dir, text_file, ctx=ctx, stride=stride)
            result, cols = as_json(
                compare_pipeline.quantize_compare(
                    model_settings, text_settings, window_settings, VariantSettings(schemes, include, ())
                )
            )
            p = runs.prepare(model_settings, text_settings, window_settings, runs.Reporter())
            cache[key] = (result, cols, p)
        return cache[key]

    return get


@pytest.mark.parametrize("model_name,schemes,include,ctx,stride", VARIANT_CASES)
def test_variant_columns_equal_quantized_copies(compared, model_name, schemes, include, ctx, stride):
    """nll, kl, rkl, tv, entropy and top1 of every variant equal float64 values from a deep copy of the model
    quantized in place (no swapping), on our own windows."""
    result, cols, p = compared(model_name, schemes, include, ctx, stride)
    ids = p.stream.ids.tolist()
    scoring = _expected_scoring(len(ids), ctx, stride, "rolling")
    positions = [t for t, _, _ in scoring]
    assert cols.reference["position"].tolist() == positions
    assert cols.reference["token_id"].tolist() == [ids[t] for t in positions]  # same stream as the run's
    lp = _brute_logprobs(p.loaded.model, ids, scoring, ctx, "rolling", None)
    np.testing.assert_allclose(cols.reference["nll"], _nll(lp, ids, positions), rtol=0, atol=NLL_ATOL)
    names = [s.strip() for s in schemes.split(",")]
    assert list(cols.variants) == names == [v["name"] for v in result["variants"]]
    for name in names:
        var = cols.variants[name]
        assert set(var) == set(VARIANT_COLUMNS) and all(len(c) == cols.n for c in var.values())
        qmodel = copy.deepcopy(p.loaded.model)
        report = fake_quantize_(qmodel, parse_scheme(name), include, ())
        assert report.n_quantized == (15 if include else 14)
        lq = _brute_logprobs(qmodel, ids, scoring, ctx, "rolling", None)
        np.testing.assert_allclose(var["nll"], _nll(lq, ids, positions), rtol=0, atol=NLL_ATOL, err_msg=name)
        for col, expected in _divergences(lp, lq).items():
            tol = ENT_ATOL if col == "entropy" else DIV_ATOL
            np.testing.assert_allclose(var[col], expected, rtol=DIV_RTOL, atol=tol, err_msg=f"{name} {col}")
        _assert_top1(var["top1"], lp, lq)
        assert var["kl"].mean() > 1e-6  # the variant really differs from the reference


# ------------------------------------------------------------------------------- (d) weights are restored
def _snapshot(model):
    return {
        n: (t, t.detach().clone()) for n, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers()]
    }


def _assert_unchanged(model, snap):
    now = dict([*model.named_parameters(remove_duplicate=False), *model.named_buffers()])
    assert set(now) == set(snap)
    for n, (obj, values) in snap.items():
        assert now[n] is obj, f"{n} is a different tensor after run_lockstep"
        assert torch.equal(now[n].detach(), values), f"{n} changed"


def test_weights_unchanged_after_run_lockstep(tiny_llama_dir, text_file):
    """Swapping puts back the very same Parameter objects with the very same values."""
    p = _prepare(tiny_llama_dir, text_file, ctx=64, max_tokens=200)
    model = p.loaded.model
    snap = _snapshot(model)
    variants = [quantize_variant(model, parse_scheme(s), ("lm_head",)) for s in ("int2-channel", "int4-g16-asym")]
    _assert_unchanged(model, snap)  # quantizing does not touch the model either
    cols = run_lockstep(model, p.stream, p.windows, variants, p.protocol.prefix_id)
    _assert_unchanged(model, snap)
    assert all(cols.variants[v.name]["kl"].mean() > 1e-3 for v in variants)  # the swaps did take effect
    # a fresh reference pass after the variants gives the same numbers as before them
    again = run_lockstep(model, p.stream, p.windows, (), p.protocol.prefix_id)
    np.testing.assert_array_equal(again.reference["nll"], cols.reference["nll"])


def test_weights_restored_when_the_forward_pass_fails(tiny_llama_dir, text_file):
    """An exception inside a variant's forward pass still puts the original weights back."""
    p = _prepare(tiny_llama_dir, text_file, ctx=32, max_tokens=40)
    model = p.loaded.model
    snap = _snapshot(model)
    variant = quantize_variant(model, parse_scheme("int4-channel"))
    name = next(iter(variant.weights))
    bad = dict(variant.weights)
    bad[name] = torch.nn.Parameter(torch.zeros(3, 3), requires_grad=False)  # wrong shape: the forward fails
    broken = type(variant)(variant.scheme, bad, variant.layers)
    with pytest.raises(RuntimeError):
        run_lockstep(model, p.stream, p.windows, [broken], p.protocol.prefix_id)
    _assert_unchanged(model, snap)


def test_tied_lm_head_quantized_without_touching_embeddings(tiny_llama_dir, text_file):
    """A head tied to the embeddings, quantized with include=lm_head: the variant's numbers are those of a model
    whose head alone is quantized, and the tie and the embeddings survive."""
    p = _prepare(tiny_llama_dir, text_file, ctx=64, max_tokens=300)
    model = p.loaded.model
    emb = model.model.embed_tokens.weight
    model.lm_head.weight = emb  # tie them (the saved tiny model is untied)
    snap = _snapshot(model)
    scheme = parse_scheme("int3-channel")
    variant = quantize_variant(model, scheme, ("lm_head",))
    head = next(r for r in variant.layers if r.name == "lm_head")
    assert head.quantized and head.tied_to == "model.embed_tokens.weight"
    cols = run_lockstep(model, p.stream, p.windows, [variant], p.protocol.prefix_id)
    _assert_unchanged(model, snap)
    assert model.lm_head.weight is model.model.embed_tokens.weight is emb

    ids = p.stream.ids.tolist()
    scoring = _expected_scoring(len(ids), 64, None, "rolling")
    lp = _brute_logprobs(model, ids, scoring, 64, "rolling", None)
    right = copy.deepcopy(model)  # deepcopy keeps the tie
    assert right.lm_head.weight is right.model.embed_tokens.weight
    fake_quantize_(right, scheme, ("lm_head",))
    assert torch.equal(right.model.embed_tokens.weight, emb)  # embeddings keep their weights
    assert not torch.equal(right.lm_head.weight, emb)
    kl_right = _divergences(lp, _brute_logprobs(right, ids, scoring, 64, "rolling", None))["kl"]
    np.testing.assert_allclose(cols.variants[scheme.name]["kl"], kl_right, rtol=DIV_RTOL, atol=DIV_ATOL)
    wrong = copy.deepcopy(model)  # head and embeddings both quantized: what a naive in-place tie would do
    with torch.no_grad():
        wrong.model.embed_tokens.weight.copy_(right.lm_head.weight)
    kl_wrong = _divergences(lp, _brute_logprobs(wrong, ids, scoring, 64, "rolling", None))["kl"]
    assert abs(kl_wrong.mean() - kl_right.mean()) > 10 * DIV_ATOL + 1e-3 * kl_right.mean()  # the check can tell


# ------------------------------------------------------------------------ (e) aggregated metrics by definition
from test_standard_errors import _brute_window_batches, brute_se  # noqa: E402  (the loops written out)


def _batch_se(x, windows):
    """The SE of a mean over positions: batch means over whole windows, written out with loops in
    test_standard_errors."""
    return brute_se(x.tolist(), windows.tolist())


@pytest.mark.parametrize("model_name,schemes,include,ctx,stride", VARIANT_CASES[:1] + VARIANT_CASES[2:])
def test_metrics_equal_their_definitions(compared, text_file, model_name, schemes, include, ctx, stride):
    result, cols, p = compared(model_name, schemes, include, ctx, stride)
    ref = result["reference"]
    nll = cols.reference["nll"].astype(np.float64)
    n_bytes = len(text_file.read_bytes())  # prefix BOS/EOS and no max-tokens: the whole file is scored
    assert ref["tokens"] == nll.size == len(p.stream) - 1
    assert ref["bytes"] == n_bytes == int(cols.reference["bytes"].sum())
    assert ref["ppl"] == pytest.approx(math.exp(nll.mean()), rel=1e-12)
    assert ref["ppl_se"] == pytest.approx(math.exp(nll.mean()) * _batch_se(nll, cols.reference["window"]), rel=1e-9)
    assert ref["nll_mean"] == pytest.approx(nll.mean(), rel=1e-12)
    assert ref["bits_per_token"] == pytest.approx(nll.mean() / LN2, rel=1e-12)
    assert ref["bits_per_byte"] == pytest.approx(nll.sum() / LN2 / n_bytes, rel=1e-12)
    assert ref["total_bits"] == pytest.approx(nll.sum() / LN2, rel=1e-12)
    ent_bits = cols.reference["entropy"].astype(np.float64) / LN2
    assert ref["entropy_mean"] == pytest.approx(ent_bits.mean(), rel=1e-12)
    for q in (10, 50, 90):
        assert ref[f"entropy_p{q}"] == pytest.approx(np.percentile(ent_bits, q), rel=1e-12)
    for v in result["variants"]:
        m, var = v["metrics"], cols.variants[v["name"]]
        nv = var["nll"].astype(np.float64)
        diff = nv - nll
        kl = var["kl"].astype(np.float64)
        a = var["top1"].astype(np.float64).mean()
        assert m["tokens"] == nv.size
        assert m["ppl"] == pytest.approx(math.exp(nv.mean()), rel=1e-12)
        assert m["ppl_se"] == pytest.approx(math.exp(nv.mean()) * _batch_se(nv, cols.reference["window"]), rel=1e-9)
        assert m["ln_ppl_ratio"] == pytest.approx(diff.mean(), rel=1e-9, abs=1e-15)
        assert m["ln_ppl_ratio"] == pytest.approx(math.log(m["ppl"] / ref["ppl"]), rel=1e-6, abs=1e-12)
        assert m["ln_ppl_ratio_se"] == pytest.approx(_batch_se(diff, cols.reference["window"]), rel=1e-9)
        assert m["ppl_ratio"] == pytest.approx(m["ppl"] / ref["ppl"], rel=1e-9)
        assert m["kl_mean"] == pytest.approx(kl.mean(), rel=1e-12)
        assert m["kl_se"] == pytest.approx(_batch_se(kl, cols.reference["window"]), rel=1e-9)
        for key, q in (("kl_p50", 0.5), ("kl_p90", 0.9), ("kl_p99", 0.99), ("kl_p999", 0.999)):
            assert m[key] == pytest.approx(np.quantile(kl, q), rel=1e-12), key
        assert m["kl_max"] == kl.max()
        assert m["kl_p50"] <= m["kl_p90"] <= m["kl_p99"] <= m["kl_p999"] <= m["kl_max"]
        assert m["top1"] == pytest.approx(a, rel=1e-12)
        assert m["top1_se"] == pytest.approx(
            _batch_se(var["top1"].astype(np.float64), cols.reference["window"]), rel=1e-9
        )
        batches = np.bincount(np.asarray(_brute_window_batches(cols.reference["window"].tolist(), math.isqrt(nv.size))))
        assert (
            m["se_blocks"] == batches.size >= 2
            and m["se_block"] == round(nv.size / batches.size)
            and batches.min() >= math.isqrt(nv.size)
        )
        assert m["rkl_mean"] == pytest.approx(var["rkl"].astype(np.float64).mean(), rel=1e-12)
        assert m["tv_mean"] == pytest.approx(var["tv"].astype(np.float64).mean(), rel=1e-12)
        assert m["bits_per_byte"] == pytest.approx(nv.sum() / LN2 / n_bytes, rel=1e-12)
        assert m["bits_per_byte_delta"] == pytest.approx(diff.sum() / LN2 / n_bytes, rel=1e-6, abs=1e-12)
        assert m["bits_per_token"] == pytest.approx(nv.mean() / LN2, rel=1e-12)
        summary = v["quantization"]
        sq = [r["sqnr_db"] for r in summary["layers"] if r["action"] == "quantized"]
        assert summary["sqnr_db_min"] == min(sq) and summary["sqnr_db_mean"] == pytest.approx(np.mean(sq))


def _check_eval_split(t: dict) -> None:
    """The loop's time split between the forward passes and the statistics (on a CPU), within eval_s."""
    assert (
        0 < t["eval_forward_s"]
        and 0 < t["eval_statistics_s"]
        and t["eval_forward_s"] + t["eval_statistics_s"] <= t["eval_s"]
    )


def test_max_tokens_caps_scored_tokens_and_bytes(tiny_llama_dir, text_file):
    """--max-tokens N scores tokens 1 … N; the bytes are the UTF-8 bytes of the text those N tokens cover."""
    n = 100
    result, cols = as_json(
        compare_pipeline.quantize_compare(
            *_settings(tiny_llama_dir, text_file, ctx=32, max_tokens=n), VariantSettings("int8-channel")
        )
    )
    text = text_file.read_text(encoding="utf-8")
    tok = load_model(str(tiny_llama_dir), CPU, torch.float32).tokenizer
    starts = [s for s, _ in tok(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping]
    n_bytes = len(text[: starts[n]].encode("utf-8"))
    assert result["reference"]["tokens"] == n == cols.n
    assert result["reference"]["bytes"] == n_bytes
    assert cols.reference["position"].tolist() == list(range(1, n + 1))
    assert result["reference"]["bits_per_byte"] == pytest.approx(
        cols.reference["nll"].astype(float).sum() / LN2 / n_bytes
    )
    _check_eval_split(result["timings"])


# --------------------------------------------------------------------------------------- (f) scheme ordering
@pytest.mark.parametrize("model_name", ["tiny_llama_dir", "tiny_qwen3_dir"])
def test_fewer_bits_more_kl(request, text_file, model_name):
    """int8-channel < int4-channel < int2-channel in mean KL (and the reverse in top-1 agreement)."""
    model_settings, text_settings, window_settings = _settings(
        request.getfixturevalue(model_name), text_file, ctx=64, max_tokens=600
    )
    result, _ = as_json(
        compare_pipeline.quantize_compare(
            model_settings, text_settings, window_settings, VariantSettings("int2-channel,int8-channel,int4-channel")
        )
    )
    m = {v["name"]: v["metrics"] for v in result["variants"]}
    kl = [m[s]["kl_mean"] for s in ("int8-channel", "int4-channel", "int2-channel")]
    top1 = [m[s]["top1"] for s in ("int8-channel", "int4-channel", "int2-channel")]
    assert 0 < kl[0] < kl[1] < kl[2], kl
    assert 1 >= top1[0] > top1[1] > top1[2], top1
    assert kl[1] > 10 * kl[0] and kl[2] > 5 * kl[1]  # not a coin toss: each step costs an order of magnitude


# ----------------------------------------------------------------------------------------- (g) Qwen3 prefixes
def test_qwen3_auto_prefix_is_eos(tiny_qwen3_dir, text_file):
    """No BOS: --prefix auto puts EOS in front; every text token is scored; NLL equals brute force."""
    p = _prepare(tiny_qwen3_dir, text_file, ctx=40)
    tok = p.loaded.tokenizer
    assert tok.bos_token_id is None and tok.eos_token_id is not None
    assert p.protocol.prefix_id == tok.eos_token_id
    assert "EOS" in p.protocol.prefix_token
    ids = [tok.eos_token_id, *_text_ids(tok, text_file.read_text(encoding="utf-8"))]
    assert p.stream.ids.tolist() == ids
    cols = run_lockstep(p.loaded.model, p.stream, p.windows, (), p.protocol.prefix_id)
    scoring = _expected_scoring(len(ids), 40, None, "rolling")
    assert cols.reference["position"].tolist() == list(range(1, len(ids)))
    lp = _brute_logprobs(p.loaded.model, ids, scoring, 40, "rolling", None)
    np.testing.assert_allclose(cols.reference["nll"], _nll(lp, ids, range(1, len(ids))), rtol=0, atol=NLL_ATOL)
    assert int(cols.reference["bytes"].sum()) == len(text_file.read_bytes())


@pytest.mark.parametrize("model_name", ["tiny_qwen3_dir", "tiny_llama_dir"])
def test_prefix_none_leaves_first_token_unscored(request, text_file, model_name):
    p = _prepare(request.getfixturevalue(model_name), text_file, ctx=40, prefix="none")
    tok = p.loaded.tokenizer
    ids = _text_ids(tok, text_file.read_text(encoding="utf-8"))
    assert p.protocol.prefix_id is None and p.stream.prefix_id is None
    assert p.stream.ids.tolist() == ids  # no prefix at all
    cols = run_lockstep(p.loaded.model, p.stream, p.windows, (), None)
    assert cols.reference["position"].tolist() == list(range(1, len(ids)))  # text token 0 is context only
    assert cols.n == len(ids) - 1 == p.protocol.scored_tokens and p.protocol.context_only_tokens == 1
    assert cols.reference["context"][0] == 1  # the first scored token sees only the first text token
    first_bytes = len(tok.decode(ids[:1]).encode("utf-8"))
    assert int(cols.reference["bytes"].sum()) == len(text_file.read_bytes()) - first_bytes
    scoring = _expected_scoring(len(ids), 40, None, "rolling")
    lp = _brute_logprobs(p.loaded.model, ids, scoring, 40, "rolling", None)
    np.testing.assert_allclose(cols.reference["nll"], _nll(lp, ids, range(1, len(ids))), rtol=0, atol=NLL_ATOL)


# ------------------------------------------------------------------------------ (h) compress-bits: the bytes
def _direct_sizes(data: bytes) -> dict[str, int]:
    return {
        "utf-8": len(data),
        "gzip -9": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "bz2 -9": len(bz2.compress(data, compresslevel=9)),
        "xz -9": len(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9)),
        "zstd -19": len(zstandard.ZstdCompressor(level=19).compress(data)),
    }


def test_scored_bytes_rolling_is_the_whole_file(tiny_llama_dir, text_file):
    p = _prepare(tiny_llama_dir, text_file, ctx=48, stride=20)
    assert compare_pipeline.scored_bytes(p) == text_file.read_bytes()


def test_scored_bytes_llamacpp_is_concatenated_scored_spans(tiny_llama_dir, text_file):
    """llama.cpp: the bytes of tokens C/2+1 … C−1 of each chunk, chunk after chunk, from our own offsets."""
    ctx = 64
    p = _prepare(tiny_llama_dir, text_file, ctx=ctx, protocol="llama.cpp")
    text = text_file.read_text(encoding="utf-8")[:-1]
    raw = text.encode("utf-8")
    offsets = p.loaded.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
    byte_start = [len(text[:s].encode("utf-8")) for s, _ in offsets] + [len(raw)]  # text token i: [bs[i], bs[i+1])
    expected = b""
    for k in range(len(p.stream) // ctx):
        first, last = k * ctx + ctx // 2 + 1, k * ctx + ctx - 1  # stream positions; text token = position − 1 (BOS)
        expected += raw[byte_start[first - 1] : byte_start[last]]
    got = compare_pipeline.scored_bytes(p)
    assert got == expected
    assert 0 < len(got) < len(raw)
    cols = run_lockstep(p.loaded.model, p.stream, p.windows, (), p.protocol.prefix_id)
    assert int(cols.reference["bytes"].sum()) == len(got)


def test_compressor_sizes_equal_direct_calls(text_file):
    data = text_file.read_bytes()
    rows = compress_all(data)
    assert [r["method"] for r in rows] == list(COMPRESSORS)
    direct = _direct_sizes(data)
    for r in rows:
        assert r["bytes"] == direct[r["method"]], r["method"]
        assert r["bits"] == 8 * r["bytes"]
        assert r["bits_per_byte"] == pytest.approx(8 * r["bytes"] / len(data))
    assert lzma.decompress(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9)) == data
    assert direct["xz -9"] < len(data)  # text compresses


@pytest.mark.parametrize("protocol,ctx", [("rolling", 64), ("llama.cpp", 64)])
def test_compress_bits_pipeline(tiny_llama_dir, text_file, protocol, ctx):
    """compress_bits: the model's total bits are Σ NLL / ln 2 and the compressors ran on exactly the scored bytes."""
    model_settings, text_settings, window_settings = _settings(tiny_llama_dir, text_file, ctx=ctx, protocol=protocol)
    result, cols = as_json(compare_pipeline.compress_bits(model_settings, text_settings, window_settings))
    data = compare_pipeline.scored_bytes(runs.prepare(model_settings, text_settings, window_settings, runs.Reporter()))
    if protocol == "rolling":
        assert data == text_file.read_bytes()
    ref = result["reference"]
    assert ref["bytes"] == len(data)
    assert ref["total_bits"] == pytest.approx(cols.reference["nll"].astype(np.float64).sum() / LN2, rel=1e-12)
    sizes = {r["method"]: r["bytes"] for r in result["compressors"]}
    assert sizes == _direct_sizes(data)
    assert result["model_over_xz"] == pytest.approx(ref["total_bits"] / (8 * sizes["xz -9"]), rel=1e-12)
    _check_eval_split(result["timings"])
