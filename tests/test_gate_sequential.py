"""gate --sequential: the stopping module (order, budget, rounds, decisions, the until-SE rule), every limit's
stream against brute force on synthetic columns, the tiny model end to end (a huge limit passes early, an
impossible one fails after the first round, --undecided), the CLI's exit codes, and 2 ranks under torchrun
against one process (slow)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from cli_run import run_cli
from tiny_models import as_json

from infoeval.errors import UsageError
from infoeval.gating.ci_summary import junit_xml, markdown
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limit_streams import QUANTILES, Plan, limit_stream, window_columns
from infoeval.gating.limits import parse_limits
from infoeval.gating.sequential_gate import SequentialSettings, run_sequential_gate
from infoeval.gating.tables import gate_table
from infoeval.input.prepare import Reporter
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure import stopping as st
from infoeval.measure.column_metrics import variant_metrics
from infoeval.measure.llamacpp_table_stats import delta_p
from infoeval.measure.sequential import FAIL, PASS

ENV = {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_DEBUG", "WORLD_SIZE", "RANK", "LOCAL_RANK")}


# ---- the stopping module -------------------------------------------------------------------------------------
def test_order_is_a_pure_function_of_seed_and_count():
    a, b = st.visit_order(40, 7), st.visit_order(40, 7)
    assert a.tolist() == b.tolist() and sorted(a.tolist()) == list(range(40))
    assert st.visit_order(40, 8).tolist() != a.tolist() and st.visit_order(41, 7)[:40].tolist() != a.tolist()
    assert st.visit_order(5, 1, "text").tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        st.visit_order(5, 1, "random")


def test_the_order_does_not_depend_on_results():
    """run_rounds visits windows in the order given whatever the evaluator returns, and stops only by the rule."""
    order = st.visit_order(30, 3)
    rule = st.SequentialRule((st.Stream("a", 1.0, 0.0),), 0.05, 30, 8)
    seen = {}
    for scale in (0.01, 1.0, 50.0):  # well inside, exactly at (the population mean is 1) and far beyond the limit
        got = []

        def evaluate(idx, scale=scale, got=got):
            got.extend(idx.tolist())
            return np.full((len(idx), 1), scale) * (1 + 0.01 * (idx[:, None] - 14.5))

        outcome, obs = st.run_rounds(evaluate, order, 30, 4, rule, np.full(30, 10))
        seen[scale] = (outcome, got)
        assert got == order[: outcome.evaluated].tolist() and len(obs) == outcome.evaluated
    assert seen[0.01][0].decision == PASS and seen[50.0][0].decision == FAIL and seen[1.0][0].decision == 0
    assert seen[1.0][0].used == 30 and seen[50.0][0].used < seen[0.01][0].used


def test_deterministic_and_independent_of_the_round_size():
    rng = np.random.default_rng(0)
    values = rng.lognormal(np.log(0.8), 0.1, 64)[:, None]
    rule = st.SequentialRule((st.Stream("kl", 1.0, 0.0),), 0.05, 64, 16)
    order = st.visit_order(64, 5)
    out = {
        size: st.run_rounds(lambda idx: values[idx], order, 64, size, rule, np.full(64, 512))[0]
        for size in (1, 2, 3, 7)
    }
    assert len({(o.decision, o.used) for o in out.values()}) == 1 and out[1].decision == PASS
    assert all(o.evaluated >= o.used and o.evaluated - o.used < size for size, o in out.items())
    assert out[7].rounds == math.ceil(out[7].evaluated / 7)


def test_budget_and_rounds():
    assert (
        st.budget_count([100, 100, 100], 250) == 2
        and st.budget_count([100], 5) == 1
        and st.budget_count([1, 2], None) == 2
    )
    assert [len(r) for r in st.rounds(7, 3)] == [3, 3, 1]
    with pytest.raises(ValueError):
        st.rounds(3, 0)


def test_min_tokens_holds_back_every_decision():
    rule = st.SequentialRule((st.Stream("a", 1.0, 0.0),), 0.05, 100, 8, min_tokens=2500)
    d = rule.decisions(np.full((10, 1), 30.0), np.arange(1, 11) * 500)
    assert d[:4].tolist() == [0, 0, 0, 0] and d[4] == FAIL  # the capital test alone fails at once; not before 2,500


def test_fail_capital_is_valid_without_replacement():
    """Windows drawn without replacement from a plan whose mean is exactly the limit: the exact test rejects
    in ≤ α of the runs (vectorised over 4,000 permutations of a skewed plan)."""
    rng = np.random.default_rng(1)
    plan = rng.lognormal(0.0, 1.0, 64)
    plan *= 1.0 / plan.mean()
    a = 0.05
    hits = sum(
        bool((st.fail_log_capital(rng.permutation(plan), 1.0, 0.0, 64) >= math.log(1 / a)).any()) for _ in range(4000)
    )
    assert hits / 4000 <= a + 3 * math.sqrt(a * (1 - a) / 4000)
    assert st.fail_log_capital(np.array([70.0, 1.0]), 1.0, 0.0, 64)[0] == np.inf  # Σ z > N·L: refuted outright


def test_kl_max_fails_at_once_and_passes_only_on_the_whole_plan():
    rule = st.SequentialRule((st.Stream("kl_max", 2.0, None, "max"),), 0.05, 5, 4)
    assert rule.decisions(np.array([[1.0], [3.0], [1.0]]), np.arange(3)).tolist() == [0, FAIL, FAIL]
    assert rule.decisions(np.ones((5, 1)), np.arange(5)).tolist() == [0, 0, 0, 0, PASS]


# ---- every limit's stream against brute force ----------------------------------------------------------------
def _synthetic(seed=0, windows=(50, 64, 64, 37, 64)):
    rng = np.random.default_rng(seed)
    n = sum(windows)
    nll_ref = rng.gamma(2.0, 1.2, n)
    var = {
        "nll": (nll_ref + rng.normal(0.05, 0.3, n)).clip(0.0),
        "kl": rng.gamma(0.6, 0.1, n),
        "tv": rng.uniform(0, 0.3, n),
        "rkl": rng.gamma(0.5, 0.1, n),
        "top1": rng.uniform(size=n) < 0.8,
    }
    var["kl_lower"] = var["kl"] * 0.8
    ref = {"nll": nll_ref, "bytes": rng.integers(1, 7, n), "entropy": rng.uniform(0, 3, n)}
    edges = np.cumsum([0, *windows])
    return ref, var, [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


LIMITS = {
    "max_kl_mean": 0.05,
    "max_kl_lower_mean": 0.05,
    "max_tv_mean": 0.1,
    "max_rkl_mean": 0.05,
    "min_top1": 0.75,
    "max_ppl_ratio": 1.04,
    "max_ppl": 5.0,
    "max_bits_per_byte_delta": 0.01,
    "max_bits_per_byte": 1.0,
    "max_kl_p90": 0.2,
    "max_kl_p99": 0.4,
    "max_kl_p999": 0.6,
    "max_kld_p95": 0.3,
    "max_dp_rms": 0.1,
    "max_kl_max": 0.9,
}


def test_every_stream_mean_is_its_metric():
    """The population mean of each limit's window observations against the metric on all positions: the stream's
    mean ≤ its limit exactly when the metric is within the limit (the quantiles: the share above L)."""
    ref, var, wins = _synthetic()
    plan = Plan.of(np.array([w.stop - w.start for w in wins]), int(ref["bytes"].sum()))
    m = variant_metrics(ref, var)
    dp = delta_p(ref["nll"], var["nll"])
    for lim in parse_limits(LIMITS):
        s = limit_stream(lim, plan)
        y = np.array([s.observe(window_columns(ref, var, w)) for w in wins])
        mean, L = (y.max() if s.stream.kind == "max" else y.mean()), lim.value
        want = {
            "kl_mean": var["kl"].mean(),
            "kl_lower_mean": var["kl_lower"].mean(),
            "tv_mean": var["tv"].mean(),
            "rkl_mean": var["rkl"].mean(),
            "top1": -var["top1"].mean(),
            "ppl_ratio": math.log(m["ppl_ratio"]),
            "ppl": math.log(m["ppl"]),
            "bits_per_byte_delta": m["bits_per_byte_delta"] - L,
            "bits_per_byte": m["bits_per_byte"] - L,
            "dp_rms": (dp**2).mean(),
            "kl_max": var["kl"].max(),
        }.get(lim.metric)
        if lim.metric in QUANTILES:
            want = (var["kl"] > L).mean()
        assert mean == pytest.approx(want, rel=1e-9, abs=1e-12), lim.key
        assert s.to_metric(mean) == pytest.approx(
            {
                "top1": var["top1"].mean(),
                "ppl_ratio": m["ppl_ratio"],
                "ppl": m["ppl"],
                "bits_per_byte_delta": m["bits_per_byte_delta"],
                "bits_per_byte": m["bits_per_byte"],
                "dp_rms": m["dp_rms"],
            }.get(lim.metric, mean),
            rel=1e-9,
        ), lim.key
        if s.stream.floor is not None:
            assert (y >= s.stream.floor - 1e-12).all(), lim.key
    q = var["kl"]  # the share above L is 1 − Q when L is the Q-quantile, within one position in n (interpolation)
    for key, frac in QUANTILES.items():
        L = float(np.quantile(q, frac))
        assert (q > L).mean() <= 1 - frac + 1.0 / q.size and (q > L * 0.999).mean() >= 1 - frac - 1.0 / q.size, key


def test_limits_without_a_stream_are_refused():
    with pytest.raises(UsageError, match="cannot judge"):
        limit_stream(
            parse_limits({"max_bits_per_byte_delta": 1})[0].__class__("x", "kl_mean", "min", 1.0), Plan(2, 5.0, 5, 10)
        )


# ---- the tiny model end to end -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ref_file(tmp_path_factory, tiny_llama_dir, tiny_text):
    d = tmp_path_factory.mktemp("seq")
    (d / "text.txt").write_text(tiny_text * 3, encoding="utf-8")
    out = d / "ref.safetensors"
    build_reference(
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        TextSettings(text=d / "text.txt", max_tokens=1600),
        WindowSettings(ctx=32),
        out,
        top_k=16,
        tail_samples=16,
        seed=0,
    )
    return out


def _seq(ref, limits, scheme="int4-g32", **kw):
    gs = GateSettings(ref, None, scheme, tuple(parse_limits(limits)))
    return as_json(run_sequential_gate(gs, SequentialSettings(**kw), ModelSettings("", "cpu", "float32")))


def test_huge_limit_passes_early_impossible_fails_after_the_first_round(ref_file):
    r, _ = _seq(ref_file, {"max_kl_mean": 100.0, "min_top1": 0.0001, "max_ppl_ratio": 1e6})
    q = r["sequential"]
    assert r["passed"] and q["decision"] == "pass" and q["windows_used"] < q["windows_budget"] / 2 and q["saving"] > 0.5
    assert q["windows_total"] == 50 and q["tokens_total"] == 1600 and all(x["decision"] == "pass" for x in q["limits"])
    assert q["visited"] == st.visit_order(50, 0)[: q["windows_used"]].tolist()
    r, _ = _seq(ref_file, {"max_kl_mean": 1e-6}, round_windows=3)
    q = r["sequential"]
    assert not r["passed"] and q["decision"] == "fail" and q["rounds"] == 1 and q["windows_evaluated"] == 3
    assert q["limits"][0]["fail_bound"] is None or q["limits"][0]["fail_bound"] > 1e-6
    assert (
        q["limits"][0]["failed_by"] == "exact capital test"
    )  # one window's KL alone exceeds N · 1e-6: refuted outright
    assert "exact capital test" in markdown(r)
    assert "FAIL" in junit_xml(r).decode() or "failure" in junit_xml(r).decode()
    assert "sequential: fail" in markdown(r)


def test_undecided_at_budget_and_the_full_budget_is_the_fixed_gate(ref_file):
    gs = GateSettings(ref_file, None, "int4-g32", tuple(parse_limits({"max_kl_mean": 10.0, "max_kl_max": 50.0})))
    fixed, fcols = as_json(run_gate(gs, ModelSettings("", "cpu", "float32")))
    seq, cols = _seq(ref_file, {"max_kl_mean": 10.0, "max_kl_max": 50.0}, max_tokens=10**6)
    q = seq["sequential"]
    assert q["decision"] == "pass" and q["windows_used"] == 50  # the maximum passes only on the whole plan
    assert seq["metrics"] == fixed["metrics"] and seq["verdicts"] == fixed["verdicts"]
    assert all((cols["variant"][k] == fcols["variant"][k]).all() for k in fcols["variant"])
    limits = {"max_kl_mean": 10.0, "max_kl_max": 50.0}
    fail, _ = _seq(ref_file, limits, max_tokens=600)
    ok, _ = _seq(ref_file, limits, max_tokens=600, undecided="pass")
    for r in (fail, ok):
        assert r["sequential"]["decision"] == "undecided at budget" and r["sequential"]["fixed_verdict_passed"]
        assert r["sequential"]["tokens_used"] <= 600 and r["sequential"]["saving"] == 0.0
    assert not fail["passed"] and ok["passed"]
    assert "undecided" in junit_xml(fail).decode()


class _Bars(Reporter):
    """The progress bars a run draws: [total, steps] each."""

    def __init__(self):
        self.bars: list = []

    def start(self, total: int, text: str) -> None:
        self.bars.append([total, 0, text])

    def advance(self) -> None:
        self.bars[-1][1] += 1


def test_the_progress_bar_counts_the_floors_forwards_and_no_more(ref_file):
    """Spending the whole budget fills the bar exactly: a step per candidate window and per floor window (the bar
    read 6/4 when it counted the candidate's windows only)."""
    bars = _Bars()
    gs = GateSettings(ref_file, None, "int4-g32", tuple(parse_limits({"max_kl_mean": 10.0, "max_kl_max": 50.0})))
    run = run_sequential_gate(gs, SequentialSettings(max_tokens=600), ModelSettings("", "cpu", "float32"), bars)
    r, _ = as_json(run)
    assert r["sequential"]["decision"] == "undecided at budget" and r["floor"] is not None
    total, steps, text = bars.bars[-1]
    assert steps == total == r["sequential"]["windows_used"] + len(r["floor"]["windows"]), (steps, total, text)
    assert total > r["sequential"]["windows_used"] and "floor" in text


def test_bad_settings_are_usage_errors(ref_file, monkeypatch):
    for kw in (
        {"alpha": 0.0},
        {"alpha": 1.0},
        {"min_tokens": 500, "max_tokens": 100},
        {"order": "x"},
        {"undecided": "maybe"},
        {"round_windows": 0},
        {"seed": -1},
    ):
        with pytest.raises(UsageError):
            SequentialSettings(**kw)
    from infoeval.gating import gate as pipeline

    def no_load(*args):
        raise AssertionError("the candidate was loaded before the options were checked")

    monkeypatch.setattr(pipeline, "_load_candidate", no_load)
    gs = GateSettings(ref_file, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 1.0})))
    # windows of 32 positions: a budget of 100 holds 3 whole windows (96 positions), so 100 can never be reached
    with pytest.raises(UsageError, match="min_tokens 100 is more than the budget's 96 positions"):
        run_sequential_gate(gs, SequentialSettings(min_tokens=100, max_tokens=100), ModelSettings("", "cpu", "float32"))
    with pytest.raises(
        UsageError, match="min_tokens 1000000 is more than the budget's 1600 positions"
    ):  # the whole reference
        run_sequential_gate(gs, SequentialSettings(min_tokens=10**6), ModelSettings("", "cpu", "float32"))
    # a budget of 96 positions holds 3 windows, fewer than the 4 before which no mean limit can pass at α = 0.05
    with pytest.raises(
        UsageError, match=r"needs at least 4 windows .* the budget allows 3: raise \S*max.tokens or use"
    ):
        run_sequential_gate(gs, SequentialSettings(max_tokens=96), ModelSettings("", "cpu", "float32"))
    assert st.fewest_windows(0.05) == 4 and st.fewest_windows(0.2) == 3  # the t-mixture radius's first finite window
    gs = GateSettings(ref_file, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 1.0})), point=True)
    with pytest.raises(UsageError, match="point"):
        run_sequential_gate(gs, SequentialSettings(), ModelSettings("", "cpu", "float32"))


