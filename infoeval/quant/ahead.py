"""Quantizing ahead: a forked child encodes a local checkpoint's block weights, read from its safetensors files,
while this process imports transformers and loads the model.

Until the model exists this process runs single-threaded Python (transformers' model code imports in ~1.8 s,
the tokenizer loads in ~0.3 s) and a core stays idle. A thread cannot use it: the import holds the GIL, and a
quantizing thread got ~20 % of a core. A forked process can: on SmolLM2-135M it encodes the three default
schemes in ~1.7 s on that core, against ~1.0 s on both cores once the model is loaded. The child runs at the
lowest priority (nice 19), so it takes only the time this process leaves idle.

  ``start`` (before loading): the safetensors headers give each tensor's shape and dtype (no data is read).
  The candidates are the 2-D weights of numbered blocks (``….<i>.….weight``) that no exclude glob names. Each
  (scheme, candidate) gets fixed regions of one shared anonymous mapping per scheme: codes, scales, zero
  points, and room for the most −0 positions an int8 weight may list. Then the fork. The child, on one thread,
  reads each candidate, casts it to the model's dtype and encodes it with every scheme exactly as
  ``apply.quantize_plan`` does (``codes.encode_dequantized``, ``sqnr_db``) into its regions. It reports each
  finished candidate down a pipe and stops between candidates once asked.
  ``take`` (after loading, per quantized layer): the child's encoding of ``<layer>.weight``. It is used only
  when the model's weight has the very bits of the file's tensor cast to its dtype (checked once per layer
  against the memory-mapped file); any other layer is encoded here. The first ``take`` asks the child to stop,
  so the layers it has not reached are encoded here on every thread. The encodings are a pure function of
  the weight's bits, and the SQNR sums do not depend on the thread count (``primitives.sum_of_squares``): a
  variant is bit for bit the one this process makes alone.

Used only on Linux, on a CPU, with no device map, outside a launcher, for local safetensors checkpoints.
``INFOEVAL_AHEAD=0`` turns it off.
"""

from __future__ import annotations

import fnmatch
import json
import mmap
import os
import pickle
import re
import signal
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from infoeval.quant import codes
from infoeval.quant.codes import MAX_NEGATIVE_ZEROS, PackedWeight
from infoeval.quant.primitives import signal_power, sqnr_db
from infoeval.quant.schemes import Scheme

ALIGN = 64  # bytes between regions: a cache line
_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
_BLOCK = re.compile(r"\.\d+\.")
FAULT_ENV = "INFOEVAL_TEST_AHEAD_FAULT"  # tests only: "fail" makes the child fail, "slow" slows it down


@dataclass(frozen=True)
class Tensor:
    """A tensor of a safetensors file: where its bytes lie, its dtype and shape."""

    file: Path
    start: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, int]


