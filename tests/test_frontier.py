"""The bits-versus-KL frontier (``measure/frontier.py``) against a brute-force Pareto check, and where it shows:
the result's ``frontier`` block, the table, the plot's third panel."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from cli_run import run_cli

from infoeval.measure.frontier import frontier_block, pareto


def _brute(points: dict) -> set[str]:
    """Every name that no other point dominates, by comparing every pair."""
    out = set(points)
    for (a, (xa, ya)), (_b, (xb, yb)) in itertools.permutations(points.items(), 2):
        if xb <= xa and yb <= ya and (xb, yb) != (xa, ya):
            out.discard(a)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_pareto_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    bits = rng.choice([2.0, 3.25, 4.0, 4.25, 4.5, 8.0, 16.0], n)  # ties in bits happen
    points = {f"v{i}": (float(b), float(np.round(rng.lognormal(-3, 1), 3))) for i, b in enumerate(bits)}
    got = pareto(points)
    assert set(got) == _brute(points) and got == sorted(got, key=lambda k: points[k])


def test_nan_and_ties():
    assert pareto({"a": (4, float("nan")), "b": (4, 0.1), "c": (4, 0.1)}) == ["b", "c"]  # equal points both stay


def test_the_block_leaves_out_variants_without_bits():
    def v(name, bits, kl):
        return {
            "name": name,
            "metrics": {"kl_mean": kl, "kl_p999": 10 * kl},
            "quantization": {"bits_per_weight": bits},
        }  # noqa: E731

    block = frontier_block([v("a", 4.5, 0.02), v("b", 4.25, 0.03), v("c", 4.25, 0.04), v("qat", None, 0.001)])
    assert block["kl_mean"] == ["b", "a"] and block["kl_p999"] == ["b", "a"] and block["without_bits"] == ["qat"]
    assert frontier_block([v("a", 4.5, 0.02), v("qat", None, 0.001)]) is None  # fewer than two with bits


def test_the_run_shows_its_frontier(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    args = [
        "quantize-compare",
        tiny_llama_dir,
        "--text",
        "t.txt",
        "--ctx",
        64,
        "--max-tokens",
        300,
        "--device",
        "cpu",
        "--floor",
        "off",
        "-q",
    ]
    r = run_cli(
        [*args, "--schemes", "int8-channel,int4-g32,int3-g64,int4-g64", "--json", "f.json", "--plot", "f.png"],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "f.json").read_text(encoding="utf-8"))
    points = {v["name"]: (v["quantization"]["bits_per_weight"], v["metrics"]["kl_mean"]) for v in data["variants"]}
    assert (
        set(data["frontier"]["kl_mean"]) == _brute(points)
        and "Bits against KL" in r.stdout
        and (tmp_path / "f.png").stat().st_size > 0
    )
    one = run_cli([*args, "--schemes", "int8-channel", "--json", "one.json"], cwd=tmp_path)
    assert one.returncode == 0 and "frontier" not in json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
