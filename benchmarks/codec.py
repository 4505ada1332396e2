"""Benchmark: compress / decompress with SmolLM2 and the range coder on the first N bytes of python-docs and of
WikiText-2 test, against the ideal Σ −log₂ q of the same tokens and segments, against xz and zstd, and against
plain forward passes over the same text.

    python benchmarks/codec.py [--bytes 32768] [--ctx 512] [--group 32] [--threads 1] [--texts python-docs,wikitext-2]
                               [--dtype float32]

Prints JSON, one record per text: sizes and bits per byte (file, payload, ideal), the overhead by cause, the
targets (payload ≤ 1.001 × ideal; file ≤ 1.001 × (ideal + header)), xz -9 and zstd -19 on the same bytes, and
tokens/s of compress, decompress, a teacher-forced batched forward pass over the same segments and one cached
forward pass per token (batch of one), in wall time and in this process's CPU time (steadier on a shared
machine). Round trips are checked byte for byte.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from _record import add_save, emit  # benchmarks/_record.py

from infoeval import engine
from infoeval.codec import core, segments
from infoeval.codec.compress import load, load_as
from infoeval.codec.container import pack, unpack
from infoeval.input.prepare import Reporter
from infoeval.input.text import load_text
from infoeval.measure.compressors import compress_all

TF_ROWS = 4  # rows per teacher-forced forward pass (logits of 4 × 512 positions: 0.4 GB)


def prefix_bytes(text: str, n: int) -> bytes:
    """The longest prefix of ``text`` whose UTF-8 encoding has at most ``n`` bytes."""
    return text.encode("utf-8")[:n].decode("utf-8", "ignore").encode("utf-8")


class Clock:
    """Wall and CPU seconds of a block (CPU time is steadier on a shared machine)."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


@torch.inference_mode()
def teacher_forced(model, segs, start_id: int) -> float:
    """Σ −log₂ q of one forward pass per segment (TF_ROWS segments of one length at a time)."""
    bits = 0.0
    by_len: dict[int, list] = {}
    for s in segs:
        by_len.setdefault(len(s), []).append(s)
    for rows in by_len.values():
        for i in range(0, len(rows), TF_ROWS):
            ids = torch.tensor([[start_id, *s.tolist()] for s in rows[i : i + TF_ROWS]])
            logits = engine.forward_logits(model, ids[:, :-1], ids.shape[1] - 1).float()
            nll = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
            bits -= float(nll.double().sum()) / math.log(2)
    return bits


@torch.inference_mode()
def one_per_token(model, seg, start_id: int, steps: int) -> float:
    """Tokens/s of cached forward passes one token at a time (a batch of one)."""
    cache = engine.new_cache(model)
    feed = [start_id, *seg[: steps - 1].tolist()]
    t0 = time.perf_counter()
    for tok in feed:
        engine.step_logits(model, cache, torch.tensor([tok]))
    return len(feed) / (time.perf_counter() - t0)


def _rates(n: int, enc: Clock, dec: Clock, tf: Clock, single: float) -> dict:
    return {
        f"{name}_{kind}": round(n / getattr(c, kind), 2)
        for name, c in (("compress", enc), ("decompress", dec), ("teacher_forced_batched", tf))
        for kind in ("wall", "cpu")
    } | {"one_forward_per_token_wall": round(single, 2)}


def measure(loaded, device, raw: bytes, ctx: int, group: int, steps: int) -> dict:
    with Clock() as enc:
        archive, coding = core.encode_bytes(raw, loaded, device, ctx, group, load_as(loaded.info), "refuse", Reporter())
    blob = pack(archive)
    with Clock() as dec:
        back = core.decode_archive(*unpack(blob), loaded)
    segs = segments.split(segments.tokenize_exactly(raw, loaded.tokenizer).ids, ctx)
    with Clock() as tf:
        tf_bits = teacher_forced(loaded.model, segs, archive.header["start_id"])
    single = one_per_token(loaded.model, segs[0], archive.header["start_id"], steps)
    n, ideal, stream, file_bits = len(raw), coding.ideal_bits, coding.stream_bits, 8 * len(blob)
    header_bits = file_bits - stream
    xz, zstd = (next(r for r in compress_all(raw) if r["method"] == m) for m in ("xz -9", "zstd -19"))
    return {
        "bytes": n,
        "tokens": coding.tokens,
        "segments": len(segs),
        "groups": len(archive.streams),
        "round_trip": back == raw,
        "file_bytes": len(blob),
        "header_bytes": header_bits // 8,
        "bits_per_byte": {
            "file": file_bits / n,
            "payload": stream / n,
            "ideal": ideal / n,
            "xz -9": xz["bits_per_byte"],
            "zstd -19": zstd["bits_per_byte"],
        },
        "bits": {
            "ideal": ideal,
            "counts": coding.code_bits,
            "payload": stream,
            "file": file_bits,
            "teacher_forced_ideal": tf_bits,
        },
        "overhead_bits": {
            "quantisation": coding.code_bits - ideal,
            "coder": stream - coding.code_bits,
            "header": header_bits,
        },
        "targets": {
            "payload_over_ideal": stream / ideal,
            "file_over_ideal_plus_header": file_bits / (ideal + header_bits),
            "within_0.1%": file_bits <= 1.001 * (ideal + header_bits),
        },
        "vs_xz": {
            "file_over_xz": file_bits / xz["bits"],
            "ideal_over_xz": ideal / xz["bits"],
            "file_over_zstd": file_bits / zstd["bits"],
        },
        "tokens_per_s": _rates(coding.tokens, enc, dec, tf, single),
        "bytes_per_s": {"compress_wall": round(n / enc.wall, 1), "decompress_wall": round(n / dec.wall, 1)},
        "decompress_slowdown_vs_teacher_forced": {
            "wall": round(dec.wall / tf.wall, 2),
            "cpu": round(dec.cpu / tf.cpu, 2),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--texts", default="python-docs,wikitext-2")
    ap.add_argument("--bytes", type=int, default=32768)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=48, help="tokens of the one-forward-per-token baseline")
    ap.add_argument("--dtype", default="float32", help="the model's dtype (compress's --dtype; the record: float32)")
    add_save(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    loaded, device, _ = load(a.model, "cpu", a.dtype, Reporter())
    out = {
        "benchmark": "codec",
        "model": a.model,
        "ctx": a.ctx,
        "group": a.group,
        "threads": a.threads,
        "dtype": str(next(loaded.model.parameters()).dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "texts": {},
    }
    for name in a.texts.split(","):
        raw = prefix_bytes(load_text(None, name, None).text, a.bytes)
        out["texts"][name] = measure(loaded, device, raw, a.ctx, a.group, a.steps)
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
