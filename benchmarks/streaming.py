"""Benchmark: models larger than memory, read one decoder layer at a time (``quantize-compare --stream layers``).

    python benchmarks/streaming.py [--figures big,offload,small] [--work DIR] [--save]

big      a seeded random-weight model of Qwen3-8B's shape in float32 (about 33 GB on disk, larger than this machine's
         memory; written a shard at a time, so the whole model is never in memory): quantize-compare's three default
         schemes and the noise floor at 1,024 tokens (ctx 512) under --stream layers, in a fresh process: wall, peak
         RSS (the child's, ``os.wait4``), the pass's bytes read (the tensors', and the storage's from /proc/self/io)
         beside the model's size, its read and compute seconds
offload  the reference pass of the same model at ctx 256 over 1,024 tokens (4 windows), each in a fresh process
         under the same memory cap: layer-streamed (``engine.streaming``) and through accelerate's offload
         (``device_map="auto"``, ``max_memory={"cpu": cap}``, an ``offload_folder``), the baseline users reach for:
         wall, the load's and the pass's seconds, peak RSS, the storage's bytes read, and both mean NLLs
small    Qwen3-0.6B's shape in float32: quantize-compare under --stream layers and under the lockstep (the in-memory
         plan) in the same run: each one's wall and peak RSS, their ratio, and whether every number agrees

The random models are written under ``--work`` (default: a temporary folder under /tmp) with the built-in model's
tokenizer and deleted when their figure is done. A child whose RSS passes ``--rss-limit`` GiB is stopped (the run
says so) rather than let the machine swap.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from _record import add_save, emit, result_numbers, save  # benchmarks/_record.py
from scale import QWEN3, write_random_model  # benchmarks/scale.py

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
CAP_GIB = 4.0  # the offload figure's memory cap, and the big figure's target peak


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration, ValueError):
        return 0.0


def run_guarded(cmd: list[str], limit_gib: float) -> dict:
    """``cmd`` in a fresh process: exit code, wall, peak RSS (``os.wait4``), the storage's bytes read
    (``ru_inblock``: 512-byte blocks) and stderr's last line; stopped (SIGKILL) past ``limit_gib`` of RSS."""
    import subprocess

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stopped = []

    def watch():
        while proc.poll() is None:
            if _rss_mib(proc.pid) > limit_gib * 1024:
                stopped.append(True)
                proc.kill()
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "storage_read_gib": round(usage.ru_inblock * 512 / GIB, 2),
        **({"stopped": f"RSS over {limit_gib} GiB"} if stopped else {}),
        **({"said": err.strip().splitlines()[-1]} if err.strip() and status else {}),
    }


def eight_b(work: Path) -> Path:
    """The float32 Qwen3-8B-shaped model of the big and offload figures, written once (deleted with ``work``)."""
    folder = work / "qwen3-8b"
    return (
        folder
        if (folder / "model.safetensors.index.json").is_file()
        else write_random_model("qwen3-8b", folder, dtype="float32")
    )


def model_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def compare_run(folder: Path, out: Path, extra: list[str], limit: float) -> dict:
    """quantize-compare (the three default schemes, the floor, 1,024 tokens, ctx 512, float32) in a fresh process."""
    cmd = [sys.executable, "-m", "infoeval", "quantize-compare", "--model", str(folder), "--dtype", "float32"]
    cmd += ["--device", "cpu", "--max-tokens", "1024", "--ctx", "512", "--json", str(out), "-q", *extra]
    row = run_guarded(cmd, limit)
    if row["exit_code"] == 0:
        data = json.loads(out.read_text())
        plan = data["memory_plan"]
        row |= {
            "plan": plan["plan"],
            "estimate_mib": round(plan["estimates"][plan["plan"]]["peak_bytes"] / 2**20, 1),
            "kl_mean": {v["name"]: v["metrics"]["kl_mean"] for v in data["variants"]},
        }
        if "stream" in plan:
            row |= {"stream": plan["stream"], "stream_read_s": round(data["timings"]["stream_read_s"], 1)}
            row["stream_compute_s"] = round(data["timings"]["stream_compute_s"], 1)
            row["stream_wait_s"] = round(data["timings"]["stream_wait_s"], 1)
    return row


def big(work: Path, limit: float) -> dict:
    folder = eight_b(work)
    size = model_bytes(folder)
    row = {"model": "qwen3-8b", "dtype": "float32", "model_gib": round(size / GIB, 2)}
    row["streamed"] = compare_run(folder, work / "big.json", ["--stream", "layers"], limit)
    reads = row["streamed"].get("stream", {})
    for key in ("bytes_read", "storage_read_bytes"):
        if reads.get(key):
            row[f"{key}_over_model"] = round(reads[key] / size, 4)
    row["peak_rss_gib"] = round(row["streamed"]["peak_rss_mib"] / 1024, 2)
    return row


