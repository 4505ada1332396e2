"""Gate limits: parsing fails closed, verdicts use standard errors, baselines, JUnit and markdown outputs."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import tomllib

from infoeval.errors import UsageError
from infoeval.gating.ci_summary import junit_xml, markdown
from infoeval.gating.limits import DEFAULT_LIMITS, compare_baseline, judge, parse_limits

ROOT = Path(__file__).resolve().parents[1]
METRICS = {
    "kl_mean": 0.040,
    "kl_se": 0.004,
    "kl_p99": 0.3,
    "top1": 0.93,
    "top1_se": 0.01,
    "ln_ppl_ratio": math.log(1.02),
    "ln_ppl_ratio_se": 0.01,
    "ppl_ratio": 1.02,
    "bits_per_byte_delta": 0.01,
    "bits_per_byte_delta_se": 0.004,
}


def test_docstring_example_fails_at_95_but_passes_as_point():
    lim = parse_limits({"max_kl_mean": 0.045})
    (v,) = judge(lim, METRICS)
    assert v.bound == pytest.approx(0.040 + 1.6448536 * 0.004, rel=1e-6)
    assert not v.passed
    (p,) = judge(lim, METRICS, point=True)
    assert p.passed and p.bound == 0.040 and p.judged == "point estimate"


def test_min_limits_subtract_and_ppl_ratio_is_judged_in_logs():
    vs = judge(parse_limits({"min_top1": 0.92, "max_ppl_ratio": 1.05}), METRICS)
    top1, ppl = vs
    assert top1.bound == pytest.approx(0.93 - 1.6448536 * 0.01, rel=1e-6) and not top1.passed
    assert ppl.bound == pytest.approx(math.exp(math.log(1.02) + 1.6448536 * 0.01), rel=1e-9) and ppl.passed


def test_llama_cpp_rms_dp_is_judged_with_its_se_and_kld_p95_as_a_point():
    m = {"dp_rms": 0.010, "dp_rms_se": 0.001, "kld_p95": 0.2}
    rms, p95 = judge(parse_limits({"max_dp_rms": 0.0105, "max_kld_p95": 0.25}), m)
    assert rms.bound == pytest.approx(0.010 + 1.6448536 * 0.001, rel=1e-6) and not rms.passed
    assert p95.judged == "point estimate" and p95.passed
    with pytest.raises(UsageError, match="wrong side"):
        parse_limits({"min_dp_rms": 0.01})


def test_quantiles_are_point_estimates_and_confidence_changes_z():
    (v,) = judge(parse_limits({"max_kl_p99": 0.29}), METRICS)
    assert v.judged == "point estimate" and not v.passed
    (a,) = judge(parse_limits({"max_kl_mean": 0.05}), METRICS, confidence=0.99)
    assert a.bound == pytest.approx(0.040 + 2.3263479 * 0.004, rel=1e-6)


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"max_kl_man": 0.1}, "unknown gate limit 'max_kl_man'"),
        ({"kl_mean": 0.1}, "unknown gate limit"),
        ({"min_kl_mean": 0.1}, "wrong side"),
        ({"max_top1": 0.9}, "wrong side"),
        ({"max_kl_mean": "0.1"}, "not a finite number"),
        ({"max_kl_mean": float("nan")}, "not a finite number"),
        ({}, "no gate limits"),
        ({"max_kl_mean": -1}, "'max_kl_mean' = -1 can never be met (kl_mean lies in [0, ∞)); give at least 0"),
        ({"min_top1": 1.5}, "'min_top1' = 1.5 can never be met (top1 lies in [0, 1]); give at most 1"),
        ({"max_ppl": 0.5}, "can never be met (ppl lies in [1, ∞))"),
        ({"max_kl_p99": 0.1, "max_tv_mean": -0.01}, "'max_tv_mean' = -0.01 can never be met"),
    ],
)
def test_bad_limits_fail_closed(raw, words):
    with pytest.raises(UsageError) as e:
        parse_limits(raw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_default_toml_matches_built_in_defaults():
    data = tomllib.loads((ROOT / "configs" / "gates" / "default.toml").read_text())
    assert data["limits"] == DEFAULT_LIMITS
    assert {lim.metric for lim in parse_limits(data["limits"])} == {
        "kl_mean",
        "kl_p99",
        "top1",
        "ppl_ratio",
        "bits_per_byte_delta",
    }


def test_baseline_relative_tolerance_by_direction():
    base = {"kl_mean": 0.030, "top1": 0.95}
    rows = compare_baseline({"kl_mean": 0.0314, "top1": 0.90}, base, ["kl_mean", "top1"], 0.05)
    assert [r["passed"] for r in rows] == [True, False]  # KL +4.7 % within 5 %; top-1 fell 5.3 %
    rows = compare_baseline({"kl_mean": 0.0316, "top1": 0.99}, base, ["kl_mean", "top1"], 0.05)
    assert [r["passed"] for r in rows] == [False, True]
    with pytest.raises(UsageError):
        compare_baseline({"kl_mean": 0.1}, {}, ["kl_mean"], 0.05)


def _result(verdicts, baseline_rows=()):
    return {
        "passed": all(v.passed for v in verdicts) and all(r["passed"] for r in baseline_rows),
        "verdicts": [v.as_dict() for v in verdicts],
        "baseline": {"rows": list(baseline_rows)} if baseline_rows else None,
        "candidate": {"spec": "cand", "scheme": "int4-g128"},
        "metrics": {**METRICS, "tokens": 100, "ppl": 10.2, "kl_lower_mean": 0.03, "tv_mean": 0.1},
        "reference": {"ppl": 10.0},
        "provenance": {"reference_file": "ref.safetensors", "top_k": 64, "tail_samples": 128},
    }


def test_junit_has_one_testcase_per_limit_and_failures_marked():
    verdicts = judge(parse_limits(DEFAULT_LIMITS), METRICS)
    rows = [{"metric": "kl_mean", "value": 0.04, "baseline": 0.02, "tolerance": 0.05, "passed": False}]
    root = ET.fromstring(junit_xml(_result(verdicts, rows)))
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(DEFAULT_LIMITS) + 1
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == sum(1 for v in verdicts if not v.passed) + 1
    assert root.find("testsuite").get("failures") == str(len(failed))


def test_markdown_table_lists_every_check():
    verdicts = judge(parse_limits(DEFAULT_LIMITS), METRICS)
    md = markdown(_result(verdicts))
    assert md.startswith("### infoeval gate: ")
    assert md.count("\n| ") == len(DEFAULT_LIMITS) + 1  # header + one row per limit
    assert ("✅ PASS" in md) == all(v.passed for v in verdicts)


def test_every_gate_metric_has_its_range_and_the_edges_are_allowed():
    from infoeval.gating.limits import GATE_METRICS, GATE_RANGES

    assert set(GATE_RANGES) == set(GATE_METRICS)
    for metric, (lo, hi) in GATE_RANGES.items():
        side = "min" if metric in ("top1",) else "max"
        edge = lo if side == "max" else hi
        if abs(edge) != float("inf"):
            assert parse_limits({f"{side}_{metric}": edge})[0].value == edge  # a limit at the edge can be met
    assert parse_limits({"max_bpb_increase": -0.1})[0].value == -0.1  # a variant may beat the reference
