"""The formatter and the linter own the layout: `ruff format --check` and `ruff check` pass on the repository with
the configuration in pyproject.toml (line length 120), and no line of Python is longer than that."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    return found


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_ruff_passes(command):
    proc = subprocess.run([_ruff(), *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_no_line_over_120_characters():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout: the package's own files
        tracked = [str(p.relative_to(ROOT)) for p in (ROOT / "infoeval").rglob("*.py")]
    long = [
        f"{name}:{i}"
        for name in tracked
        for i, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > 120
    ]
    assert not long, long[:20]
