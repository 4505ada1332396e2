"""Benchmark: the per-position statistics of quantize-compare (``reference_stats`` + ``compare`` of one variant)
per window, the full-buffer way (the functions as they were before chunking, kept below) against the chunked
``infoeval.measure.infotheory`` at several chunk sizes.

    python benchmarks/stats.py [--rows 512,2048] [--vocab 49152] [--chunks 0,2,4,8,16,32,64] [--repeats 7]
                               [--threads N] [--model smollm2-135m] [--data-dir ../shared/data]

Chunk sizes: rows per chunk; 0 is ``infotheory.chunk_rows``'s own choice (CHUNK_BYTES per thread).
Logits: synthetic by default (Gaussian logits, std 2, plus a few tokens lifted by up to 10: entropies of a few
nats, like a language model's); with ``--model`` the model's own logits on Tiny Shakespeare (the vocabulary is
then the model's). The variant's logits are the reference's plus Gaussian noise (std 0.05), as quantization does.

Time: the fastest of ``--repeats`` rounds after a warm-up round, every mode once per round (a shared machine is
noisy; the minimum is the usual estimator), under inference mode with one Workspace per mode reused as the
lockstep loop does: wall seconds (``s``) and CPU seconds of all threads (``cpu_s``: the robust figure with
``--threads 1`` when other processes compete for the cores; with several threads an oversubscribed machine
stalls every parallel region, and the chunked statistics have many more of them). Memory: each (mode, rows,
chunk) runs in a fresh process that makes the logits, resets its peak RSS (/proc/self/clear_refs) and runs the
statistics twice; the peak minus the RSS before is ``extra_mib``. ``buffers_mib`` is the Workspace's own size.
It prints one JSON object; ``bit_identical``: the chunked columns equal the old ones bit for bit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from _record import add_save, emit  # benchmarks/_record.py

from infoeval.measure import infotheory as it
from infoeval.measure.infotheory import nll

ROOT = Path(__file__).resolve().parents[1]


# ---- the full-buffer statistics as they were: (n, V) buffers for ref lp, ref p, var lq, var q and a product
class OldWorkspace:
    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, role: str, like: torch.Tensor) -> torch.Tensor:
        n, v = like.shape
        buf = self._buffers.get(role)
        if buf is None or buf.shape[0] < n or buf.shape[1] != v or buf.device != like.device:
            buf = torch.empty(n, v, dtype=torch.float32, device=like.device)
            self._buffers[role] = buf
        return buf[:n]


@dataclass(frozen=True)
class OldRefStats:
    lp: torch.Tensor
    p: torch.Tensor
    entropy: torch.Tensor
    argmax: torch.Tensor
    nll: torch.Tensor


def _dot(a, b, ws):
    return torch.mul(a, b, out=ws.get("tmp", a)).sum(-1)


def old_reference_stats(logits, targets, workspace: OldWorkspace) -> OldRefStats:
    lp = torch.ops.aten._log_softmax.out(logits.float(), -1, False, out=workspace.get("ref_lp", logits))
    p = torch.exp(lp, out=workspace.get("ref_p", logits))
    return OldRefStats(lp=lp, p=p, entropy=-_dot(p, lp, workspace), argmax=lp.argmax(-1), nll=nll(lp, targets))


def old_compare(ref: OldRefStats, logits, targets, workspace: OldWorkspace) -> dict[str, torch.Tensor]:
    lq = torch.ops.aten._log_softmax.out(logits.float(), -1, False, out=workspace.get("var_lq", logits))
    q = torch.exp(lq, out=workspace.get("var_q", logits))
    entropy_q = -_dot(q, lq, workspace)
    out_nll = nll(lq, targets)
    top1 = lq.gather(-1, ref.argmax.reshape(-1, 1)).reshape(-1) >= lq.amax(-1)
    lq.sub_(ref.lp)
    kl = -_dot(ref.p, lq, workspace)
    rkl = _dot(q, lq, workspace)
    q.sub_(ref.p).abs_()
    tv = 0.5 * q.sum(-1)
    return {"nll": out_nll, "kl": kl, "rkl": rkl, "tv": tv, "entropy": entropy_q, "top1": top1}


# ---- logits ------------------------------------------------------------------------------------------------
def synthetic_logits(n: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, vocab, generator=g) * 2.0
    lifted = torch.randint(0, vocab, (n, 8), generator=g)
    return z.scatter_add_(-1, lifted, 10.0 * torch.rand(n, 8, generator=g))


def model_logits(n: int, model: str, data_dir: str) -> torch.Tensor:
    from infoeval.models import load_model

    loaded = load_model(model, torch.device("cpu"), torch.float32)
    text = (Path(data_dir) / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[: 20 * n]
    ids = torch.tensor(loaded.tokenizer(text)["input_ids"][: n + 1])[None]
    with torch.inference_mode():
        return loaded.model(input_ids=ids, use_cache=False, logits_to_keep=n).logits[0, -n:].float().contiguous()


def make_inputs(n: int, a) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    z = model_logits(n, a.model, a.data_dir) if a.model else synthetic_logits(n, a.vocab)
    g = torch.Generator().manual_seed(1)
    zv = z + 0.05 * torch.randn(z.shape, generator=g)
    targets = torch.randint(0, z.shape[1], (n,), generator=g)
    return z, zv, targets


@torch.inference_mode()
def run_stats(mode: str, z, zv, targets, ws) -> dict[str, torch.Tensor]:
    if mode == "old":
        ref = old_reference_stats(z, targets, ws)
        return {"ref_entropy": ref.entropy, "ref_nll": ref.nll, **old_compare(ref, zv, targets, ws)}
    ref = it.reference_stats(z, targets, ws)
    return {"ref_entropy": ref.entropy, "ref_nll": ref.nll, **it.compare(ref, zv, targets, ws)}


# ---- measurements ------------------------------------------------------------------------------------------
def seconds(modes: list[tuple[str, int]], z, zv, targets, repeats: int) -> tuple[dict, dict, dict]:
    """The fastest of ``repeats`` calls of each (mode, chunk rows), wall and CPU seconds (all threads), the modes
    interleaved in every round so that a slow spell of a shared machine hits all of them; and each mode's columns."""
    wss = {m: OldWorkspace() if m[0] == "old" else it.Workspace() for m in modes}
    wall, cpu, cols = dict.fromkeys(modes, float("inf")), dict.fromkeys(modes, float("inf")), {}
    for i in range(repeats + 1):  # round 0 is the warm-up: buffers allocated, pages touched
        for m in modes:
            it.CHUNK_ROWS = m[1] or None
            t0, c0 = time.perf_counter(), time.process_time()
            cols[m] = run_stats(m[0], z, zv, targets, wss[m])
            if i:
                wall[m] = min(wall[m], time.perf_counter() - t0)
                cpu[m] = min(cpu[m], time.process_time() - c0)
    return wall, cpu, cols


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_memory(mode: str, n: int, chunk: int, a) -> dict:
    it.CHUNK_ROWS = chunk or None
    torch.set_num_threads(a.threads)
    z, zv, targets = make_inputs(n, a)
    before = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
    ws = OldWorkspace() if mode == "old" else it.Workspace()
    for _ in range(2):
        run_stats(mode, z, zv, targets, ws)
    return {"extra_mib": round(_status_mib("VmHWM") - before, 1)}


