"""llama.cpp's --kl-divergence statistics (infoeval/measure/llamacpp_table_stats.py) against brute force, NumPy and
a literal transcription of llama.cpp's running sums; the `--table llama.cpp` block printed by the CLI on a tiny
model."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from cli_run import run_cli

from infoeval.measure import llamacpp_table_stats as ls
from infoeval.measure.column_metrics import variant_metrics
from infoeval.measure.metrics import METRICS
from infoeval.measure.stats import mean_cov
from infoeval.output.llamacpp_table import block_lines

FRACTIONS = [f for _, _, f in ls.DP_PERCENTILES]


# ---- the percentile rule -----------------------------------------------------------------------------------
def test_percentile_on_hand_made_arrays():
    v = np.arange(0, 90, 10, dtype=np.float32)  # n − 1 = 8: positions 8·f
    assert ls.percentile(v, 0.5) == 40.0 and ls.percentile(v, 0.25) == 20.0 and ls.percentile(v, 0.75) == 60.0
    assert ls.percentile(v, 0.0) == 0.0 and ls.percentile(v, -1.0) == 0.0  # fraction ≤ 0: the first
    assert ls.percentile(v, 1.0) == 80.0 and ls.percentile(v, 2.0) == 80.0  # fraction ≥ 1: the last
    assert ls.percentile(v, 0.1) == pytest.approx(8.0, abs=1e-5)  # position 0.8: 0.2·0 + 0.8·10
    assert ls.percentile(v, 0.999) == pytest.approx(79.92, abs=1e-4)  # position 7.992: 0.008·70 + 0.992·80
    w = np.array([1.0, 2.0, 4.0, 8.0, 16.0], dtype=np.float32)  # position 4·0.9 = 3.6: 0.4·8 + 0.6·16
    assert ls.percentile(w, 0.9) == pytest.approx(12.8, abs=1e-5)
    assert ls.percentile(np.array([7.0], dtype=np.float32), 0.5) == 7.0  # n = 1: ip + 1 clamps to the last
    assert math.isnan(ls.percentile(np.array([], dtype=np.float32), 0.5))


def test_percentile_in_float32_as_llama_cpp_computes_it():
    """Float32 arithmetic: (1 − w)·a + w·b with float32 w, not NumPy's float64 lerp."""
    v = np.array([0.1, 0.7, 1.3], dtype=np.float32)
    p = np.float32(0.3) * np.float32(2)
    w = p - np.float32(int(p))
    assert ls.percentile(v, 0.3) == float((np.float32(1) - w) * v[0] + w * v[1])


def test_position_rounds_in_float32_for_huge_n():
    """n − 1 = 2²⁴ + 1 is not a float32: llama.cpp's position 0.5·(n − 1) lands on 2²³ exactly, NumPy's on 2²³ + ½."""
    v = np.zeros(2**24 + 2, dtype=np.float32)
    v[2**23 + 1 :] = 1.0  # sorted
    assert ls.percentile(v, 0.5) == 0.0
    assert np.quantile(v, 0.5) == 0.5


def _float32_slack(n: int, f: float, spread: float) -> float:
    """How far llama.cpp's rule may sit from NumPy's: the float32 fraction and product move the position by up
    to (n − 1)(|float32(f) − f| + 2⁻²³), times a neighbour gap (≤ the spread), plus float32 rounding."""
    return ((n - 1) * (abs(float(np.float32(f)) - f) + 2**-23) + 1e-6) * spread + 1e-12


def test_median_even_and_odd():
    assert ls.median(np.array([1.0, 2.0, 4.0, 8.0], dtype=np.float32)) == 3.0
    assert ls.median(np.array([1.0, 2.0, 9.0], dtype=np.float32)) == 2.0
    assert math.isnan(ls.median(np.array([])))


