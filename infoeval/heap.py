"""Give freed heap memory back to the operating system (glibc's ``malloc_trim``), where long-lived and short-lived
allocations interleave.

Quantizing a model layer by layer keeps each layer's small integer codes and scales while the layer's float32
temporaries (a few times the layer's size) are freed. glibc serves both from one heap, so the freed temporaries
become holes between kept codes that it neither reuses fully nor returns: measured on SmolLM2-135M, three
schemes, the resident memory after quantizing varied from 1.0 to 2.2 GB from run to run for the same work (more
when other processes competed for the cores). ``malloc_trim(0)`` returns the free pages inside the heap
(``madvise``), so trimming every ``TRIM_EVERY`` quantized layers keeps it at ~1.06 GB, for ~5 % of the
quantization time.

The opposite holds in an evaluation loop, where every forward pass allocates and frees the same activations:
glibc's dynamic thresholds then map some of them afresh (``mmap``) or return the heap's top to the OS after each
pass, and the next pass faults the pages in again (measured: 2.3 million page faults, ~10 % of the loop, for
quantize-compare's shared batches of 4 windows on 4,096 tokens). ``steady_heap`` fixes the thresholds for the
rest of the process: blocks up to 32 MiB (glibc's own ceiling for its dynamic threshold) come from the heap, and
up to 64 MiB of free memory stay at its top (60,000–75,000 faults for the same loop). Larger blocks, such as a
window's logits, are still mapped and unmapped, and ``release_freed_memory`` still returns free pages on request:
the engine asks once per shared batch, after every role's decoder blocks and before the heads' logits (the top
of the heap otherwise kept up to 64 MiB of the blocks' freed activations resident at the run's peak; measured on
SmolLM2 at 1,024 tokens, the peak then varied by ~40 MiB from run to run, and by ~4 MiB after; the next batch
faults back ≤ 64 MiB, ~16,000 pages, against ~10 s of forward passes).
Linux with glibc only; elsewhere nothing happens.
"""

from __future__ import annotations

import ctypes
import platform

from infoeval import switches

TRIM_EVERY = 32  # quantized layers between trims
MMAP_THRESHOLD = 32 << 20  # bytes: smaller blocks come from the heap (glibc's maximum dynamic threshold)
TRIM_THRESHOLD = 64 << 20  # bytes of free memory the heap's top keeps
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)

_trim = _mallopt = None
if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
    try:
        _libc = ctypes.CDLL(None)
        _trim, _mallopt = _libc.malloc_trim, _libc.mallopt
    except (OSError, AttributeError):
        _trim = _mallopt = None
_steady = False


def release_freed_memory() -> bool:
    """Return the heap's free pages to the OS; True when glibc released something."""
    return bool(_trim(0)) if _trim is not None and not switches.off("heap") else False


def steady_heap() -> bool:
    """Fix glibc's mmap and trim thresholds for the rest of the process (see the module docstring); True once set."""
    global _steady
    if not _steady and _mallopt is not None and not switches.off("heap"):
        _steady = bool(_mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    return _steady
