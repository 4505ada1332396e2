"""heap.release_freed_memory: glibc's malloc_trim gives back the freed holes between kept allocations (the
pattern of quantizing layer by layer), which plain frees do not."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from infoeval import heap

_HOLES = """
import sys, torch
from infoeval.heap import release_freed_memory
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
x = torch.empty(1 << 21)
del x  # 8 MB freed: glibc's mmap threshold rises, later temporaries come from the heap
kept, temps = [], []
for _ in range(200):
    temps.append(torch.ones(1 << 18))  # 1 MB temporary, touched
    kept.append(torch.ones(1 << 10))  # 4 KB kept after it: the temporaries become holes
temps.clear()
before = rss_mib()
released = release_freed_memory()
print(released, before - rss_mib())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_trim_returns_the_holes_left_by_freed_temporaries():
    out = subprocess.run([sys.executable, "-c", _HOLES], capture_output=True, text=True, check=True).stdout.split()
    released, freed_mib = out[0] == "True", float(out[1])
    assert released and freed_mib > 100  # most of the 200 MB of holes, which free() alone kept resident


def test_no_glibc_no_trim(monkeypatch):
    monkeypatch.setattr(heap, "_trim", None)
    assert heap.release_freed_memory() is False


_THRESHOLDS = """
import ctypes, sys, torch
from infoeval.heap import steady_heap
class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "steady":
    print(steady_heap(), steady_heap())
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
before = libc.mallinfo2().hblks
x = torch.ones(5 << 20)  # a 20 MB activation of one pass
mapped = libc.mallinfo2().hblks - before
block = libc.malloc(30 << 20)  # 30 MB at the heap's top (or mapped), freed again
ctypes.memset(block, 1, 30 << 20)
libc.free(block)
print(mapped, libc.mallinfo2().keepcost >> 20 >= 30)
"""


def _thresholds(mode: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", _THRESHOLDS, mode], capture_output=True, text=True, check=True
    ).stdout.split()


@pytest.mark.skipif(
    platform.system() != "Linux"
    or platform.libc_ver()[0] != "glibc"
    or tuple(map(int, platform.libc_ver()[1].split(".")[:2])) < (2, 33),
    reason="glibc's mallinfo2",
)
def test_a_steady_heap_serves_and_keeps_a_loops_activations():
    """By default glibc maps a fresh 20 MB block (above its initial 128 KB threshold) and unmaps it when freed,
    so the next pass faults its 5,120 pages in again; after steady_heap it comes from the heap, and 30 MB freed
    at the heap's top stay there (``keepcost``) for the next pass instead of going back to the OS."""
    assert _thresholds("default") == ["1", "False"]
    assert _thresholds("steady") == ["True", "True", "0", "True"]


def test_no_glibc_no_steady_heap(monkeypatch):
    monkeypatch.setattr(heap, "_mallopt", None)
    monkeypatch.setattr(heap, "_steady", False)
    assert heap.steady_heap() is False