@pytest.mark.parametrize("n", [2, 3, 10, 101, 1000, 4097])
def test_percentiles_match_numpy_linear_on_random_values(n):
    rng = np.random.default_rng(n)
    for v in (rng.gamma(0.3, 0.05, n).astype(np.float32), rng.normal(0, 0.1, n)):  # KLD-like float32, Δp-like float64
        s = np.sort(v)
        spread = float(s[-1] - s[0])
        for f in FRACTIONS:
            want = float(np.quantile(v.astype(np.float64), f))
            assert ls.percentile(s, f) == pytest.approx(want, abs=_float32_slack(n, f, spread)), f
        assert ls.median(s) == pytest.approx(float(np.median(v.astype(np.float64))), abs=1e-6 * spread + 1e-12)


# ---- per-position Δp ---------------------------------------------------------------------------------------
def _random_runs(n=2000, v=50, seed=0):
    """Reference and variant distributions (float64 logits) and observed tokens: the columns the pipeline keeps."""
    rng = np.random.default_rng(seed)
    zp = rng.normal(0, 2, (n, v))
    zq = zp + rng.normal(0, 0.3, (n, v))
    y = rng.integers(0, v, n)
    lp = zp - np.log(np.exp(zp).sum(-1, keepdims=True))
    lq = zq - np.log(np.exp(zq).sum(-1, keepdims=True))
    p, q = np.exp(lp), np.exp(lq)
    rows = np.arange(n)
    return {
        "p": p,
        "q": q,
        "lp": lp,
        "lq": lq,
        "y": y,
        "nll_p": -lp[rows, y],
        "nll_q": -lq[rows, y],
        "kl": (p * (lp - lq)).sum(-1),
        "top1": p.argmax(-1) == q.argmax(-1),
    }


def test_delta_p_is_q_minus_p_of_the_observed_token():
    r = _random_runs()
    rows = np.arange(len(r["y"]))
    brute = r["q"][rows, r["y"]] - r["p"][rows, r["y"]]
    np.testing.assert_allclose(ls.delta_p(r["nll_p"], r["nll_q"]), brute, rtol=0, atol=1e-14)
    dp32 = ls.delta_p(r["nll_p"].astype(np.float32), r["nll_q"].astype(np.float32))  # the float32 columns
    assert dp32.dtype == np.float64
    np.testing.assert_allclose(dp32, brute, rtol=0, atol=1e-6)


# ---- the aggregates against llama.cpp's running sums -------------------------------------------------------
def _llama_cpp_block(nll_q, nll_b, kld, p_diff, same_top):
    """perplexity.cpp's kl_divergence() final block, transcribed: sums, mean_and_uncertainty, covariance."""
    n = len(nll_q)

    def mean_and_uncertainty(s, s2):
        f = s / n
        df = s2 / n - f * f
        return f, (math.sqrt(df / (n - 1)) if df > 0 and n > 10 else 0.0)

    s = lambda x: float(np.sum(x, dtype=np.float64))  # noqa: E731
    lq, lb = mean_and_uncertainty(s(nll_q), s(nll_q**2)), mean_and_uncertainty(s(nll_b), s(nll_b**2))
    cov = (s(nll_q * nll_b) / n - (s(nll_q) / n) * (s(nll_b) / n)) / (n - 1)
    ppl, ppl_b = math.exp(lq[0]), math.exp(lb[0])
    ratio_unc = math.sqrt(lq[1] ** 2 + lb[1] ** 2 - 2 * cov)
    mse = mean_and_uncertainty(s(p_diff**2), s(p_diff**4))
    rms = math.sqrt(mse[0])
    top = s(same_top) / n
    return {
        "ppl": ppl,
        "ppl_se": ppl * lq[1],
        "ln_ppl_cor": cov / (lq[1] * lb[1]),
        "ln_ppl_ratio": lq[0] - lb[0],
        "ln_ppl_ratio_se": ratio_unc,
        "ppl_ratio": math.exp(lq[0] - lb[0]),
        "ppl_ratio_se": math.exp(lq[0] - lb[0]) * ratio_unc,
        "ppl_diff": ppl - ppl_b,
        "ppl_diff_se": math.sqrt((ppl * lq[1]) ** 2 + (ppl_b * lb[1]) ** 2 - 2 * ppl * ppl_b * cov),
        "kl_mean": mean_and_uncertainty(s(kld), s(kld**2))[0],
        "kl_se": mean_and_uncertainty(s(kld), s(kld**2))[1],
        "dp_mean": mean_and_uncertainty(s(p_diff), s(p_diff**2))[0],
        "dp_se": mean_and_uncertainty(s(p_diff), s(p_diff**2))[1],
        "dp_rms": rms,
        "dp_rms_se": 0.5 / rms * mse[1],
        "top1": top,
        "same_top_se": math.sqrt(top * (1 - top) / (n - 1)),
    }


