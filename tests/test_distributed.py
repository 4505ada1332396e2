"""Data parallelism: 2 ranks under torchrun (gloo, CPU) give exactly the single process's columns and metrics when
both use one thread per process; a failing rank stops every rank with one line and no output file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run_cli
from golden_runs import _reference_record, compare
from tiny_models import requires_smollm2, tiny_text

from infoeval import distributed

HERE = Path(__file__).resolve().parent
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
for _k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "INFOEVAL_TEST_FAULT_RANK", "INFOEVAL_TEST_FAULT_STAGE"):
    ONE_THREAD.pop(_k, None)


def _single(args: list, cwd: Path):
    """The command as one process with one thread, run in this one (``cli_run.py``)."""
    return run_cli(args, cwd=cwd, threads=1)


def _ranks(
    args: list, cwd: Path, n: int = 2, script: list | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}"]
    target = script or ["-m", "infoeval"]
    return subprocess.run(
        [*launch, *target, *map(str, args)],
        cwd=cwd,
        env={**ONE_THREAD, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode in (0, 1), proc.stderr[-3000:]


def _without_ranks(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    prov = record.get("provenance", {})
    assert prov.pop("world_size", None) in (1, 2)
    prov.pop("parallel", None)
    return record


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_llama_dir) -> Path:
    d = tmp_path_factory.mktemp("dp")
    (d / "text.txt").write_text(tiny_text(), encoding="utf-8")
    return d


def _both(
    work: Path, name: str, args: list, positions: bool = False, tables: bool = True, rank1_rows: int = 0
) -> tuple[dict, dict]:
    """The command once as one process and once as two ranks; returns both JSON results. ``positions``: both
    positions CSVs are the same bytes; ``tables``: a third, single run checks that only rank 0 printed;
    ``rank1_rows``: rank 1 sent rank 0 more than that many rows of columns (an empty share pickles to a few bytes)."""
    one, two = work / f"{name}-1.json", work / f"{name}-2.json"
    csv = [["--positions", work / f"{name}-{k}.csv"] if positions else [] for k in (1, 2)]
    _ok(_single([*args, *csv[0], "--json", one, "-q"], work))
    proc = _ranks([*args, *csv[1], "--json", two, "-q"], work)
    _ok(proc)
    if tables:
        solo = _single([*args, "-q", "--json", work / f"{name}-again.json"], work).stdout
        assert len(proc.stdout.splitlines()) == len(solo.splitlines()), "only rank 0 prints the tables"
    if positions:
        assert (work / f"{name}-1.csv").read_bytes() == (work / f"{name}-2.csv").read_bytes()
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["provenance"]["world_size"] == 2 and b["provenance"]["parallel"]["backend"] == "gloo"
    assert b["provenance"]["parallel"]["gathered_bytes"] > 8 * rank1_rows, b["provenance"]["parallel"]
    assert a["provenance"]["world_size"] == 1
    return _without_ranks(a), _without_ranks(b)


def _same_reference(work: Path, name: str, args: list) -> None:
    """``reference`` once as one process (``{name}-1.safetensors``) and once as two ranks: the same tensors."""
    _ok(_single([*args, "--out", work / f"{name}-1.safetensors"], work))
    _ok(_ranks([*args, "--out", work / f"{name}-2.safetensors"], work))
    r1, r2 = (_reference_record(work / f"{name}-{k}.safetensors") for k in (1, 2))
    assert r1["tensors"] == r2["tensors"]


COMMON = ["--text", "text.txt", "--device", "cpu", "--ctx", 64, "--max-tokens", 400]


def test_quantize_compare_two_ranks_equal_one_process(work, tiny_llama_dir):
    # 1,600 tokens, ctx 64, stride 48: 33 windows, a shared batch of 32 (SHARED_TOKENS = 2,048) and one for rank 1
    args = [
        "quantize-compare",
        tiny_llama_dir,
        "--schemes",
        "int8-channel,int4-g32,int3-g64-asym",
        "--stride",
        48,
        "--baseline",
        "int4-g32",
        *COMMON[:-1],
        1600,
    ]
    a, b = _both(work, "qc", args, positions=True, rank1_rows=48)
    assert compare(a, b, "quantize-compare") == [] and a["reference"]["tokens"] == 1600
    assert a["paired"] == b["paired"] and a["paired"]["baseline"] == "int4-g32"  # the same verdicts, to the digit
    # the sampled noise floor visits the windows its seed says, under torchrun as in one process, with the same numbers
    from infoeval.measure.floor import floor_windows

    assert a["floor"]["windows"] == b["floor"]["windows"] == list(floor_windows(range(33), 4, "sampled", 0))
    assert a["floor"]["metrics"] == b["floor"]["metrics"] and a["floor"]["variants"] == b["floor"]["variants"]


@pytest.mark.slow
def test_compress_bits_and_mutual_info_two_ranks(work, tiny_llama_dir):
    a, b = _both(work, "cb", ["compress-bits", tiny_llama_dir, *COMMON])
    assert compare(a, b, "compress-bits") == []
    mi = [
        "mutual-info",
        "--model",
        tiny_llama_dir,
        "--lengths",
        "8,16,32",
        "--blocks",
        5,
        "--batch-tokens",
        64,
        "--bootstrap",
        50,
        "--text",
        "text.txt",
        "--device",
        "cpu",
    ]
    a, b = _both(work, "mi", mi)
    assert compare(a, b, "mutual-info") == []


@pytest.mark.slow
def test_reference_and_gate_two_ranks(work, tiny_llama_dir):
    ref = ["reference", tiny_llama_dir, "--top-k", 16, "--tail-samples", 8, *COMMON, "-q"]
    _same_reference(work, "ref", ref)
    gate = [
        "gate",
        "--reference",
        work / "ref-1.safetensors",
        "--scheme",
        "int4-g32",
        "--max-kl-mean",
        0.5,
        "--device",
        "cpu",
    ]
    a, b = _both(work, "gate", gate)
    assert compare(a, b, "gate") == []


@pytest.mark.slow
def test_spec_accept_and_distill_two_ranks(work, tiny_llama_dir):
    a, b = _both(
        work, "sa", ["spec-accept", tiny_llama_dir, "--draft-scheme", "int4-g32", "--temperature", "0.5,1", *COMMON]
    )
    assert compare(a, b, "spec-accept") == []
    a, b = _both(work, "di", ["distill", tiny_llama_dir, "--student-layers", 1, "--T", "1,2", *COMMON])
    assert compare(a, b, "distill") == []


@pytest.mark.slow
@requires_smollm2
def test_smollm2_two_ranks_equal_one_process(work):
    """The built-in model on its default text, every rank given work: quantize-compare's shared batches, the
    reference and the gate (the tables check, compress-bits and mutual-info are the tiny model's, above)."""
    # 9 windows of 256: a shared batch of 8 for rank 0 (SHARED_TOKENS = 2048), the last window for rank 1
    qc = ["quantize-compare", "--schemes", "int4-g128", "--device", "cpu", "--ctx", 256, "--max-tokens", 2304]
    a, b = _both(work, "smol-qc", qc, positions=True, tables=False, rank1_rows=256)
    assert compare(a, b, "quantize-compare") == [] and a["reference"]["tokens"] == 2304
    small = ["--device", "cpu", "--ctx", 128, "--max-tokens", 512]  # 4 windows: 2 per rank
    ref = ["reference", "--top-k", 16, "--tail-samples", 8, *small, "-q"]
    _same_reference(work, "smol-ref", ref)
    gate = [
        "gate",
        "--reference",
        work / "smol-ref-1.safetensors",
        "--scheme",
        "int4-g128",
        "--max-kl-mean",
        0.5,
        "--device",
        "cpu",
    ]
    a, b = _both(work, "smol-gate", gate, tables=False)
    assert compare(a, b, "gate") == []


@pytest.mark.parametrize(
    "stage, line",
    [
        (
            "forward",
            "infoeval: error: rank 1 of 2 failed: RuntimeError: injected fault",
        ),  # inside a gather: every rank says it
        ("quantize", "[rank 1] infoeval: error: RuntimeError: injected fault (set INFOEVAL_DEBUG=1 for the traceback)"),
    ],
)
def test_a_failing_rank_stops_every_rank(work, tiny_llama_dir, stage, line):
    """A rank failing inside the window loop is reported by rank 0 for all; one failing before it (each rank
    quantizes alone) says so itself, and the launcher stops the others: one line either way, no hang."""
    out = work / "fault.json"
    proc = _ranks(
        ["quantize-compare", tiny_llama_dir, *COMMON, "--json", out, "-q"],
        work,
        script=[str(HERE / "fault_rank.py")],
        env={"INFOEVAL_TEST_FAULT_RANK": "1", "INFOEVAL_TEST_FAULT_STAGE": stage},
    )
    assert proc.returncode != 0
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith(("infoeval:", "[rank"))]
    assert ours == [line], proc.stderr[-3000:]
    assert not out.exists()
    assert not list(work.glob(".fault*"))


