"""Benchmark: what each performance mechanism saves, measured by switching it off (``INFOEVAL_OFF``,
``infoeval/switches.py``) in whole processes of the commands it serves, on the built-in SmolLM2-135M.

    python benchmarks/mechanisms.py [--tokens 4096] [--repeats 3] [--save]

Commands (each a fresh process, ``--json`` to a scratch file, ``-q``):

* ``compare``: the default ``quantize-compare`` (its three schemes, python-docs, the sampled noise floor) at
  ``--tokens``; served by ``heap`` (glibc thresholds and trims) and ``shared_batches`` (the decoder blocks of 4
  windows in one pass);
* ``sensitivity``: ``sensitivity --by block --schemes int4-g128`` at ``--sensitivity-tokens``; served by
  ``blocks`` (each unit's forward from its first block's cached input).

(The record of 2026-12-05 also measured ``ahead``, ``logits_pool`` and, on a 2-rank torchrun quantize-compare,
``rank_share``; all three were removed, docs/design-notes.md.)

Per command, the configurations (all on, and each of its mechanisms off) run ``--repeats`` times in rotation (so
drift in the machine falls on all alike): wall seconds and peak RSS from the kernel's accounting of the child
(``os.wait4``). Per mechanism: the medians on and off, their spread
(min–max), the saving in % of the command's wall time and of its peak, and whether it pays by issue 53's rule
(≥ 5 % of the wall time or ≥ 10 % of the peak). The numbers every configuration printed must be equal (checked).

Prints one JSON object (``--save``: benchmarks/results/mechanisms.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, result_numbers, run_child  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
SERVES = {"compare": ("heap", "shared_batches"), "sensitivity": ("blocks",)}
WALL_RULE, PEAK_RULE = 0.05, 0.10  # a mechanism pays when it saves at least this share of the wall time or of the peak


def _command(name: str, args, out: Path) -> list[str]:
    py = [sys.executable, "-m", "infoeval"]
    if name == "compare":
        return [*py, "quantize-compare", "--max-tokens", str(args.tokens), "--json", str(out), "-q"]
    return [
        *py,
        "sensitivity",
        "--by",
        "block",
        "--schemes",
        "int4-g128",
        "--max-tokens",
        str(args.sensitivity_tokens),
        "--json",
        str(out),
        "-q",
    ]


def _run(name: str, off: str | None, args, work: Path) -> dict:
    out = work / f"{name}-{off or 'all-on'}.json"
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_OFF"} | ({"INFOEVAL_OFF": off} if off else {})
    code, wall, rss, err = run_child(_command(name, args, out), env=env)
    if code != 0:
        raise SystemExit(f"{name} with {off or 'all on'} failed ({code}): {err[-1500:]}")
    return {"wall_s": wall, "peak_rss_mib": rss, "numbers": result_numbers(out)}


def _spread(xs: list[float]) -> list[float]:
    return [round(min(xs), 2), round(max(xs), 2)]


def measure(name: str, args, work: Path) -> dict:
    configs = [None, *SERVES[name]]
    runs = {c: [] for c in configs}
    for _ in range(args.repeats):
        for c in configs:
            runs[c].append(_run(name, c, args, work))
    on = runs[None]
    same = all(r["numbers"] == on[0]["numbers"] for c in configs for r in runs[c])
    wall_on, peak_on = statistics.median(r["wall_s"] for r in on), statistics.median(r["peak_rss_mib"] for r in on)
    out = {
        "command": " ".join(_command(name, args, Path("OUT.json"))[1:]),
        "numbers_equal": same,
        "all_on": {
            "wall_s": round(wall_on, 2),
            "wall_spread_s": _spread([r["wall_s"] for r in on]),
            "peak_rss_mib": round(peak_on, 1),
            "peak_spread_mib": _spread([r["peak_rss_mib"] for r in on]),
        },
        "mechanisms": {},
    }
    for c in SERVES[name]:
        wall_off = statistics.median(r["wall_s"] for r in runs[c])
        peak_off = statistics.median(r["peak_rss_mib"] for r in runs[c])
        saves_wall, saves_peak = 1 - wall_on / wall_off, 1 - peak_on / peak_off
        out["mechanisms"][c] = {
            "off_wall_s": round(wall_off, 2),
            "off_wall_spread_s": _spread([r["wall_s"] for r in runs[c]]),
            "off_peak_rss_mib": round(peak_off, 1),
            "off_peak_spread_mib": _spread([r["peak_rss_mib"] for r in runs[c]]),
            "saves_wall": round(saves_wall, 4),
            "saves_peak": round(saves_peak, 4),
            "pays": saves_wall >= WALL_RULE or saves_peak >= PEAK_RULE,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_save(ap)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--sensitivity-tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--commands", default="compare,sensitivity")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="infoeval-mechanisms-"))
    figures = {
        "rule": {"saves_wall_at_least": WALL_RULE, "or_saves_peak_at_least": PEAK_RULE},
        "repeats": args.repeats,
        "commands": {name: measure(name, args, work) for name in args.commands.split(",")},
    }
    emit(__file__, figures, args.save, args=args)


if __name__ == "__main__":
    main()
