"""The infoeval command line, run in-process: ``run_cli(args)`` gives what a subprocess would (its exit code, stdout
and stderr), through ``infoeval.cli.main`` (argument parsing, the error boundary, the exit codes), without paying
again for importing torch and transformers. Tests of a command's messages and exit codes use it; each command keeps
one subprocess smoke test (tests/test_cli_smoke.py), the only proof that the installed entry point runs."""

from __future__ import annotations

import contextlib
import io
import os
import traceback
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Completed:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns, for a run in this process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_cli(
    args, cwd: Path | str | None = None, env: dict | None = None, debug: bool = False, threads: int | None = None
) -> Completed:
    """``infoeval ARGS`` in this process, in folder ``cwd``, with ``env`` as the whole environment where given (as
    ``subprocess.run``'s; restored afterwards; without ``env``, INFOEVAL_DEBUG unset unless ``debug``) and, with
    ``threads``, that many torch threads (as OMP_NUM_THREADS gives a new process). Settings read when a library is
    imported (such as HF_HUB_OFFLINE) keep this process's values; an error that goes up (INFOEVAL_DEBUG=1) prints
    its traceback on stderr and exits 1, as Python does."""
    import torch

    from infoeval.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here, saved, were = os.getcwd(), dict(os.environ), torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        if env is not None:
            os.environ.clear()
            os.environ.update({k: str(v) for k, v in env.items()})
        else:
            os.environ.pop("INFOEVAL_DEBUG", None)
        if debug:
            os.environ["INFOEVAL_DEBUG"] = "1"
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except Exception:  # INFOEVAL_DEBUG=1: the error goes up, and Python prints it and exits 1
                traceback.print_exc()
                code = 1
    finally:
        torch.set_num_threads(were)
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    return Completed(argv, code, out.getvalue(), err.getvalue())
