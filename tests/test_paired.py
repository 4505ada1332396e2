"""Paired verdicts between variants (``quantize-compare --baseline``, ``measure/paired.py``) against brute force:
the paired SE of the differences, Holm's adjustment, the P99's bootstrap written out, flips counted with loops,
and the verdicts' calibration on synthetic variants of equal expected KL built from real windows
(``tests/data/se_windows.npz``, see test_se_coverage.py). The command's bad input is one line, exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli
from test_standard_errors import brute_se

from infoeval.errors import UsageError
from infoeval.measure import paired
from infoeval.measure.stats import block_labels

POOL = Path(__file__).resolve().parent / "data" / "se_windows.npz"


def _series(seed: int, n_windows: int = 16, length: int = 64):
    rng = np.random.default_rng(seed)
    windows = np.repeat(np.arange(n_windows), length)
    shared = np.repeat(
        rng.normal(0, 1, n_windows), length
    )  # a window-level effect: positions of a window move together
    return windows, shared + rng.normal(0, 1, windows.size), rng


def test_t_test_is_the_batch_means_t_on_g_minus_1_df():
    windows, d, _ = _series(0)
    d = d + 0.3
    row = paired.t_test(d, windows)
    assert row["diff"] == pytest.approx(d.mean()) and row["se"] == pytest.approx(
        brute_se(d.tolist(), windows.tolist()), rel=1e-12
    )
    assert row["df"] == 15 and row["t"] == pytest.approx(row["diff"] / row["se"])
    # two-sided p from Student's t with 15 df, against the table: t = 2.131450 → p = 0.05, t = 2.946713 → p = 0.01
    for t, p in ((2.131449546, 0.05), (2.946712883, 0.01)):
        assert paired._with_p({"diff": t, "se": 1.0, "df": 15})["p"] == pytest.approx(p, abs=1e-7)
    assert paired.t_test(np.zeros(64), np.repeat(np.arange(4), 16))["p"] == 1.0  # no difference at all


def test_holm_against_its_definition():
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 9):
        p = {f"v{i}": float(x) for i, x in enumerate(rng.uniform(0, 0.2, m))}
        order = sorted(p, key=p.get)
        want, running = {}, 0.0
        for k, name in enumerate(order):
            running = max(running, min(1.0, (m - k) * p[name]))
            want[name] = running
        assert paired.holm(p) == pytest.approx(want)
    assert (
        math.isnan(paired.holm({"a": float("nan"), "b": 0.01})["a"])
        and paired.holm({"a": float("nan"), "b": 0.01})["b"] == 0.01
    )


def test_the_p99_bootstrap_written_out():
    windows, x, rng = _series(2)
    a, b = np.exp(x), np.exp(x + rng.normal(0, 0.2, x.size))
    got = paired.quantile_diff(a, b, windows, reps=60, seed=7)
    labels = block_labels(a.size, windows)
    draw, diffs = np.random.default_rng(7), []
    for _ in range(60):
        rows = [i for g in draw.integers(0, 16, 16) for i in range(a.size) if labels[i] == g]
        diffs.append(np.quantile(a[rows], 0.99) - np.quantile(b[rows], 0.99))
    assert got["diff"] == pytest.approx(np.quantile(a, 0.99) - np.quantile(b, 0.99)) and got["se"] == pytest.approx(
        np.std(diffs, ddof=1)
    )
    same = paired.quantile_diff(a, a, windows, reps=20)
    assert same["diff"] == 0 and same["se"] == 0 and same["p"] == 1.0


def test_flips_and_verdict_directions():
    base, var = np.array([1, 1, 0, 0, 1, 0], bool), np.array([1, 0, 1, 0, 0, 1], bool)
    want = {
        "baseline_only": sum(b and not v for b, v in zip(base, var)),
        "variant_only": sum(v and not b for b, v in zip(base, var)),
    }
    got = paired.flips(base, var)
    assert {k: got[k] for k in want} == want == {"baseline_only": 2, "variant_only": 2} and got["both"] + got[
        "neither"
    ] == 2
    assert paired.verdict(-0.1, 0.01, 0.05, -1) == "better" and paired.verdict(0.1, 0.01, 0.05, -1) == "worse"
    assert paired.verdict(0.1, 0.01, 0.05, 1) == "better" and paired.verdict(0.1, 0.2, 0.05, 1) == "not distinguishable"
    assert [paired.better(m) for m in ("kl_mean", "kl_p99", "top1", "ln_ppl_ratio")] == [
        -1,
        -1,
        1,
        -1,
    ]  # the registry's directions


def _trial_columns(pool: np.ndarray, top: np.ndarray, rng, scale: dict[str, float]) -> dict[str, dict]:
    """Variants of one run from 16 real windows: each KL = the real KL × exp(window effect + position noise) ×
    its scale, noise drawn alike for every variant (equal scales: equal expected KL)."""
    pick = rng.integers(0, len(pool), 16)
    kl, agree = pool[pick].ravel(), top[pick].ravel()
    out = {}
    for name, s in scale.items():
        noise = np.repeat(rng.normal(0, 0.1, 16), pool.shape[1]) + rng.normal(0, 0.3, kl.size)
        flip, nll_noise = rng.random(kl.size) < 0.05, rng.normal(0, 0.5, kl.size)
        out[name] = {"kl": kl * np.exp(noise) * s, "top1": agree ^ flip, "nll": 2.0 + kl * s + nll_noise}
    return out


@pytest.fixture(scope="module")
def pool():
    data = np.load(POOL)
    w = data["window"]
    ids = [i for i in np.unique(w) if (w == i).sum() == 512]
    kl = np.stack([data["int4-g128/kl"][w == i] for i in ids]).astype(np.float64)
    top = np.stack([data["int4-g128/top1"][w == i] for i in ids]).astype(bool)
    return kl[:, ::4], top[:, ::4]  # 128 positions a window: the same windows, a faster test


ALPHA, TRIALS = 0.05, 1000
SLACK = 3 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)  # three binomial SDs of a false-verdict rate over TRIALS runs


def test_pairs_of_equal_expected_kl_are_not_distinguishable_but_for_alpha(pool):
    """1,000 seeded runs of a baseline and one variant of the same expected KL: a false better/worse in α = 5 % of
    them, within binomial noise (4.5-5.9 % over four seeds), for every metric: the verdicts are calibrated."""
    kl, top = pool
    rng, false = np.random.default_rng(0), {m: 0 for m in ("kl_mean", "top1", "ln_ppl_ratio")}
    windows = np.repeat(np.arange(16), kl.shape[1])
    for _ in range(TRIALS):
        block = _fast_block(_trial_columns(kl, top, rng, {"base": 1.0, "a": 1.0}), windows)
        for metric in false:
            false[metric] += block["a"][metric] != "not distinguishable"
    assert all(ALPHA - SLACK <= f / TRIALS <= ALPHA + SLACK for f in false.values()), false


def test_holm_keeps_the_family_of_variants_at_alpha(pool):
    """Three variants of the baseline's expected KL: some false verdict among the three in at most α of the runs."""
    kl, top = pool
    rng, family = np.random.default_rng(1), {m: 0 for m in ("kl_mean", "top1", "ln_ppl_ratio")}
    windows = np.repeat(np.arange(16), kl.shape[1])
    for _ in range(TRIALS):
        block = _fast_block(_trial_columns(kl, top, rng, {"base": 1.0, "a": 1.0, "b": 1.0, "c": 1.0}), windows)
        for metric in family:
            family[metric] += any(block[v][metric] != "not distinguishable" for v in block)
    assert all(f / TRIALS <= ALPHA + SLACK for f in family.values()), family


