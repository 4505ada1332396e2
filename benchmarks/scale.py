"""Benchmark: how quantize-compare's cost grows with the model, on seeded random-weight models of Qwen3's real
shapes (0.6B, 1.7B, 4B in float32; 8B in bfloat16) beside the real SmolLM2-135M. Each run is a fresh
``python -m infoeval quantize-compare --plan P`` process (the default three schemes, 1,024 tokens, ctx 512, the
noise floor on, the default memory budget: 90 % of the memory available) whose wall time and peak RSS come from
the kernel's accounting of that child (``os.wait4``); beside each, the plan it took and that plan's estimate of
its peak (``comparison.memory_plan``, made from the config before any weight loads), or the line it was refused
with. For the smaller models, the reference files' bytes per position in each format against llama.cpp's 2·V.

    python benchmarks/scale.py [--models …] [--plans lockstep,reference-first,auto] [--save]

The random models are written under ``--work`` (default: a temporary folder under /tmp), safetensors in shards,
with the built-in model's tokenizer, and deleted when their row is done; with ``--save`` the record is written
after every row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, run_child, save  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
SMOL = "smollm2-135m"
# Qwen3's published configs (hidden, intermediate, layers, heads, KV heads, tied head), vocabulary 151,936
QWEN3 = {
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, True),
    "qwen3-4b": (2560, 9728, 36, 32, 8, True),
    "qwen3-8b": (4096, 12288, 36, 32, 8, False),
}
DTYPE = {"qwen3-8b": "bfloat16"}  # the others in float32
PLANS_OF = {"qwen3-4b": ["lockstep", "auto"], "qwen3-8b": ["lockstep", "auto"]}  # lockstep refused, auto: the other
SHARD_BYTES = 2 << 30
TOKENS, CTX = 1024, 512


def qwen3_config(name: str, dtype: str | None = None):
    from transformers import Qwen3Config

    hidden, inter, layers, heads, kv, tied = QWEN3[name]
    return Qwen3Config(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        use_sliding_window=False,
        bos_token_id=151643,
        eos_token_id=151645,
        dtype=dtype or DTYPE.get(name, "float32"),
    )


def _tokenizer_folder() -> Path:
    """The built-in model's converted folder (its tokenizer files): made on first use by the GGUF cache."""
    from infoeval.models.files import builtin_gguf, cached_sha256, gguf_cache_dir

    gguf = builtin_gguf(SMOL)
    return gguf_cache_dir(gguf, cached_sha256(gguf))


def write_random_model(name: str, folder: Path, seed: int = 0, dtype: str | None = None) -> Path:
    """A seeded random-weight Qwen3 of ``name``'s shape in ``folder`` (``dtype``: default ``DTYPE``'s): norms 1,
    every other tensor N(0, 0.02²), written a shard at a time (never the whole model in memory)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    config = qwen3_config(name, dtype)
    dtype = getattr(torch, dtype or DTYPE.get(name, "float32"))
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    for f in _tokenizer_folder().iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, folder / f.name)
    gen = torch.Generator().manual_seed(seed)
    shard, size, index, n = {}, 0, {}, 0
    names = [k for k in meta.state_dict() if not (config.tie_word_embeddings and k == "lm_head.weight")]

    def flush():
        nonlocal shard, size, n
        if shard:
            file = f"model-{n:05d}.safetensors"
            save_file(shard, str(folder / file), metadata={"format": "pt"})
            index.update({k: file for k in shard})
            shard, size, n = {}, 0, n + 1

    for key in names:
        shape = meta.state_dict()[key].shape
        t = torch.ones(shape) if "norm" in key else torch.empty(shape).normal_(0.0, 0.02, generator=gen)
        shard[key] = t.to(dtype)
        size += shard[key].numel() * shard[key].element_size()
        if size >= SHARD_BYTES:
            flush()
    flush()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    return folder


def measure(model: str, plan: str, dtype: str) -> dict:
    """One quantize-compare in a fresh process under ``--plan plan``: the plan it took and its estimate, wall, peak
    RSS, the mean KLs; or, where the plan was refused, the exit code and the line it said."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "infoeval", "quantize-compare", "--model", model, "--plan", plan]
        cmd += ["--dtype", dtype, "--max-tokens", str(TOKENS), "--ctx", str(CTX), "--json", str(out), "-q"]
        code, wall, peak, err = run_child(cmd)
        if code != 0:
            return {"exit_code": code, "said": err.strip().splitlines()[-1] if err.strip() else ""}
        data = json.loads(out.read_text())
    taken = data["memory_plan"]
    est = taken["estimates"][taken["plan"]]
    return {
        "plan_taken": taken["plan"],
        "reason": taken["reason"],
        "estimate_mib": round(est["peak_bytes"] / 2**20, 1),
        "parts_mib": {k: round(v / 2**20, 1) for k, v in est["parts_bytes"].items()},
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak, 1),
        "estimate_over_measured": round(est["peak_bytes"] / 2**20 / peak, 3),
        "scored_tokens": data["reference"]["tokens"],
        "s_per_scored_token": round(wall / data["reference"]["tokens"], 4),
        "kl_mean": {v["name"]: round(v["metrics"]["kl_mean"], 6) for v in data["variants"]},
    }