def test_block_matches_llama_cpp_running_sums_and_numpy():
    r = _random_runs()
    ref = {"nll": r["nll_p"].astype(np.float32), "bytes": np.ones(len(r["y"]), dtype=np.int64)}
    var = {
        "nll": r["nll_q"].astype(np.float32),
        "kl": r["kl"].astype(np.float32),
        "top1": r["top1"],
        "rkl": np.zeros(len(r["y"]), np.float32),
        "tv": np.zeros(len(r["y"]), np.float32),
    }
    m = variant_metrics(ref, var)
    nq, nb = var["nll"].astype(np.float64), ref["nll"].astype(np.float64)
    want = _llama_cpp_block(nq, nb, var["kl"].astype(np.float64), ls.delta_p(nb, nq), r["top1"])
    for key, value in want.items():  # llama.cpp's SEs (positions as independent) under their llamacpp_ names
        name = f"llamacpp_{key}" if key.endswith("_se") and key != "same_top_se" else key
        assert m[name] == pytest.approx(value, rel=1e-9), key
    ppl_b = math.exp(nb.mean())
    assert m["llamacpp_ppl_base_se"] == pytest.approx(ppl_b * np.std(nb, ddof=1) / math.sqrt(nb.size), rel=1e-9)
    # the same figures' SEs under their plain names: batch means (stats.mean_cov, tested in test_standard_errors)
    dp = ls.delta_p(nb, nq)
    bse = lambda x: math.sqrt(mean_cov(x, x))  # noqa: E731
    assert m["ppl_se"] == pytest.approx(m["ppl"] * bse(nq), rel=1e-12)
    assert m["ln_ppl_ratio_se"] == pytest.approx(bse(nq - nb), rel=1e-12)
    assert m["ppl_ratio_se"] == pytest.approx(m["ppl_ratio"] * bse(nq - nb), rel=1e-12)
    diff_var = (m["ppl"] * bse(nq)) ** 2 + (ppl_b * bse(nb)) ** 2 - 2 * m["ppl"] * ppl_b * mean_cov(nq, nb)
    assert m["ppl_diff_se"] == pytest.approx(math.sqrt(diff_var), rel=1e-9)
    assert m["dp_se"] == pytest.approx(bse(dp), rel=1e-12) and m["kl_se"] == pytest.approx(
        bse(var["kl"].astype(np.float64)), rel=1e-12
    )
    assert m["dp_rms_se"] == pytest.approx(0.5 / m["dp_rms"] * bse(dp**2), rel=1e-12)
    assert m["top1_se"] == pytest.approx(bse(r["top1"].astype(np.float64)), rel=1e-12)
    assert m["ln_ppl_cor"] == pytest.approx(np.corrcoef(nq, nb)[0, 1], rel=1e-12)
    assert m["dp_positive"] == np.mean(dp > 0) and 0.3 < m["dp_positive"] < 0.7
    kl = var["kl"].astype(np.float64)
    for key, _, f in ls.KLD_PERCENTILES:
        assert m[f"kld_{key}"] == pytest.approx(np.quantile(kl, f), abs=_float32_slack(kl.size, f, np.ptp(kl))), key
    for key, _, f in ls.DP_PERCENTILES:
        assert m[f"dp_{key}"] == pytest.approx(np.quantile(dp, f), abs=_float32_slack(dp.size, f, np.ptp(dp))), key
    assert m["kld_max"] == float(var["kl"].max()) and m["dp_min"] == float(dp.min())
    assert all(k in METRICS for k in m)  # every key has a registry entry


