"""Make ``tests/data/se_windows.npz``: real windows for the standard errors' coverage test.

SmolLM2-135M on the first 32,768 tokens of WikiText-2 test (``../shared/data``), ctx 512 (64 windows), the
variants int4-g128 and int8-channel: each position's window and, per variant, its KL (float32), top-1 agreement
(uint8) and NLL minus the reference's (float32). ``tests/test_se_coverage.py`` draws 16 of these windows at random
(with replacement) as one run's positions and checks how often the 95 % intervals cover the pool's mean.

    python scripts/se_windows.py            # about 4 minutes on 2 CPU cores
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "se_windows.npz"
SETTINGS = dict(
    schemes=("int4-g128", "int8-channel"),
    dataset="wikitext-2",
    data_dir=str(ROOT.parent / "shared" / "data"),
    ctx=512,
    max_tokens=32768,
    device="cpu",
    dtype="float32",
    floor="off",
)


def arrays(window, ref_nll, variants: dict) -> dict[str, np.ndarray]:
    """The file's arrays from the run's columns (``variants``: name → its kl, top1 and nll columns)."""
    out = {"window": np.asarray(window, dtype=np.int32)}
    for name, v in variants.items():
        out[f"{name}/kl"] = np.asarray(v["kl"], dtype=np.float32)
        out[f"{name}/top1"] = np.asarray(v["top1"], dtype=np.uint8)
        out[f"{name}/dnll"] = (np.asarray(v["nll"], dtype=np.float64) - np.asarray(ref_nll, dtype=np.float64)).astype(
            np.float32
        )
    return out


def main() -> None:
    import infoeval

    cols = infoeval.compare("smollm2-135m", **SETTINGS).columns
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays(cols.reference["window"], cols.reference["nll"], cols.variants))
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