def test_commands_that_do_not_shard_refuse_a_launcher(work):
    proc = _ranks(["kl-fit", "--steps", 5], work)
    assert proc.returncode != 0
    assert "'kl-fit' runs as one process" in proc.stderr


def test_one_replica_per_group_of_gpus():
    assert distributed.replica_gpus(8, 1, 4) == [2, 3]
    assert distributed.replica_gpus(3, 0, 1) == [0, 1, 2]
    with pytest.raises(Exception, match="only 2 GPUs"):
        distributed.replica_gpus(2, 0, 4)


def test_without_a_launcher_nothing_is_sharded(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.launched() and distributed.is_main()
    assert distributed.share(7) == 7


def test_reference_first_two_ranks_equal_one_process_lockstep(work, tiny_llama_dir):
    """Under torchrun each rank runs reference-first on its windows: the states gathered, the same numbers as one
    process's lockstep."""
    args = ["quantize-compare", tiny_llama_dir, "--schemes", "int8-channel,int4-g32", *COMMON[:-1], 800]
    one, two = work / "rf-1.json", work / "rf-2.json"
    _ok(_single([*args, "--plan", "lockstep", "--json", one, "-q"], work))
    _ok(_ranks([*args, "--plan", "reference-first", "--json", two, "-q"], work))
    a, b = (_without_ranks(json.loads(f.read_text())) for f in (one, two))
    assert b["memory_plan"]["plan"] == "reference-first"
    a.pop("memory_plan"), b.pop("memory_plan")
    assert compare(a, b, "quantize-compare") == []


@pytest.mark.slow
def test_streamed_two_ranks_equal_one_process(work, tiny_llama_dir):
    """--stream layers under two ranks: each rank streams its share of the windows through every layer, the last
    hidden states gathered, then the statistics sharded as the lockstep's: the single process's every number."""
    args = ["quantize-compare", tiny_llama_dir, "--stream", "layers", "--schemes", "int4-g32,int8-channel", *COMMON]
    a, b = _both(work, "streamed", args, positions=True, tables=False, rank1_rows=64)
    assert (
        compare(a, b, "quantize-compare") == [] and a["memory_plan"]["plan"] == b["memory_plan"]["plan"] == "streamed"
    )