def test_standard_errors_against_brute_force():
    rng = np.random.default_rng(3)
    a, b = rng.gamma(2.0, 1.0, 500), rng.gamma(2.0, 1.0, 500)
    b = 0.6 * a + b
    n = a.size
    brute_cov = sum((x - a.mean()) * (z - b.mean()) for x, z in zip(a, b)) / (n * (n - 1))
    assert ls.cov_of_means(a, b) == pytest.approx(brute_cov, rel=1e-12)
    assert ls.cov_of_means(a, a) == pytest.approx(np.var(a, ddof=1) / n, rel=1e-12)  # SE² of the mean
    rms, rms_unc = ls.rms_se(a - b)
    d2 = (a - b) ** 2
    assert rms == pytest.approx(math.sqrt(d2.mean()), rel=1e-12)
    assert rms_unc == pytest.approx(0.5 / rms * math.sqrt(np.var(d2, ddof=1) / n), rel=1e-12)
    # the ln PPL ratio's SE from the two SEs and their covariance is the SE of the paired differences
    se = lambda x: math.sqrt(np.var(x, ddof=1) / n)  # noqa: E731
    assert math.sqrt(se(a) ** 2 + se(b) ** 2 - 2 * ls.cov_of_means(a, b)) == pytest.approx(se(a - b), rel=1e-10)


def test_small_and_empty_inputs_give_nan_not_errors():
    one = np.array([0.5])
    s = ls.kld_statistics(one, one, np.array([0.0], np.float32), np.array([True]))
    assert (
        s["dp_mean"] == 0.0 and math.isnan(s["dp_se"]) and math.isnan(s["ln_ppl_cor"]) and math.isnan(s["same_top_se"])
    )
    e = ls.kld_statistics(np.array([]), np.array([]), np.array([], np.float32), np.array([], bool))
    assert all(math.isnan(v) for v in e.values())


def test_block_lines_follow_llama_cpp_labels_and_formats():
    r = _random_runs(500)
    ref = {"nll": r["nll_p"].astype(np.float32), "bytes": np.ones(500, dtype=np.int64)}
    var = {
        "nll": r["nll_q"].astype(np.float32),
        "kl": r["kl"].astype(np.float32),
        "top1": r["top1"],
        "rkl": np.zeros(500, np.float32),
        "tv": np.zeros(500, np.float32),
    }
    m = variant_metrics(ref, var)
    lines = block_lines(m | {"llamacpp_ppl_base_se": 0.25}, {"ppl": 10.0, "ppl_se": 0.5})  # llama.cpp's ± only
    assert lines[:2] == [
        "====== Perplexity statistics ======",
        f"Mean PPL(Q)                   : {m['ppl']:10.6f} ± {m['llamacpp_ppl_se']:10.6f}",
    ]
    assert lines[2] == "Mean PPL(base)                :  10.000000 ±   0.250000"
    assert f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * m['ln_ppl_cor']:6.2f}%" in lines
    assert (
        f"Mean    KLD: {m['kl_mean']:10.6f} ± {m['llamacpp_kl_se']:10.6f}" in lines
        and m["llamacpp_kl_se"] != m["kl_se"]
    )
    assert f"99.9%   KLD: {m['kld_p999']:10.6f}" in lines and f"Median  KLD: {m['kld_median']:10.6f}" in lines
    assert f" 0.1%   Δp: {100 * m['dp_p001']:6.3f}%" in lines and f"75.0%   Δp: {100 * m['dp_p75']:6.3f}%" in lines
    assert f"RMS Δp    : {100 * m['dp_rms']:6.3f} ± {100 * m['llamacpp_dp_rms_se']:5.3f} %" in lines
    assert f"Same top p: {100 * m['top1']:6.3f} ± {100 * m['same_top_se']:5.3f} %" in lines
    assert [line.split(" KLD")[0] for line in lines if " KLD:" in line] == [
        "Mean   ",
        "Maximum",
        "99.9%  ",
        "99.0%  ",
        "95.0%  ",
        "90.0%  ",
        "Median ",
        "10.0%  ",
        " 5.0%  ",
        " 1.0%  ",
        " 0.1%  ",
        "Minimum",
    ]


# ---- the command line --------------------------------------------------------------------------------------
def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"} | {
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    return run_cli([*args, "-q"], cwd=cwd, env=env, threads=1)


