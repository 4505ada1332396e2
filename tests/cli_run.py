"""The infoeval command line, run in-process: ``run_cli(args)`` gives what a subprocess would (its exit code, stdout
and stderr), through ``infoeval.cli.main`` (argument parsing, the error boundary, the exit codes), without paying
again for importing torch and transformers. Tests of a command's messages and exit codes use it; each command keeps
one subprocess smoke test (tests/test_cli_smoke.py), the only proof that the installed entry point runs."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Completed:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns, for a run in this process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_cli(args, cwd: Path | str | None = None, env: dict | None = None, debug: bool = False) -> Completed:
    """``infoeval ARGS`` in this process, in folder ``cwd``, with ``env`` set on top of this process's environment
    (restored afterwards; INFOEVAL_DEBUG unset unless ``debug``)."""
    from infoeval.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here, saved = os.getcwd(), dict(os.environ)
    try:
        os.environ.pop("INFOEVAL_DEBUG", None)
        os.environ.update({**(env or {}), **({"INFOEVAL_DEBUG": "1"} if debug else {})})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    return Completed(argv, code, out.getvalue(), err.getvalue())
