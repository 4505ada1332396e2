"""The gate on the real SmolLM2-135M: the compact reference reproduces quantize-compare's exact numbers, and the
default limits (configs/gates/default.toml) pass int8-channel and fail int4-channel.

512 tokens of python-docs, ctx 256. The KL estimate (top-64 + 128 tail samples, seed 0) is within 2 % of the
exact mean and P99 KL; the coarse lower bound alone is ~0.78 (int8-channel) and ~0.85 (int4-g128) of the exact
mean on this model, whose mass outside the top 64 tokens averages ~16 %: see README, "Gates".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from machine import fingerprint
from tiny_models import as_json, requires_smollm2

from infoeval.comparison import compare as compare_pipeline
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import parse_limits
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.quant.variant_settings import VariantSettings

pytestmark = [pytest.mark.slow, requires_smollm2]

ROOT = Path(__file__).resolve().parents[1]
MODEL = ModelSettings("smollm2-135m", "cpu", "float32")
TEXT, WINDOWS = TextSettings(max_tokens=512), WindowSettings(256)
DEFAULT = tuple(parse_limits(tomllib.loads((ROOT / "configs/gates/default.toml").read_text())["limits"]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("real-gate") / "ref.safetensors"
    info = as_json(build_reference(MODEL, TEXT, WINDOWS, out, top_k=64, tail_samples=128, seed=0))
    return out, info


@pytest.fixture(scope="module")
def exact():
    result, _ = as_json(
        compare_pipeline.quantize_compare(MODEL, TEXT, WINDOWS, VariantSettings("int8-channel,int4-g128,int4-channel"))
    )
    return {v["name"]: v["metrics"] for v in result["variants"]}


@pytest.fixture(scope="module")
def gated(reference):
    return {
        s: as_json(run_gate(GateSettings(reference[0], None, s, DEFAULT), MODEL))[0]
        for s in ("int8-channel", "int4-g128", "int4-channel")
    }


def test_reference_size_under_one_percent_of_llama_cpp(reference):
    info = reference[1]
    assert info["bytes_per_position"] < 1024
    assert info["bytes_per_position"] <= 0.01 * info["llama_cpp_bytes_per_position"]


@pytest.mark.parametrize("scheme", ["int8-channel", "int4-g128"])
def test_compact_kl_within_two_percent_of_exact(gated, exact, scheme):
    g, e = gated[scheme]["metrics"], exact[scheme]
    assert g["kl_mean"] == pytest.approx(e["kl_mean"], rel=0.02)
    assert g["kl_p99"] == pytest.approx(e["kl_p99"], rel=0.02)
    assert g["kl_lower_mean"] <= e["kl_mean"]  # the coarse KL is a lower bound …
    assert g["kl_lower_mean"] < 0.95 * e["kl_mean"]  # … and on this model a loose one, hence the tail samples
    assert g["top1"] == e["top1"]
    assert g["ppl"] == pytest.approx(e["ppl"], rel=1e-5)
    assert g["tv_mean"] == pytest.approx(e["tv_mean"], rel=0.03)


def test_default_limits_pass_int8_and_fail_int4_channel(gated):
    assert gated["int8-channel"]["passed"]
    assert not gated["int4-channel"]["passed"]
    failed = {v["metric"] for v in gated["int4-channel"]["verdicts"] if not v["passed"]}
    assert {"kl_mean", "top1"} <= failed


def test_gguf_file_candidate_is_the_reference_itself(reference):
    """A .gguf candidate (here the very GGUF the reference was built from) gates to KL ≈ 0, top-1 = 1."""
    from infoeval.models.files import builtin_gguf

    result, _ = as_json(run_gate(GateSettings(reference[0], str(builtin_gguf("smollm2-135m")), None, DEFAULT), MODEL))
    m = result["metrics"]
    assert result["passed"] and result["candidate"]["model"]["kind"] == "gguf"
    assert abs(m["kl_mean"]) < 1e-3 and m["top1"] == 1.0 and m["ppl_ratio"] == pytest.approx(1.0, abs=1e-5)


# ------------------------------------------------------------------------------------------ pinned figures
# Deterministic on the development machine (float32 CPU; one and two threads agree to 3e-6 relative): PIN_REL
# catches any change of the reference file's contents, the tail sampling, the quantization or the metrics. Top-1
# is a count of matching positions out of 512, compared exactly.
PIN_REL = 1e-4
PINNED = {
    # scheme: (exact kl_mean, gated kl_mean (top-64 + tail samples), gated coarse lower bound, top-1 of 512,
    #          the candidate's PPL, passes the default limits); tail samples drawn per window from (seed, window)
    "int8-channel": (0.0030740431, 0.0030677440, 0.0024536390, 489, 20.624548, True),
    "int4-g128": (0.72869922, 0.72612506, 0.63408190, 309, 38.255918, False),
    "int4-channel": (0.81058957, 0.81277684, 0.70017587, 285, 44.194491, False),
}
# A CPU of other arithmetic (tests/machine.py) rounds the log-probs otherwise: the exact figures and the PPL move by
# ≤ 4e-5 relative, within PIN_REL, but a few tail samples and top-64 sets fall otherwise, which moved the gated KL
# and its lower bound by up to 1.3e-3 (AVX-512 kernels, 2026-12-02) and 3.8e-3 (the same machine with
# ATEN_CPU_CAPABILITY=avx2) relative. So the three KL figures are pinned per machine where known (fingerprint →
# scheme → exact, gated, lower; one and two threads gave the very same values there), and elsewhere the gated
# figures are compared within SAMPLED_REL.
PINNED_BY_MACHINE = {
    "3d6fe4d9cda6c7bb": {
        "int8-channel": (0.003074051414, 0.003068311033, 0.002453692162),
        "int4-g128": (0.7286994795, 0.7265209444, 0.634083556),
        "int4-channel": (0.8105896453, 0.8138202519, 0.700176924),
    },
}
SAMPLED_REL = 1e-2


def test_pinned_figures(reference, exact, gated):
    own = PINNED_BY_MACHINE.get(fingerprint())
    for scheme, (kl_exact, kl_gated, kl_lower, top1, ppl, passed) in PINNED.items():
        e, g = exact[scheme], gated[scheme]["metrics"]
        if own is not None:
            kl_exact, kl_gated, kl_lower = own[scheme]
        sampled = PIN_REL if own is not None else SAMPLED_REL
        assert e["kl_mean"] == pytest.approx(kl_exact, rel=PIN_REL), (scheme, e["kl_mean"])
        assert g["kl_mean"] == pytest.approx(kl_gated, rel=sampled), (scheme, g["kl_mean"])
        assert g["kl_lower_mean"] == pytest.approx(kl_lower, rel=sampled), (scheme, g["kl_lower_mean"])
        assert e["top1"] == g["top1"] == pytest.approx(top1 / 512, rel=1e-12), (scheme, e["top1"], g["top1"])
        assert e["ppl"] == pytest.approx(ppl, rel=PIN_REL) and g["ppl"] == pytest.approx(ppl, rel=PIN_REL), (
            scheme,
            e["ppl"],
            g["ppl"],
        )
        assert gated[scheme]["passed"] is passed
