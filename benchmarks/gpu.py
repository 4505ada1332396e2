"""Benchmark: the GPU record, made by ``scripts/gpu_check.sh`` on a machine with CUDA (issue 50).

quantize-compare on a random-weight model of Qwen3-0.6B's shape (28 layers, hidden 1024, vocabulary 151,936;
seeded, so the same model everywhere; its figures are speed and memory, not quality) in bfloat16 and in float32 on
the GPU: scored tokens per second, peak GPU memory, load and quantize seconds. The first windows again on the CPU in
float32 give the CPU-vs-GPU differences per position (NLL, each variant's KL, top-1 flips). With ``--junit``, the
outcome of every ``cuda`` test (tests/test_cuda*.py, run just before) goes into the record too.

    python benchmarks/gpu.py [--max-tokens 16384] [--cpu-tokens 1024] [--junit cuda-tests.xml] [--save]

The text is the Python docs (``python-docs``) through the tests' offline byte-level tokenizer (vocabulary 512):
the model's 151,936-wide head is what costs, whatever ids reach it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
# Qwen3-0.6B's config.json (the hub's Qwen/Qwen3-0.6B), less what does not shape the computation
QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
    bos_token_id=151643,
    eos_token_id=151645,
)


def build_model(folder: Path, seed: int = 0) -> Path:
    """A Qwen3-0.6B-shaped model with seeded random weights (std 0.02) and the tests' offline tokenizer, saved."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_tokenizer

    torch.manual_seed(seed)
    config = Qwen3Config(**{**QWEN3_06B, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0})
    model = Qwen3ForCausalLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    build_tokenizer(folder, bos=False)
    return folder


def run(folder: Path, device: str, dtype: str, schemes: tuple, max_tokens: int, ctx: int):
    """One quantize-compare run; its result and the figures of speed and memory."""
    import torch

    import infoeval

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    result = infoeval.compare(
        str(folder),
        schemes=schemes,
        dataset="python-docs",
        ctx=ctx,
        max_tokens=max_tokens,
        device=device,
        dtype=dtype,
        floor="off",
    )
    wall = time.perf_counter() - t0
    data, timings = result.to_json(), result.to_json()["timings"]
    figures = {
        "device": device,
        "dtype": data["provenance"]["dtype"],
        "tokens": data["reference"]["tokens"],
        "wall_s": round(wall, 2),
        "load_s": round(timings["load_s"], 2),
        "quantize_s": round(timings.get("quantize_s", 0.0), 2),
        "eval_s": round(timings["eval_s"], 2),
        "tokens_per_s": round(data["reference"]["tokens"] / timings["eval_s"], 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device.startswith("cuda") else None,
        "kl_mean": {v["name"]: v["metrics"]["kl_mean"] for v in data["variants"]},
    }
    return result, figures


def differences(cpu, gpu) -> dict:
    """The per-position differences between the same windows scored on the CPU and on the GPU (float32)."""
    import numpy as np

    a, b = cpu.columns, gpu.columns
    out = {
        "positions": int(len(a.reference["nll"])),
        "nll_max_abs_diff": float(np.max(np.abs(a.reference["nll"] - b.reference["nll"]))),
    }
    for name in a.variants:
        out[name] = {
            "kl_max_abs_diff": float(np.max(np.abs(a.variants[name]["kl"] - b.variants[name]["kl"]))),
            "kl_mean_cpu": float(np.mean(a.variants[name]["kl"])),
            "kl_mean_gpu": float(np.mean(b.variants[name]["kl"])),
            "top1_flips": int(np.sum(a.variants[name]["top1"] != b.variants[name]["top1"])),
        }
    return out


def test_outcomes(junit: Path) -> dict:
    """Every test of a JUnit XML file: passed, skipped (with its reason) or failed (with its first line)."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if problem is None:
            outcomes[name] = "passed"
        else:
            words = (problem.get("message") or problem.text or "").strip().splitlines()
            outcomes[name] = f"{'failed' if problem.tag != 'skipped' else 'skipped'}: {words[0][:200] if words else ''}"
    counts = {k: sum(v.split(":")[0] == k for v in outcomes.values()) for k in ("passed", "skipped", "failed")}
    return {**counts, "outcomes": outcomes}


def gpu_facts() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-tokens", type=int, default=16384, help="tokens scored in each GPU run")
    ap.add_argument(
        "--cpu-tokens",
        type=int,
        default=1024,
        help="tokens scored on both the CPU and the GPU (float32) for the differences",
    )
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--schemes", default="int8-channel,int4-g128")
    ap.add_argument("--junit", type=Path, help="the cuda tests' JUnit XML, to record their outcomes")
    ap.add_argument(
        "--device", default="cuda", help="cuda (the record); cpu only to try the script on a machine without a GPU"
    )
    add_save(ap)
    args = ap.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(
            "benchmarks/gpu.py: no CUDA device here; the GPU record is made on a GPU machine (scripts/gpu_check.sh)"
        )
    schemes = tuple(args.schemes.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "qwen3-0.6b-shape")
        runs = [
            run(folder, args.device, dtype, schemes, args.max_tokens, args.ctx)[1] for dtype in ("bfloat16", "float32")
        ]
        gpu_small, _ = run(folder, args.device, "float32", schemes, args.cpu_tokens, args.ctx)
        cpu_small, cpu_figures = run(folder, "cpu", "float32", schemes, args.cpu_tokens, args.ctx)
    figures = {
        "gpu": gpu_facts() if args.device.startswith("cuda") else None,
        "model": {"shape": "Qwen3-0.6B", **QWEN3_06B, "weights": "random, seed 0"},
        "runs": runs,
        "cpu_run": cpu_figures,
        "cpu_vs_gpu_float32": differences(cpu_small, gpu_small),
        "bf16_speedup": round(runs[0]["tokens_per_s"] / runs[1]["tokens_per_s"], 2),
    }
    if args.junit is not None and args.junit.is_file():
        figures["tests"] = test_outcomes(args.junit)
    emit(__file__, figures, args.save, args=args)


if __name__ == "__main__":
    main()
