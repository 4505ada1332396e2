"""Benchmark: the sensitivity sweep's time with and without the block-input cache, and the proxy's Spearman ρ.

    python benchmarks/sensitivity.py [--by type,block] [--scheme int4-g128] [--max-tokens 2048] [--ctx 512]
                                     [--model smollm2-135m] [--threads N] [--out-dir DIR] [--no-plain]

One model load (``prepare``), then for each ``--by``: the sweep with the block cache (and the proxy), then the
plain sweep (every unit's forward from the embeddings, no proxy) on the same windows. For each it reports the
wall and CPU seconds of the sweep (``sweep_s``, ``sweep_cpu_s``: with ``--threads 1`` the CPU seconds are the
steady figure when other processes compete for the cores), the proxy's seconds, ``speedup`` and ``cpu_speedup``
= plain / cached, the fraction of
decoder blocks the cached sweep runs (``layers_run_fraction``: the ideal speedup is its inverse, less the head
and statistics that every unit pays), the largest difference between the two paths' mean KLs (they compute the
same numbers), and the Spearman ρ of the proxy with the direct mean KL. With ``--out-dir`` each sweep's
result JSON is written there (``<by>-cache.json``, ``<by>-plain.json``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _record import add_save, emit  # benchmarks/_record.py

from infoeval.input.prepare import Reporter, prepare
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.output.results import write_json
from infoeval.sensitivities import sweep_prepared


def _args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--by", default="type,block")
    ap.add_argument("--scheme", default="int4-g128")
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out-dir", type=Path, default=None)
    ap.add_argument("--no-plain", action="store_true", help="only the cached sweep")
    add_save(ap)
    return ap.parse_args()


def _one(p, a, by: str, cache: bool) -> dict:
    r = sweep_prepared(p, a.scheme, by=by, block_cache=cache, proxy=cache)
    if a.out_dir is not None:
        write_json(a.out_dir / f"{by}-{'cache' if cache else 'plain'}.json", r)
    return r.to_json()


def main() -> None:
    a = _args()
    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    p = prepare(
        ModelSettings(model=a.model),
        TextSettings(dataset=a.dataset, max_tokens=a.max_tokens),
        WindowSettings(ctx=a.ctx),
        Reporter(),
    )
    out = {
        "model": a.model,
        "scheme": a.scheme,
        "tokens": p.protocol.scored_tokens,
        "ctx": a.ctx,
        "threads": torch.get_num_threads(),
        "load_s": time.perf_counter() - t0,
        "runs": {},
    }
    for by in a.by.split(","):
        cached = _one(p, a, by, True)
        row = {
            "units": len(cached["units"]),
            "cache_sweep_s": cached["timings"]["sweep_s"],
            "cache_sweep_cpu_s": cached["timings"]["sweep_cpu_s"],
            "proxy_s": cached["timings"]["proxy_s"],
            "layers_run_fraction": cached["layers_run_fraction"],
            "proxy_spearman": cached["proxy"]["spearman"],
        }
        if not a.no_plain:
            plain = _one(p, a, by, False)
            row |= {
                "plain_sweep_s": plain["timings"]["sweep_s"],
                "plain_sweep_cpu_s": plain["timings"]["sweep_cpu_s"],
                "speedup": plain["timings"]["sweep_s"] / cached["timings"]["sweep_s"],
                "cpu_speedup": plain["timings"]["sweep_cpu_s"] / cached["timings"]["sweep_cpu_s"],
                "max_kl_difference": max(
                    abs(x["kl_mean"] - y["kl_mean"]) for x, y in zip(cached["units"], plain["units"])
                ),
            }
        out["runs"][by] = row
        print(json.dumps({by: row}), flush=True)
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
