"""Speculative sampling: the acceptance rule, the KV caches (checked against uncached forward passes at every call),
Theorem 1 by Monte Carlo on a tiny model, and the spec-decode pipeline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import as_json

from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings
from infoeval.measure.stats import chi_square
from infoeval.models import load_model
from infoeval.speculative.decode import plain_sample, speculative_sample, verify_drafts
from infoeval.speculative.drafts import DraftSettings, build_draft, truncated
from infoeval.speculative.generate import spec_decode
from infoeval.speculative.verify import theorem1_check

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    return load_model(str(tiny_llama_dir), CPU, torch.float32)


# ------------------------------------------------------------------------------------------ the rule alone
def test_rule_accepts_everything_when_p_equals_q():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 10, generator=g, dtype=torch.float64), -1)
    for _ in range(50):
        d = torch.multinomial(p[:3], 1, generator=g)[:, 0]
        k, x = verify_drafts(p, p[:3], d, g)
        assert k == 3 and 0 <= x < 10
        assert verify_drafts(p[:3], p[:3], d, g) == (3, None)  # no bonus row: the round was cut short


def test_rule_rejects_tokens_the_target_never_emits():
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    for _ in range(20):
        k, x = verify_drafts(p, q, torch.tensor([0]), g)
        assert k == 0 and x in (1, 2)  # resampled from norm(max(0, p − q)) = (0, 0.5, 0.5)


def test_rule_first_token_follows_p():
    """One draft from q, verified against p: the emitted token is distributed as p (not q)."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    n = 8000
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    counts = np.zeros(4)
    rows_p, rows_q = torch.stack([p, p]), q[None]
    for d in drafts.tolist():
        k, x = verify_drafts(rows_p, rows_q, torch.tensor([d]), g)
        counts[d if k == 1 else x] += 1
    assert chi_square(counts, p.numpy())["p_value"] > 0.01
    assert chi_square(counts, q.numpy())["p_value"] < 1e-6


# ------------------------------------------------------------------------------------------ KV caches
class Spy:
    """Wraps a model: at every cached call, compares the returned logits with an uncached forward pass over the
    tokens the cache should hold (kept in a mirror, cut back to the cache's length to follow its crops)."""

    def __init__(self, model):
        self.model, self.config = model, model.config
        self.mirror: list[int] = []
        self.calls, self.max_err = 0, 0.0
        self.prefixes: list[list[int]] = []

    def __call__(self, input_ids, use_cache, logits_to_keep, **kw):
        (cache,) = kw.values()
        length = cache.get_seq_length()
        assert len(self.mirror) >= length
        self.mirror = self.mirror[:length]
        self.prefixes.append(list(self.mirror))
        out = self.model(input_ids=input_ids, use_cache=use_cache, logits_to_keep=logits_to_keep, **kw)
        full = torch.tensor([self.mirror + input_ids[0].tolist()])
        ref = self.model(input_ids=full, use_cache=False).logits[0, -logits_to_keep:]
        self.max_err = max(self.max_err, float((out.logits[0, -logits_to_keep:] - ref).abs().max()))
        self.mirror += input_ids[0].tolist()
        self.calls += 1
        return out


@pytest.mark.parametrize("gamma", [1, 3])
def test_caches_hold_exactly_the_committed_tokens(llama, gamma):
    prompt = torch.tensor(llama.tokenizer("The dictionary maps keys").input_ids)
    target, draft = Spy(llama.model), Spy(truncated(llama.model, 1))
    gen = speculative_sample(target, draft, prompt, gamma, 30, 1.0, torch.Generator().manual_seed(0))
    assert len(gen.tokens) == len(prompt) + 30 and gen.tokens[: len(prompt)] == prompt.tolist()
    assert target.calls == gen.target_calls == len(gen.rounds) and draft.calls == gen.draft_calls == gen.proposed
    assert target.max_err < 1e-4 and draft.max_err < 1e-4
    # at each target call, and at the first draft call of each round, the cache holds only committed tokens: a
    # prefix of the final sequence (later draft calls of a round also hold that round's uncommitted drafts)
    firsts = np.cumsum([0] + [r["proposed"] for r in gen.rounds[:-1]])
    for pre in target.prefixes + [draft.prefixes[i] for i in firsts]:
        assert pre == gen.tokens[: len(pre)]
    assert 0 < gen.accepted < gen.proposed  # a 1-layer draft of a 2-layer target: some of each
    assert gen.verified == gen.accepted + sum(r["accepted"] < r["proposed"] for r in gen.rounds)
    assert sum(r["emitted"] for r in gen.rounds) >= 30


