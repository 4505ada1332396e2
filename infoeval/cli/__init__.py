"""The `infoeval` command line: the app, one module of commands per family (each adds its commands with
``register(app)``) and ``main``, the error boundary. Each command parses options, calls the library and renders."""

from __future__ import annotations

import os
import sys

import typer

from infoeval.cli import compare, gate, klfit, mutual_info, speculative
from infoeval.errors import EXIT_RUNTIME, InfoevalError

app = typer.Typer(
    name="infoeval",
    help="Measure, in bits and nats, how much a language model changes when you quantize, distill or draft it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _family in (compare, gate, speculative, mutual_info, klfit):
    _family.register(app)


def main() -> None:
    """Entry point: known errors become one line on stderr and an exit code; tracebacks only with INFOEVAL_DEBUG=1."""
    debug = bool(os.environ.get("INFOEVAL_DEBUG"))
    try:
        app()
    except InfoevalError as e:
        if debug:
            raise
        print(f"infoeval: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("infoeval: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        if debug:
            raise
        print("infoeval: error: out of memory; use a smaller --ctx or model, or --device cuda", file=sys.stderr)
        sys.exit(EXIT_RUNTIME)
    except Exception as e:  # noqa: BLE001 - the single error boundary
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"infoeval: error: {type(e).__name__}: {msg} (set INFOEVAL_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(EXIT_RUNTIME)

