"""spec-accept on the tiny Llama, recomputed the slow way: our own windows, full forward passes, the draft's logits
from the target's hidden states (block 0 → final norm → head), float64 statistics per position."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_standard_errors import brute_se
from tiny_models import as_json

from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.models import load_model
from infoeval.speculative import accept, accept_columns, results
from infoeval.speculative.drafts import DraftSettings

CTX, MAX_TOKENS = 48, 150
TEMPS = (0.5, 1.0, 2.0)
LN2 = math.log(2)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, tiny_text):
    path = tmp_path_factory.mktemp("spec-accept") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


def _run(model_dir, text_file, ds, temps=TEMPS):
    model_settings = ModelSettings(str(model_dir), "cpu", "float32")
    return as_json(
        accept.spec_accept(
            model_settings, TextSettings(text_file, max_tokens=MAX_TOKENS), WindowSettings(CTX), ds, temps
        )
    )


@pytest.fixture(scope="module")
def layer1(tiny_llama_dir, text_file):
    return _run(tiny_llama_dir, text_file, DraftSettings(layers=1))


@pytest.fixture(scope="module")
def brute(tiny_llama_dir, tiny_text):
    """Per-position float64 statistics, from full forward passes over our own rolling windows."""
    lm = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32)
    ids = [lm.tokenizer.bos_token_id] + lm.tokenizer(tiny_text, add_special_tokens=False).input_ids[:MAX_TOKENS]
    zp, zq, y = [], [], []
    m = lm.model
    with torch.inference_mode():
        for start in range(0, MAX_TOKENS, CTX):  # window inputs start … start+CTX−1 predict start+1 … start+CTX
            x = torch.tensor([ids[start : min(start + CTX, MAX_TOKENS)]])
            out = m.model(input_ids=x, output_hidden_states=True, use_cache=False)
            zp.append(m.lm_head(out.last_hidden_state)[0].double())
            zq.append(m.lm_head(m.model.norm(out.hidden_states[1]))[0].double())
            y += ids[start + 1 : start + 1 + x.shape[1]]
    return torch.cat(zp), torch.cat(zq), torch.tensor(y)


def _stats(zp, zq, y, t_p, t_q):
    lp, lq = torch.log_softmax(zp / t_p, -1), torch.log_softmax(zq / t_q, -1)
    p, q = lp.exp(), lq.exp()
    return {
        "beta": torch.minimum(p, q).sum(-1),
        "kl": (p * (lp - lq)).sum(-1),
        "tv": 0.5 * (p - q).abs().sum(-1),
        "entropy_p": -(p * lp).sum(-1),
        "entropy_q": -(q * lq).sum(-1),
        "nll_p": -lp.gather(-1, y[:, None])[:, 0],
        "nll_q": -lq.gather(-1, y[:, None])[:, 0],
    }


def test_columns_match_brute_force(layer1, brute):
    result, cols = layer1
    zp, zq, y = brute
    assert cols.base["position"].tolist() == list(range(1, MAX_TOKENS + 1))
    assert cols.base["token_id"].tolist() == y.tolist()
    assert cols.base["top1"].tolist() == (zq.gather(-1, zp.argmax(-1, keepdim=True))[:, 0] >= zq.amax(-1)).tolist()
    assert [(t, m) for t, m in cols.conditions] == [
        (0.5, "both"),
        (1.0, "both"),
        (2.0, "both"),
        (0.5, "target"),
        (2.0, "target"),
    ]
    for t, mode in cols.conditions:
        want = _stats(zp, zq, y, t, t if mode == "both" else 1.0)
        got = cols.stats[accept_columns.key(t, mode)]
        for k, v in want.items():
            assert np.allclose(got[k], v.numpy(), atol=5e-5, rtol=1e-4), (t, mode, k)


def test_aggregates_follow_their_definitions(layer1):
    result, cols = layer1
    for c in result["conditions"]:
        s = cols.stats[accept_columns.key(c["temperature"], c["mode"])]
        beta = s["beta"].astype(np.float64)
        assert c["tokens"] == MAX_TOKENS
        assert c["alpha"] == pytest.approx(beta.mean()) and c["alpha_se"] == pytest.approx(
            brute_se(beta.tolist(), cols.base["window"].tolist())
        )
        assert c["alpha"] == pytest.approx(1 - c["tv_mean"], abs=1e-5)
        assert c["pinsker"]["violations"] == 0 and c["pinsker"]["max_ratio"] <= 1
        assert (
            c["pearson_r"] == pytest.approx(np.corrcoef(s["entropy_p"], beta)[0, 1], abs=1e-6)
            and c["pearson_n"] == MAX_TOKENS
        )
        assert sum(q["n"] for q in c["quartiles"]) == MAX_TOKENS
        assert sum(q["n"] * q["alpha"] for q in c["quartiles"]) / MAX_TOKENS == pytest.approx(c["alpha"])
        for e in c["expected_tokens"]:
            g = e["gamma"]
            assert e["e_mean_alpha"] == pytest.approx(sum(c["alpha"] ** k for k in range(g + 1)))
            assert e["e_per_position"] == pytest.approx(np.mean([sum(b**k for k in range(g + 1)) for b in beta]))
    t1 = result["top1"]
    assert t1["top1"] == pytest.approx(cols.base["top1"].mean())
    assert sum(r["runs"] for r in t1["run_lengths"]) == t1["runs"]
    assert t1["run_mean"] * t1["runs"] == pytest.approx(cols.base["top1"].sum())  # every match is in one run


def test_target_only_mode_keeps_the_draft_at_T1(layer1):
    _, cols = layer1
    q1 = cols.stats[accept_columns.key(1.0, "both")]["entropy_q"]
    assert np.array_equal(cols.stats[accept_columns.key(2.0, "target")]["entropy_q"], q1)
    assert np.array_equal(
        cols.stats[accept_columns.key(2.0, "target")]["entropy_p"],
        cols.stats[accept_columns.key(2.0, "both")]["entropy_p"],
    )
    assert not np.allclose(cols.stats[accept_columns.key(2.0, "both")]["entropy_q"], q1)


def test_outputs_shape(layer1):
    result, cols = layer1
    frame = accept.positions_frame(cols)
    assert list(frame.columns) == accept.POSITION_COLUMNS and len(frame) == MAX_TOKENS * 5
    rows = results.accept_rows(result)
    assert len(rows) == 5 and set(rows[0]) == set(results.ACCEPT_COLUMNS)
    assert result["schema"].startswith("infoeval/spec-accept/")
    pv = result["provenance"]
    assert pv["draft"]["kind"] == "layers" and pv["draft"]["layers"] == 1 and pv["command"] == "spec-accept"
    assert {"model", "text", "protocol", "dtype", "device", "versions"} <= set(pv)


def test_full_depth_draft_is_accepted_everywhere(tiny_llama_dir, text_file):
    result, cols = _run(tiny_llama_dir, text_file, DraftSettings(layers=2), temps=(1.0, 2.0))
    for c in result["conditions"]:
        s = cols.stats[accept_columns.key(c["temperature"], c["mode"])]
        if c["mode"] == "both":
            assert np.allclose(s["beta"], 1.0, atol=1e-5) and np.allclose(s["kl"], 0.0, atol=1e-6)
            assert c["expected_tokens"][3]["e_mean_alpha"] == pytest.approx(5.0, abs=1e-3)
        assert c["pinsker"]["violations"] == 0
    assert result["top1"]["top1"] == 1.0 and result["top1"]["runs"] == 1  # one run through contiguous windows


@pytest.mark.parametrize("spec", ["", "0", "-1", "1,1", "x", "inf"])
def test_bad_temperatures(spec):
    with pytest.raises(UsageError, match="--temperature"):
        accept.parse_temperatures(spec)


def test_temperatures_parse():
    assert accept.parse_temperatures("0.5, 1,2") == (0.5, 1.0, 2.0)
    assert accept_columns.conditions((1.0, 3.0)) == [(1.0, "both"), (3.0, "both"), (3.0, "target")]
