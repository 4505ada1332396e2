"""Benchmark: many quantizations against one reference (issue 51). Twelve variants of SmolLM2-135M (infoeval's
rounding at 8, 4 and 3 bits, bfloat16, and the hqq, quanto and bitsandbytes libraries) on the first 8,192 tokens
of python-docs, each run a fresh `python -m infoeval` process whose peak RSS the kernel reports (``os.wait4``):

* ``reference``: compress-bits on the same text (the reference's forward passes alone);
* ``plain``: quantize-compare of the twelve; ``paired``: the same with ``--baseline int4-g128``.

Figures: each run's wall time and peak RSS; the twelve's growth over the reference against the variants' stored
bytes; the verdicts' own seconds (``timings.paired_s``) as a share of the run; the frontier and the verdict table
against int4-g128. And the verdicts' calibration, no model needed: 1,000 seeded runs of a baseline and a variant
of equal expected KL, made from 16 real windows (``tests/data/se_windows.npz``), how often a verdict is false.

    python benchmarks/many_variants.py [--max-tokens 8192] [--trials 1000] [--save]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _record import add_save, emit, measure_child  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ",".join(
    ["int8-channel", "int8-g128", "int4-g128", "int4-g64", "int4-g32", "int4-channel", "int4-g128-asym", "int3-g64"]
    + ["bf16", "hqq:int4-g64", "quanto:int4", "bnb:nf4"]
)
BASELINE = "int4-g128"


def child(args: list, folder: Path) -> tuple[dict, dict]:
    """One command as a fresh process: its result JSON, and its wall seconds and peak RSS (MiB)."""
    out = folder / f"r{time.monotonic_ns()}.json"
    wall, peak = measure_child([sys.executable, "-m", "infoeval", *map(str, args), "--json", str(out), "-q"])
    return json.loads(out.read_text(encoding="utf-8")), {"wall_s": round(wall, 1), "peak_rss_mib": round(peak, 1)}


def calibration(trials: int, seed: int = 0) -> dict:
    """False verdicts on a baseline and a variant of the same expected KL: each a real window's KL times
    exp(window effect + position noise), the noise drawn alike for both (measure/paired.t_test on whole windows)."""
    from infoeval.measure.paired import holm, t_test, verdict

    data = np.load(ROOT / "tests" / "data" / "se_windows.npz")
    w = data["window"]
    pool = np.stack([data["int4-g128/kl"][w == i].astype(np.float64) for i in np.unique(w) if (w == i).sum() == 512])
    rng, false, windows = np.random.default_rng(seed), 0, np.repeat(np.arange(16), 512)
    for _ in range(trials):
        kl = pool[rng.integers(0, len(pool), 16)].ravel()
        a, b = (kl * np.exp(np.repeat(rng.normal(0, 0.1, 16), 512) + rng.normal(0, 0.3, kl.size)) for _ in range(2))
        row = t_test(a - b, windows)
        false += verdict(row["diff"], holm({"a": row["p"]})["a"], 0.05, -1) != "not distinguishable"
    return {"trials": trials, "alpha": 0.05, "false_verdicts": false, "false_rate": false / trials}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--trials", type=int, default=1000)
    add_save(ap)
    a = ap.parse_args()
    text = ["--max-tokens", a.max_tokens, "--ctx", 512, "--device", "cpu", "--dtype", "float32"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _, reference = child(["compress-bits", "smollm2-135m", *text], folder)
        plain_json, plain = child(["quantize-compare", "smollm2-135m", "--schemes", SCHEMES, *text], folder)
        paired_json, paired = child(
            ["quantize-compare", "smollm2-135m", "--schemes", SCHEMES, "--baseline", BASELINE, *text], folder
        )
    stored = sum(v["quantization"].get("stored_bytes") or 0 for v in plain_json["variants"]) / 2**20
    growth = plain["peak_rss_mib"] - reference["peak_rss_mib"]
    verdicts = {
        name: {
            m: f"{row[m]['diff']:+.4g} ± {row[m]['se']:.2g} {row[m]['verdict']}"
            for m in ("kl_mean", "kl_p99", "top1", "ln_ppl_ratio")
        }
        for name, row in paired_json["paired"]["variants"].items()
    }
    figures = {
        "variants": len(plain_json["variants"]),
        "tokens": plain_json["reference"]["tokens"],
        "reference": reference,
        "plain": plain,
        "paired": paired,
        "stored_mib": round(stored, 1),
        "growth_over_reference_mib": round(growth, 1),
        "growth_over_stored": round(growth / stored, 2) if stored else None,
        "paired_s": round(paired_json["timings"]["paired_s"], 2),
        "paired_share_of_run": round(paired_json["timings"]["paired_s"] / paired["wall_s"], 4),
        "wall_paired_over_plain": round(paired["wall_s"] / plain["wall_s"], 3),
        "frontier": paired_json["frontier"],
        "bits_per_weight": {v["name"]: v["quantization"].get("bits_per_weight") for v in plain_json["variants"]},
        "kl_mean": {v["name"]: v["metrics"]["kl_mean"] for v in plain_json["variants"]},
        "verdicts_vs": BASELINE,
        "verdicts": verdicts,
        "calibration": calibration(a.trials),
    }
    emit(__file__, figures, a.save, args=a)


if __name__ == "__main__":
    main()
