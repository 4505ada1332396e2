"""Errors with one-line messages and the exit code each kind maps to.

Usage errors (bad options, bad input files) exit 2, runtime failures exit 3, a failed gate exits 1.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re

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
_FLAGS = contextvars.ContextVar("infoeval_flag_spelling", default=False)
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


_OWN_FLAGS: dict[str, str] = {}  # keyword → its option where that is not --<keyword with dashes> (top_k → --topk)


def register_flag(keyword: str, flag: str) -> None:
    """Say that ``keyword``'s option is spelled ``flag`` on the command line (``fields.entries`` does, per field)."""
    _OWN_FLAGS[keyword] = flag


def spell(keyword: str) -> str:
    """A field's name as the front end in use spells it: ``--max-tokens`` on the command line (within
    ``flag_spelling``), ``max_tokens`` in Python."""
    if not _FLAGS.get():
        return keyword
    return _OWN_FLAGS.get(keyword, "--" + keyword.replace("_", "-"))


def keyword_spelling(message: str) -> str:
    """A message written with the CLI's option names, in the Python API's keyword names (--max-tokens → max_tokens)."""
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), message)


@contextlib.contextmanager
def flag_spelling():
    """Within: errors raised through the API keep the CLI's option names (the command line calling the API)."""
    token = _FLAGS.set(True)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def keyword_errors(function):
    """A public API function whose errors name its keywords, not the command line's flags (outside
    ``flag_spelling``)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except InfoevalError as e:
            if not _FLAGS.get() and e.args and isinstance(e.args[0], str):
                e.args = (keyword_spelling(e.args[0]), *e.args[1:])
            raise

    return wrapper