def test_table_renders(ref_file):
    from rich.console import Console

    r, _ = _seq(ref_file, {"max_kl_mean": 100.0, "max_kl_p99": 1e3}, order="text")
    q = r["sequential"]
    assert q["guarantee"] is False and "TEXT ORDER" in markdown(r)
    p99 = next(x for x in q["limits"] if x["limit"] == "max_kl_p99")
    assert p99["bound_of"] == "share" and p99["decision"] == "pass" and p99["pass_bound"] < 0.01
    assert "share > 1000.0000: ≤ 0.00" in markdown(r)  # a bound on the share above the limit, not on P99
    r, _ = _seq(ref_file, {"max_kl_mean": 100.0, "min_top1": 0.0001})
    assert r["sequential"]["guarantee"] is True and "TEXT ORDER" not in markdown(r)
    console = Console(record=True, width=160)
    console.print(gate_table(r))
    text = console.export_text()
    assert "sequential" in text and "saving" in text and "CS bound" in text


# ---- the command line ----------------------------------------------------------------------------------------
def _cli(args, cwd, env=ENV, launch=None):
    """The command in this process (``cli_run.py``), or under ``launch`` (torchrun) in subprocesses."""
    if launch is None:
        return run_cli(args, cwd=cwd, env=env, threads=1 if env.get("OMP_NUM_THREADS") == "1" else None)
    return subprocess.run(
        [*launch, *map(str, args)], cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # command-line subprocesses
def test_cli_exit_codes(ref_file, tmp_path):
    base = ["gate", "-r", ref_file, "--scheme", "int4-g32", "--sequential", "-q"]
    ok = _cli(
        [
            *base,
            "--max-kl-mean",
            100,
            "--min-top1",
            0.0001,
            "--max-ppl-ratio",
            1e6,
            "--max-kl-p99",
            1e3,
            "--max-bpb-increase",
            100,
            "--json",
            tmp_path / "ok.json",
            "--junit",
            tmp_path / "ok.xml",
        ],
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "ok.json").read_text())["sequential"]["decision"] == "pass"
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "ok.xml").getroot().iter("property")}
    assert props["sequential.decision"] == "pass"
    bad = _cli([*base, "--max-kl-mean", 1e-6], tmp_path)
    assert bad.returncode == 1, bad.stderr
    for extra, words in [
        (["--alpha", 0], "--alpha"),
        (["--alpha", 1.5], "--alpha"),
        (["--min-tokens", 500, "--max-tokens", 100], "--min-tokens"),
        (["--point"], "--point"),
        (["--order", "random"], "--order"),
        (["--max-tokens", 96], "needs at least 4 windows"),  # 3 windows of 32: no PASS before the 4th
    ]:
        r = _cli([*base, *extra], tmp_path)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr
    r = _cli(["gate", "-r", ref_file, "--scheme", "int4-g32", "--alpha", 0.1, "-q"], tmp_path)
    assert r.returncode == 2 and "--alpha needs --sequential" in r.stderr


