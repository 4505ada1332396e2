"""Benchmark: the report page's size, write time, first paint and browser memory, and what storing top-5 costs
quantize-compare, on the built-in SmolLM2 and its default python-docs text.

    python benchmarks/report.py [--tokens 8192] [--repeats 2] [--work DIR] [--save]

1. `quantize-compare` with the default schemes on ``--tokens`` tokens, without and with `--topk 5`, interleaved
   ``--repeats`` times, each a fresh process: the evaluation seconds (the result's ``eval_s``) and the process's
   wall seconds; the ratio of the fastest of each (same benchmark run, so the same machine state).
2. The page of the last top-5 run: its size, the seconds to write it in-process (read the run folder, build the
   page's data and plots, render, write), `infoeval report` as a fresh process, and in headless Chromium the time
   from navigation to the first contentful paint, to the end of the page's script and to the frame after it (the
   text view on screen: the "first paint" the target means), the spans drawn, the DOM nodes, the JS heap and the
   renderer processes' resident memory.
3. The whole text (113,108 positions at the default protocol): the same run's positions tiled to that length
   (the page's size and the browser's work depend on the number of positions, variants and top-k, not on the
   values), the same figures, and the time to draw the next page of spans.

Prints one JSON object (``--save``: benchmarks/results/report.json). Needs Chromium and chromedriver (Debian's
``chromium chromium-driver``) and selenium for parts 2 and 3.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

ROOT = Path(__file__).resolve().parents[1]
WHOLE_TEXT = 113_108  # scored positions of the whole python-docs text at the default protocol
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--window-size=1280,1000",
)


def _compare(work: Path, tokens: int, topk: int, tag: str) -> dict:
    out = work / tag
    shutil.rmtree(out, ignore_errors=True)
    args = ["quantize-compare", "--max-tokens", tokens, "--out-dir", out, "-q"] + (["--topk", topk] if topk else [])
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "infoeval", *map(str, args)], cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    result = json.loads((out / "result.json").read_text())
    return {"wall_s": round(wall, 2), "eval_s": round(result["timings"]["eval_s"], 2), "folder": out}


def _topk_cost(work: Path, tokens: int, repeats: int) -> tuple[dict, Path]:
    runs = {"none": [], "top5": []}
    for _ in range(repeats):
        runs["none"].append(_compare(work, tokens, 0, "none"))
        runs["top5"].append(_compare(work, tokens, 5, "top5"))
    best = {k: {m: min(r[m] for r in v) for m in ("eval_s", "wall_s")} for k, v in runs.items()}
    figures = {k: [{m: r[m] for m in ("eval_s", "wall_s")} for r in v] for k, v in runs.items()}
    figures["eval_ratio"] = round(best["top5"]["eval_s"] / best["none"]["eval_s"], 4)
    figures["wall_ratio"] = round(best["top5"]["wall_s"] / best["none"]["wall_s"], 4)
    return figures, runs["top5"][-1]["folder"]


def _write(run, out: Path, title: str) -> dict:
    """Build and write the page of ``run`` in-process: seconds and bytes."""
    from infoeval.output.results import atomic_write_bytes
    from infoeval.report.data import run_data
    from infoeval.report.page import render

    t0 = time.perf_counter()
    atomic_write_bytes(out, render([run_data(run.result, run.positions, run.vocab, title)]).encode("utf-8"))
    return {
        "bytes": out.stat().st_size,
        "mb": round(out.stat().st_size / 1e6, 3),
        "write_s": round(time.perf_counter() - t0, 3),
    }


def _renderer_rss_mb(driver) -> float:
    """Resident memory of the browser's renderer processes (the page's), from /proc."""
    total = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"--type=renderer" in (proc / "cmdline").read_bytes():
                total += int(
                    next(
                        line for line in (proc / "status").read_text().splitlines() if line.startswith("VmRSS")
                    ).split()[1]
                )
        except (OSError, StopIteration):
            continue
    return round(total / 1024, 1)


def _browser(page: Path) -> dict:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.execute_cdp_cmd("Performance.enable", {})
        driver.get(page.as_uri())
        marks = ("first-contentful-paint", "infoeval-ready", "infoeval-painted")
        WebDriverWait(driver, 120).until(
            lambda d: d.execute_script(f"return {list(marks)}.every((m) => performance.getEntriesByName(m).length)")
        )
        timing = driver.execute_script(f"return {list(marks)}.map((m) => performance.getEntriesByName(m)[0].startTime)")
        spans = driver.execute_script("return document.querySelectorAll('.text .t').length")
        metrics = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
        out = {
            "first_contentful_paint_s": round(timing[0] / 1000, 3),
            "script_done_s": round(timing[1] / 1000, 3),
            "text_painted_s": round(timing[2] / 1000, 3),
            "spans": spans,
            "dom_nodes": int(metrics["Nodes"]),
            "js_heap_mb": round(metrics["JSHeapUsedSize"] / 2**20, 1),
            "renderer_rss_mb": _renderer_rss_mb(driver),
        }
        t0 = time.perf_counter()
        driver.find_element("css selector", "#run-0 .next").click()
        driver.execute_script("return document.querySelectorAll('#run-0 .text .t').length")
        out["next_page_s"] = round(time.perf_counter() - t0, 3)
        return out
    finally:
        driver.quit()


def _tiled(run, n: int):
    """The run with its positions repeated to ``n`` per variant (positions and windows renumbered)."""
    import numpy as np
    import pandas as pd

    frame = run.positions
    per = frame["position"].nunique()
    reps = math.ceil(n / per)
    parts = []
    for r in range(reps):
        f = frame.copy()
        f["position"] += r * (frame["position"].max() + 1)
        f["window"] += r * (frame["window"].max() + 1)
        parts.append(f)
    tiled = pd.concat(parts, ignore_index=True)
    keep = tiled.groupby("variant").cumcount().to_numpy() < n
    result = json.loads(json.dumps(run.result))
    result["reference"]["tokens"] = n
    return type(run)(result, tiled[keep].reset_index(drop=True).astype({"position": np.int64}), run.vocab, run.source)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/infoeval-bench-report"))
    add_save(ap)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    from infoeval.report.runs import read_run

    figures: dict = {"tokens": args.tokens}
    figures["topk_cost"], folder = _topk_cost(args.work, args.tokens, args.repeats)
    run = read_run(folder)
    default = _write(run, args.work / "default.html", "default run")
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "infoeval", "report", folder, "-o", args.work / "again.html"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    default["report_process_s"] = round(time.perf_counter() - t0, 2)
    figures["default_page"] = default | _browser(args.work / "default.html")
    whole = _write(_tiled(run, WHOLE_TEXT), args.work / "whole.html", "whole text (tiled)")
    figures["whole_text_page"] = {"positions": WHOLE_TEXT, **whole, **_browser(args.work / "whole.html")}
    d, w = figures["default_page"], figures["whole_text_page"]
    figures["targets"] = {
        "default page ≤ 4 MB": d["mb"] <= 4,
        "default page written in ≤ 3 s": d["write_s"] <= 3,
        "default page's text painted ≤ 2 s": d["text_painted_s"] <= 2,
        "whole text ≤ 40 MB or paged (spans ≤ 4,096)": w["mb"] <= 40 or w["spans"] <= 4096,
        "top-5 adds ≤ 5 % to quantize-compare": figures["topk_cost"]["eval_ratio"] <= 1.05,
    }
    emit(__file__, figures, args.save, args=args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
