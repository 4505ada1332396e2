"""torchrun on the GPUs present: one rank per GPU (NCCL beside gloo) gives the single process's numbers within
float32's reordering. NCCL takes one GPU per rank, so this needs two; ``INFOEVAL_TEST_GPU=cpu`` is its dry run
(two CPU ranks over gloo; tests/cuda_device.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_run import run_cli
from cuda_device import DRY_RUN, GPU, ON_GPU, close, gpu_count, numbers

pytestmark = ON_GPU
ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "INFOEVAL_TEST_FAULT_RANK", "INFOEVAL_TEST_FAULT_STAGE")
}


def test_one_rank_per_gpu_gives_the_single_process_numbers(tiny_llama_dir, tiny_text, tmp_path):
    ranks = 2 if DRY_RUN else gpu_count()
    if ranks < 2:
        pytest.skip(f"NCCL takes one GPU per rank: this machine has {ranks}")
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    args = [
        "quantize-compare",
        tiny_llama_dir,
        "--schemes",
        "int8-channel,int4-g32",
        "--text",
        "t.txt",
        "--ctx",
        64,
        "--max-tokens",
        800,
        "--device",
        GPU,
        "--dtype",
        "float32",
        "-q",
    ]
    assert run_cli([*args, "--json", tmp_path / "one.json"], cwd=tmp_path, threads=1).returncode == 0
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        "infoeval",
    ]
    proc = subprocess.run(
        [*launch, *map(str, args), "--json", str(tmp_path / "many.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**ENV, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, many = (json.loads((tmp_path / f"{n}.json").read_text(encoding="utf-8")) for n in ("one", "many"))
    assert many["provenance"]["world_size"] == ranks
    assert many["provenance"]["parallel"]["backend"] == ("gloo" if DRY_RUN else "cpu:gloo,cuda:nccl")
    assert close(numbers(many["variants"]), numbers(one["variants"]), 1e-3, 1e-5) == []
    assert close(numbers(many["reference"]), numbers(one["reference"]), 1e-3, 1e-5) == []