@pytest.mark.slow  # torchrun: two processes
def test_two_ranks_same_verdict_and_stopping_window(ref_file, tmp_path):
    one_thread = {**ENV, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = [
        "gate",
        "-r",
        ref_file,
        "--scheme",
        "int4-g32",
        "--sequential",
        "--round-windows",
        2,
        "--device",
        "cpu",
        "-q",
        "--max-kl-mean",
        100,
        "--min-top1",
        0.0001,
        "--max-ppl-ratio",
        1e6,
        "--max-bpb-increase",
        100,
    ]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "infoeval"]
    for name, limit in (("pass", ["--max-kl-p99", 1e3]), ("fail", ["--max-kl-p99", 1e-4])):
        a = _cli([*args, *limit, "--json", tmp_path / f"{name}-1.json"], tmp_path, one_thread)
        b = _cli([*args, *limit, "--json", tmp_path / f"{name}-2.json"], tmp_path, one_thread, launch)
        assert a.returncode == b.returncode in (0, 1), (a.stderr[-2000:], b.stderr[-2000:])
        ra, rb = (json.loads((tmp_path / f"{name}-{k}.json").read_text()) for k in (1, 2))
        assert rb["provenance"]["world_size"] == 2 and ra["provenance"]["world_size"] == 1
        qa, qb = ra["sequential"], rb["sequential"]
        assert (qa["decision"], qa["stopped_at_window"], qa["visited"]) == (
            qb["decision"],
            qb["stopped_at_window"],
            qb["visited"],
        )
        assert qa["limits"] == qb["limits"] and ra["metrics"] == rb["metrics"] and qa["decision"] == name


