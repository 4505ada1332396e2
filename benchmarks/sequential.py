"""Benchmark: `gate --sequential` against the fixed gate, `quantize-compare --until-se`, and the sequential rule's
calibration, on the built-in SmolLM2 and its default python-docs text.

    python benchmarks/sequential.py [--tokens 8192] [--until-se 0.01] [--runs 10000] [--work DIR] [--save]

1. One compact reference (`infoeval reference --max-tokens 8192`, the default protocol), then, each as its own
   command (wall seconds of the whole process: interpreter, model load, quantizing, evaluation), the fixed gate
   and the sequential gate with the default limits for int8-channel and int4-channel: tokens used of the budget,
   the stopping window, the wall ratio.
2. A candidate at its own limit: int4-g128 with the single limit max_kl_mean set to its own full-budget mean KL
   (from its fixed run); the sequential verdict must be "undecided at budget" or agree with the fixed one.
3. `quantize-compare --schemes int4-g128 --until-se X` against the same command on the whole text (`--max-tokens
   all`, run once per work folder like the reference): the tokens it took, its SE, and how many SEs its mean is
   from the whole text's.
4. Calibration of the gate's rule (one limit on mean KL, α = 0.05; the t-mixture PASS bound and, on the FAIL side,
   the t-mixture bound and the exact capital test): ``--runs`` seeded streams of 64 window means with the true mean
   exactly at the limit (false PASS) and 2 % inside it (false FAIL), from lognormal laws and from a bootstrap of
   the whole-text run's real int4-g128 window means; beside it the naive rule (x̄ + 1.645 σ̂/√t below the limit
   after any window), which must fail the same test.

Prints one JSON object (``--save``: benchmarks/results/sequential.json).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05


def _run(args: list, out: Path) -> tuple[dict, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", *map(str, args), "--json", out, "-q"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(out.read_text()), wall, proc.returncode


def _summary(result: dict, wall: float, rc: int) -> dict:
    q = result.get("sequential") or {}
    out = {
        "exit": rc,
        "passed": result["passed"],
        "wall_s": round(wall, 2),
        "load_s": round(result["timings"]["load_s"], 2),
        "eval_s": round(result["timings"]["eval_s"], 2),
        "kl_mean": result["metrics"]["kl_mean"],
    }
    if q:
        out |= {
            k: q[k]
            for k in (
                "decision",
                "stopped_at_window",
                "windows_evaluated",
                "windows_budget",
                "tokens_used",
                "tokens_budget",
                "saving",
            )
        }
        out["tokens_share"] = q["tokens_used"] / q["tokens_budget"]
        out["limits"] = {
            r["limit"]: {"decision": r["decision"], "pass_bound": r["pass_bound"], "fail_bound": r["fail_bound"]}
            for r in q["limits"]
        }
    return out


def _pair(work: Path, name: str, gate: list) -> dict:
    fixed, fw, frc = _run(gate, work / f"{name}-fixed.json")
    seq, sw, src = _run([*gate, "--sequential"], work / f"{name}-sequential.json")
    return {
        "fixed": _summary(fixed, fw, frc),
        "sequential": _summary(seq, sw, src),
        "wall_ratio": round(sw / fw, 3),
        "agree": fixed["passed"] == seq["passed"],
    }


def _near_limit(work: Path, base: list) -> dict:
    from infoeval.gating.limits import judge, parse_limits

    fixed, fw, frc = _run([*base, "--scheme", "int4-g128", "--max-kl-mean", 1e9], work / "g128-fixed.json")
    limit = fixed["metrics"]["kl_mean"]
    fixed_passed = judge(parse_limits({"max_kl_mean": limit}), fixed["metrics"])[0].passed
    (work / "near.toml").write_text(f"[limits]\nmax_kl_mean = {limit!r}\n", encoding="utf-8")
    seq, sw, src = _run(
        [*base, "--scheme", "int4-g128", "--limits", work / "near.toml", "--sequential"], work / "near-sequential.json"
    )
    near = {
        "limit": limit,
        "fixed": {**_summary(fixed, fw, frc), "passed": fixed_passed},
        "sequential": _summary(seq, sw, src),
        "wall_ratio": round(sw / fw, 3),
        "agree": fixed_passed == seq["passed"],
    }
    near["never_opposite"] = near["sequential"]["decision"] == "undecided at budget" or near["agree"]
    return near


def _until_se(work: Path, target: float) -> tuple[dict, np.ndarray]:
    """The run to a precision and the whole text's run; returns the figures and the whole run's window means."""
    import pandas as pd

    if (work / "whole.json").exists() and (
        work / "whole.csv"
    ).exists():  # like the reference: made once per work folder
        whole, ww = json.loads((work / "whole.json").read_text()), float("nan")
    else:
        whole, ww, _ = _run(
            ["quantize-compare", "--schemes", "int4-g128", "--max-tokens", "all", "--positions", work / "whole.csv"],
            work / "whole.json",
        )
    until, uw, _ = _run(["quantize-compare", "--schemes", "int4-g128", "--until-se", target], work / "until.json")
    m_all, m = whole["variants"][0]["metrics"], until["variants"][0]["metrics"]
    q = until["until_se"]
    frame = pd.read_csv(work / "whole.csv")
    frame = frame[frame["variant"] == "int4-g128"] if "variant" in frame else frame
    kl_col = "kl" if "kl" in frame else next(c for c in frame.columns if c.endswith("kl"))
    window_means = frame.groupby("window")[kl_col].mean().to_numpy()
    figures = {
        "target": target,
        "reached": q["reached"],
        "kl_se": m["kl_se"],
        "tokens_used": q["tokens_used"],
        "windows_used": q["windows_used"],
        "tokens_total": q["tokens_total"],
        "kl_mean": m["kl_mean"],
        "whole_text_kl_mean": m_all["kl_mean"],
        "whole_text_kl_se": m_all["kl_se"],
        "distance_in_se": abs(m["kl_mean"] - m_all["kl_mean"]) / m["kl_se"],
        "wall_s": round(uw, 2),
        "whole_text_wall_s": round(ww, 2) if ww == ww else None,
        "window_kl_cv": float(window_means.std(ddof=1) / window_means.mean()),
        "windows_whole_text": int(window_means.size),
    }
    return figures, window_means


def _calibration(real_windows: np.ndarray, runs: int, seed: int = 0) -> dict:
    """False PASS at the limit, false FAIL 2 % inside it, for the gate's rule on one limit and the naive rule."""
    from infoeval.measure.sequential import naive_upper
    from infoeval.measure.stopping import FAIL, PASS, SequentialRule, Stream, first_decision

    rng, n = np.random.default_rng(seed), 64
    real = real_windows / real_windows.mean()
    laws = {
        "lognormal σ_log 0.1": lambda size: rng.lognormal(0.0, 0.1, size) / math.exp(0.005),
        "lognormal σ_log 0.3": lambda size: rng.lognormal(0.0, 0.3, size) / math.exp(0.045),
        f"real int4-g128 window means, resampled ({real.size})": lambda size: rng.choice(real, size),
    }
    rule = SequentialRule((Stream("kl", 1.0, 0.0),), ALPHA, 10**9)
    tokens, table = np.arange(1, n + 1), {}
    for name, draw in laws.items():
        at, inside = draw((runs, n)), draw((runs, n)) * 0.98
        false_pass = np.mean([first_decision(rule.decisions(x[:, None], tokens))[0] == PASS for x in at])
        false_fail = np.mean([first_decision(rule.decisions(x[:, None], tokens))[0] == FAIL for x in inside])
        naive = np.mean((naive_upper(at)[:, 1:] < 1.0).any(axis=1))
        table[name] = {
            "false_pass": float(false_pass),
            "false_fail": float(false_fail),
            "naive_false_pass": float(naive),
        }
    slack = 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs)
    return {
        "runs": runs,
        "windows": n,
        "alpha": ALPHA,
        "pass_mark": ALPHA + slack,
        "laws": table,
        "calibrated": all(
            r["false_pass"] <= ALPHA + slack and r["false_fail"] <= ALPHA + slack for r in table.values()
        ),
        "naive_fails": all(r["naive_false_pass"] > ALPHA + slack for r in table.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--until-se", type=float, default=0.01)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/infoeval-bench-sequential"))
    add_save(ap)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    ref = args.work / f"ref-{args.tokens}.safetensors"
    t0 = time.perf_counter()
    if not ref.exists():
        subprocess.run(
            [sys.executable, "-m", "infoeval", "reference", "--max-tokens", str(args.tokens), "--out", str(ref), "-q"],
            cwd=ROOT,
            check=True,
        )
    figures: dict = {"tokens": args.tokens, "reference_s": round(time.perf_counter() - t0, 1)}
    base = ["gate", "-r", ref]
    figures["int8-channel"] = _pair(args.work, "int8", [*base, "--scheme", "int8-channel"])
    figures["int4-channel"] = _pair(args.work, "int4c", [*base, "--scheme", "int4-channel"])
    figures["int4-g128 at its own mean KL"] = near = _near_limit(args.work, base)
    figures["until_se"], windows = _until_se(args.work, args.until_se)
    figures["calibration"] = _calibration(windows, args.runs)
    i8, i4, u = figures["int8-channel"], figures["int4-channel"], figures["until_se"]
    figures["targets"] = {
        "int8 passes with ≤ 30 % of tokens": i8["sequential"].get("tokens_share", 1) <= 0.30
        and i8["sequential"]["passed"],
        "int8 wall ≤ 0.4× fixed": i8["wall_ratio"] <= 0.4,
        "int4-channel fails after ≤ 2 windows": i4["sequential"].get("stopped_at_window", 99) <= 2
        and not i4["sequential"]["passed"],
        "int4-channel wall ≤ 0.15× fixed": i4["wall_ratio"] <= 0.15,
        "near limit: undecided or agreeing": near["never_opposite"],
        "until-se: SE ≤ target, mean within 2 SE of the whole text's": u["kl_se"] <= args.until_se
        and u["distance_in_se"] <= 2,
        "calibrated, and the naive rule is not": figures["calibration"]["calibrated"]
        and figures["calibration"]["naive_fails"],
    }
    emit(__file__, figures, args.save, args=args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
