"""Switches that turn one performance mechanism off, so that ``benchmarks/mechanisms.py`` measures what each one
saves in whole processes of the commands it serves: ``INFOEVAL_OFF=heap,blocks`` (comma-separated names of
``MECHANISMS``). The numbers a command prints are the same with any of them off (tests/test_switches.py); only
its time and memory change.
"""

from __future__ import annotations

import os

ENV = "INFOEVAL_OFF"
MECHANISMS = {
    "heap": "glibc's heap thresholds fixed for the window loop and freed pages returned while quantizing (heap.py)",
    "shared_batches": "the decoder blocks of up to 4 windows in one pass per model (engine/batches.py, plan_shared)",
    "blocks": "sensitivity's units run from their first block's cached input (engine/blocks.py)",
}


def off(name: str) -> bool:
    """Whether mechanism ``name`` is switched off in this process (``INFOEVAL_OFF``)."""
    if name not in MECHANISMS:
        raise KeyError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    return name in {x.strip() for x in os.environ.get(ENV, "").split(",")}
