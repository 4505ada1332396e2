"""A command made from a request class (``input.fields``): one option per keyword, its name, type, default, help
and panel read from the field that declares it; the positional MODEL; --config. The command builds the request
from what was typed and the config file (the defaults stay the request's own) and hands it, with the output
options, to the function that runs it."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer

from infoeval.errors import UsageError, flag_spelling
from infoeval.input.fields import Entry, build, config_values, entries, own_flags
from infoeval.output.destinations import output_keywords

# --help's panels, in this order (a panel not named here comes last)
PANELS = (
    "Model",
    "Coding",
    "Variants",
    "Units",
    "Mix",
    "Calibration",
    "Memory",
    "Text",
    "Windows",
    "Precision",
    "Output",
)
POSITIONAL = "positional"  # the parameter holding the positional MODEL (TARGET, CANDIDATE, ...)
TYPED = ("COMMANDLINE", "ENVIRONMENT", "DEFAULT_MAP")  # where a value counts as given: typed, or from --config


def typer_type(hint):
    """An API keyword's type as an option's: a union holding str as str (a list keyword is comma-separated text),
    ``X | None`` as ``Optional[X]``."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    kinds = [a for a in args if a is not type(None)]
    kind = str if str in kinds else kinds[0] if len(kinds) == 1 else hint
    return Optional[kind] if type(None) in args else kind  # noqa: UP045  (the typing form Typer reads)


def _simple(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, Path))


def parameter(entry: Entry, help: str | None = None) -> inspect.Parameter:
    """The option of one keyword, as a keyword-only parameter Typer reads (``help``: the command's own words)."""
    opt, default = entry.opt, entry.default
    kind = opt.cli or typer_type(entry.hint)
    # the parameter's default is only shown (a value not typed is never read: the request keeps its own default)
    shown = opt.default_text if opt.default_text else default if _simple(default) else None
    if shown is None and typing.get_origin(kind) not in (typing.Union, types.UnionType):
        kind = Optional[kind]  # noqa: UP045
    show = opt.default_text != "" and shown not in (None, "")
    if opt.argument:
        info = typer.Argument(metavar=opt.positional, help=help or opt.text(), show_default=False)
    else:
        least = getattr(opt.parse, "least", None)
        metavar = opt.metavar or (f"INTEGER (≥ {least})" if least is not None else None)
        info = typer.Option(
            *opt.flags, help=help or opt.text(), show_default=show, rich_help_panel=entry.panel, metavar=metavar
        )
    if opt.required:
        shown = ...  # Typer's mark of a required parameter
    return inspect.Parameter(
        entry.keyword, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, info], default=shown
    )


def _panel(entry: Entry) -> int:
    return PANELS.index(entry.panel) if entry.panel in PANELS else len(PANELS)


def _config_option(known: dict[str, Entry]) -> inspect.Parameter:
    """--config FILE.toml: its keys (the options' names, '-' or '_') become this command's defaults, read before the
    other options (options typed on the command line win); a list for a comma-separated option is joined."""

    def load(context: typer.Context, param, value: Path | None) -> Path | None:
        if value is None:
            return value
        from infoeval.input.settings import read_toml

        values = config_values(value, context.info_name, known, read_toml)
        for key, v in values.items():
            kind = known[key].opt.cli or typer_type(known[key].hint)
            if isinstance(v, list) and typing.get_origin(kind) is not list and str in (kind, *typing.get_args(kind)):
                values[key] = ",".join(map(str, v))
        context.default_map = {**(context.default_map or {}), **values}
        return value

    info = typer.Option("--config", is_eager=True, callback=load, help="TOML file of option defaults (see configs/).")
    annotation = Annotated[Optional[Path], info]  # noqa: UP045
    return inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None)


def command(
    request: type,
    run: Callable,
    *,
    outputs: type | None = None,
    output_names: tuple[str, ...] = (),
    metavar: str | None = "MODEL",
    what: str = "the model",
    positional_help: str | None = None,
    helps: dict[str, str] | None = None,
):
    """A Typer command of ``request``'s keywords that runs ``run(request, outputs)``: ``outputs``, a declared class
    of output options (those named in ``output_names``; None: none); ``metavar``: the positional argument's name
    (None: no positional); ``what``: the positional's meaning in messages; ``positional_help``: its help;
    ``helps``: keyword → this command's own help."""
    helps = helps or {}
    asked = {k: e for k, e in entries(request).items() if e.opt.command_line}
    wanted = output_keywords(output_names)
    told = {k: e for k, e in entries(outputs).items() if k in wanted} if outputs else {}
    known = {**asked, **told}
    positional = next((e for e in asked.values() if e.opt.positional), None) if metavar else None
    params = [inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
    if positional is not None:
        params.append(_positional(metavar, positional_help or f"{what.capitalize()}; same as {positional.flag}."))
    ordered = sorted(known.values(), key=_panel)
    params += [parameter(e, helps.get(k)) for k, e in ((e.keyword, e) for e in ordered)]
    params.append(_config_option(known))

    def callback(**values):
        context = values.pop("context")
        values.pop("config", None)
        given = {k: v for k, v in values.items() if k in known and _typed(context, k)}
        if positional is not None and values.get(POSITIONAL) is not None:
            _pick(context, values[POSITIONAL], positional, given, what)
        filed = frozenset(k for k in given if context.get_parameter_source(k).name == "DEFAULT_MAP")
        with flag_spelling(own_flags(known)):  # errors name this command's options
            return _run(given, filed)

    def _run(given: dict, filed: frozenset):
        asked_for = build(request, {k: v for k, v in given.items() if k in asked}, filed=filed)
        told_to = (
            build(outputs, {k: v for k, v in given.items() if k in told}).chosen(output_names) if outputs else None
        )
        return run(asked_for, told_to)

    callback.__signature__ = inspect.Signature(params)
    callback.__annotations__ = {p.name: p.annotation for p in params}
    callback.__doc__ = run.__doc__
    callback.__name__ = run.__name__
    callback.declared = known  # keyword → the field that declares it (tests/test_requests.py reads it)
    callback.helps = helps
    return callback


def _positional(metavar: str, words: str) -> inspect.Parameter:
    """The model as a positional argument (MODEL, TARGET, CANDIDATE, ...) beside its option."""
    arg = typer.Argument(metavar=metavar, help=words, show_default=False)
    annotation = Annotated[Optional[str], arg]  # noqa: UP045
    return inspect.Parameter(POSITIONAL, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None)


def _pick(context: typer.Context, model: str, positional: Entry, given: dict, what: str) -> None:
    """The positional model into ``given``; the option typed too, with another value, is a usage error (a --config
    value gives way)."""
    key = positional.keyword
    typed = getattr(context.get_parameter_source(key), "name", "") in TYPED[:2]  # not from --config
    if typed and given[key] != model:
        raise UsageError(f"{what} is given twice ('{model}' and {positional.flag} '{given[key]}'); give one")
    given[key] = model


def _typed(context: typer.Context, name: str) -> bool:
    source = context.get_parameter_source(name)
    return source is not None and source.name in TYPED