def memory(mode: str, n: int, chunk: int, a) -> float:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        f"{mode},{n},{chunk}",
        "--vocab",
        str(a.vocab),
        "--threads",
        str(a.threads),
    ]
    cmd += ["--model", a.model, "--data-dir", a.data_dir] if a.model else []
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["extra_mib"]


def measure(n: int, chunks: list[int], a) -> dict:
    z, zv, targets = make_inputs(n, a)
    vocab = z.shape[1]
    modes = [("old", 0), *(("new", c) for c in chunks)]
    best, cpu, cols = seconds(modes, z, zv, targets, a.repeats)
    old_s, old_cpu = best[("old", 0)], cpu[("old", 0)]
    row = {
        "rows": n,
        "vocab": vocab,
        "old_s": round(old_s, 4),
        "old_cpu_s": round(old_cpu, 4),
        "old_buffers_mib": round(5 * n * vocab * 4 / 2**20, 1),
        "old_extra_mib": memory("old", n, 0, a),
        "chunked": [],
    }
    for mode, c in modes[1:]:
        it.CHUNK_ROWS = c or None
        rows = max(r.stop - r.start for r in it.row_chunks(n, it.chunk_rows(z)))
        row["chunked"].append(
            {
                "chunk_rows": c or f"auto: {it.chunk_rows(z)}",
                "s": round(best[(mode, c)], 4),
                "speedup": round(old_s / best[(mode, c)], 2),
                "cpu_s": round(cpu[(mode, c)], 4),
                "cpu_speedup": round(old_cpu / cpu[(mode, c)], 2),
                "buffers_mib": round(4 * rows * vocab * 4 / 2**20, 1),
                "extra_mib": memory(mode, n, c, a),
                "bit_identical": all(torch.equal(cols[(mode, c)][k], v) for k, v in cols[("old", 0)].items()),
            }
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="512,2048", help="scored positions per window")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument(
        "--chunks", default="0,2,4,8,16,32,64", help="rows per chunk to try; 0: infotheory.chunk_rows's own"
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--model", default="", help="real logits from this model (e.g. smollm2-135m) instead of synthetic")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    add_save(ap)
    a = ap.parse_args()
    if a.child:
        mode, n, chunk = a.child.split(",")
        print(json.dumps(child_memory(mode, int(n), int(chunk), a)))
        return
    torch.set_num_threads(a.threads)
    chunks = [int(c) for c in a.chunks.split(",")]
    runs = [measure(int(n), chunks, a) for n in a.rows.split(",")]
    out = {
        "benchmark": "stats",
        "logits": a.model or "synthetic",
        "torch_threads": a.threads,
        "chunk_bytes": it.CHUNK_BYTES,
        "seconds": "per window: reference_stats + compare of one variant",
        "runs": runs,
    }
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
