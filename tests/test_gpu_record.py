"""The GPU record's parts that run without a GPU: the cuda tests' outcomes read from their JUnit XML, the CPU-vs-GPU
differences of two runs, the tests' own comparison helper, and the performance page's gpu section (the record, or
a line saying it has not been made yet)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_device import close

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_cuda" name="test_a" time="0.1"/>
<testcase classname="tests.test_cuda_commands" name="test_b[x]" time="0.1">
<skipped message="needs two GPUs">detail</skipped></testcase>
<testcase classname="tests.test_cuda_commands" name="test_c" time="0.1">
<failure message="assert 1 == 2&#10;more">trace</failure></testcase>
<testcase classname="tests.test_cuda_torchrun" name="test_d" time="0.1">
<error message="fixture broke">trace</error></testcase>
</testsuite></testsuites>"""


def test_outcomes_from_junit(tmp_path):

    path = tmp_path / "t.xml"
    path.write_text(JUNIT, encoding="utf-8")
    got = _bench().test_outcomes(path)
    assert got["outcomes"] == {
        "test_cuda::test_a": "passed",
        "test_cuda_commands::test_b[x]": "skipped: needs two GPUs",
        "test_cuda_commands::test_c": "failed: assert 1 == 2",
        "test_cuda_torchrun::test_d": "failed: fixture broke",
    }
    assert (got["passed"], got["skipped"], got["failed"]) == (1, 1, 2)


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_differences_of_two_runs():
    class Columns:
        def __init__(self, nll, kl, top1):
            self.reference, self.variants = {"nll": np.array(nll)}, {"v": {"kl": np.array(kl), "top1": np.array(top1)}}

    class Run:
        def __init__(self, *a):
            self.columns = Columns(*a)

    d = _bench().differences(
        Run([1.0, 2.0, 3.0], [0.1, 0.2, 0.3], [1, 1, 0]), Run([1.0, 2.5, 3.0], [0.1, 0.2, 0.0], [1, 0, 0])
    )
    assert d["positions"] == 3 and d["nll_max_abs_diff"] == 0.5
    assert d["v"]["kl_max_abs_diff"] == pytest.approx(0.3) and d["v"]["top1_flips"] == 1
    assert d["v"]["kl_mean_cpu"] == pytest.approx(0.2) and d["v"]["kl_mean_gpu"] == pytest.approx(0.1)


def test_close_names_every_difference():
    a = {"x": 1.0, "y": [1.0, 2.0], "z": "int8", "n": float("nan")}
    assert close(a, {"x": 1.0005, "y": [1.0, 2.0], "z": "int8", "n": float("nan")}, 1e-3, 0) == []
    assert close(a, {"x": 1.01, "y": [1.0, 2.1], "z": "int4", "n": 0.0}, 1e-3, 0) == [
        ".x: 1.0 vs 1.01",
        ".y[1]: 2.0 vs 2.1",
        '.z: "int8" vs "int4"',
        ".n: nan vs 0.0",
    ]
    assert close({"x": 1}, {"y": 1}, 0, 0) == [": keys ['x', 'y']"] and close([1], [1, 2], 0, 0) == [
        ": lengths 1 and 2"
    ]


def test_the_performance_page_says_whether_a_gpu_record_was_made(tmp_path):
    import performance_page

    results = tmp_path / "benchmarks" / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    (results / "gpu.json").unlink(missing_ok=True)
    assert "**Not made yet**" in performance_page.render(tmp_path).split("## gpu", 1)[1]
    record = json.loads((results / "codec.json").read_text(encoding="utf-8"))
    record.update(
        benchmark="gpu",
        command="python benchmarks/gpu.py --save",
        figures={"bf16_speedup": 2.5, "runs": [{"dtype": "bfloat16", "tokens_per_s": 9e4}]},
    )
    (results / "gpu.json").write_text(json.dumps(record), encoding="utf-8")
    section = performance_page.render(tmp_path).split("## gpu", 1)[1]
    assert "Not made yet" not in section and "bf16_speedup" in section and record["date"] in section
