"""Errors with one-line messages and the exit code each kind maps to.

Usage errors (bad options, bad input files) exit 2, runtime failures exit 3, a failed gate exits 1.
"""

from __future__ import annotations

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
