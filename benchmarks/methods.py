"""Benchmark: the quantizers people ship beside infoeval's own rounding, in KL on one text, on the built-in
SmolLM2-135M and its default python-docs text.

    python benchmarks/methods.py [--tokens 4096] [--schemes ...] [--work DIR] [--save]

1. One `quantize-compare` run with every scheme (the same windows for all): per scheme the stored bits per weight,
   mean KL ± SE, KL P99, top-1, Δ ln PPL ± SE, the mean SQNR and the seconds the library spent quantizing.
2. In-process, each variant's forward time relative to the reference's: one window of 512 tokens, the median of
   ``--repeats`` passes each, the models taking turns.
3. Each scheme alone in a fresh process (`quantize-compare --schemes S --max-tokens 512`): its peak resident
   memory, from the kernel's accounting of that child, beside the reference alone (`compress-bits`, one model).

Prints one JSON object (``--save``: benchmarks/results/methods.json). Needs the backends' extras
(``pip install 'infoeval[methods]'``); a scheme whose library is missing is left out and named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
# at 4 bits, groups of 64 (SmolLM2's rows of 576 inputs are not a multiple of 128, which torchao needs; quanto picks
# its own group, 96 or 128) and infoeval's int4-g128 as the usual reference point; at 8 bits, a scale per channel
SCHEMES = "int4-g128,int4-g64,hqq:int4-g64,quanto:int4,torchao:int4-g64,bnb:nf4,int8-channel,hqq:int8-channel,quanto:int8,torchao:int8,bnb:int8"


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


def _compare(schemes: list[str], tokens: int, out: Path) -> dict:
    args = ["quantize-compare", "--schemes", ",".join(schemes), "--max-tokens", tokens, "--json", out, "-q"]
    subprocess.run([sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, check=True, capture_output=True)
    result = json.loads(out.read_text())
    rows = {}
    for v in result["variants"]:
        m, q = v["metrics"], v["quantization"]
        rows[v["name"]] = {
            "bits_per_weight": round(q["bits_per_weight"], 4), "kl_mean": m["kl_mean"], "kl_se": m["kl_se"], "kl_p99": m["kl_p99"],
            "top1": m["top1"], "ln_ppl_ratio": m["ln_ppl_ratio"], "ln_ppl_ratio_se": m["ln_ppl_ratio_se"], "sqnr_db_mean": q["sqnr_db_mean"],
            "quantize_s": q.get("quantize_s"), "library": q["scheme"].get("library_version") and f"{q['scheme']['library']} {q['scheme']['library_version']}",
        }  # fmt: skip
    return {"tokens": result["reference"]["tokens"], "reference_ppl": result["reference"]["ppl"], "quantize_s_all": result["timings"]["quantize_s"],
            "schemes": rows}  # fmt: skip


def _forward_times(schemes: list[str], repeats: int) -> dict:
    """Seconds of one 512-token forward pass per model (median), and each variant's ratio to the reference's."""
    import torch

    from infoeval.models import load_model
    from infoeval.quant.apply import WithVariant, quantize_variant
    from infoeval.quant.methods import is_method, parse_method
    from infoeval.quant.methods.variant import build_method_variant
    from infoeval.quant.schemes import parse_scheme

    model = load_model("smollm2-135m", torch.device("cpu"), torch.float32).model
    roles = {"reference": model}
    for s in schemes:
        roles[s] = build_method_variant(model, parse_method(s)).model if is_method(s) else WithVariant(model, quantize_variant(model, parse_scheme(s)))
    ids = torch.randint(0, 49152, (1, 512), generator=torch.Generator().manual_seed(0))
    times = {name: [] for name in roles}
    with torch.inference_mode():
        for name, m in roles.items():
            m(input_ids=ids)  # first call: a library may prepare its kernel
        for _ in range(repeats):
            for name, m in roles.items():
                t0 = time.perf_counter()
                m(input_ids=ids)
                times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    return {name: {"forward_s": round(t, 4), "ratio": round(t / med["reference"], 3)} for name, t in med.items()}


def _peak_rss_mb(schemes: list[str] | None) -> float:
    args = ["quantize-compare", "--schemes", ",".join(schemes), "--max-tokens", 512, "-q"] if schemes else ["compress-bits", "--max-tokens", 512, "-q"]
    proc = subprocess.Popen([sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{args} failed: {proc.stderr.read().decode()[-1500:]}")
    return round(usage.ru_maxrss / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--schemes", default=SCHEMES)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/infoeval-bench-methods"))
    add_save(ap)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    schemes, missing = _available([s.strip() for s in args.schemes.split(",") if s.strip()])
    figures: dict = {"schemes_missing": missing}
    # first, while this process is small: a child's peak RSS counts what it inherited at the fork
    figures["peak_rss_mb"] = {"reference only": _peak_rss_mb(None), **{s: _peak_rss_mb([s]) for s in schemes}}
    figures["compare"] = _compare(schemes, args.tokens, args.work / "compare.json")
    figures["forward"] = _forward_times(schemes, args.repeats)
    backends = {s.split(":")[0] for s in schemes if ":" in s}
    figures["targets"] = {"at least four backends besides RTN ran": len(backends) >= 4}
    emit(__file__, figures, args.save, args=args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