def test_a_share_seen_as_zero_does_not_pass_on_a_point():
    """Exceedance shares of a good candidate are 0 in every window: the PASS bound keeps the spread floor's width
    (√(L(1−L)/n̄)), where a zero running spread alone would give the point 0."""
    from infoeval.measure.sequential import t_mixture_radius
    from infoeval.measure.stopping import T_OPT, SequentialRule, Stream

    share, n_bar = 0.01, 512
    floor = (share * (1 - share) / n_bar) ** 0.5
    x = np.zeros(40)
    bare = SequentialRule((Stream("p99", share, 0.0),), alpha=0.05, population=100).state(x, Stream("p99", share, 0.0))
    kept = Stream("p99", share, 0.0, spread_floor=floor)
    st = SequentialRule((kept,), alpha=0.05, population=100).state(x, kept)
    t = np.arange(1, 41, dtype=np.float64)
    assert bare.upper[-1] == 0.0
    assert np.allclose(st.upper[10:], np.minimum.accumulate(t_mixture_radius(t, np.full(40, floor), 0.05, T_OPT))[10:])
    assert st.upper[-1] > 0 and np.isinf(st.upper[:3]).all() and np.isfinite(st.upper[3])
    assert (st.upper >= bare.upper).all()  # the floor only ever widens the PASS side


