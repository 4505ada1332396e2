"""Quantizing ahead: a forked child encodes a local checkpoint's block weights, read from its safetensors files,
while this process imports transformers and loads the model.

Until the model exists this process runs single-threaded Python (transformers' model code imports in ~1.8 s)
and a core stays idle. A thread cannot use it (the import holds the GIL: a quantizing thread got ~20 % of a
core); a forked process can: on SmolLM2-135M it encodes the three default schemes in ~1.7 s there, against
~1.0 s on both cores once the model is loaded. It runs at nice 19: only on what this process leaves idle.

  ``start``: the safetensors headers give each tensor's shape and dtype. The candidates are the 2-D weights of
  numbered blocks (``….<i>.….weight``) that no exclude glob names; each (scheme, candidate) gets fixed regions
  (codes, scales, zero points, room for the most −0 positions) of one shared anonymous mapping per scheme.
  The child, on one thread, reads each candidate, casts it to the model's dtype, encodes it with every scheme
  into its regions by this process's own ``apply.encode_with_sqnr``, and reports it down a pipe; asked to stop,
  it stops between schemes (a half-done candidate reports what it finished). It dies with this process.
  ``take`` (per quantized layer, after loading): the child's encoding of ``<layer>.weight``, used only when the
  model's weight has the very bits of the file's tensor cast to its dtype (checked once per layer against the
  memory-mapped file, the one the child read: same inode, size and mtime); other layers are encoded here. The
  first ``take`` stops the child, so the layers it has not reached are encoded on every thread. Encodings are
  a pure function of the weight's bits and the SQNR sums do not depend on the thread count
  (``primitives.sum_of_squares``): a variant is bit for bit the one this process makes alone. ``release`` gives
  the pages of the regions no variant took back to the OS.

Used only on Linux, on a CPU, with no device map, outside a launcher, for local safetensors checkpoints;
``INFOEVAL_OFF=ahead`` turns it off (``infoeval/switches.py``).
"""

from __future__ import annotations

import ctypes
import fcntl
import fnmatch
import mmap
import os
import pickle
import re
import select
import signal
import struct
import sys
import time
from pathlib import Path

import torch

from infoeval import switches
from infoeval.models.files import SafetensorsTensor, checkpoint_tensors
from infoeval.quant.apply import encode_with_sqnr
from infoeval.quant.codes import PackedWeight
from infoeval.quant.primitives import signal_power
from infoeval.quant.schemes import Scheme
from infoeval.quant.shared_layout import SharedLayout, mapping, read, write

