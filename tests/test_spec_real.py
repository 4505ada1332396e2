"""Speculative decoding on the real built-in model (SmolLM2-135M), kept short: one window of ctx 128 (128 scored
tokens), the model loaded once.

On this model a draft that keeps more of the target is accepted more often. Measured on python-docs: at 256
tokens (ctx 128) α(int8-channel) = 0.973 ± 0.001 > α(int4-channel) = 0.554 ± 0.011 > α(first 29 of 30 layers) =
0.413 ± 0.018 > α(first 8 layers) = 0.084 ± 0.010, and at 2,048 tokens (ctx 512) int4-channel 0.568, 8 layers
0.087 (a truncated SmolLM2 is a poor draft: its early layers were never trained to feed the final norm and head).
The gaps are many standard errors wide.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import requires_smollm2

from infoeval.input.prepare import Reporter, prepare
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.speculative import accept, accept_columns
from infoeval.speculative.decode import speculative_sample
from infoeval.speculative.drafts import DraftSettings, build_draft

pytestmark = [pytest.mark.slow, requires_smollm2]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def prepared():
    return prepare(
        ModelSettings("smollm2-135m", "cpu", "float32"), TextSettings(max_tokens=128), WindowSettings(128), Reporter()
    )


def _alpha(p, ds, temps=(1.0,)):
    draft = build_draft(p.loaded, ds, CPU, torch.float32)
    cols = accept_columns.evaluate_windows(p, draft, temps)
    return accept.summarize(cols, 1.0, "both"), cols


def test_full_depth_is_the_target(prepared):
    s, cols = _alpha(prepared, DraftSettings(layers=30))
    stats = cols.stats[accept_columns.key(1.0, "both")]
    assert np.all(stats["kl"] == 0)  # the very same logits
    assert np.allclose(stats["beta"], 1.0, atol=1e-4)  # Σ p over 49,152 float32 terms: 1 ± 3e-5
    assert cols.base["top1"].all() and s["pinsker"]["violations"] == 0


def test_more_of_the_target_is_accepted_more(prepared):
    a = {
        name: _alpha(prepared, ds)[0]
        for name, ds in {
            "int8": DraftSettings(scheme="int8-channel"),
            "int4": DraftSettings(scheme="int4-channel"),
            "l8": DraftSettings(layers=8),
        }.items()
    }
    for hi, lo in (("int8", "int4"), ("int4", "l8")):
        gap = a[hi]["alpha"] - a[lo]["alpha"]
        assert gap > 5 * np.hypot(a[hi]["alpha_se"], a[lo]["alpha_se"]), (hi, lo, a[hi]["alpha"], a[lo]["alpha"])
    for s in a.values():
        assert s["tokens"] == 128 and s["pinsker"]["violations"] == 0
        assert s["kl_mean"] > 0 and 0 < s["alpha"] < 1


def test_speculative_sampling_runs_on_the_real_model(prepared):
    loaded = prepared.loaded
    draft = build_draft(loaded, DraftSettings(layers=8), CPU, torch.float32)
    prompt = torch.tensor(loaded.tokenizer("def fibonacci(n):").input_ids)
    gen = speculative_sample(loaded.model, draft, prompt, 4, 12, 1.0, torch.Generator().manual_seed(0))
    assert len(gen.tokens) == len(prompt) + 12 and gen.target_calls == len(gen.rounds)
    assert gen.proposed == sum(r["proposed"] for r in gen.rounds) and all(1 <= r["proposed"] <= 4 for r in gen.rounds)
    assert sum(r["emitted"] for r in gen.rounds) >= 12 and 0 <= gen.accepted <= gen.proposed


# ------------------------------------------------------------------------------------------ pinned figures
# Deterministic on the development machine (float32 CPU; one and two threads agree to 2e-5 relative, the
# standard errors included): PIN_REL catches any change of the acceptance or KL computation, the drafts or the
# windows. Sampling with seed 0 is pinned token for token.
PIN_REL = 1e-4
PINNED_ALPHA = {
    # draft: (α, its standard error (batch means, schema 3), mean KL(p‖q) nats), 128 tokens, T = 1
    "int8-channel": (DraftSettings(scheme="int8-channel"), 0.97242917, 0.0030944059, 0.0036971860),
    "int4-channel": (DraftSettings(scheme="int4-channel"), 0.52264248, 0.023603554, 0.96869289),
    "8 layers": (DraftSettings(layers=8), 0.060110398, 0.0096657149, 17.800072),
}
PINNED_SAMPLE = [1604, 3987, 46477, 24, 94, 727, 472, 2822, 79, 4917, 446, 216, 32, 43, 472, 327, 2056, 281]


@pytest.mark.parametrize("name", list(PINNED_ALPHA))
def test_pinned_acceptance(prepared, name):
    ds, alpha, alpha_se, kl = PINNED_ALPHA[name]
    s, _ = _alpha(prepared, ds)
    assert s["tokens"] == 128
    assert s["alpha"] == pytest.approx(alpha, rel=PIN_REL), s["alpha"]
    assert s["alpha_se"] == pytest.approx(alpha_se, rel=PIN_REL), s["alpha_se"]
    assert s["kl_mean"] == pytest.approx(kl, rel=PIN_REL), s["kl_mean"]


def test_pinned_speculative_sample(prepared):
    """The 8-layer draft is a poor one: with seed 0 none of its 42 drafts is accepted, and every round emits one
    token drawn from the residual norm(max(0, p − q))."""
    loaded = prepared.loaded
    draft = build_draft(loaded, DraftSettings(layers=8), CPU, torch.float32)
    prompt = torch.tensor(loaded.tokenizer("def fibonacci(n):").input_ids)
    gen = speculative_sample(loaded.model, draft, prompt, 4, 12, 1.0, torch.Generator().manual_seed(0))
    assert gen.tokens == PINNED_SAMPLE
    assert (gen.accepted, gen.proposed, gen.target_calls) == (0, 42, 12)
    assert [r["proposed"] for r in gen.rounds] == [4] * 9 + [3, 2, 1]
