"""Benchmark: the standard errors quantize-compare prints (batch means, ``infoeval.measure.stats.se``) against the plain
per-position SE sd/√n (llama.cpp's) and the SE of the means of non-overlapping 256-position blocks in text
order, on the built-in SmolLM2-135M, the three default schemes, 8,192 tokens of python-docs and of WikiText-2
test (issue 36).

    python benchmarks/standard_errors.py [--corpora python-docs,wikitext-2] [--max-tokens 8192] [--block 256] [--save]
    python benchmarks/standard_errors.py --markdown benchmarks/results/standard_errors.json   # the docs' table

Each corpus is one default ``infoeval quantize-compare --positions P --json R`` run (~2 minutes on 2 cores);
the figures come from its JSON (``kl_se``, ``top1_se``, ``ln_ppl_ratio_se``) and its positions CSV (in text
order: window, then position). For each variant and metric: ``naive`` (sd/√n), ``batch`` (the JSON's SE),
``block256`` and the ratios ``batch/block256`` (the issue's target: 0.6–1.6) and ``naive/block256``. The
block-256 SE rests on 32 blocks at 8,192 tokens, so it is itself uncertain by about ±1/√(2·31) ≈ ±13 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _record import add_save, emit  # benchmarks/_record.py

from infoeval.measure.stats import iid_se

METRICS = {"kl_mean": ("kl_se", "kl"), "top1": ("top1_se", "top1_match"), "ln_ppl_ratio": ("ln_ppl_ratio_se", None)}


def fixed_block_se(x: np.ndarray, block: int) -> float:
    """SE of the means of the ⌊n/block⌋ whole blocks of ``block`` consecutive values (the rest dropped)."""
    means = x[: x.size // block * block].reshape(-1, block).mean(axis=1)
    return float(np.std(means, ddof=1) / np.sqrt(means.size))


def corpus_rows(result: dict, positions: pd.DataFrame, block: int) -> list[dict]:
    rows = []
    for v in result["variants"]:
        d, m = positions[positions["variant"] == v["name"]], v["metrics"]
        for metric, (se_key, column) in METRICS.items():
            x = (d["nll"] - d["nll_ref"] if column is None else d[column]).to_numpy(dtype=np.float64)
            naive, blocked = iid_se(x), fixed_block_se(x, block)
            rows.append(
                {
                    "variant": v["name"],
                    "metric": metric,
                    "mean": m[metric],
                    "naive": naive,
                    "batch": m[se_key],
                    f"block{block}": blocked,
                    f"batch/block{block}": m[se_key] / blocked,
                    f"naive/block{block}": naive / blocked,
                    "se_block": m["se_block"],
                    "se_blocks": m["se_blocks"],
                }
            )
    return rows


def run_corpus(corpus: str, max_tokens: int, folder: Path) -> tuple[dict, pd.DataFrame]:
    pos, res = folder / f"{corpus}.csv", folder / f"{corpus}.json"
    text = [] if corpus == "python-docs" else ["--dataset", corpus]
    cmd = [
        sys.executable,
        "-m",
        "infoeval",
        "quantize-compare",
        *text,
        "--max-tokens",
        str(max_tokens),
        "--positions",
        str(pos),
        "--json",
        str(res),
        "-q",
    ]
    subprocess.run(cmd, check=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
    return json.loads(res.read_text(encoding="utf-8")), pd.read_csv(pos)


def markdown(record: dict) -> str:
    """The table of docs/metrics.md from a saved record."""
    block = record["settings"]["block"]
    record = record["figures"]
    lines = [
        f"| corpus | variant | metric | mean | sd/√n | batch means | block-{block} | batch / block | sd/√n / block |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for corpus, c in record["corpora"].items():
        for r in c["rows"]:
            lines.append(
                f"| {corpus} | {r['variant']} | {r['metric']} | {r['mean']:.4g} | {r['naive']:.3g} | "
                f"{r['batch']:.3g} | "
                f"{r[f'block{block}']:.3g} | {r[f'batch/block{block}']:.2f} | {r[f'naive/block{block}']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="python-docs,wikitext-2")
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--block", type=int, default=256)
    add_save(ap)
    ap.add_argument("--markdown", type=Path, default=None, help="print the table of a saved record and stop")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return
    out = {"benchmark": "standard_errors", "corpora": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in args.corpora.split(","):
            result, positions = run_corpus(corpus, args.max_tokens, Path(tmp))
            out["corpora"][corpus] = {
                "text": result["provenance"]["text"],
                "rows": corpus_rows(result, positions, args.block),
            }
    emit(__file__, out, args.save, args=args)


if __name__ == "__main__":
    main()
