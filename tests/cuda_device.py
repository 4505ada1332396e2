"""What the ``cuda`` tests run on (``tests/test_cuda*.py``; ``scripts/gpu_check.sh`` runs them on a GPU machine).

``GPU`` is ``cuda`` unless ``INFOEVAL_TEST_GPU`` says otherwise; without a CUDA device the tests skip with one
reason. ``INFOEVAL_TEST_GPU=cpu python -m pytest -m cuda`` is their dry run on a machine without one: every
"GPU" side then runs on the CPU, so each comparison is the CPU against itself, but every call, file and assertion
of the tests runs (what a GPU machine would otherwise be the first to find wrong).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

GPU = os.environ.get("INFOEVAL_TEST_GPU", "cuda")
DRY_RUN = not GPU.startswith("cuda")
HAS_GPU = DRY_RUN or torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA device (INFOEVAL_TEST_GPU=cpu: their dry run on the CPU)"
)
ON_GPU = [pytest.mark.cuda, needs_gpu]  # a module's pytestmark


def on_gpu(test):
    """Mark ``test`` a ``cuda`` test, skipped without a GPU."""
    return pytest.mark.cuda(needs_gpu(test))


def gpu_count() -> int:
    """The GPUs present (a dry run counts the CPU as one)."""
    return 1 if DRY_RUN else torch.cuda.device_count()


def numbers(data) -> object:
    """A result's JSON without what differs between two runs of the same settings (when, how long, on what device)."""
    skip = ("timings", "seconds", "argv", "created", "provenance", "throughput", "speed")
    if isinstance(data, dict):
        return {k: numbers(v) for k, v in data.items() if k not in skip}
    return [numbers(v) for v in data] if isinstance(data, list) else data


def close(a, b, rtol: float, atol: float, path: str = "") -> list[str]:
    """Where two JSON-like results differ: numbers beyond ``atol + rtol·|b|``, anything else unequal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in close(a[k], b[k], rtol, atol, f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} and {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in close(x, y, rtol, atol, f"{path}[{i}]")]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        ok = (a != a and b != b) or abs(a - b) <= atol + rtol * abs(b)  # NaN == NaN here
        return [] if ok else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {json.dumps(a)[:80]} vs {json.dumps(b)[:80]}"]
