"""The lm-eval and gptq protocols: documents, rows, word counts, the figures against brute-force computations on
tiny models (lm-eval's and GPTQ's loops written out here with plain transformers calls), and the options."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from infoeval.comparison.compare import compress_bits, quantize_compare
from infoeval.errors import DataError, UsageError
from infoeval.input.documents import (
    count_words,
    gptq_text,
    hf_wikitext_rows,
    load_documents,
    wikitext_articles,
    wikitext_detokenizer,
)
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.input.text import Text, load_text
from infoeval.measure.protocol_metrics import document_loglikelihoods, gptq_figures, lmeval_figures
from infoeval.quant.variant_settings import VariantSettings

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- word counts, documents, rows ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "doc,words",
    [
        ("", 1),
        ("a", 1),
        ("a b", 2),
        (" a b ", 4),
        ("a\n\nb\tc", 3),
        ("a  \n  b", 2),
        (" = Title = \n", 5),
        ("x\u00a0y", 2),
    ],
)
def test_word_count_is_lm_evals(doc, words):
    """len(re.split(r"\\s+", doc)): empty strings at either end count (lm-eval counts them too)."""
    assert count_words(doc) == words == len(re.split(r"\s+", doc))


def test_detokenizer_examples():
    page = ' = Title = \n The cat @-@ like 1 @,@ 000 dogs ( big ) , " quoted " . \n = = Sub = = \n'
    assert wikitext_detokenizer(page) == ' = Title =\nThe cat-like 1,000 dogs (big), "quoted".\n== Sub ==\n'


def test_articles_split_like_wikitext_document_level():
    raw = " \n = A = \n \n text a \n = = Sec = = \n more \n = B = \n text b \n"
    assert wikitext_articles(raw) == [" = A = \n \n text a \n = = Sec = = \n more ", " = B = \n text b \n"]


def test_hf_rows_and_gptq_join():
    raw = " \n = A = \n \n text a \n"
    assert hf_wikitext_rows(raw) == ["", " = A = \n", "", " text a \n"]
    t = gptq_text(Text(raw, "wikitext-2", None))
    assert t.text == "\n\n = A = \n\n\n\n\n text a \n" and t.source_sha256 == Text(raw, "x", None).sha256
    assert gptq_text(Text(raw, "file", None)).text == raw  # other texts are scored as they are


@pytest.mark.skipif(
    not Path("../shared/data/wikitext-2-raw/wiki.test.raw").is_file(), reason="WikiText-2 not available"
)
def test_wikitext2_test_rows_match_hugging_face_split_size():
    """4,358 rows, and HF's recorded split size: UTF-8 bytes of the rows + 4 × (rows + 1) Arrow offsets = 1,305,092;
    + 4 × rows = 1,305,088 is the num_bytes of the current (parquet) wikitext-2-raw-v1 dataset card, whose
    validation split is 3,760 rows and 1,159,288 by the same rule."""
    raw = load_text(None, "wikitext-2", None).text
    rows = hf_wikitext_rows(raw)
    assert len(rows) == 4358
    assert sum(len(r.encode()) for r in rows) + 4 * (len(rows) + 1) == 1305092
    assert sum(len(r.encode()) for r in rows) + 4 * len(rows) == 1305088
    valid = hf_wikitext_rows(load_text(None, "wikitext-2-valid", None).text)
    assert len(valid) == 3760 and sum(len(r.encode()) for r in valid) + 4 * len(valid) == 1159288
    pages = wikitext_articles(raw)
    assert len(pages) == 62 and pages[0].startswith(" = Robert Boulter = \n")


def test_jsonl_documents(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "a b"}\n\n{"text": "", "x": 1}\n{"body": "c", "text": "d\\n"}\n', encoding="utf-8")
    text, docs = load_documents(None, None, None, str(f))
    assert docs.texts == ("a b", "", "d\n") and docs.words == (2, 1, 2) and docs.nbytes == (3, 0, 2)
    assert text.text == "a bd\n" and text.source == "jsonl"
    with pytest.raises(DataError, match="field 'body'"):
        load_documents(None, None, None, str(f), "body")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\nnot json\n')
    with pytest.raises(DataError, match="line 2"):
        load_documents(None, None, None, str(tmp_path / "bad.jsonl"))


# ---- figures: pure arithmetic -------------------------------------------------------------------------------
def test_gptq_average_against_brute_force():
    rng = np.random.default_rng(0)
    window = np.repeat(np.arange(5), [7, 7, 3, 9, 1])  # unequal counts: mean of means ≠ overall mean
    nll = rng.exponential(2.0, window.size).astype(np.float32)
    brute = math.exp(np.mean([nll[window == k].astype(np.float64).mean() for k in range(5)]))
    assert gptq_figures(nll, window)["ppl"] == pytest.approx(brute, rel=1e-12)
    assert gptq_figures(nll, window)["ppl"] != pytest.approx(math.exp(nll.astype(np.float64).mean()), rel=1e-3)


def test_lmeval_figures_against_brute_force():
    starts = np.array([0, 5, 5, 9])  # document 1 is empty (it shares its start with document 2)
    position = np.array([1, 2, 3, 4, 6, 7, 8, 10, 11])
    nll = np.arange(1, 10, dtype=np.float32) / 4
    ll = document_loglikelihoods(nll, position, starts)
    assert ll.tolist() == [-(0.25 + 0.5 + 0.75 + 1.0), 0.0, -(1.25 + 1.5 + 1.75), -(2.0 + 2.25)]
    words, nbytes = np.array([3, 1, 4, 2]), np.array([20, 0, 25, 9])
    f = lmeval_figures(ll, words, nbytes)
    total = ll.sum()
    assert f["word_perplexity"] == pytest.approx(math.exp(-total / 10))
    assert f["byte_perplexity"] == pytest.approx(math.exp(-total / 54))
    assert f["bits_per_byte"] == pytest.approx(-total / 54 / math.log(2))


# ---- brute force on tiny models ------------------------------------------------------------------------------
def _model(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        folder
    )


@torch.inference_mode()
def _lm_eval_loglikelihood(model, tok, doc: str, ctx: int) -> float:
    """lm-eval 0.4.x's HF loglikelihood_rolling for one document, written out: tok_encode, the prefix token,
    rolling windows (context_len=1) made disjoint, each window's continuation log-probabilities summed."""
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    tokens = tok.encode(doc, add_special_tokens=not doc.startswith(tok.decode(prefix)))
    total, predicted = 0.0, 0
    while predicted < len(tokens):
        if predicted == 0:
            k = min(ctx, len(tokens))
            context, cont = [prefix], tokens[:k]
        else:
            k = min(len(tokens) - predicted, ctx)
            end = predicted + k
            a, cont = tokens[end - ctx - 1 : end - 1], tokens[end - k : end]
            context = a[: len(a) - (len(cont) - 1)]
        inp = torch.tensor([(context + cont)[-(ctx + 1) :][:-1]])
        logp = torch.log_softmax(model(inp).logits[0], -1)[-len(cont) :]
        total += float(logp.gather(-1, torch.tensor(cont)[:, None]).sum())
        predicted += k
    return total


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen3_dir"])
def test_lmeval_protocol_against_brute_force(request, fixture, tiny_text, tmp_path):
    folder = request.getfixturevalue(fixture)
    model, tok = _model(folder)
    marker = tok.decode(tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)
    docs = [tiny_text[:700], "", tiny_text[700:760], marker + tiny_text[760:1500], " x "]
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    result, cols = compress_bits(
        ModelSettings(model=str(folder)), TextSettings(documents=str(f)), WindowSettings(ctx=16, protocol="lm-eval")
    )
    got = result.protocol_metrics["figures"]["reference"]
    ll = [_lm_eval_loglikelihood(model, tok, d, 16) for d in docs]
    words, nbytes = sum(len(re.split(r"\s+", d)) for d in docs), sum(len(d.encode()) for d in docs)
    assert got["loglikelihood"] == pytest.approx(sum(ll), rel=1e-5)
    assert got["word_perplexity"] == pytest.approx(math.exp(-sum(ll) / words), rel=1e-5)
    assert got["bits_per_byte"] == pytest.approx(-sum(ll) / nbytes / math.log(2), rel=1e-5)
    assert (got["documents"], got["words"], got["bytes"]) == (5, words, nbytes)
    assert result.protocol_metrics["complete"]
    assert result.reference["tokens"] == sum(
        len(tok.encode(d, add_special_tokens=not d.startswith(marker))) for d in docs
    )