def test_several_limits_pass_at_alpha_and_fail_at_alpha_over_k():
    """The PASS side of every limit is the CS at α (intersection-union: a gate passes only if each limit does),
    the FAIL side at α/k (union bound: any one limit fails the gate)."""
    from infoeval.measure.sequential import t_mixture_cs
    from infoeval.measure.stopping import T_OPT, SequentialRule, Stream, first_decision

    rng = np.random.default_rng(4)
    x = rng.lognormal(0.0, 0.3, 40)
    streams = tuple(Stream(f"s{j}", 2.0) for j in range(5))
    state = SequentialRule(streams, 0.05, 100).state(x, streams[0])
    assert np.array_equal(state.upper, t_mixture_cs(x, 0.05, t_opt=T_OPT, running_intersection=True)[1])
    assert np.array_equal(state.lower, t_mixture_cs(x, 0.01, t_opt=T_OPT, running_intersection=True)[0])

    # calibration: 4,000 seeded gates of 3 limits on 64 lognormal window means (σ_log 0.3, floor 0)
    runs, a, n = 4000, 0.05, 64
    mu = np.exp(0.3**2 / 2)  # the lognormal's mean: the streams are scaled so that it sits where the case puts it
    slack = 3 * math.sqrt(a * (1 - a) / runs)
    limits = (Stream("a", 1.0, 0.0), Stream("b", 1.0, 0.0), Stream("c", 1.0, 0.0))
    rule = SequentialRule(limits, a, 10**9)
    tokens = np.arange(1, n + 1)
    for means, wrong in (((1.0, 0.5, 0.5), PASS), ((1.0, 1.0, 1.0), FAIL), ((0.98, 0.98, 0.98), FAIL)):
        hits = 0
        for _ in range(runs):
            obs = rng.lognormal(0.0, 0.3, (n, 3)) / mu * np.array(means)
            hits += first_decision(rule.decisions(obs, tokens))[0] == wrong
        assert hits / runs <= a + slack, (means, hits / runs)


