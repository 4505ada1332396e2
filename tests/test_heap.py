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