_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
_BLOCK = re.compile(r"\.\d+\.")
FAULT_ENV = "INFOEVAL_TEST_AHEAD_FAULT"  # tests only: "fail" makes the child fail, "slow" slows it down
STOP_WAIT_S = 2.0  # seconds the parent waits for a stopped child's last report before killing it
PIPE_BYTES = 1 << 20  # the pipe's capacity (~4,000 reports), so that the child never waits on a full pipe


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this (child) process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Ahead:
    """A forked child quantizing a checkpoint's block weights, and what it has finished."""

    def __init__(self, tensors: dict[str, SafetensorsTensor], schemes: list[Scheme], dtype: torch.dtype):
        self.tensors, self.schemes, self.dtype = tensors, schemes, dtype
        self.shared = SharedLayout({key: t.shape for key, t in tensors.items()}, schemes)
        self.stop_flag = mapping(1)[1]
        self.files = {f: _identity(f) for f in {t.file for t in tensors.values()}}  # the files as the child reads them
        self.done: dict[str, dict] | None = None  # key → the child's record, once collected
        self.checked: dict[str, bool] = {}
        self.taken: set[tuple[str, str]] = set()
        self.child_s = 0.0
        self.pid, self._read = None, None

    # ---- the child ---------------------------------------------------------------------------------------------
    def _encode(self, key: str, w: torch.Tensor) -> dict:
        record = {"key": key, "signal": signal_power(w), "schemes": {}}
        for s in self.schemes:
            if self.stop_flag[0]:
                break
            pw, sqnr = encode_with_sqnr(w, s, record["signal"])
            record["schemes"][s.name] = {"sqnr": sqnr, **write(self.shared.view(s.name, key), pw)}
        return record

    def _child(self, write_fd: int) -> None:
        _die_with_parent()
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
        try:
            fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except OSError:
            pass
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
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
    def _read_all(self, stop: bool) -> bytearray:
        """The child's reports until it closes the pipe; once asked to stop, at most ``STOP_WAIT_S`` more."""
        data, deadline = bytearray(), time.monotonic() + STOP_WAIT_S if stop else None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._read], [], [], timeout)[0]:
                return data  # a stopped child that did not finish its scheme in time: killed by close
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                return data
            data += chunk

    def collect(self, stop: bool = True) -> None:
        """Ask the child to stop after its current scheme (unless ``stop`` is False: let it finish), read what it
        finished, and reap it."""
        if self.done is not None:
            return
        if stop:
            self.stop_flag[0] = 1
        data = self._read_all(stop)
        self.close()
        self.done, pos = {}, 0
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

    def close(self) -> None:
        """End and reap the child (SIGKILL: a child that has finished is exiting anyway) and close the pipe."""
        if self.pid is not None:
            self.stop_flag[0] = 1
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
            self.pid = None
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def release(self) -> None:
        """``close``; give the pages of the regions no variant took back to the OS (the child may have written
        them), and drop this handle's buffers: the variants keep the shared memory they use, no more."""
        self.close()
        self.shared.release(self.taken)

    def _same_bits(self, key: str, w: torch.Tensor) -> bool:
        """Whether ``w`` is the file's tensor ``key`` cast to the model's dtype, bit for bit (checked once), in the
        file the child read (unchanged since)."""
        if key not in self.checked:
            t = self.tensors[key]
            ok = w.device.type == "cpu" and w.dtype == self.dtype and tuple(w.shape) == t.shape and w.is_contiguous()
            try:
                if ok and _identity(t.file) == self.files[t.file]:
                    with open(t.file, "rb") as fh:
                        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                    src = torch.frombuffer(mapped, dtype=t.dtype, count=t.nbytes // t.dtype.itemsize, offset=t.start)
                    bits = _BITS[w.dtype]
                    ok = torch.equal(w.view(bits).reshape(-1), src.to(self.dtype).view(bits))
                    del src
                    mapped.close()
                else:
                    ok = False
            except (OSError, ValueError, BufferError):
                ok = False
            self.checked[key] = ok
        return self.checked[key]

    def take(self, name: str, scheme: Scheme, w: torch.Tensor) -> tuple[PackedWeight, float, float] | None:
        """(stored weight, SQNR, Σw²) of layer ``name`` under ``scheme`` as the child encoded it, or None."""
        key = f"{name}.weight"
        if (scheme.name, key) not in self.shared.layout:
            return None
        self.collect()
        record = self.done.get(key)
        if record is None or scheme.name not in record["schemes"] or not self._same_bits(key, w):
            return None
        got = record["schemes"][scheme.name]
        packed = read(self.shared.view(scheme.name, key), self.tensors[key].shape, scheme, w.dtype, got)
        self.taken.add((scheme.name, key))
        return packed, got["sqnr"], record["signal"]


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _send(fd: int, record: dict) -> None:
    data = pickle.dumps(record)
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def start(folder: Path | None, schemes: list[Scheme], dtype: torch.dtype, exclude=()) -> Ahead | None:
    """Fork a child quantizing ``folder``'s block weights with ``schemes``' integer ones (a 16-bit cast needs no
    child), or None where it does not apply."""
    schemes = [s for s in schemes if not s.fmt]
    if folder is None or not schemes or not sys.platform.startswith("linux") or switches.off("ahead"):
        return None
    try:
        tensors = {key: t for key, t in checkpoint_tensors(folder).items()
                   if key.endswith(".weight") and _BLOCK.search(key)
                   and not any(fnmatch.fnmatchcase(key[: -len(".weight")], g) for g in exclude)}  # fmt: skip
        return Ahead(tensors, schemes, dtype).fork() if tensors else None
    except (OSError, ValueError, KeyError):  # an unreadable header, no memory to map, no fork: encode here
        return None
