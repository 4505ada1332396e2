"""Benchmark: the quantizers people ship beside infoeval's own rounding, in KL on one text, on the built-in
SmolLM2-135M and its default python-docs text.

    python benchmarks/methods.py [--tokens 4096] [--schemes ...] [--work DIR] [--save]

1. One `quantize-compare` run with every scheme (the same windows for all): per scheme the stored bits per weight,
   mean KL ± SE, KL P99, top-1, Δ ln PPL ± SE, the mean SQNR and the seconds the library spent quantizing.
2. In-process, each variant's forward time relative to the reference's: one window of 512 tokens, the median of
   ``--repeats`` passes each, the models taking turns.
3. Each scheme alone in a fresh process (`quantize-compare --schemes S --max-tokens 512`): its peak resident
   memory, from the kernel's accounting of that child, beside the reference alone (`compress-bits`, one model).
4. A calibrated method (AutoRound) against infoeval's rounding at the same settings (``--versus``): the ratio of
   their mean KL on the held-out evaluation tokens, the paired difference ± SE (batch means over the positions
   of the one run), and the calibration cost (AutoRound's tuning seconds, on ``--calibration-samples`` chunks
   of ``--calibration-seqlen`` tokens of the python-docs text after the evaluated ones). Its forward time and
   peak memory (steps 2 and 3) are measured with one iteration: the kernels, the copy of the model and the cached
   block inputs do not depend on the number of iterations, only the tuning time does.

Prints one JSON object (``--save``: benchmarks/results/methods.json). Needs the backends' extras
(``pip install 'infoeval[methods]'``); a scheme whose library is missing is left out and named.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
# at 4 bits, groups of 64 (SmolLM2's rows of 576 inputs are not a multiple of 128, which torchao needs; quanto picks
# its own group, 96 or 128) and infoeval's int4-g128 as the usual reference point; at 8 bits, a scale per channel
SCHEMES = (
    "int4-g128,int4-g64,hqq:int4-g64,quanto:int4,torchao:int4-g64,bnb:nf4,autoround:int4-g64-iters50,"
    "int8-channel,hqq:int8-channel,quanto:int8,torchao:int8,bnb:int8"
)
CALIBRATED = "autoround:"


def _available(schemes: list[str]) -> tuple[list[str], list[str]]:
    from infoeval.errors import UsageError
    from infoeval.quant.methods import is_method, parse_method

    ok, missing = [], []
    for s in schemes:
        try:
            if is_method(s):
                parse_method(s)
            ok.append(s)
        except UsageError as e:
            missing.append(f"{s}: {e}")
    return ok, missing


def _calibration_args(schemes: list[str], args) -> list:
    return (
        ["--calibration-samples", args.calibration_samples, "--calibration-seqlen", args.calibration_seqlen]
        if any(s.startswith(CALIBRATED) for s in schemes)
        else []
    )


def _one_iteration(scheme: str) -> str:
    """A calibrated scheme with a single tuning iteration (the same kernels and memory, a fraction of the time)."""
    return re.sub(r"-iters\d+$", "", scheme) + "-iters1" if scheme.startswith(CALIBRATED) else scheme


def _compare(schemes: list[str], tokens: int, out: Path, extra: list) -> dict:
    args = [
        "quantize-compare",
        "--schemes",
        ",".join(schemes),
        "--max-tokens",
        tokens,
        "--json",
        out,
        "--positions",
        out.with_suffix(".csv"),
        "-q",
        *extra,
    ]
    subprocess.run([sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, check=True, capture_output=True)
    result = json.loads(out.read_text())
    rows = {}
    for v in result["variants"]:
        m, q = v["metrics"], v["quantization"]
        rows[v["name"]] = {
            "bits_per_weight": round(q["bits_per_weight"], 4),
            "kl_mean": m["kl_mean"],
            "kl_se": m["kl_se"],
            "kl_p99": m["kl_p99"],
            "top1": m["top1"],
            "ln_ppl_ratio": m["ln_ppl_ratio"],
            "ln_ppl_ratio_se": m["ln_ppl_ratio_se"],
            "sqnr_db_mean": q["sqnr_db_mean"],
            "quantize_s": q.get("quantize_s"),
            "library": q["scheme"].get("library_version")
            and f"{q['scheme']['library']} {q['scheme']['library_version']}",
            **(
                {"tune_s": q["tune_s"], "kernel": q["kernel"], "calibration": q["calibration"]}
                if "calibration" in q
                else {}
            ),
        }
    return {
        "tokens": result["reference"]["tokens"],
        "reference_ppl": result["reference"]["ppl"],
        "quantize_s_all": result["timings"]["quantize_s"],
        "schemes": rows,
    }


def _paired(positions: Path, scheme: str, versus: str) -> dict:
    """``scheme`` against ``versus`` on the same positions: the ratio of mean KLs and the paired difference ± SE."""
    import pandas as pd

    from infoeval.measure.stats import mean_se

    frame = pd.read_csv(positions, usecols=["variant", "kl"])
    a, b = (frame.loc[frame["variant"] == name, "kl"].to_numpy(dtype=float) for name in (scheme, versus))
    diff, diff_se = mean_se(a - b)
    return {
        "scheme": scheme,
        "versus": versus,
        "kl_ratio": float(a.mean() / b.mean()),
        "kl_diff": diff,
        "kl_diff_se": diff_se,
    }


def _calibration(tokenizer):
    """A small calibration for the one-iteration variant of step 2 (python-docs chunks; its values do not matter)."""
    from infoeval.quant.methods.calibration import calibration_samples
    from infoeval.quant.variant_settings import CalibrationSettings

    return calibration_samples(
        CalibrationSettings(text="python-docs", samples=8, seqlen=64), None, np.zeros(0, dtype=np.int64), 0, tokenizer
    )


def _forward_times(schemes: list[str], repeats: int) -> dict:
    """Seconds of one 512-token forward pass per model (median), and each variant's ratio to the reference's."""
    import torch

    from infoeval.models import load_model
    from infoeval.quant.apply import WithVariant, quantize_variant
    from infoeval.quant.methods import is_method, parse_method
    from infoeval.quant.methods.variant import build_method_variant
    from infoeval.quant.schemes import parse_scheme

    loaded = load_model("smollm2-135m", torch.device("cpu"), torch.float32)
    model, roles = loaded.model, {"reference": loaded.model}
    for s in schemes:
        if is_method(s):
            m = parse_method(_one_iteration(s))
            roles[s] = build_method_variant(
                model,
                m,
                tokenizer=loaded.tokenizer,
                calibration=_calibration(loaded.tokenizer) if m.calibrated else None,
            ).model
        else:
            roles[s] = WithVariant(model, quantize_variant(model, parse_scheme(s)))
    ids = torch.randint(0, 49152, (1, 512), generator=torch.Generator().manual_seed(0))
    times = {name: [] for name in roles}
    with torch.inference_mode():
        for m in roles.values():
            m(input_ids=ids)  # first call: a library may prepare its kernel
        for _ in range(repeats):
            for name, m in roles.items():
                t0 = time.perf_counter()
                m(input_ids=ids)
                times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    return {name: {"forward_s": round(t, 4), "ratio": round(t / med["reference"], 3)} for name, t in med.items()}


def _peak_rss_mb(schemes: list[str] | None, extra: list = ()) -> float:
    args = (
        ["quantize-compare", "--schemes", ",".join(map(_one_iteration, schemes)), "--max-tokens", 512, "-q", *extra]
        if schemes
        else ["compress-bits", "--max-tokens", 512, "-q"]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{args} failed: {proc.stderr.read().decode()[-1500:]}")
    return round(usage.ru_maxrss / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--schemes", default=SCHEMES)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--versus", default="int4-g64", help="the rounding a calibrated scheme is compared with (step 4)")
    ap.add_argument("--calibration-samples", type=int, default=32)
    ap.add_argument("--calibration-seqlen", type=int, default=256)
    ap.add_argument("--work", type=Path, default=Path("/tmp/infoeval-bench-methods"))
    add_save(ap)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    schemes, missing = _available([s.strip() for s in args.schemes.split(",") if s.strip()])
    figures: dict = {"schemes_missing": missing}
    # first, while this process is small: a child's peak RSS counts what it inherited at the fork
    figures["peak_rss_mb"] = {
        "reference only": _peak_rss_mb(None),
        **{s: _peak_rss_mb([s], _calibration_args([s], args)) for s in schemes},
    }
    figures["compare"] = _compare(schemes, args.tokens, args.work / "compare.json", _calibration_args(schemes, args))
    calibrated = [s for s in schemes if s.startswith(CALIBRATED)]
    figures["calibrated"] = [
        {**_paired(args.work / "compare.csv", s, args.versus), "tune_s": figures["compare"]["schemes"][s]["tune_s"]}
        for s in calibrated
        if args.versus in schemes
    ]
    figures["forward"] = _forward_times(schemes, args.repeats)
    backends = {s.split(":")[0] for s in schemes if ":" in s}
    figures["targets"] = {
        "at least four backends besides RTN ran": len(backends) >= 4,
        **{f"{c['scheme']} below {c['versus']} in mean KL": c["kl_ratio"] < 1 for c in figures["calibrated"]},
    }
    emit(__file__, figures, args.save, args=args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
