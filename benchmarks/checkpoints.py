"""Benchmark: the checkpoints people ship, gated from their saved folders, and fake quantization against the
deployed kernels, on the built-in SmolLM2-135M and its default python-docs text.

    python benchmarks/checkpoints.py [--tokens 4096] [--work DIR] [--save]

The float model is SmolLM2's safetensors conversion (the reference's own weights). From it each library saves a
checkpoint as a user would (``tests/shipped_formats.py``: bitsandbytes nf4 and LLM.int8(), torchao int8 and intx
int4-g64, HQQ int4-g64 and quanto int4 in their own layouts, AutoRound's round-to-nearest exported as auto_round,
auto_gptq and auto_awq, compressed-tensors through ``infoeval quantize --format pack-quantized``), and gguf-py's
reference quantizers write GGUF files (Q8_0, Q5_1, Q5_0, Q4_0) of the same blocks.

1. **Gated from the folder**: ``infoeval gate FOLDER -r ref.safetensors --floor off`` in a fresh process each:
   exit code, mean KL ± SE, the stored bits per weight, the load seconds, wall seconds and peak RSS; beside it the
   same method in process (``gate --scheme backend:spec``) where there is one, with z = Δ / √(SE₁² + SE₂²).
2. **Fake against kernel**: one ``quantize-compare`` with every checkpoint that has an infoeval scheme of the same
   bits, group and symmetry, and those schemes, on the same windows: KL(reference ‖ fake) and KL(reference ‖
   checkpoint); then, per scheme, ``quantize-compare`` with infoeval's fake-quantized checkpoint of that scheme as
   the reference and its checkpoints as variants: KL(fake ‖ checkpoint) directly, with top-1 agreement, and the
   ratio KL(fake ‖ checkpoint) / KL(reference ‖ checkpoint) (how much of the kernel's departure the fake
   quantization does not predict).

Prints one JSON object (``--save``: benchmarks/results/checkpoints.json). Needs the libraries' extras
(``pip install 'infoeval[methods,packed]'``); a format whose library is missing is left out and named.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import add_save, emit, run_child  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# format → infoeval's scheme of the same bits, group and symmetry (None: none), and the library's in-process scheme
EQUIVALENT = {
    "bnb-nf4": (None, "bnb:nf4"),  # NF4's levels are not uniform
    "bnb-int8": ("int8-channel", "bnb:int8"),
    "torchao-int8": ("int8-channel", "torchao:int8"),
    "torchao-int4-g64": ("int4-g64", "torchao:int4-g64"),
    "hqq-int4-g64": ("int4-g64-asym", "hqq:int4-g64"),
    "quanto-int4": (None, "quanto:int4"),  # quanto picks its own group size
    "autoround-int4-g64": ("int4-g64", "autoround:int4-g64-iters0"),
    "gptq-int4-g64": ("int4-g64", None),
    "awq-int4-g64": ("int4-g64-asym", None),
    "compressed-int4-g64": ("int4-g64", None),
    "gguf-Q8_0": ("int8-g32", None),
    "gguf-Q5_1": ("int5-g32-asym", None),
    "gguf-Q5_0": ("int5-g32", None),
    "gguf-Q4_0": ("int4-g32", None),
}


def _cli(args: list) -> None:
    proc = subprocess.run([sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"infoeval {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}"
        )


def _base() -> Path:
    """The float folder behind the built-in model (its cached safetensors conversion)."""
    import torch

    from infoeval.models import load_model

    return Path(load_model("smollm2-135m", torch.device("cpu"), torch.float32).info.cache)


def _save_all(base: Path, work: Path) -> tuple[dict, dict]:
    """{name: path} of every checkpoint this machine's libraries can write, and {name: why not} of the others."""
    from shipped_formats import GGUF_TYPES, SAVERS, requantize_gguf

    from infoeval.models.files import builtin_gguf

    made, missing = {}, {}
    for name in EQUIVALENT:
        out = work / (f"smollm2-{name.split('-', 1)[1]}.gguf" if name.startswith("gguf-") else name)
        t0, reused = time.perf_counter(), out.exists()
        try:
            if not reused:
                if name.startswith("gguf-"):
                    assert name[5:] in GGUF_TYPES
                    requantize_gguf(builtin_gguf("smollm2-135m"), out, name[5:])
                else:
                    SAVERS[name][0](base, out)
        except ImportError as e:
            missing[name] = str(e).splitlines()[0]
            continue
        made[name] = {
            "path": out,
            "save_s": None if reused else round(time.perf_counter() - t0, 2),
        }  # None: made by an earlier run
    return made, missing


