"""How a command gains options it does not declare itself: one keyword-only parameter (``option``), a group of
them folded into one argument of the command (``extend``), and options declared from an API function's keywords
(``api_options``, with ``typer_type``)."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from typing import Annotated, Optional

import typer


def option(name: str, annotation, default) -> inspect.Parameter:
    """One keyword-only option of a command's signature (what the option decorators add)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def extend(command, argument: str, extra: list[inspect.Parameter], build, place: str = "last"):
    """``command`` with the options ``extra`` added to its own, in its --help and --config like its own, which reach
    it as one argument named ``argument``: ``build(values)`` of every option's value. ``place``: where they stand in
    --help, "last" (after its own), "first" or "here" (where the command declares ``argument``). An option the command
    declares itself (its own default or help) stays its own and is in ``values`` as well. Typer passes every option
    by name, so all are keyword-only."""
    hints = typing.get_type_hints(command, include_extras=True)
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(command).parameters.values()
    ]
    declared = {p.name for p in own} - {argument}

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, **{argument: build(kwargs)}, **{k: v for k, v in kwargs.items() if k in declared})

    added = [p for p in extra if p.name not in declared]
    at = {"first": 0, "last": len(own)}.get(place) if place != "here" else [p.name for p in own].index(argument)
    own = [p for p in own if p.name != argument]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[:at] + added + own[at:]]
    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__
    return wrapper


def typer_type(hint):
    """An API keyword's type as an option's: a union holding str as str (a list keyword is comma-separated text),
    ``X | None`` as ``Optional[X]``."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    kinds = [a for a in args if a is not type(None)]
    kind = str if str in kinds else kinds[0] if len(kinds) == 1 else hint
    return Optional[kind] if type(None) in args else kind  # noqa: UP045  (the typing form Typer reads)


def api_options(function, argument: str, helps: dict[str, str]):
    """Give a command an option per keyword of the API's ``function`` named in ``helps`` (name → help text), declared
    once here: its type and default are the keyword's own (a list as comma-separated text), so the command line's
    defaults cannot drift from the API's; they reach the command as one ``argument``, the dict of those keywords."""
    from infoeval.api.scoring import comma_list

    signature, hints = inspect.signature(function), typing.get_type_hints(function)
    defaults = {n: signature.parameters[n].default for n in helps}
    params = [
        option(
            n,
            Annotated[typer_type(hints[n]), typer.Option(help=helps[n], show_default=d is not None)],
            comma_list(d) if isinstance(d, (list, tuple)) else d,
        )
        for n, d in defaults.items()
    ]
    return lambda command: extend(command, argument, params, lambda values: {n: values[n] for n in helps}, place="here")
