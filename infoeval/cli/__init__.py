"""The `infoeval` command line: the app, one module of commands per family (each adds its commands with
``register(app)``) and ``main``, the error boundary. Each command parses options, calls the library and renders."""

from __future__ import annotations

import logging
import os
import sys

import typer

from infoeval import distributed
from infoeval.cli import codec, compare, gate, klfit, mutual_info, report, speculative
from infoeval.cli import mix as mix_cli
from infoeval.cli import sensitivity as sensitivity_cli
from infoeval.errors import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    InfoevalError,
    RankFailure,
    UsageError,
    flag_spelling,
)
from infoeval.quant.methods import LIBRARY_LOGGERS

app = typer.Typer(
    name="infoeval",
    help="Measure, in bits and nats, how much a language model changes when you quantize, distill or draft it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _family in (compare, gate, speculative, mutual_info, klfit, codec):
    _family.register(app)
sensitivity_cli.register(app)
mix_cli.register(app)
report.register(app)


# Click's exceptions as this Typer raises them (Typer ≥ 0.29 carries its own copy of Click): what the option parser
# refuses, and a bare `infoeval` (NoArgsIsHelpError, Click ≥ 8.2).
_CLICK = sys.modules[typer.BadParameter.__module__]
_PARSER_ERROR = _CLICK.UsageError
_NO_ARGS = getattr(_CLICK, "NoArgsIsHelpError", ())

PARALLEL_COMMANDS = ("quantize-compare", "compress-bits", "reference", "gate", "spec-accept", "distill", "mutual-info")


def _command(argv: list[str]) -> str | None:
    """The command word of ``argv``: its first word that is not an option (None when there is none)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _check_launch(argv: list[str]) -> None:
    """Under a launcher (WORLD_SIZE > 1) only the window-based commands run, one shard per rank."""
    command = _command(argv)
    if distributed.launched() and command is not None and command not in PARALLEL_COMMANDS:
        raise UsageError(
            f"'{command}' runs as one process; launch it without torchrun/accelerate (WORLD_SIZE="
            f"{os.environ['WORLD_SIZE']}); data-parallel commands: {', '.join(PARALLEL_COMMANDS)}"
        )


FLOOR_COMMANDS = ("quantize-compare", "gate")  # the commands whose runs have variants, and so a noise floor


def _check_floor(argv: list[str]) -> None:
    """--floor on a command without variants: one line, not Typer's unknown-option box."""
    command = _command(argv)
    if (
        command is not None
        and command not in FLOOR_COMMANDS
        and any(a == "--floor" or a.startswith("--floor=") for a in argv)
    ):
        raise UsageError(f"--floor applies to runs with variants ({', '.join(FLOOR_COMMANDS)}); '{command}' has none")


def _say(e: BaseException, line: str) -> None:
    """Print the one error line; under a launcher rank 0 speaks for everyone, the other ranks only of their own
    failures (a usage error or a failed rank is the same on every rank)."""
    if distributed.is_main() or not (isinstance(e, RankFailure) or getattr(e, "exit_code", None) == EXIT_USAGE):
        prefix = "" if distributed.is_main() else f"[rank {os.environ.get('RANK', '?')}] "
        print(prefix + line, file=sys.stderr)


def app_commands() -> set[str]:
    """The names of infoeval's commands."""
    return {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}


def parser_error(e: Exception, argv: list[str]) -> str:
    """The option parser's refusal in one line, and where the allowed options are listed."""
    words = " ".join(e.format_message().split())
    param = getattr(e, "param", None)
    if e.ctx is not None and param is not None and param.name:
        source = e.ctx.get_parameter_source(param.name)
        if getattr(source, "name", "") == "DEFAULT_MAP":  # the value came from --config, not the command line
            words += f" (from the --config file's key '{param.name}')"
    command = _command(argv)
    named = [command] if command in app_commands() else []
    path = e.ctx.command_path if e.ctx is not None else " ".join(["infoeval", *named])
    return f"{words} (`{path} --help` lists what is allowed)"


def main(argv: list | None = None) -> int:
    """Entry point: run the command ``argv`` (default: the process's arguments) and return its exit code; known
    errors become one line on stderr and their code; tracebacks only with INFOEVAL_DEBUG=1. Tests call it
    in-process (``main(["gate", ...])``), the console script and ``python -m infoeval`` exit with what it returns."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    debug = bool(os.environ.get("INFOEVAL_DEBUG"))
    if not debug:  # an optional quantization library's import-time chatter (transformers imports torchao when present)
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        _check_launch(argv)
        _check_floor(argv)
        with flag_spelling():  # the API's errors name the options as typed (--max-tokens), not as keywords
            code = app(args=argv, prog_name="infoeval", standalone_mode=False)
        code = code if isinstance(code, int) else 0  # Typer's own ending: 0, or a failed gate (typer.Exit(1))
        if code == 130:  # Ctrl-C inside the command (Typer ≥ 0.29 ends it with Exit(130))
            print("infoeval: interrupted", file=sys.stderr)
        return code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    except _NO_ARGS as e:  # bare `infoeval`: the help on stdout, as `--help` prints it, and nothing on stderr
        text = e.ctx.get_help()  # Typer's rich help prints itself and returns ""; Click's returns the text
        if text:
            print(text)
        return EXIT_USAGE
    except _PARSER_ERROR as e:  # what the option parser refuses: one line, not Typer's box
        _say(e, f"infoeval: error: {parser_error(e, argv)}")
        return EXIT_USAGE
    except typer.Abort:  # Ctrl-C (older Typer) or the end of input at a prompt
        print("infoeval: interrupted", file=sys.stderr)
        return 130
    except InfoevalError as e:
        if debug:
            raise
        _say(e, f"infoeval: error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        print("infoeval: interrupted", file=sys.stderr)
        return 130
    except MemoryError as e:
        if debug:
            raise
        _say(e, "infoeval: error: out of memory; use a smaller --ctx or model, or --device cuda")
        return EXIT_RUNTIME
    except Exception as e:
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _say(e, f"infoeval: error: {type(e).__name__}: {msg} (set INFOEVAL_DEBUG=1 for the traceback)")
        return EXIT_RUNTIME
    finally:
        distributed.close()
    return 0
