"""Errors with one-line messages and the exit code each kind maps to.

Usage errors (bad options, bad input files) exit 2, runtime failures exit 3, a failed gate exits 1.
"""

from __future__ import annotations

import contextlib
import contextvars

EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3


class InfoevalError(Exception):
    """Base class: the message is one line saying what was wrong and what is allowed."""

    exit_code = EXIT_RUNTIME


class UsageError(InfoevalError, ValueError):
    """An option or argument has a value that is not allowed."""

    exit_code = EXIT_USAGE


class DataError(InfoevalError, ValueError):
    """The text is missing, unreadable, not UTF-8 or too short."""

    exit_code = EXIT_USAGE


class SchemeError(UsageError):
    """A quantization scheme name that cannot be parsed or is impossible."""

    exit_code = EXIT_USAGE


class ModelLoadError(DataError):
    """The model cannot be found or is not a causal language model."""

    exit_code = EXIT_USAGE


class DeviceError(UsageError):
    """The requested device is not available."""

    exit_code = EXIT_USAGE


class RuntimeFailure(InfoevalError):
    """Something failed while running (out of memory, a model that produced NaN, ...)."""

    exit_code = EXIT_RUNTIME


class RankFailure(RuntimeFailure):
    """Under a launcher, a rank failed while evaluating; every rank raises this with the failing rank's reason."""


# ---- one message, two spellings: the CLI's flags (--max-tokens), the Python API's keywords (max_tokens) ------
_FLAGS = contextvars.ContextVar("infoeval_flag_spelling", default=None)  # None: Python; a dict: the command line


def spell(keyword: str) -> str:
    """A field's name as the front end in use spells it: on the command line (within ``flag_spelling``) its option,
    the running command's own where it declares one (``top_k`` → ``--topk``), else ``--max-tokens`` for
    ``max_tokens``; in Python the keyword itself."""
    flags = _FLAGS.get()
    if flags is None:
        return keyword
    return flags.get(keyword, "--" + keyword.replace("_", "-"))


@contextlib.contextmanager
def flag_spelling(own: dict[str, str] | None = None):
    """Within: errors name the command line's options, not the API's keywords (the command line calling the API);
    ``own``: keyword → option of the running command where not --<keyword with dashes>."""
    token = _FLAGS.set({**(_FLAGS.get() or {}), **(own or {})})
    try:
        yield
    finally:
        _FLAGS.reset(token)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1, thousands separated: "1 window", "1,024 tokens".

    >>> counted(1, "window"), counted(0, "model"), counted(1024, "token"), counted(2, "pass", "passes")
    ('1 window', '0 models', '1,024 tokens', '2 passes')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
