"""Runs to a precision: `quantize-compare --until-se X`, `compress-bits --until-se X` (comparison/until.py) and the
stopping driver (measure/stopping.run_until_se)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from cli_run import run_cli
from tiny_models import as_json

from infoeval.comparison import compare as pipeline
from infoeval.comparison.until import MIN_WINDOWS, UntilSettings
from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure import stopping as st
from infoeval.measure.column_metrics import bits_per_byte_se, variant_metrics
from infoeval.measure.sequential import CONTINUE, PASS
from infoeval.measure.stats import LN2, cluster_se, mean_cov, se
from infoeval.quant.variant_settings import VariantSettings

ENV = {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_DEBUG", "WORLD_SIZE", "RANK", "LOCAL_RANK")}


# ---- the driver ------------------------------------------------------------------------------------------------
def _driver(target, round_size, budget=40, min_windows=2):
    rng = np.random.default_rng(0)
    values = rng.normal(1.0, 0.2, 40)
    seen = []
    outcome, ses = st.run_until_se(
        seen.extend,
        np.arange(40),
        budget,
        round_size,
        lambda t: [values[:t].std(ddof=1) / np.sqrt(t)],
        target,
        min_windows,
    )
    return outcome, ses, seen, values


def test_stops_at_the_first_window_with_the_se_reached_whatever_the_rounds():
    out = {size: _driver(0.05, size) for size in (1, 3, 8)}
    outcome, ses, seen, values = out[1]
    t = outcome.used
    running = [values[:k].std(ddof=1) / np.sqrt(k) for k in range(2, 41)]
    assert outcome.decision == PASS and t == 2 + next(i for i, s in enumerate(running) if s <= 0.05)
    assert ses[0] == pytest.approx(running[t - 2]) and seen == list(range(t))
    assert {(o.decision, o.used) for o, *_ in out.values()} == {(PASS, t)}
    assert all(o.evaluated - o.used < size and len(s) == o.evaluated for size, (o, _, s, _) in out.items())


def test_budget_spent_and_min_windows():
    outcome, ses, seen, values = _driver(1e-9, 4, budget=10)
    assert outcome.decision == CONTINUE and outcome.used == outcome.evaluated == 10 and len(seen) == 10
    assert ses[0] == pytest.approx(values[:10].std(ddof=1) / np.sqrt(10))
    outcome, *_ = _driver(10.0, 1, min_windows=5)
    assert outcome.decision == PASS and outcome.used == 5  # any SE is small enough, but not before 5 windows
    with pytest.raises(ValueError):
        st.run_until_se(lambda idx: None, np.arange(3), 3, 1, lambda t: [1.0], 0.0)


def test_bits_per_byte_se_is_the_delta_method_ratio_se():
    rng = np.random.default_rng(3)
    nll, nbytes = rng.gamma(2.0, 1.0, 3000), rng.integers(1, 8, 3000).astype(np.float64)
    x = nll / LN2
    r, b = x.sum() / nbytes.sum(), nbytes.mean()
    closed = np.sqrt(mean_cov(x, x) - 2 * r * mean_cov(x, nbytes) + r * r * mean_cov(nbytes, nbytes)) / b
    assert bits_per_byte_se(nll, nbytes) == pytest.approx(closed, rel=1e-9)
    assert bits_per_byte_se(nll, np.full(3000, 4)) == pytest.approx(se(nll) / LN2 / 4, rel=1e-12)
    assert np.isnan(bits_per_byte_se(nll, np.zeros(3000)))


def test_cluster_se_against_brute_force():
    rng = np.random.default_rng(5)
    x, labels = rng.gamma(2.0, 1.0, 600), np.repeat(rng.permutation(20), 30)
    means = np.array([x[labels == g].mean() for g in range(20)])
    assert cluster_se(x, labels) == pytest.approx(means.std(ddof=1) / np.sqrt(20), rel=1e-12)  # equal clusters
    sizes = rng.integers(5, 40, 12)
    labels = np.repeat(np.arange(12), sizes)
    x = rng.normal(size=labels.size)
    s = np.array([x[labels == g].sum() for g in range(12)])
    brute = np.sqrt(12 / 11 * ((s - sizes * x.mean()) ** 2).sum()) / x.size
    assert cluster_se(x, labels * 7 + 3) == pytest.approx(brute, rel=1e-12) and np.isnan(
        cluster_se(x, np.zeros(x.size))
    )
    assert bits_per_byte_se(x + 5, np.full(x.size, 2), labels) == pytest.approx(
        cluster_se(x, labels) / LN2 / 2, rel=1e-9
    )


def test_bad_settings():
    for kw in (
        {"target": 0.0},
        {"target": -1.0},
        {"target": float("nan")},
        {"target": 0.1, "max_tokens": 0},
        {"target": 0.1, "order": "x"},
        {"target": 0.1, "seed": -1},
    ):
        with pytest.raises(UsageError):
            UntilSettings(**kw)


# ---- quantize-compare and compress-bits on a tiny model ------------------------------------------------------
@pytest.fixture(scope="module")
def text_file(tmp_path_factory, tiny_text):
    path = tmp_path_factory.mktemp("until") / "text.txt"
    path.write_text(tiny_text * 2, encoding="utf-8")
    return path


def _run(model_dir, text_file, until, command="compare", max_tokens=1200):
    settings = (
        ModelSettings(str(model_dir), "cpu", "float32"),
        TextSettings(text=text_file, max_tokens=max_tokens),
        WindowSettings(ctx=32),
    )
    if command == "compare":
        return as_json(pipeline.quantize_compare(*settings, VariantSettings("int4-g32,int8-channel"), until=until))
    return as_json(pipeline.compress_bits(*settings, until=until))


def test_until_se_uses_the_seeded_windows_and_reports_their_metrics(tiny_llama_dir, text_file):
    full, fcols = _run(tiny_llama_dir, text_file, None, max_tokens=None)
    n_windows = int(fcols.reference["window"].max()) + 1
    result, cols = _run(tiny_llama_dir, text_file, UntilSettings(10.0))  # any SE will do: stops at MIN_WINDOWS
    q = result["until_se"]
    order = st.visit_order(n_windows, 0)
    used = sorted(order[:MIN_WINDOWS].tolist())
    assert (
        q["reached"]
        and q["windows_used"] == MIN_WINDOWS
        and q["windows_total"] == n_windows
        and q["tokens_budget"] == q["tokens_total"]
    )
    assert sorted(set(cols.reference["window"].tolist())) == used and (np.diff(cols.reference["position"]) > 0).all()
    assert q["tokens_used"] == result["reference"]["tokens"] == cols.n
    # the same positions as the whole run (in text order), with the same numbers up to the batching of the windows
    rows = np.isin(fcols.reference["window"], used)
    assert (fcols.reference["position"][rows] == cols.reference["position"]).all()
    for name in ("int4-g32", "int8-channel"):
        np.testing.assert_allclose(cols.variants[name]["kl"], fcols.variants[name]["kl"][rows], rtol=1e-4, atol=1e-6)
        m = next(v["metrics"] for v in result["variants"] if v["name"] == name)
        assert m == pytest.approx(variant_metrics(cols.reference, cols.variants[name]), nan_ok=True)
        kl = cols.variants[name]["kl"].astype(np.float64)
        windows_se = cluster_se(kl, cols.reference["window"])
        assert q["standard_errors"][f"{name}/kl"] == pytest.approx(max(m["kl_se"], windows_se))
    assert "until_se" not in full


def test_until_se_not_reached_reads_the_whole_budget(tiny_llama_dir, text_file):
    result, cols = _run(tiny_llama_dir, text_file, UntilSettings(1e-9, max_tokens=500))
    q = result["until_se"]
    assert (
        not q["reached"]
        and q["windows_used"] == q["windows_budget"]
        and 500 - 32 < q["tokens_used"] == q["tokens_budget"] <= 500
    )
    assert all(s > 1e-9 for s in q["standard_errors"].values())


def test_compress_bits_until_se_watches_bits_per_byte(tiny_llama_dir, text_file):
    result, cols = _run(tiny_llama_dir, text_file, UntilSettings(0.5), command="compress")
    q = result["until_se"]
    assert list(q["standard_errors"]) == ["bits_per_byte"] and q["reached"]
    ref = cols.reference
    over_windows = bits_per_byte_se(ref["nll"], ref["bytes"], ref["window"])
    assert q["standard_errors"]["bits_per_byte"] == pytest.approx(
        max(result["reference"]["bits_per_byte_se"], over_windows)
    )
    assert result["reference"]["bits_per_byte_se"] <= 0.5 and over_windows <= 0.5
    assert result["reference"]["bytes"] == int(cols.reference["bytes"].sum())
    assert all(
        round(row["bits"] / row["bits_per_byte"]) == result["reference"]["bytes"] for row in result["compressors"]
    )


# ---- the command line ----------------------------------------------------------------------------------------
def _cli(args, cwd):
    return run_cli(args, cwd=cwd, env=ENV)


@pytest.mark.slow  # command-line subprocesses
def test_cli_until_se(tiny_llama_dir, text_file, tmp_path):
    base = ["quantize-compare", tiny_llama_dir, "--text", text_file, "--ctx", 32, "--schemes", "int8-channel", "-q"]
    ok = _cli([*base, "--until-se", 10, "--json", tmp_path / "r.json"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    q = json.loads((tmp_path / "r.json").read_text())["until_se"]
    assert q["reached"] and q["tokens_budget"] == q["tokens_total"]  # no --max-tokens: the whole text is the budget
    for extra, words in [
        (["--until-se", 0], "--until-se"),
        (["--until-se", -1], "--until-se"),
        (["--order-seed", 3], "--order-seed"),
        (["--until-se", 0.1, "--protocol", "lm-eval"], "--until-se"),
    ]:
        r = _cli([*base, *extra], tmp_path)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr
    r = _cli(
        [
            "compress-bits",
            tiny_llama_dir,
            "--text",
            text_file,
            "--ctx",
            32,
            "-q",
            "--until-se",
            10,
            "--max-tokens",
            300,
        ],
        tmp_path,
    )
    assert r.returncode == 0 and "SE ≤ 10 reached" in r.stdout, r.stderr
    out = " ".join(r.stdout.split())  # the header names the windows and tokens used, as the until line does
    head = re.search(r"(\d+) of (\d+) windows used \(--until-se\), ([\d,]+) tokens scored of the text", out)
    tail = re.search(r"after (\d+) of (\d+) windows in seeded order \(([\d,]+) of [\d,]+ positions", out)
    assert head and tail and head.groups() == tail.groups() and int(head[1]) < int(head[2]), out


@pytest.mark.slow  # torchrun: two processes
def test_two_ranks_stop_at_the_same_window_with_the_same_numbers(tiny_llama_dir, text_file, tmp_path):
    """Each round is split between the ranks and gathered; the stop is decided on windows 1 … t of the order, so
    one process and two stop at the same window with the same result (only the windows evaluated past the stop,
    whole rounds, differ)."""
    one_thread = {**ENV, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = [
        "quantize-compare",
        tiny_llama_dir,
        "--text",
        text_file,
        "--ctx",
        32,
        "--schemes",
        "int4-g32",
        "--device",
        "cpu",
        "-q",
        "--until-se",
        0.004,
        "--max-tokens",
        1200,
    ]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "infoeval"]
    a = run_cli(
        [*args, "--json", tmp_path / "1.json"], cwd=tmp_path, env=one_thread, threads=1
    )  # one process: this one
    b = subprocess.run(
        [*launch, *map(str, args), "--json", tmp_path / "2.json"],
        cwd=tmp_path,
        env=one_thread,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert a.returncode == b.returncode == 0, (a.stderr[-2000:], b.stderr[-2000:])
    ra, rb = (json.loads((tmp_path / f"{k}.json").read_text()) for k in (1, 2))
    assert ra["provenance"]["world_size"] == 1 and rb["provenance"]["world_size"] == 2
    qa, qb = ra["until_se"], rb["until_se"]
    assert qa["round_windows"] * 2 == qb["round_windows"] and MIN_WINDOWS < qa["windows_used"] < qa["windows_budget"]
    same = ("reached", "standard_errors", "windows_used", "tokens_used", "windows_budget", "tokens_budget")
    assert {k: qa[k] for k in same} == {k: qb[k] for k in same}
    assert ra["variants"][0]["metrics"] == rb["variants"][0]["metrics"] and ra["reference"] == rb["reference"]
    # the provenance counts the rows the gathers completed: the windows evaluated, not the text's rows per round
    assert rb["provenance"]["parallel"]["gathered_rows"] == qb["tokens_evaluated"]
