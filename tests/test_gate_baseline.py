"""`gate --baseline` paired on positions (issue 51, step 2; ``gating/baseline.py``): an earlier gate run that kept
its per-position table is compared with the candidate position by position (difference ± batch-means SE, fail only
when worse beyond noise); without the table the tolerance form stays and says why. Numbers against the two
positions tables and the loops of test_standard_errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli
from test_standard_errors import brute_se

import infoeval

LIMITS = dict(max_kl_mean=10.0, min_top1=0.0, max_ppl_ratio=100.0, max_bpb_increase=100.0)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs(tiny_llama_dir, tiny_text, tmp_path_factory):
    """A reference file, and an int4-g32 gate run kept as a run folder (result.json and positions.csv)."""
    folder = tmp_path_factory.mktemp("gate-baseline")
    (folder / "t.txt").write_text(tiny_text, encoding="utf-8")
    ref = folder / "ref.safetensors"
    infoeval.reference(
        str(tiny_llama_dir), out=ref, text=folder / "t.txt", ctx=64, max_tokens=600, top_k=16, device="cpu"
    )
    infoeval.gate(reference=ref, scheme="int4-g32", floor="off", device="cpu", **LIMITS).save(folder / "base")
    return folder, ref


def _gate(ref, scheme, baseline, **kw):
    return infoeval.gate(reference=ref, scheme=scheme, floor="off", device="cpu", baseline=baseline, **LIMITS, **kw)


def test_the_same_candidate_is_not_worse_and_its_differences_are_zero(runs):
    folder, ref = runs
    result = _gate(ref, "int4-g32", folder / "base")
    rows = result.to_json()["baseline"]["rows"]
    assert {r["form"] for r in rows} == {"paired"} and {r["metric"] for r in rows} == {
        "kl_mean",
        "kl_p99",
        "top1",
        "ppl_ratio",
        "bits_per_byte_delta",
    }
    assert (
        all(abs(r["diff"]) < 1e-7 and r["passed"] for r in rows) and result.passed
    )  # 0 but for the CSV's printed digits


def test_a_worse_candidate_fails_beyond_noise_and_a_better_one_passes(runs):
    folder, ref = runs
    worse = _gate(ref, "int3-g64", folder / "base")
    kl = next(r for r in worse.to_json()["baseline"]["rows"] if r["metric"] == "kl_mean")
    base = pd.read_csv(folder / "base" / "positions.csv")
    d = worse.positions["kl"].to_numpy(np.float64) - base["kl"].to_numpy(np.float64)
    assert kl["diff"] == pytest.approx(d.mean()) and kl["se"] == pytest.approx(
        brute_se(d.tolist(), base["window"].tolist())
    )
    assert kl["worse_by_at_least"] > 0 and not kl["passed"] and not worse.passed
    better = _gate(ref, "int8-channel", folder / "base")
    assert all(r["passed"] for r in better.to_json()["baseline"]["rows"]) and better.passed
    assert next(r for r in better.to_json()["baseline"]["rows"] if r["metric"] == "kl_mean")["diff"] < 0


def test_a_baseline_without_positions_keeps_the_tolerance_and_says_so(runs, tmp_path):
    folder, ref = runs
    only_json = tmp_path / "base.json"
    only_json.write_text((folder / "base" / "result.json").read_text(encoding="utf-8"), encoding="utf-8")
    rows = _gate(ref, "int4-g32", only_json).to_json()["baseline"]["rows"]
    assert {r["form"] for r in rows} == {"tolerance"} and all(
        r["note"] == "the baseline kept no per-position table" for r in rows
    )
    assert all(r["tolerance"] == 0.05 and r["passed"] for r in rows)


def test_the_cli_prints_the_paired_rows_and_exits_1_when_worse(runs, tmp_path):
    folder, ref = runs
    r = run_cli(
        [
            "gate",
            "-r",
            ref,
            "--scheme",
            "int3-g64",
            "--floor",
            "off",
            "--device",
            "cpu",
            "--max-kl-mean",
            10,
            "--baseline",
            folder / "base",
            "--json",
            tmp_path / "g.json",
            "--markdown",
            tmp_path / "g.md",
            "-q",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stderr
    assert "kl_mean vs baseline" in r.stdout and "worse by ≥" in r.stdout
    assert "not worse beyond noise" in (tmp_path / "g.md").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))["baseline"]["rows"][0]["form"] == "paired"
