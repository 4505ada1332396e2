"""Benchmark: every command as a new user runs it on a model of the design card's size (issue "What a user hits on
a model of the design card's size"): a seeded random-weight model of Qwen3-0.6B's shape (596 M parameters, a
151,936-wide head, the built-in model's tokenizer), float32 unless said (compress: its default ``--dtype auto``,
bfloat16 on a CPU that computes it natively; the codec32 rows in float32), 2 cores.

    python benchmarks/new_user.py [--work DIR] [--save]
        [--rows qc,qc1,qc512,bf16,gate,sequential,sens,mix,codec,codec32,spec]

Each row is a fresh ``python -m infoeval`` process: its exit code, wall seconds and peak RSS (the child's, from the
kernel's accounting). The ratios the issue states its targets in, measured in the same run: sensitivity's and mix's
peak over quantize-compare's (three schemes, the same 512 tokens; target ≤ 1.3), and the gate's (one candidate)
over quantize-compare's with that one scheme at the gate's 1,024 tokens (target ≤ 1.0). The model is written
under ``--work`` (default: a temporary folder under /tmp) and deleted at the end.
"""

from __future__ import annotations

import argparse
import pydoc_data.topics
import shutil
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, run_child, save  # benchmarks/_record.py
from scale import write_random_model  # benchmarks/scale.py

ROWS = ("qc", "qc1", "qc512", "bf16", "gate", "sequential", "sens", "mix", "codec", "codec32", "spec")


def _row(cmd: list, cwd: Path) -> dict:
    code, wall, rss, err = run_child([sys.executable, "-m", "infoeval", *map(str, cmd)], cwd)
    out = {"exit_code": code, "wall_s": round(wall, 1), "peak_rss_gib": round(rss / 1024, 2)}
    if code not in (0, 1):
        out["stderr"] = err.strip().splitlines()[-1][:300] if err.strip() else ""
    return out


def jobs(model: Path, work: Path) -> dict[str, list[tuple[str, list]]]:
    """Each row's commands (name, arguments), in order; a row's later commands may read what its first wrote."""
    ref = work / "ref.safetensors"
    two_kb = work / "two_kb.txt"
    quick = ["--max-tokens", 1024, "-q"]
    return {
        "qc": [("quantize-compare", ["quantize-compare", model, *quick])],
        "qc1": [("quantize-compare, int8-channel", ["quantize-compare", model, "--schemes", "int8-channel", *quick])],
        "qc512": [("quantize-compare, 512 tokens", ["quantize-compare", model, "--max-tokens", 512, "-q"])],
        "bf16": [("quantize-compare, bfloat16", ["quantize-compare", model, "--dtype", "bfloat16", *quick])],
        "gate": [
            ("reference", ["reference", model, *quick, "-o", ref]),
            ("gate --scheme int8-channel", ["gate", model, "--reference", ref, "--scheme", "int8-channel", "-q"]),
        ],
        "sequential": [
            (
                "gate --sequential (2-window reference)",
                ["gate", model, "--reference", ref, "--scheme", "int8-channel", "--sequential", "-q"],
            )
        ],
        "sens": [
            ("sensitivity --by type, 512 tokens", ["sensitivity", model, "--by", "type", "--max-tokens", 512, "-q"])
        ],
        "mix": [
            (
                "mix --budget-bits 5, 512 + 512 tokens",
                [
                    "mix",
                    model,
                    "--budget-bits",
                    5,
                    "--max-tokens",
                    512,
                    "--sweep-tokens",
                    512,
                    "--out-dir",
                    work / "mix",
                    "-q",
                ],
            )
        ],
        "codec": [
            ("compress a 2,048-byte file", ["compress", two_kb, "-o", work / "two.iez", "--model", model, "-q"]),
            ("decompress it", ["decompress", work / "two.iez", "-o", work / "back.txt", "-q"]),
        ],
        "codec32": [
            (
                "compress a 2,048-byte file, float32",
                ["compress", two_kb, "-o", work / "two32.iez", "--model", model, "--dtype", "float32", "-q"],
            ),
            ("decompress it, float32", ["decompress", work / "two32.iez", "-o", work / "back32.txt", "-q"]),
        ],
        "spec": [("spec-accept --draft smollm2-135m", ["spec-accept", model, "--draft", "smollm2-135m", *quick])],
    }


def _figures(rows: dict) -> dict:
    """The record: every row, and the peak ratios the issue's targets are stated in (where both rows are there)."""
    peak = {k: v["peak_rss_gib"] for k, v in rows.items()}
    pairs = {
        "sensitivity / quantize-compare (512 tokens)": (
            "sensitivity --by type, 512 tokens",
            "quantize-compare, 512 tokens",
        ),
        "mix / quantize-compare (512 tokens)": (
            "mix --budget-bits 5, 512 + 512 tokens",
            "quantize-compare, 512 tokens",
        ),
        "gate / quantize-compare (int8-channel)": ("gate --scheme int8-channel", "quantize-compare, int8-channel"),
    }
    ratios = {k: round(peak[a] / peak[b], 3) for k, (a, b) in pairs.items() if a in peak and b in peak}
    wall = {k: v["wall_s"] for k, v in rows.items()}
    walls = {
        f"{a} / {a}, float32": round(wall[a] / wall[f"{a}, float32"], 3)
        for a in ("compress a 2,048-byte file", "decompress it")
        if a in wall and f"{a}, float32" in wall
    }
    return {"model": "qwen3-0.6b shape, float32", "rows": rows, "peak_ratios": ratios, "wall_ratios": walls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_save(ap)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--rows", default=",".join(ROWS))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="infoeval-new-user-", dir=a.work))
    try:
        model = write_random_model("qwen3-0.6b", work / "qwen3-0.6b")
        (work / "two_kb.txt").write_bytes("".join(pydoc_data.topics.topics.values()).encode()[:2048])
        rows = {}
        for key in a.rows.split(","):
            for name, cmd in jobs(model, work)[key]:
                rows[name] = _row(cmd, work)
                print(name, rows[name], file=sys.stderr, flush=True)
                if a.save:  # each row as soon as it is measured: a long run keeps what it has
                    save(__file__, _figures(rows), args=a)
        emit(__file__, _figures(rows), a.save, args=a)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