def checkpoint_tensors(folder: Path) -> dict[str, Tensor]:
    """The 2-D float tensors of a folder's safetensors files (one file, or the files of its index), from their
    headers; empty when the folder has none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []
    out = {}
    for path in files:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for key, meta in header.items():
            if key != "__metadata__" and meta["dtype"] in _DTYPES and len(meta["shape"]) == 2:
                a, b = meta["data_offsets"]
                out[key] = Tensor(path, 8 + n + a, b - a, _DTYPES[meta["dtype"]], tuple(meta["shape"]))
    return out


def _regions(shape: tuple[int, int], scheme: Scheme) -> dict[str, int]:
    """Bytes of each stored field of a weight of ``shape`` (``codes._encode``'s, with room for the most −0
    positions)."""
    out_f, in_f = shape
    n, g = out_f * in_f, in_f if scheme.group_size is None else min(scheme.group_size, in_f)
    blocks = out_f * -(-in_f // g)
    sizes = {"codes": (n + 1) // 2 if scheme.bits <= 4 else n, "scale": 4 * blocks}
    if not scheme.symmetric:
        sizes["zero"] = blocks
    elif scheme.bits > 4:
        sizes["negative_zeros"] = 4 * int(MAX_NEGATIVE_ZEROS * n)
    return sizes


def _shared(nbytes: int) -> torch.Tensor:
    """A uint8 tensor over a shared anonymous mapping: what a forked child writes there, the parent reads."""
    return torch.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=torch.uint8)


class Ahead:
    """A forked child quantizing a checkpoint's block weights, and what it has finished."""

    def __init__(self, tensors: dict[str, Tensor], schemes: list[Scheme], dtype: torch.dtype):
        self.tensors, self.schemes, self.dtype = tensors, schemes, dtype
        self.layout: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}  # (scheme, key) → field → (offset, bytes)
        sizes = dict.fromkeys((s.name for s in schemes), 0)
        for key, t in tensors.items():
            for s in schemes:
                fields = {}
                for field_, n in _regions(t.shape, s).items():
                    fields[field_] = (sizes[s.name], n)
                    sizes[s.name] += -(-n // ALIGN) * ALIGN
                self.layout[s.name, key] = fields
        self.buffers = {name: _shared(n) for name, n in sizes.items()}
        self.stop_flag = _shared(1)
        self.done: dict[str, dict] | None = None  # key → the child's record, once collected
        self.checked: dict[str, bool] = {}
        self.child_s = 0.0
        self.pid, self._read = None, None

    # ---- the child ---------------------------------------------------------------------------------------------
    def _view(self, scheme: str, key: str, field_: str, dtype: torch.dtype, count: int) -> torch.Tensor:
        offset, _ = self.layout[scheme, key][field_]
        return self.buffers[scheme][offset : offset + count * dtype.itemsize].view(dtype)

    def _encode(self, key: str, w: torch.Tensor) -> dict:
        record = {"key": key, "signal": signal_power(w), "schemes": {}}
        for s in self.schemes:
            pw, w_hat = codes.encode_dequantized(w, s)
            sqnr = sqnr_db(w, w_hat, record["signal"], overwrite=True)
            parts = {"codes": pw.codes, "scale": pw.scale, "zero": pw.zero, "negative_zeros": pw.negative_zeros}
            for field_, t in parts.items():
                if t is not None:
                    self._view(s.name, key, field_, t.dtype, t.numel()).copy_(t.reshape(-1))
            record["schemes"][s.name] = {"sqnr": sqnr, "codes_dtype": str(pw.codes.dtype),
                                         "negative_zeros": None if pw.negative_zeros is None else pw.negative_zeros.numel()}  # fmt: skip
        return record

    def _child(self, write_fd: int) -> None:
        torch.set_num_threads(1)  # the idle core; and no OpenMP team is used across the fork
        os.nice(19)  # only what this process leaves idle: its own threads come first
        fault = os.environ.get(FAULT_ENV, "")
        t0 = time.perf_counter()
        for key, t in self.tensors.items():
            if self.stop_flag[0]:
                break
            if fault == "fail":
                raise RuntimeError("fault injected by the test")
            if fault == "slow":
                time.sleep(0.05)
            raw = bytearray(t.nbytes)
            with open(t.file, "rb") as fh:
                fh.seek(t.start)
                fh.readinto(raw)
            w = torch.frombuffer(raw, dtype=t.dtype).view(t.shape).to(self.dtype).contiguous()
            try:
                record = self._encode(key, w)
            except ValueError:  # e.g. too large to store: this process meets it again, and says so
                continue
            _send(write_fd, record)
        _send(write_fd, {"key": None, "child_s": time.perf_counter() - t0})

    def fork(self) -> Ahead:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                os.close(read_fd)
                self._child(write_fd)
            except BaseException:  # noqa: BLE001  (the parent encodes whatever was not reported)
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self._read = pid, read_fd
        return self

    # ---- the parent --------------------------------------------------------------------------------------------
    def collect(self, stop: bool = True) -> None:
        """Ask the child to stop after its current weight (unless ``stop`` is False: let it finish), read what it
        finished, and reap it."""
        if self.done is not None:
            return
        if stop:
            self.stop_flag[0] = 1
        data = bytearray()
        while chunk := os.read(self._read, 1 << 16):
            data += chunk
        self.close(kill=False)  # the pipe is closed: the child is exiting
        self.done = {}
        pos = 0
        while pos + 8 <= len(data):
            (n,) = struct.unpack("<Q", data[pos : pos + 8])
            if pos + 8 + n > len(data):
                break
            record = pickle.loads(data[pos + 8 : pos + 8 + n])
            pos += 8 + n
            if record["key"] is None:
                self.child_s = record["child_s"]
            else:
                self.done[record["key"]] = record

    def close(self, kill: bool = True) -> None:
        """Reap the child (ended first with SIGKILL when ``kill``: this process gave up on it) and close the pipe."""
        if self.pid is not None:
            self.stop_flag[0] = 1  # a child stuck writing to a full pipe exits on the closed pipe
            try:
                if kill:
                    os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
            self.pid = None
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def release(self) -> None:
        """``close``, and drop this handle's buffers: the variants keep the shared memory they use, no more."""
        self.close()
        self.buffers, self.stop_flag = {}, None

    def _same_bits(self, key: str, w: torch.Tensor) -> bool:
        """Whether ``w`` is the file's tensor ``key`` cast to the model's dtype, bit for bit (checked once)."""
        if key not in self.checked:
            t = self.tensors[key]
            ok = w.device.type == "cpu" and w.dtype == self.dtype and tuple(w.shape) == t.shape and w.is_contiguous()
            if ok:
                with open(t.file, "rb") as fh:
                    mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                src = torch.frombuffer(mapped, dtype=t.dtype, count=t.nbytes // t.dtype.itemsize, offset=t.start)
                ok = torch.equal(w.view(_BITS[w.dtype]).reshape(-1), src.to(self.dtype).view(_BITS[w.dtype]))
                del src
                mapped.close()
            self.checked[key] = ok
        return self.checked[key]

    def take(self, name: str, scheme: Scheme, w: torch.Tensor) -> tuple[PackedWeight, float, float] | None:
        """(stored weight, SQNR, Σw²) of layer ``name`` under ``scheme`` as the child encoded it, or None."""
        key = f"{name}.weight"
        if (scheme.name, key) not in self.layout:
            return None
        self.collect()
        record = self.done.get(key)
        if record is None or scheme.name not in record["schemes"] or not self._same_bits(key, w):
            return None
        got = record["schemes"][scheme.name]
        out_f, in_f = self.tensors[key].shape
        n, blocks = out_f * in_f, _regions((out_f, in_f), scheme)["scale"] // 4
        codes_dtype = torch.int8 if got["codes_dtype"] == "torch.int8" else torch.uint8
        view = lambda field_, dtype, count: self._view(scheme.name, key, field_, dtype, count)  # noqa: E731
        negative = got["negative_zeros"]
        packed = PackedWeight(
            codes=view("codes", codes_dtype, (n + 1) // 2 if scheme.bits <= 4 else n),
            scale=view("scale", torch.float32, blocks).view(out_f, -1),
            zero=None if scheme.symmetric else view("zero", torch.uint8, blocks).view(out_f, -1),
            negative_zeros=None if negative is None else view("negative_zeros", torch.int32, negative),
            shape=(out_f, in_f), dtype=w.dtype, bits=scheme.bits, group_size=scheme.group_size, symmetric=scheme.symmetric,
        )  # fmt: skip
        return packed, got["sqnr"], record["signal"]


def _send(fd: int, record: dict) -> None:
    data = pickle.dumps(record)
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def start(folder: Path | None, schemes: list[Scheme], dtype: torch.dtype, exclude=()) -> Ahead | None:
    """Fork a child quantizing ``folder``'s block weights with ``schemes``, or None where it does not apply."""
    if folder is None or not schemes or not sys.platform.startswith("linux") or os.environ.get("INFOEVAL_AHEAD") == "0":
        return None
    try:
        tensors = {key: t for key, t in checkpoint_tensors(folder).items()
                   if key.endswith(".weight") and _BLOCK.search(key)
                   and not any(fnmatch.fnmatchcase(key[: -len(".weight")], g) for g in exclude)}  # fmt: skip
    except (OSError, ValueError, KeyError):
        return None
    return Ahead(tensors, schemes, dtype).fork() if tensors else None
