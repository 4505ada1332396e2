"""Byte ranges of a file read into page-aligned host memory ("arenas"), the tensors in them views, not copies.

For a model larger than the memory available (``past_the_cache``), and where the file system allows it, the read
bypasses the page cache (``O_DIRECT``): the disk writes straight into the arena, so the pass costs no copy out of
the cache and no reclaim of it (on two cores the page cache's copy and reclaim took ~8 % of the compute beside
it). A smaller model is read through the cache, which keeps it for the next pass; so is any file on a file system
without direct reads (tmpfs, some network file systems). ``Arenas`` keeps the arenas a pass read into and hands
one back when no tensor views it any more: the next layer's bytes go into memory already touched (no page faults,
no new memory).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading

import torch

from infoeval.errors import ModelLoadError

ALIGN = 4096  # O_DIRECT's alignment of offsets, lengths and memory (a page; every common block size divides it)
GAP = 1 << 20  # tensors closer than this in a file are read as one range (the bytes between them read and unused)


def host_available() -> int:
    """Bytes of host memory available now (MemAvailable: free memory and the page cache the kernel can reclaim)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def past_the_cache(nbytes: int) -> bool:
    """Whether files of ``nbytes`` are best read past the page cache: when they exceed the memory available, the
    cache cannot keep them for the next pass, and reading through it only costs its copies and their reclaim;
    smaller ones stay cached, and a second pass reads them from memory."""
    return nbytes > host_available()


def _use_count(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def new_arena(nbytes: int) -> torch.Tensor:
    """A page-aligned uint8 tensor of at least ``nbytes`` (anonymous memory, given back when nothing holds it)."""
    size = -(-max(nbytes, 1) // ALIGN) * ALIGN
    return torch.frombuffer(mmap.mmap(-1, size), dtype=torch.uint8)


class Arenas:
    """The arenas a pass has read into, each handed out again once no tensor views it. Thread-safe (the reader thread
    takes; the pass lets go of the views)."""

    def __init__(self):
        self._all: list[torch.Tensor] = []
        self._lock = threading.Lock()
        self.made = 0  # arenas made (new memory), for the tests

    def take(self, nbytes: int) -> torch.Tensor:
        with self._lock:
            free = [a for a in self._all if a.numel() >= nbytes and _use_count(a) <= 2]  # the list's, and the asking
            if free:
                return min(free, key=torch.Tensor.numel)
            arena = new_arena(nbytes + ALIGN)  # a range's alignment may differ by a page from the one before
            self._all.append(arena)
            self.made += 1
            return arena

    def clear(self) -> None:
        with self._lock:
            self._all.clear()


def _open(path, direct: bool) -> tuple[int, bool]:
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT), True
        except OSError:  # a file system without direct reads
            pass
    return os.open(path, os.O_RDONLY), False


def read_range(path, start: int, end: int, arena: torch.Tensor | None = None, direct: bool = True) -> torch.Tensor:
    """Bytes ``[start, end)`` of ``path`` as a uint8 view of ``arena`` (new where None), read from the page-aligned
    offset below ``start`` (so that the view begins ``start % ALIGN`` bytes in)."""
    lo, hi = start - start % ALIGN, -(-end // ALIGN) * ALIGN
    arena = new_arena(hi - lo) if arena is None else arena
    if arena.numel() < hi - lo:
        raise ValueError(f"an arena of {arena.numel()} bytes cannot hold {hi - lo}")
    view, done, need = memoryview(arena.numpy()), 0, end - lo
    fd, direct = _open(path, direct)
    try:
        while done < need:  # one read may return less (a read is capped near 2 GiB)
            try:
                got = os.preadv(fd, [view[done : hi - lo]], lo + done)
            except OSError as e:
                if not direct or e.errno != errno.EINVAL:
                    raise
                os.close(fd)  # a direct read it refused (an unaligned remainder): the rest through the cache
                fd, direct = _open(path, False)
                continue
            if not got:
                raise ModelLoadError(f"'{path}' ends inside a tensor (truncated?)")
            done += got
    finally:
        os.close(fd)
    return arena[start - lo : end - lo]


def runs(spans: list[tuple[int, int]], gap: int = GAP) -> list[tuple[int, int]]:
    """``spans`` ([start, end) byte ranges of one file) merged into the ranges to read: sorted, and joined where the
    next starts within ``gap`` bytes of the one before's end."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s - out[-1][1] <= gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]
