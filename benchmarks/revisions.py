"""Benchmark: the default ``quantize-compare`` at several git revisions of this repository, in one run, so that
each step of a change is a same-run comparison with the one before it (issue 53: a removal must not make the
default run more than 3 % slower; the run against an older revision says what a series of changes cost).

    python benchmarks/revisions.py --revs d8df1b8,cce9f7c,HEAD [--tokens 4096] [--repeats 3] [--save]

Each revision is checked out in a scratch git worktree (``WORK`` is this working tree as it is) and runs as the
user runs it: a fresh ``python -m infoeval quantize-compare --max-tokens N --json OUT -q`` process from that
tree, with this interpreter and its installed packages. The revisions run in rotation, ``--repeats`` rounds (so
a slow spell of a shared machine hits all alike): wall seconds and peak RSS from the kernel's accounting of the
child (``os.wait4``). Per revision: the medians and their spread (min–max), and whether its repeats printed the
same numbers; per revision after the first: its ratio to the one before it and to the first (wall and peak), whether
it printed the numbers of the one before (timings, provenance and memory left out), and the result's top-level
blocks it added or removed (what a change in the numbers is). Prints one JSON object (``--save``:
benchmarks/results/revisions.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _record import add_save, emit, result_numbers, run_child  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]


def _tree(rev: str, work: Path) -> tuple[str, Path]:
    """``rev``'s full commit id and a worktree of it (``WORK``: this tree, as it is)."""
    if rev == "WORK":
        return "WORK", ROOT
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = work / sha[:12]
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", str(path), sha], cwd=ROOT, check=True, capture_output=True
    )
    found = subprocess.run(
        [sys.executable, "-c", "import infoeval; print(infoeval.__file__)"],
        cwd=path,
        env=_env(path),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(found).is_relative_to(path):
        raise SystemExit(f"{rev}: the child imports infoeval from {found}, not from its worktree {path}")
    return sha, path


def _env(tree: Path) -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_OFF", "PYTHONPATH")} | {"PYTHONPATH": str(tree)}


def _run(tree: Path, args, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "infoeval",
        "quantize-compare",
        "--max-tokens",
        str(args.tokens),
        "--json",
        str(out),
        "-q",
    ]
    code, wall, rss, err = run_child(cmd, cwd=tree, env=_env(tree))
    if code != 0:
        raise SystemExit(f"{tree} failed ({code}): {err[-1500:]}")
    return {
        "wall_s": wall,
        "peak_rss_mib": rss,
        "numbers": result_numbers(out),
    }


def _summary(runs: list[dict]) -> dict:
    walls, peaks = [r["wall_s"] for r in runs], [r["peak_rss_mib"] for r in runs]
    return {
        "wall_s": round(statistics.median(walls), 2),
        "wall_spread_s": [round(min(walls), 2), round(max(walls), 2)],
        "peak_rss_mib": round(statistics.median(peaks), 1),
        "peak_spread_mib": [round(min(peaks), 1), round(max(peaks), 1)],
    }


def measure(revs: list[str], args, work: Path) -> list[dict]:
    trees = [(rev, *_tree(rev, work)) for rev in revs]
    try:
        runs = {rev: [] for rev in revs}
        for i in range(args.repeats):
            for rev, _, tree in trees:
                runs[rev].append(_run(tree, args, work / f"{i}-{rev}.json"))
    finally:
        for _, sha, tree in trees:
            if sha != "WORK":
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    out = []
    for k, (rev, sha, _) in enumerate(trees):
        mine = runs[rev][0]["numbers"]
        row = {
            "rev": rev,
            "commit": sha,
            **_summary(runs[rev]),
            "numbers_repeat": all(r["numbers"] == mine for r in runs[rev]),
        }
        if k:
            prev, base = out[k - 1], out[0]
            before = runs[revs[k - 1]][0]["numbers"]
            row |= {
                "numbers_equal_previous": mine == before,
                "blocks_added": sorted(set(json.loads(mine)) - set(json.loads(before))),
                "blocks_removed": sorted(set(json.loads(before)) - set(json.loads(mine))),
            }
            row |= {
                "wall_vs_previous": round(row["wall_s"] / prev["wall_s"], 3),
                "peak_vs_previous": round(row["peak_rss_mib"] / prev["peak_rss_mib"], 3),
                "wall_vs_first": round(row["wall_s"] / base["wall_s"], 3),
                "peak_vs_first": round(row["peak_rss_mib"] / base["peak_rss_mib"], 3),
            }
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_save(ap)
    ap.add_argument(
        "--revs", required=True, help="comma-separated git revisions, oldest first (WORK: this working tree)"
    )
    ap.add_argument("--labels", default="", help="comma-separated labels, one per revision (what each step changed)")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    revs = args.revs.split(",")
    labels = args.labels.split(",") if args.labels else [""] * len(revs)
    if len(labels) != len(revs):
        raise SystemExit(f"--labels has {len(labels)} labels for {len(revs)} revisions")
    work = Path(tempfile.mkdtemp(prefix="infoeval-revisions-"))
    rows = measure(revs, args, work)
    for row, label in zip(rows, labels):
        row["label"] = label
    emit(
        __file__,
        {"command": f"quantize-compare --max-tokens {args.tokens}", "repeats": args.repeats, "revisions": rows},
        args.save,
        args=args,
    )


if __name__ == "__main__":
    main()
