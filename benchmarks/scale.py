"""Benchmark: how quantize-compare's cost grows with the model, on seeded random-weight models of Qwen3's real
shapes beside the real SmolLM2-135M. Each case is a fresh ``python -m infoeval quantize-compare`` process (the
default three schemes, 1,024 tokens, ctx 512, the noise floor on) whose wall time and peak RSS come from the
kernel's accounting of that child (``os.wait4``); beside each, the memory plan's estimate of that peak
(``comparison.memory_plan``, made from the model's config before any weight loads) and their ratio.

    python benchmarks/scale.py [--models smollm2-135m,qwen3-0.6b,qwen3-1.7b] [--plans lockstep] [--save]

The random models are written under ``--work`` (default: a temporary folder under /tmp), float32 safetensors in
shards (bfloat16 for 8B), with the built-in model's tokenizer, and deleted when the case is done. A case whose
estimate exceeds ``--budget-gib`` (default 20) is not started: it is reported as refused, with the estimate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, run_child  # benchmarks/_record.py

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
SHARD_BYTES = 2 << 30
TOKENS, CTX = 1024, 512


def qwen3_config(name: str):
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
        dtype=DTYPE.get(name, "float32"),
    )


def _tokenizer_folder() -> Path:
    """The built-in model's converted folder (its tokenizer files): made on first use by the GGUF cache."""
    from infoeval.models.files import builtin_gguf, cached_sha256, gguf_cache_dir

    gguf = builtin_gguf(SMOL)
    return gguf_cache_dir(gguf, cached_sha256(gguf))


def write_random_model(name: str, folder: Path, seed: int = 0) -> Path:
    """A seeded random-weight Qwen3 of ``name``'s shape in ``folder``: norms 1, every other tensor N(0, 0.02²),
    written a shard at a time (never the whole model in memory)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    config = qwen3_config(name)
    dtype = getattr(torch, DTYPE.get(name, "float32"))
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


def estimate(model: str, plan: str) -> dict:
    """The memory plan's estimate of quantize-compare's peak on ``model`` (MiB, and its parts)."""
    from infoeval.comparison.memory_plan import estimate_run
    from infoeval.input.settings import ModelSettings, VariantSettings

    est = estimate_run(ModelSettings(model=model, device="cpu"), VariantSettings(), CTX, plan)
    return {"estimate_mib": round(est.total / 2**20, 1), "parts_mib": est.parts_mib()}


def measure(model: str, plan: str, tokens: int) -> dict:
    """One quantize-compare in a fresh process: wall, peak RSS, the mean KLs."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "infoeval", "quantize-compare", "--model", model]
        cmd += ["--max-tokens", str(tokens), "--ctx", str(CTX), "--json", str(out), "-q"]
        code, wall, peak, err = run_child(cmd)
        if code != 0:
            return {"exit_code": code, "error": err.strip().splitlines()[-1:]}
        data = json.loads(out.read_text())
    return {
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak, 1),
        "scored_tokens": data["reference"]["tokens"],
        "s_per_scored_token": round(wall / data["reference"]["tokens"], 4),
        "kl_mean": {v["name"]: round(v["metrics"]["kl_mean"], 6) for v in data["variants"]},
    }


def case(name: str, plan: str, work: Path, budget_mib: float) -> dict:
    folder = None
    try:
        if name == SMOL:
            model = SMOL
        else:
            folder = write_random_model(name, work / name)
            model = str(folder)
        row = {"model": name, "plan": plan, **estimate(model, plan)}
        from infoeval.models.shapes import model_shape

        shape = model_shape(model)
        row["parameters"] = shape.n_parameters
        row["parameter_mib"] = round(shape.parameter_bytes / 2**20, 1)
        if row["estimate_mib"] > budget_mib:
            return {**row, "refused": f"estimate {row['estimate_mib']:.0f} MiB > budget {budget_mib:.0f} MiB"}
        got = measure(model, plan, TOKENS)
        if "peak_rss_mib" in got:
            got["estimate_over_measured"] = round(row["estimate_mib"] / got["peak_rss_mib"], 3)
        return {**row, **got}
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=f"{SMOL},qwen3-0.6b,qwen3-1.7b")
    ap.add_argument("--plans", default="lockstep")
    ap.add_argument("--budget-gib", type=float, default=20.0)
    ap.add_argument("--work", default=None, help="a scratch folder for the random models (default: under /tmp)")
    add_save(ap)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        rows = [case(m, p, Path(tmp), a.budget_gib * 1024) for m in a.models.split(",") for p in a.plans.split(",")]
    emit(__file__, {"benchmark": "scale", "tokens": TOKENS, "ctx": CTX, "rows": rows}, a.save, args=a)


if __name__ == "__main__":
    main()