def child(mode: str, folder: str, out: str, cap_gib: float) -> None:
    """The offload figure's reference pass, in this process: ``stream`` or ``accelerate``; its record to ``out``."""
    import numpy as np
    import torch

    from infoeval import engine
    from infoeval.comparison.lockstep import REFERENCE, run_lockstep
    from infoeval.engine.streaming import StreamedModel, last_states
    from infoeval.input.prepare import Reporter, prepare
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

    p = prepare(
        ModelSettings(folder, "cpu", "float32"),
        TextSettings(max_tokens=1024),
        WindowSettings(ctx=256),
        Reporter(),
        skeleton=True,
    )
    t0 = time.perf_counter()
    if mode == "stream":
        streamed = StreamedModel(Path(folder), torch.float32, torch.device("cpu"), p.loaded.model)
        load_s, t1 = 0.0, time.perf_counter()
        states = last_states(streamed, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id)
        cols = run_lockstep(None, p.stream, p.windows, (), p.protocol.prefix_id, stored={REFERENCE: states[REFERENCE]})
        reads = streamed.reads
        timed = {"stream_read_s": reads.read_s, "stream_wait_s": reads.wait_s, "stream_compute_s": reads.compute_s}
    else:
        from transformers import AutoModelForCausalLM

        with tempfile.TemporaryDirectory(dir=Path(out).parent) as offload:
            model = AutoModelForCausalLM.from_pretrained(
                folder,
                dtype=torch.float32,
                device_map="auto",
                max_memory={"cpu": int(cap_gib * GIB)},
                offload_folder=offload,
            ).eval()
            load_s, t1 = time.perf_counter() - t0, time.perf_counter()
            cols = run_lockstep(model, p.stream, p.windows, (), p.protocol.prefix_id)
        timed = {}
    Path(out).write_text(
        json.dumps(
            {
                "load_s": round(load_s, 1),
                "pass_s": round(time.perf_counter() - t1, 1),
                "windows": len(p.windows),
                "nll_mean": float(np.mean(cols.reference["nll"])),
                **{k: round(v, 1) for k, v in timed.items()},
            }
        )
    )


def offload(work: Path, limit: float) -> dict:
    folder = eight_b(work)
    row = {
        "model": "qwen3-8b",
        "dtype": "float32",
        "model_gib": round(model_bytes(folder) / GIB, 2),
        "ctx": 256,
        "tokens": 1024,
        "cap_gib": CAP_GIB,
    }
    for mode in ("stream", "accelerate"):
        out = work / f"{mode}.json"
        cmd = [sys.executable, __file__, "--child", mode, str(folder), str(out)]
        row[mode] = run_guarded(cmd, limit)
        if row[mode]["exit_code"] == 0:
            row[mode] |= json.loads(out.read_text())
    if "pass_s" in row["stream"] and "pass_s" in row["accelerate"]:
        row["stream_over_accelerate_wall"] = round(row["stream"]["wall_s"] / row["accelerate"]["wall_s"], 3)
        row["stream_over_accelerate_pass"] = round(row["stream"]["pass_s"] / row["accelerate"]["pass_s"], 3)
        row["nll_difference"] = abs(row["stream"]["nll_mean"] - row["accelerate"]["nll_mean"])
    return row


def small(work: Path, limit: float) -> dict:
    folder = write_random_model("qwen3-0.6b", work / "qwen3-0.6b")
    try:
        row = {"model": "qwen3-0.6b", "dtype": "float32"}
        for name, extra in (("lockstep", ["--plan", "lockstep"]), ("streamed", ["--stream", "layers"])):
            row[name] = compare_run(folder, work / f"{name}.json", extra, limit)
        row["streamed_over_lockstep_wall"] = round(row["streamed"]["wall_s"] / row["lockstep"]["wall_s"], 3)
        row["same_numbers"] = result_numbers(work / "lockstep.json") == result_numbers(work / "streamed.json")
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        return child(sys.argv[2], sys.argv[3], sys.argv[4], CAP_GIB)
    ap = argparse.ArgumentParser()
    ap.add_argument("--figures", default="small,big,offload")
    ap.add_argument("--work", default=None, help="a scratch folder for the random models (default: under /tmp)")
    ap.add_argument("--rss-limit", type=float, default=16.0, help="GiB of RSS past which a child is stopped")
    add_save(ap)
    a = ap.parse_args()
    runs = {"small": small, "big": big, "offload": offload}
    figures = {"benchmark": "streaming", "qwen3_shapes": {k: QWEN3[k] for k in ("qwen3-0.6b", "qwen3-8b")}}
    saved = ROOT / "benchmarks" / "results" / "streaming.json"
    if a.save and saved.is_file():  # a figure not asked for again keeps its last measurement
        figures |= {k: v for k, v in json.loads(saved.read_text())["figures"].items() if k in runs}
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        for name in a.figures.split(","):
            figures[name] = {**runs[name](Path(tmp), a.rss_limit), "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
            if a.save:  # each figure as soon as it is measured: a long run keeps what it has
                save(__file__, figures, args=a)
    emit(__file__, figures, a.save, args=a)


if __name__ == "__main__":
    main()