def _gate(ref: Path, work: Path, tag: str, candidate: Path | None = None, scheme: str | None = None) -> dict:
    """One gate in a fresh process: exit code, mean KL ± SE, top-1, stored bits, load, wall and peak RSS."""
    out = work / f"gate-{tag}.json"
    cmd = [
        sys.executable,
        "-m",
        "infoeval",
        "gate",
        *([str(candidate)] if candidate else []),
        "-r",
        str(ref),
        "--floor",
        "off",
        "-q",
        "--json",
        str(out),
        *(["--scheme", scheme] if scheme else []),
    ]
    if scheme and scheme.startswith("autoround:"):  # the saved export's calibration size (tests/shipped_formats.py)
        cmd += ["--calibration-samples", "4", "--calibration-seqlen", "32"]
    code, wall, rss, err = run_child(cmd)
    if code not in (0, 1):  # 1: the default limits failed, which is a result
        return {"exit_code": code, "error": err.strip().splitlines()[-1] if err.strip() else None}
    r = json.loads(out.read_text())
    q = r["candidate"]["quantization"] or {}
    return {
        "exit_code": code,
        "kl_mean": r["metrics"]["kl_mean"],
        "kl_se": r["metrics"]["kl_se"],
        "top1": r["metrics"]["top1"],
        "bits_per_weight": q.get("bits_per_weight"),
        "load_s": round(r["timings"]["load_s"], 2),
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(rss, 1),
    }


def _z(a: dict, b: dict) -> float | None:
    if "kl_mean" not in a or "kl_mean" not in b:
        return None
    return (a["kl_mean"] - b["kl_mean"]) / math.sqrt(a["kl_se"] ** 2 + b["kl_se"] ** 2)


def _compare(model, schemes: list[str], checkpoints: list[Path], tokens: int, out: Path) -> dict:
    _cli(
        [
            "quantize-compare",
            model,
            *(["--schemes", ",".join(schemes)] if schemes else []),
            "--checkpoints",
            ",".join(map(str, checkpoints)),
            "--max-tokens",
            tokens,
            "--floor",
            "off",
            "--json",
            out,
            "-q",
        ]
    )
    return {v["name"]: v for v in json.loads(out.read_text())["variants"]}


def fake_against_kernel(made: dict, tokens: int, work: Path) -> dict:
    """Per checkpoint with an equivalent scheme: KL(ref ‖ fake), KL(ref ‖ checkpoint), KL(fake ‖ checkpoint)."""
    pairs = {n: EQUIVALENT[n][0] for n in made if EQUIVALENT[n][0]}
    schemes = sorted(set(pairs.values()))
    names = {n: Path(made[n]["path"]).name.removesuffix(".gguf") for n in pairs}
    joint = _compare("smollm2-135m", schemes, [made[n]["path"] for n in pairs], tokens, work / "fake-vs-kernel.json")
    rows = {}
    for scheme in schemes:
        fake = work / f"fake-{scheme}"
        if not fake.exists():
            _cli(["quantize", "smollm2-135m", "--scheme", scheme, "--out", fake])
        mine = [n for n in pairs if pairs[n] == scheme]
        direct = _compare(fake, [], [made[n]["path"] for n in mine], tokens, work / f"fake-{scheme}-vs-kernel.json")
        for n in mine:
            m_ref, m_fake, m_ckpt = joint[names[n]]["metrics"], joint[scheme]["metrics"], direct[names[n]]["metrics"]
            rows[n] = {
                "scheme": scheme,
                "bits_per_weight": joint[names[n]]["quantization"]["bits_per_weight"],
                "kl_ref_fake": m_fake["kl_mean"],
                "kl_ref_fake_se": m_fake["kl_se"],
                "kl_ref_checkpoint": m_ref["kl_mean"],
                "kl_ref_checkpoint_se": m_ref["kl_se"],
                "kl_fake_checkpoint": m_ckpt["kl_mean"],
                "kl_fake_checkpoint_se": m_ckpt["kl_se"],
                "top1_fake_checkpoint": m_ckpt["top1"],
                "unexplained": m_ckpt["kl_mean"] / m_ref["kl_mean"] if m_ref["kl_mean"] else None,
            }
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_save(ap)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch folder for the checkpoints (default: a temporary one)"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="infoeval-checkpoints-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child == "save":  # the saving runs in a child: a process's peak RSS counts its parent's at the fork
        made, missing = _save_all(_base(), work)
        print(json.dumps({"made": {k: {**v, "path": str(v["path"])} for k, v in made.items()}, "missing": missing}))
        return
    saved = subprocess.run(
        [sys.executable, __file__, "--child", "save", "--work", str(work)], check=True, capture_output=True, text=True
    )
    made, missing = (json.loads(saved.stdout.strip().splitlines()[-1])[k] for k in ("made", "missing"))
    ref = work / "ref.safetensors"
    _cli(["reference", "smollm2-135m", "--max-tokens", args.tokens, "--out", ref, "-q"])
    gated = {}
    for name, info in made.items():
        row = {"save_s": info["save_s"], "checkpoint": _gate(ref, work, name, candidate=info["path"])}
        method = EQUIVALENT[name][1]
        if method:
            row["in_process"] = {"scheme": method, **_gate(ref, work, f"{name}-in-process", scheme=method)}
            row["z"] = _z(row["checkpoint"], row["in_process"])
        gated[name] = row
    out = {
        "tokens": args.tokens,
        "text": "python-docs",
        "model": "smollm2-135m",
        "gated": gated,
        "fake_vs_kernel": fake_against_kernel(made, args.tokens, work),
        "missing": missing,
    }
    emit(__file__, out, args.save, args=args)


if __name__ == "__main__":
    main()