@pytest.mark.parametrize("protocol", ["lm-eval", "gptq"])
def test_a_reference_of_any_protocol_gates_sequentially(protocol, tmp_path, tiny_llama_dir, tiny_text):
    """--until-se needs an ``anytime`` protocol (lm-eval's and GPTQ's own figures need every window), but the gate
    publishes no protocol figure: --sequential takes a reference of any protocol, and at the full budget it is the
    fixed gate on that reference's windows."""
    (tmp_path / "text.txt").write_text(tiny_text * 3, encoding="utf-8")
    out = tmp_path / "ref.safetensors"
    build_reference(
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        TextSettings(text=tmp_path / "text.txt", max_tokens=1600),
        WindowSettings(ctx=32, protocol=protocol),
        out,
        top_k=16,
        tail_samples=16,
        seed=0,
    )
    limits = {"max_kl_mean": 10.0, "max_kl_max": 50.0}
    gs = GateSettings(out, None, "int4-g32", tuple(parse_limits(limits)))
    fixed, _ = as_json(run_gate(gs, ModelSettings("", "cpu", "float32")))
    seq, _ = _seq(out, limits, max_tokens=10**6)
    q = seq["sequential"]
    assert q["decision"] == "pass" and q["windows_used"] == q["windows_total"] > 1
    assert seq["metrics"] == fixed["metrics"] and seq["verdicts"] == fixed["verdicts"]
    assert seq["provenance"]["reference_provenance"]["protocol"]["name"] == protocol
