"""Distillation terms: a hand-computed two-class example, the closed-form gradient against autograd, what the T²
factor does, and the distill pipeline against float64 brute force on the tiny Llama."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import as_json

from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.models import load_model
from infoeval.speculative import distill as dmod
from infoeval.speculative.drafts import DraftSettings

LN2 = math.log(2)


def test_two_class_example_by_hand():
    """z_p = (2, 0), z_q = (0, 0), T = 2, y = 0, α = 0.1."""
    t, alpha = 2.0, 0.1
    e = math.e  # softmax((2, 0) / 2) = (e, 1) / (e + 1)
    p = (e / (e + 1), 1 / (e + 1))
    q = (0.5, 0.5)
    kl = p[0] * math.log(p[0] / q[0]) + p[1] * math.log(p[1] / q[1])
    hard = math.log(2)  # −ln q(y = 0) at T = 1: q = (1/2, 1/2)
    h = -(p[0] * math.log(p[0]) + p[1] * math.log(p[1]))
    grad = ((q[0] - p[0]) / t, (q[1] - p[1]) / t)
    got = dmod.distill_terms(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([0]), t, alpha)
    assert float(got["kl"]) == pytest.approx(kl, rel=1e-6) and kl == pytest.approx(0.110944, abs=1e-6)
    assert float(got["hard_ce"]) == pytest.approx(hard, rel=1e-6)
    assert float(got["t2_kl"]) == pytest.approx(4 * kl, rel=1e-6)
    assert float(got["loss"]) == pytest.approx(alpha * hard + (1 - alpha) * 4 * kl, rel=1e-6)
    assert float(got["soft_ce"]) == pytest.approx(-(p[0] * math.log(0.5) + p[1] * math.log(0.5)), rel=1e-6)
    assert float(got["teacher_entropy"]) == pytest.approx(h, rel=1e-6)
    assert float(got["teacher_tail_mass"]) == pytest.approx(p[1], rel=1e-6)
    assert float(got["grad_norm"]) == pytest.approx(math.hypot(*grad), rel=1e-6)
    assert float(got["t2_grad_norm"]) == pytest.approx(4 * math.hypot(*grad), rel=1e-6)
    closed = dmod.kl_grad_closed_form(torch.tensor([2.0, 0.0]), torch.zeros(2), t)
    assert closed.tolist() == pytest.approx(list(grad), rel=1e-6)


@pytest.mark.parametrize("t", [0.5, 1.0, 2.0, 8.0])
def test_closed_form_gradient_equals_autograd(t):
    g = torch.Generator().manual_seed(0)
    zp, zq = torch.randn(6, 50, generator=g) * 3, torch.randn(6, 50, generator=g) * 3
    auto = dmod.kl_grad_autograd(zp, zq, t)
    closed = dmod.kl_grad_closed_form(zp.double(), zq.double(), t)
    assert torch.allclose(auto, closed, atol=1e-12, rtol=1e-9)
    with torch.inference_mode():  # the pipeline calls it on inference tensors
        assert torch.allclose(dmod.kl_grad_autograd(zp, zq, t), closed, atol=1e-12)


def test_t_squared_keeps_the_soft_gradient_on_scale():
    """For large T, ‖∂KL/∂z_q‖ ≈ ‖centre(z_q − z_p)‖₂ / (V·T²): it falls as 1/T², and T² times it tends to the
    constant ‖centre(z_q − z_p)‖₂ / V."""
    g = torch.Generator().manual_seed(1)
    v = 40
    zp, zq = torch.randn(1, v, generator=g, dtype=torch.float64), torch.randn(1, v, generator=g, dtype=torch.float64)
    d = zq - zp
    limit = float(torch.linalg.vector_norm(d - d.mean()) / v)
    norms = {
        t: float(dmod.distill_terms(zp, zq, torch.tensor([0]), t, 0.5)["grad_norm"]) for t in (1.0, 8.0, 32.0, 128.0)
    }
    assert norms[8.0] / norms[32.0] == pytest.approx(16.0, rel=0.02)  # 1/T²
    assert 128.0**2 * norms[128.0] == pytest.approx(limit, rel=1e-3)
    assert 32.0**2 * norms[32.0] == pytest.approx(limit, rel=0.02)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_alpha_out_of_range(alpha):
    with pytest.raises(UsageError, match="alpha"):
        dmod.parse_alpha(alpha)


CTX, MAX_TOKENS, TEMPS = 48, 120, (1.0, 2.0, 4.0)


@pytest.fixture(scope="module")
def run(tiny_llama_dir, tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("distill") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    model_settings = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    draft_settings = DraftSettings(layers=1, role="student")
    return as_json(
        dmod.distill(
            model_settings, TextSettings(path, max_tokens=MAX_TOKENS), WindowSettings(CTX), draft_settings, TEMPS, 0.1
        )
    )


def test_pipeline_against_brute_force(run, tiny_llama_dir, tiny_text):
    result, cols = run
    lm = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32)
    ids = [lm.tokenizer.bos_token_id] + lm.tokenizer(tiny_text, add_special_tokens=False).input_ids[:MAX_TOKENS]
    m = lm.model
    zp, zq, y = [], [], []
    with torch.inference_mode():
        for start in range(0, MAX_TOKENS, CTX):
            x = torch.tensor([ids[start : min(start + CTX, MAX_TOKENS)]])
            out = m.model(input_ids=x, output_hidden_states=True, use_cache=False)
            zp.append(m.lm_head(out.last_hidden_state)[0].double())
            zq.append(m.lm_head(m.model.norm(out.hidden_states[1]))[0].double())
            y += ids[start + 1 : start + 1 + x.shape[1]]
    zp, zq, y = torch.cat(zp), torch.cat(zq), torch.tensor(y)
    hard = -torch.log_softmax(zq, -1).gather(-1, y[:, None])[:, 0]
    for row in result["rows"]:
        t = row["temperature"]
        lp, lq = torch.log_softmax(zp / t, -1), torch.log_softmax(zq / t, -1)
        p, q = lp.exp(), lq.exp()
        kl = (p * (lp - lq)).sum(-1)
        assert row["tokens"] == MAX_TOKENS
        assert row["hard_ce"] == pytest.approx(float(hard.mean()), rel=1e-5)
        assert row["kl"] == pytest.approx(float(kl.mean()), rel=1e-4)
        assert row["t2_kl"] == pytest.approx(t * t * float(kl.mean()), rel=1e-4)
        assert row["loss"] == pytest.approx(0.1 * float(hard.mean()) + 0.9 * t * t * float(kl.mean()), rel=1e-4)
        assert row["loss_bits"] == pytest.approx(row["loss"] / LN2)
        assert row["teacher_entropy_bits"] == pytest.approx(float(-(p * lp).sum(-1).mean()) / LN2, rel=1e-5)
        assert row["teacher_tail_mass"] == pytest.approx(float((1 - p.amax(-1)).mean()), rel=1e-5)
        gn = torch.linalg.vector_norm(q - p, dim=-1) / t
        assert row["grad_norm"] == pytest.approx(float(gn.mean()), rel=1e-4)
        assert row["t2_grad_norm"] == pytest.approx(t * t * float(gn.mean()), rel=1e-4)
    assert cols.base["token_id"].tolist() == y.tolist()


def test_pipeline_shape_and_self_check(run):
    result, cols = run
    assert result["grad_check"]["positions"] == dmod.GRAD_CHECK_POSITIONS
    assert result["grad_check"]["max_abs_diff"] < 1e-6 < result["grad_check"]["max_abs_grad"]
    ent = [r["teacher_entropy_bits"] for r in result["rows"]]
    assert ent == sorted(ent)  # softening raises the teacher's entropy ...
    assert [r["kl"] for r in result["rows"]] == sorted(
        (r["kl"] for r in result["rows"]), reverse=True
    )  # ... and lowers KL
    frame = dmod.positions_frame(cols)
    assert len(frame) == MAX_TOKENS * len(TEMPS) and "t2_grad_norm" in frame.columns
    assert result["provenance"]["student"]["kind"] == "layers" and result["schema"].startswith("infoeval/distill/")