def reference_bytes(model: str, dtype: str) -> dict:
    """Bytes per scored position of each reference format on this model, beside llama.cpp's 2·V."""
    import infoeval

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        run = {"max_tokens": TOKENS, "ctx": CTX, "device": "cpu", "dtype": dtype}
        for label, kw in (("topk", {}), ("hidden", {"format": "hidden", "head": "candidate"})):
            info = infoeval.reference(model, out=Path(tmp) / f"{label}.safetensors", **kw, **run).to_json()
            out[label] = round(info["bytes_per_position"], 1)
    out["llama_cpp"] = info["llama_cpp_bytes_per_position"]
    out["hidden_over_llama_cpp"] = round(out["hidden"] / out["llama_cpp"], 4)
    return out


def case(name: str, plans: list[str], work: Path, references: bool) -> dict:
    """Every plan on one model (written here, deleted after), and with ``references`` the reference files' bytes."""
    from infoeval.models.shapes import model_shape

    folder = None
    dtype = DTYPE.get(name, "float32")
    try:
        folder = None if name == SMOL else write_random_model(name, work / name)
        model = SMOL if folder is None else str(folder)
        import torch

        shape = model_shape(model, getattr(torch, dtype))
        row = {"model": name, "dtype": dtype, "parameters": shape.n_parameters}
        row["parameter_mib"] = round(shape.parameter_bytes / 2**20, 1)
        row["runs"] = {plan: measure(model, plan, dtype) for plan in plans}
        walls = {p: r["wall_s"] for p, r in row["runs"].items() if "wall_s" in r}
        if "lockstep" in walls and "reference-first" in walls:
            row["reference_first_over_lockstep_wall"] = round(walls["reference-first"] / walls["lockstep"], 3)
        if references:
            row["reference_bytes_per_position"] = reference_bytes(model, dtype)
        return row
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=f"{SMOL},qwen3-0.6b,qwen3-1.7b,qwen3-4b,qwen3-8b")
    ap.add_argument("--plans", default=None, help="default: lockstep,reference-first; lockstep,auto past 1.7B")
    ap.add_argument(
        "--references", default=f"{SMOL},qwen3-0.6b,qwen3-1.7b", help="models whose reference files are sized"
    )
    ap.add_argument("--work", default=None, help="a scratch folder for the random models (default: under /tmp)")
    add_save(ap)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        for m in a.models.split(","):
            plans = a.plans.split(",") if a.plans else PLANS_OF.get(m, ["lockstep", "reference-first"])
            rows.append(case(m, plans, Path(tmp), m in a.references.split(",")))
            figures = {"benchmark": "scale", "tokens": TOKENS, "ctx": CTX, "rows": rows}
            if a.save:  # each model's row as soon as it is measured: a long run keeps what it has
                save(__file__, figures, args=a)
    emit(__file__, figures, a.save, args=a)


if __name__ == "__main__":
    main()
