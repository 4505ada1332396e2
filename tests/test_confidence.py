"""KL by confidence (``measure/confidence.py``, ``quantize-compare --table confidence``): the buckets against a
loop over positions, the reference's top-1 probability against closed-form bounds (the observed token's
probability, the min-entropy bound −log p_max ≤ H, 1/V), and the view on the command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cli_run import run_cli

import infoeval
from infoeval.measure.confidence import EDGES, bucket_of, confidence_block


def test_buckets_against_a_loop():
    rng = np.random.default_rng(0)
    p = np.r_[rng.uniform(0, 1, 500), list(EDGES)]
    kl, top1 = rng.exponential(0.1, p.size), rng.random(p.size) < 0.8
    block = confidence_block(p, {"v": {"kl": kl, "top1": top1}})
    for i, (lo, hi) in enumerate(zip(EDGES, EDGES[1:])):
        inside = [j for j in range(p.size) if lo <= p[j] < hi or (hi == 1.0 and p[j] == 1.0)]
        assert block["counts"][i] == len(inside) and all(bucket_of(p[inside]) == i)
        want = sum(kl[j] for j in inside) / len(inside) if inside else None
        assert block["variants"]["v"]["kl_mean"][i] == (pytest.approx(want) if inside else None)
        assert block["variants"]["v"]["top1"][i] == (pytest.approx(np.mean(top1[inside])) if inside else None)
    assert sum(block["counts"]) == p.size and block["edges"] == list(EDGES)


def test_the_reference_top1_probability_obeys_its_bounds(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    result = infoeval.compare(
        str(tiny_llama_dir),
        schemes=("int4-g32",),
        text=tmp_path / "t.txt",
        ctx=64,
        max_tokens=400,
        device="cpu",
        floor="off",
    )
    ref = result.columns.reference
    p, observed = ref["p_top1"].astype(np.float64), np.exp(-ref["nll"].astype(np.float64))
    assert (observed <= p * (1 + 1e-5)).all() and (p <= 1 + 1e-6).all() and (p >= 1 / 512 - 1e-7).all()
    hit = ref["token_id"] == ref["argmax"]
    assert hit.any() and np.allclose(p[hit], observed[hit], rtol=1e-5)  # the observed token is the top one
    assert (-np.log(p) <= ref["entropy"].astype(np.float64) + 1e-5).all()  # min-entropy ≤ Shannon entropy
    block = result.to_json()["by_confidence"]
    assert block["counts"] == np.bincount(bucket_of(p), minlength=len(EDGES) - 1).tolist()
    assert math.isclose(
        sum(c * (k or 0) for c, k in zip(block["counts"], block["variants"]["int4-g32"]["kl_mean"])) / p.size,
        result.to_json()["variants"][0]["metrics"]["kl_mean"],
        rel_tol=1e-9,
    )
    assert "p_top1_ref" in result.positions.columns


def test_the_confidence_view(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    args = ["--text", "t.txt", "--ctx", 64, "--max-tokens", 200, "--device", "cpu", "--floor", "off", "-q"]
    r = run_cli(
        [
            "quantize-compare",
            tiny_llama_dir,
            "--schemes",
            "int8-channel,int4-g32",
            "--table",
            "confidence",
            "--json",
            "c.json",
            *args,
        ],
        cwd=tmp_path,
    )
    assert (
        r.returncode == 0 and "Mean KL by the reference's confidence" in r.stdout and "Top-1 agreement by" in r.stdout
    )
    assert json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))["by_confidence"]["edges"] == list(EDGES)
    bad = run_cli(["gate", "-r", "missing.safetensors", "--table", "confidence", "-q"], cwd=tmp_path)
    assert bad.returncode == 2 and "--table 'confidence' is not allowed; give one of default, llama.cpp" in bad.stderr