def _fast_block(cols: dict, windows: np.ndarray) -> dict:
    """The verdicts of paired_block for the t-tested metrics (the P99's bootstrap is tested on its own)."""
    others = [n for n in cols if n != "base"]
    out = {n: {} for n in others}
    for metric in ("kl_mean", "top1", "ln_ppl_ratio"):
        column, better = paired.COLUMNS[metric], paired.better(metric)
        rows = {
            n: paired.t_test(cols[n][column].astype(np.float64) - cols["base"][column].astype(np.float64), windows)
            for n in others
        }
        adjusted = paired.holm({n: r["p"] for n, r in rows.items()})
        for n in others:
            out[n][metric] = paired.verdict(rows[n]["diff"], adjusted[n], 0.05, better)
    return out


def test_a_variant_a_third_worse_is_found_worse(pool):
    kl, top = pool
    rng, worse = np.random.default_rng(1), 0
    windows = np.repeat(np.arange(16), kl.shape[1])
    for _ in range(200):
        cols = _trial_columns(kl, top, rng, {"base": 1.0, "a": 1.33})
        worse += _fast_block(cols, windows)["a"]["kl_mean"] == "worse"
    assert worse / 200 >= 0.8, worse


def test_paired_block_holds_every_metric(pool):
    kl, top = pool
    cols = _trial_columns(kl, top, np.random.default_rng(2), {"base": 1.0, "a": 1.0, "b": 2.0})
    block = paired.paired_block(
        cols, paired.PairedSettings("base", alpha=0.05, seed=3), np.repeat(np.arange(16), kl.shape[1])
    )
    assert block["baseline"] == "base" and list(block["variants"]) == ["a", "b"]
    assert set(block["variants"]["b"]) == {"kl_mean", "kl_p99", "top1", "ln_ppl_ratio", "top1_flips"}
    assert (
        block["variants"]["b"]["kl_mean"]["verdict"] == "worse"
        and block["variants"]["b"]["kl_mean"]["p_holm"] >= block["variants"]["b"]["kl_mean"]["p"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--baseline", "int2-g32"],
            "--baseline 'int2-g32' is not a variant of this run; its variants: int8-channel, int4-g32",
        ),
        (["--schemes", "int4-g32", "--baseline", "int4-g32"], "--baseline 'int4-g32' is the run's only variant"),
        (["--alpha", "0.1"], "--alpha needs --baseline"),
        (["--baseline", "int4-g32", "--alpha", "0.7"], "--alpha 0.7 is not allowed"),
    ],
)
def test_bad_baselines_are_one_line_usage_errors(tiny_llama_dir, tmp_path, args, message):
    base = [
        "quantize-compare",
        tiny_llama_dir,
        "--schemes",
        "int8-channel,int4-g32",
        "--device",
        "cpu",
        "-q",
        "--text",
        "missing.txt",
    ]
    r = run_cli([*base, *args], cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_settings_refuse_a_bad_level():
    with pytest.raises(UsageError, match="^alpha 0 is not allowed"):
        paired.PairedSettings("x", alpha=0)


def test_the_run_carries_its_verdicts_and_loads_back(tiny_llama_dir, tiny_text, tmp_path):
    import infoeval

    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    kw = dict(
        schemes=("int8-channel", "int4-g32", "int3-g64"),
        text=tmp_path / "t.txt",
        ctx=64,
        max_tokens=600,
        device="cpu",
        floor="off",
    )
    plain, result = (
        infoeval.compare(str(tiny_llama_dir), **kw),
        infoeval.compare(str(tiny_llama_dir), baseline="int4-g32", **kw),
    )
    assert (
        "paired" not in plain.to_json() and plain.to_json()["variants"] == result.to_json()["variants"]
    )  # nothing else moves
    block = result.to_json()["paired"]
    assert block["baseline"] == "int4-g32" and list(block["variants"]) == ["int8-channel", "int3-g64"]
    cols = result.columns.variants
    for name in block["variants"]:
        d = cols[name]["kl"].astype(np.float64) - cols["int4-g32"]["kl"].astype(np.float64)
        assert block["variants"][name]["kl_mean"]["diff"] == pytest.approx(d.mean())
        assert block["variants"][name]["kl_mean"]["se"] == pytest.approx(
            brute_se(d.tolist(), result.columns.reference["window"].tolist())
        )
    assert (
        block["variants"]["int3-g64"]["kl_mean"]["verdict"] == "worse"
        and block["variants"]["int8-channel"]["kl_mean"]["verdict"] == "better"
    )
    result.save(tmp_path / "run")
    assert infoeval.load(tmp_path / "run").to_json()["paired"] == block
