"""--topk K: every model's K most likely tokens and their probabilities per position (measure/topk.py), in the
positions output as CSV or Parquet."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from tiny_models import as_json
from typer.testing import CliRunner

from infoeval import cli
from infoeval.comparison import compare as pipeline
from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.topk import BLOCK, top_k_logits, top_k_probs
from infoeval.quant.variant_settings import VariantSettings


@pytest.mark.parametrize("vocab", [3, 100, BLOCK, BLOCK + 3, 5 * BLOCK, 49_152])
@pytest.mark.parametrize("k", [1, 5, 12])
def test_top_k_equals_torch_topk(vocab, k):
    gen = torch.Generator().manual_seed(vocab + k)
    z = torch.randn(40, vocab, generator=gen) * 3
    z[0, -1] = 100.0  # the largest logit in the short last block
    z[1, :] = 0.0  # every logit tied: any k ids, all values 0
    values, ids = top_k_logits(z, k)
    ref = torch.topk(z, min(k, vocab), -1)
    assert torch.equal(values, ref.values)
    assert torch.equal(ids[2:], ref.indices[2:]) and ids[0, 0] == vocab - 1
    assert len(set(ids[1].tolist())) == min(k, vocab)  # no id twice (the short block's padding never shows)


def test_probabilities_are_the_softmax():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(30, 1000, generator=gen) * 4
    lp = torch.log_softmax(z, -1)
    ids, p = top_k_probs(z, 5, log_normalizer=torch.logsumexp(z, -1))
    ids2, p2 = top_k_probs(z, 5, max_log_prob=lp.max(-1).values)
    want = lp.exp().topk(5, -1)
    assert ids.dtype == torch.int32 and torch.equal(ids.long(), want.indices) and torch.equal(ids, ids2)
    torch.testing.assert_close(p, want.values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(p2, want.values, rtol=1e-5, atol=1e-7)
    assert (p.sum(-1) <= 1 + 1e-6).all() and (p[:, :-1] >= p[:, 1:]).all()


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, tiny_text):
    path = tmp_path_factory.mktemp("topk") / "text.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


def _settings(model_dir, text_file):
    return (
        ModelSettings(str(model_dir), "cpu", "float32"),
        TextSettings(text=text_file, max_tokens=200),
        WindowSettings(ctx=32),
    )


def test_lockstep_top_k_columns_are_each_models_softmax(tiny_llama_dir, text_file):
    from infoeval.input.prepare import Reporter, prepare
    from infoeval.quant.apply import build_variants
    from infoeval.quant.variant_settings import parse_schemes

    settings = _settings(tiny_llama_dir, text_file)
    result, cols = as_json(pipeline.quantize_compare(*settings, VariantSettings("int4-g32"), top_k=3))
    plain, pcols = as_json(pipeline.quantize_compare(*settings, VariantSettings("int4-g32")))
    assert (
        result["variants"] == plain["variants"] and result["reference"] == plain["reference"]
    )  # top-k changes no number
    assert result["provenance"]["top_k"] == 3 and "top_k" not in plain["provenance"]
    p = prepare(*settings, Reporter())
    variant = build_variants(p.loaded.model, parse_schemes("int4-g32"), [], (), ())[0]
    w = p.windows[2]
    rows = slice(sum(x.n_scored for x in p.windows[:2]), sum(x.n_scored for x in p.windows[:3]))
    ids = p.stream.ids[w.start : w.start + w.length][None]
    with torch.inference_mode():
        ref_logits = p.loaded.model(input_ids=ids).logits[0, w.first_scored : w.first_scored + w.n_scored]
        from infoeval.quant.apply import WithVariant

        var_logits = WithVariant(p.loaded.model, variant)(input_ids=ids).logits[
            0, w.first_scored : w.first_scored + w.n_scored
        ]
    for got, logits in ((cols.reference, ref_logits), (cols.variants["int4-g32"], var_logits)):
        want = torch.softmax(logits.float(), -1).topk(3, -1)
        assert (got["top_ids"][rows] == want.indices.numpy()).all()
        torch.testing.assert_close(torch.from_numpy(got["top_p"][rows]), want.values, rtol=1e-4, atol=1e-6)
    assert pcols.reference.keys() == set(cols.reference) - {"top_ids", "top_p"}


def test_positions_as_csv_and_parquet(tiny_llama_dir, text_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [
        "quantize-compare",
        str(tiny_llama_dir),
        "--text",
        str(text_file),
        "--ctx",
        "32",
        "--max-tokens",
        "120",
        "--schemes",
        "int8-channel",
        "--topk",
        "4",
        "-q",
        "--json",
        "r.json",
    ]
    for name in ("p.csv", "p.parquet"):
        r = CliRunner().invoke(cli.app, [*args, "--positions", name])
        assert r.exit_code == 0, r.output
    csv, parquet = pd.read_csv("p.csv"), pd.read_parquet("p.parquet")
    assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet) == 120
    for prefix in ("ref_", ""):
        assert [f"{prefix}top{j}_id" for j in range(1, 5)] == [
            c for c in csv.columns if c.startswith(f"{prefix}top") and c.endswith("_id")
        ]
    assert parquet["top1_id"].dtype == "int32" and parquet["ref_top1_p"].dtype == "float32"
    pd.testing.assert_frame_equal(csv, parquet, check_dtype=False, atol=1e-6)
    assert (csv["ref_top1_p"] >= csv["ref_top2_p"]).all() and (csv["ref_top1_p"] <= 1).all()


def test_bad_top_k(tiny_llama_dir, text_file):
    with pytest.raises(UsageError, match="^top_k"):
        pipeline.quantize_compare(*_settings(tiny_llama_dir, text_file), VariantSettings("int8-channel"), top_k=-1)