@pytest.fixture(scope="module")
def tiny_runs(tiny_llama_dir, tmp_path_factory):
    """quantize-compare and gate with --table llama.cpp on the tiny Llama (and a bad --table)."""
    from tiny_models import tiny_text

    root = tmp_path_factory.mktemp("llamacpp-table")
    (root / "t.txt").write_text(tiny_text(), encoding="utf-8")
    base = ["--text", root / "t.txt", "--ctx", 64, "--max-tokens", 300]
    qc = _run(
        [
            "quantize-compare",
            tiny_llama_dir,
            *base,
            "--schemes",
            "int8-channel,int4-g32",
            "--table",
            "llama.cpp",
            "--json",
            root / "qc.json",
            "--positions",
            root / "qc.csv",
            "--csv",
            root / "s.csv",
        ],
        root,
    )
    ref = _run(["reference", tiny_llama_dir, *base, "--out", root / "ref.safetensors"], root)
    gate = _run(
        [
            "gate",
            "--reference",
            root / "ref.safetensors",
            "--scheme",
            "int4-g32",
            "--table",
            "llama.cpp",
            "--max-kl-mean",
            100,
            "--json",
            root / "g.json",
            "--positions",
            root / "g.csv",
        ],
        root,
    )
    bad = _run(["quantize-compare", tiny_llama_dir, *base, "--table", "llamacpp"], root)
    return root, qc, ref, gate, bad


def test_quantize_compare_prints_the_llama_cpp_block(tiny_runs):
    import pandas as pd

    root, qc, *_ = tiny_runs
    assert qc.returncode == 0, qc.stderr
    data = json.loads((root / "qc.json").read_text())
    out = qc.stdout.splitlines()
    assert "Variants vs reference" not in qc.stdout  # the default tables are replaced
    for v in data["variants"]:
        m = v["metrics"]
        start = next(i for i, line in enumerate(out) if line.startswith(f"### {v['name']} (Q) vs the reference (base)"))
        assert out[start + 1 : start + 1 + len(block_lines(m, data["reference"]))] == block_lines(m, data["reference"])
        assert (
            f"Mean PPL(base)                : {data['reference']['ppl']:10.6f} ± {m['llamacpp_ppl_base_se']:10.6f}"
            in out
        )
        assert m["llamacpp_ppl_base_se"] != data["reference"]["ppl_se"]  # llama.cpp's ±, not the batch-means one
    pos = pd.read_csv(root / "qc.csv")
    np.testing.assert_allclose(pos["dp"], np.exp(-pos["nll"]) - np.exp(-pos["nll_ref"]), atol=1e-6)
    summary = pd.read_csv(root / "s.csv")
    assert summary.loc[1, "dp_rms"] == pytest.approx(data["variants"][0]["metrics"]["dp_rms"], rel=1e-12)
    assert summary.loc[2, "kld_p95"] == pytest.approx(data["variants"][1]["metrics"]["kld_p95"], rel=1e-12)


def test_gate_prints_the_llama_cpp_block_and_the_verdicts(tiny_runs):
    import pandas as pd

    root, _, ref, gate, _ = tiny_runs
    assert ref.returncode == 0, ref.stderr
    assert gate.returncode in (0, 1), gate.stderr
    data = json.loads((root / "g.json").read_text())
    out = gate.stdout.splitlines()
    start = next(
        i for i, line in enumerate(out) if line.startswith("### the candidate (Q) vs the compact reference (base)")
    )
    assert out[start + 1 : start + 1 + len(block_lines(data["metrics"], data["reference"]))] == block_lines(
        data["metrics"], data["reference"]
    )
    assert "tail-corrected estimate" in gate.stdout and "Gate:" in gate.stdout
    pos = pd.read_csv(root / "g.csv")
    np.testing.assert_allclose(pos["dp"], np.exp(-pos["nll_candidate"]) - np.exp(-pos["nll_reference"]), atol=1e-6)
    assert data["metrics"]["dp_mean"] == pytest.approx(pos["dp"].mean(), rel=1e-6)


def test_unknown_table_is_a_usage_error(tiny_runs):
    bad = tiny_runs[-1]
    assert bad.returncode == 2
    assert "--table 'llamacpp' is not allowed; give one of default, llama.cpp" in bad.stderr