def test_full_depth_draft_accepts_everything(llama):
    prompt = torch.tensor(llama.tokenizer("The dictionary").input_ids)
    draft = build_draft(llama, DraftSettings(layers=2), CPU, torch.float32)
    gen = speculative_sample(llama.model, draft, prompt, 4, 20, 0.7, torch.Generator().manual_seed(3))
    assert gen.acceptance == 1.0 and gen.alpha == 1.0
    assert gen.target_calls == 4 and [r["emitted"] for r in gen.rounds] == [5, 5, 5, 5]


def test_plain_sampling_uses_the_cache(llama):
    prompt = torch.tensor(llama.tokenizer("The dictionary").input_ids)
    spy = Spy(llama.model)
    gen = plain_sample(spy, prompt, 12, 1.0, torch.Generator().manual_seed(0))
    assert gen.target_calls == spy.calls == 12 and spy.max_err < 1e-4
    assert len(gen.tokens) == len(prompt) + 12


# ------------------------------------------------------------------------------------- Theorem 1 (Monte Carlo)
def test_theorem1_monte_carlo(llama):
    """The first two emitted tokens of speculative sampling (γ = 1 and 4) follow the target, not the draft; the
    draft's own samples are rejected against the target, which shows the test has power."""
    context = torch.tensor(llama.tokenizer("The dictionary").input_ids)
    draft = build_draft(llama, DraftSettings(layers=1), CPU, torch.float32)
    r = theorem1_check(llama.model, draft, context, 1.0, 3000, (1, 4), seed=0)
    rows = {row["sampler"]: row for row in r["rows"]}
    assert set(rows) == {"target", "speculative γ=1", "speculative γ=4", "draft"}
    assert len(r["cells"]) >= 20 and all(rows[s]["vs_target"]["df"] >= 20 for s in rows)
    for name in ("target", "speculative γ=1", "speculative γ=4"):
        assert rows[name]["vs_target"]["p_value"] > 0.01, rows[name]
    for name in ("speculative γ=1", "speculative γ=4"):
        assert rows[name]["vs_draft"]["p_value"] < 1e-3, rows[name]
    assert rows["draft"]["vs_target"]["p_value"] < 1e-3
    assert rows["draft"]["vs_draft"]["p_value"] > 0.01
    total_p = sum(c["p"] for c in r["cells"]) + r["other_p"]
    assert total_p == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------------------------------ the pipeline
def test_spec_decode_pipeline(tiny_llama_dir):
    model_settings = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    result, spec = as_json(
        spec_decode(model_settings, DraftSettings(layers=1), "The dictionary", 3, 24, 1.0, 5, repeats=2)
    )
    s, p = result["speculative"], result["plain"]
    assert s["new_tokens"] == p["new_tokens"] == 24 and p["target_calls"] == 24
    assert s["tokens_per_target_call"] == pytest.approx(24 / s["target_calls"])
    assert s["acceptance"] == pytest.approx(s["accepted"] / s["proposed"])
    assert len(s["wall_s_all"]) == 2 and s["wall_s"] == min(s["wall_s_all"])
    assert result["speedup"] == pytest.approx(p["wall_s"] / s["wall_s"])
    mo = result["model_of_speedup"]
    assert mo["predicted_tokens_per_call"] == pytest.approx(sum(mo["alpha"] ** k for k in range(4)))
    assert result["provenance"]["draft"]["kind"] == "layers" and result["verify"] is None
    assert math.isfinite(mo["cost_ratio"]) and mo["cost_ratio"] > 0 and mo["verify_cost"] > 0
    assert mo["predicted_speedup"] == pytest.approx(
        mo["predicted_tokens_per_call"] / (3 * mo["cost_ratio"] + mo["verify_cost"])
    )
    assert mo["verify_call_s"] == pytest.approx(spec.target_s / spec.target_calls)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"gamma": 0}, "gamma"),
        ({"max_new": 0}, "max_new_tokens"),
        ({"temperature": 0.0}, "temperature"),
        ({"verify": 10}, "verify"),
    ],
)
def test_spec_decode_bad_options(kw, match):
    args = {"gamma": 4, "max_new": 8, "temperature": 1.0, "verify": 0} | kw
    with pytest.raises(UsageError, match=match):
        as_json(
            spec_decode(
                ModelSettings("no-such-model"),
                DraftSettings(layers=1),
                "x",
                args["gamma"],
                args["max_new"],
                args["temperature"],
                0,
                1,
                args["verify"],
            )
        )