def test_lmeval_max_tokens_cuts_documents(tiny_llama_dir, tiny_text, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    result, _ = compress_bits(
        ModelSettings(model=str(tiny_llama_dir)),
        TextSettings(text=path, max_tokens=50),
        WindowSettings(ctx=16, protocol="lm-eval"),
    )
    assert result.reference["tokens"] == 50 and not result.protocol_metrics["complete"]
    assert result.provenance.protocol["text_tokens"] is None


@torch.inference_mode()
def test_gptq_protocol_against_brute_force(tiny_llama_dir, tiny_text, tmp_path):
    """GPTQ's llama_eval written out: tokenizer(text) (BOS added by default), ⌊N / ctx⌋ windows, CrossEntropyLoss
    over logits[:-1] vs ids[1:], PPL = exp(Σ nll_i · ctx / (n · ctx))."""
    path = tmp_path / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    model, tok = _model(tiny_llama_dir)
    ids = tok(tiny_text, return_tensors="pt").input_ids
    ctx = 32
    n = ids.numel() // ctx
    nlls = [
        torch.nn.functional.cross_entropy(
            model(ids[:, i * ctx : (i + 1) * ctx]).logits[0, :-1], ids[0, i * ctx + 1 : (i + 1) * ctx]
        )
        * ctx
        for i in range(n)
    ]
    brute = float(torch.exp(torch.stack(nlls).sum() / (n * ctx)))
    result, cols = quantize_compare(
        ModelSettings(model=str(tiny_llama_dir)),
        TextSettings(text=path, max_tokens=None),
        WindowSettings(ctx=ctx, protocol="gptq"),
        VariantSettings(schemes="int8-channel"),
    )
    figures = result.protocol_metrics["figures"]
    assert figures["reference"]["ppl"] == pytest.approx(brute, rel=1e-5)
    assert figures["reference"]["windows"] == n and set(figures) == {"reference", "int8-channel"}
    assert result.provenance.protocol["layout"]["special_tokens"]["before"] == [tok.bos_token_id]


# ---- options ----------------------------------------------------------------------------------------------------
def test_gptq_default_ctx_and_option_errors():
    from infoeval.comparison.request import CompareRequest
    from infoeval.input.fields import build

    def window(**kw):  # as both front ends build them
        return build(CompareRequest, {"max_tokens": "all", "device": "cpu", **kw}).window

    assert (
        window(protocol="gptq").ctx == 2048
        and window(protocol="gptq", ctx=128).ctx == 128
        and window(protocol="lm-eval").ctx == 512
    )
    with pytest.raises(UsageError, match="^stride"):
        WindowSettings(ctx=64, stride=32, protocol="lm-eval")
    with pytest.raises(UsageError, match="articles"):
        TextSettings(documents="articles")
    with pytest.raises(UsageError, match="^documents FILE.jsonl"):
        TextSettings(dataset="wikitext-2", documents="x.jsonl")


def test_documents_need_the_lm_eval_protocol(tiny_llama_dir, tmp_path):
    with pytest.raises(UsageError, match="protocol lm-eval"):
        compress_bits(
            ModelSettings(model=str(tiny_llama_dir)),
            TextSettings(documents=str(tmp_path / "d.jsonl")),
            WindowSettings(protocol="rolling"),
        )


def test_lmeval_differs_from_rolling_only_in_the_filled_last_window(tiny_qwen3_dir, tiny_text, tmp_path):
    """One document, a tokenizer without default special tokens: the same windows and NLLs as rolling except the
    last window, which lm-eval fills with earlier tokens (more context, so different numbers there)."""
    path = tmp_path / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    model_settings, text_settings = ModelSettings(model=str(tiny_qwen3_dir)), TextSettings(text=path, max_tokens=None)
    _, roll = compress_bits(model_settings, text_settings, WindowSettings(ctx=64, protocol="rolling"))
    _, lm = compress_bits(model_settings, text_settings, WindowSettings(ctx=64, protocol="lm-eval"))
    r, m = roll.reference, lm.reference
    assert r["position"].tolist() == m["position"].tolist() and r["token_id"].tolist() == m["token_id"].tolist()
    last = m["window"] == m["window"].max()
    assert 0 < last.sum() < 64
    np.testing.assert_array_equal(r["nll"][~last], m["nll"][~last])
    k = int(last.sum())
    assert m["context"][last].tolist() == list(range(65 - k, 65)) and r["context"][last].tolist() == list(
        range(1, k + 1)
    )
