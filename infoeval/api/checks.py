"""Keyword types at the API's door: ``@checked`` refuses a value of the wrong type for a keyword (by the function's
annotations, and ``RUN_TYPES`` for the run keywords every scoring function takes) with one line naming the keyword
and what it takes, before anything loads; a wrong value of the right type is the settings' own check."""

from __future__ import annotations

import collections.abc
import functools
import inspect
import os
import types
import typing
from pathlib import Path

from infoeval.errors import UsageError

# the text, window and device keywords (api/scoring.run_settings), which reach the functions through **run
RUN_TYPES = {
    "text": str | Path | None,
    "dataset": str | None,
    "data_dir": str | Path | None,
    "max_tokens": int | str | None,
    "ctx": int | None,
    "stride": int | None,
    "protocol": str,
    "prefix": str,
    "documents": str | None,
    "document_field": str,
    "device": str,
    "dtype": str,
    "device_map": str | None,
}
_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "True or False",
    Path: "a path",
    type(None): "None",
    dict: "a dict",
}


def _fits(value, hint) -> bool:
    """Whether ``value`` is of the annotated type (unions, sequences of a type, paths; other classes by isinstance)."""
    origin = typing.get_origin(hint)
    if hint in (typing.Any, object):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, (str, os.PathLike))
    if origin in (collections.abc.Sequence, list, tuple):
        args = typing.get_args(hint)
        return isinstance(value, (list, tuple)) and (not args or all(_fits(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _describe(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(arg) for arg in typing.get_args(hint)))
    if typing.get_origin(hint) in (collections.abc.Sequence, list, tuple):
        args = typing.get_args(hint)
        return "a sequence" + (f" of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "")
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def checked(function):
    """``function`` with its keywords' types checked first (its annotations; ``RUN_TYPES`` for those in ``**run``)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        hints = typing.get_type_hints(function)
        for name, value in signature.bind_partial(*args, **kwargs).arguments.items():
            given = (
                value.items() if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD else [(name, value)]
            )
            for key, v in given:
                hint = hints.get(key) if key in signature.parameters else RUN_TYPES.get(key)
                if hint is not None and not _fits(v, hint):
                    raise UsageError(f"{key} {v!r} is not allowed; give {_describe(hint)}")
        return function(*args, **kwargs)

    return wrapper
