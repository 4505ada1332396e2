"""One declaration per option. A request is a frozen dataclass whose fields say, each once, an option's type,
default, help and checks (``option``); fields that are themselves such dataclasses (``group``) add their options
in place. From a request class come the API's keywords (``build``: keywords → request, checked), the command line's
options (``cli/commands.py``) and --config's keys (``config_values``); an error names the field and each front end
spells it its own way (``errors.spell``: ``--max-tokens`` on the command line, ``max_tokens`` in Python).

    @dataclass(frozen=True)
    class Window:
        ctx: int = option(512, help="Window length in tokens.", check=at_least(2))

    build(Window, {"ctx": "1"})   # UsageError: ctx '1' is not allowed; give an integer

A leaf: imports neither torch nor typer."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path

from infoeval.errors import UsageError, spell

GIVEN = "given"  # a request's field holding the keywords its caller gave (the others are defaults)
FILED = "filed"  # and those of them a --config file gave (a command line's defaults, not typed)


@dataclasses.dataclass(frozen=True)
class Opt:
    """What a field says about its option besides its name, type and default."""

    help: str | Callable[[], str]  # a callable: help computed when first shown (e.g. from a registry)
    flags: tuple[str, ...] = ()  # the command line's spellings; () is --<keyword with dashes>
    keyword: str | None = None  # the keyword (and option name) where it is not the field's name
    parse: Callable | None = None  # the value as given (typed text, a TOML value, a Python value) → the field's
    accepts: object = None  # the types a caller may give (default: the field's annotation)
    cli: object = None  # the option's type on the command line (default: from ``accepts``)
    default_text: str | None = None  # --help's default where the field's default is not what a user types
    panel: str | None = None  # --help's group (default: the group's)
    aliases: tuple[str, ...] = ()  # other --config keys for it
    positional: str | None = None  # also a positional argument with this metavar (MODEL, TARGET, ...)
    metavar: str | None = None  # --help's name for its value (NAME|FILE)
    argument: bool = False  # a positional argument only (metavar ``positional``), not an option
    required: bool = False  # the command line asks for it (its default None stands for "not given")
    command_line: bool = True  # an option of the command line
    api: bool = True  # a keyword of the API

    def text(self) -> str:
        return self.help() if callable(self.help) else self.help


def option(default=dataclasses.MISSING, *, help, factory=dataclasses.MISSING, **meta) -> dataclasses.Field:
    """A request's field that is an option: its default (or ``factory``), help and what ``Opt`` says."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"option": Opt(help=help, **meta)})


def group(cls, panel: str | None = None, omit: tuple[str, ...] = (), **defaults) -> dataclasses.Field:
    """A request's field holding another declared dataclass, whose options are this request's too, in place;
    ``defaults``: keyword → this request's own default for one of them (sensitivity's --max-tokens 2048); ``omit``:
    keywords this request does not take (they keep their defaults)."""
    factory = functools.partial(cls, **_fields_of(cls, defaults)) if defaults else cls
    meta = {"group": cls, "panel": panel, "defaults": defaults, "omit": omit}
    return dataclasses.field(default_factory=factory, metadata=meta)


def _fields_of(cls, values: Mapping) -> dict:
    """Keyword values as ``cls``'s own field names (a field may be declared under another keyword)."""
    fields = {
        (f.metadata["option"].keyword or f.name): f.name for f in dataclasses.fields(cls) if "option" in f.metadata
    }
    return {fields[k]: v for k, v in values.items() if k in fields}


def given_field() -> dataclasses.Field:
    """The field that records the keywords a caller gave (``GIVEN``), not compared and not shown."""
    return dataclasses.field(default=frozenset(), compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One keyword of a request: its declaration, the class and field holding it, and its panel."""

    keyword: str
    opt: Opt
    owner: type
    field: dataclasses.Field
    panel: str | None
    own_default: object = dataclasses.MISSING  # the request's own default for it (``group(..., **defaults)``)

    @property
    def default(self):
        f = self.field
        if self.own_default is not dataclasses.MISSING:
            return self.own_default
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    @property
    def hint(self):
        return self.opt.accepts or typing.get_type_hints(self.owner)[self.field.name]

    @property
    def flag(self) -> str:
        """Its option's name on the command line (the first spelling; of --x/--no-x, --x)."""
        return self.opt.flags[0].split("/")[0] if self.opt.flags else "--" + self.keyword.replace("_", "-")


def own_flags(found: Mapping[str, Entry]) -> dict[str, str]:
    """keyword → option, for the keywords whose option is not --<keyword with dashes> (``errors.flag_spelling``)."""
    return {k: e.flag for k, e in found.items() if e.flag != "--" + k.replace("_", "-")}


def entries(cls, panel: str | None = None, defaults: Mapping | None = None) -> dict[str, Entry]:
    """Every keyword of request class ``cls``, in declaration order, its groups' in place (``defaults``: keyword →
    the enclosing request's own default)."""
    found: dict[str, Entry] = {}
    defaults = defaults or {}
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            inner = {**f.metadata["defaults"], **defaults}
            for key, entry in entries(f.metadata["group"], f.metadata["panel"] or panel, inner).items():
                if key in f.metadata["omit"]:
                    continue
                if key in found:
                    raise TypeError(f"{cls.__name__}: keyword '{key}' declared twice")
                found[key] = entry
        elif "option" in f.metadata:
            opt = f.metadata["option"]
            key = opt.keyword or f.name
            if key in found:
                raise TypeError(f"{cls.__name__}: keyword '{key}' declared twice")
            found[key] = Entry(key, opt, cls, f, opt.panel or panel, defaults.get(key, dataclasses.MISSING))
    return found


def build(cls, values: Mapping, *, also: tuple[str, ...] = (), filed: frozenset = frozenset()):
    """A request of class ``cls`` from keyword ``values`` (those not given keep their defaults): an unknown keyword,
    or a value of a type its field does not take, is a usage error naming it; each value is then parsed by its
    field's ``parse`` and the classes check themselves (``__post_init__``). ``also``: keywords the caller takes
    beside the request's, named in the unknown keyword's message; ``filed``: those of ``values`` a --config file
    gave (the request's ``filed`` field, where it has one, records them)."""
    known = {k: e for k, e in entries(cls).items() if e.opt.api or e.opt.command_line}
    unknown = sorted(set(values) - set(known))
    if unknown:
        allowed = ", ".join(spell(k) for k in [*known, *also])
        raise UsageError(f"unknown keyword '{spell(unknown[0])}'; allowed: {allowed}")
    for key, value in values.items():
        hint = known[key].hint
        if not fits(value, hint):
            raise UsageError(f"{spell(key)} {value!r} is not allowed; give {describe(hint)}")
    return _make(cls, values, top=frozenset(filed) & frozenset(values))


def _make(cls, values: Mapping, top: frozenset | None = None):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            kwargs[f.name] = _make(f.metadata["group"], {**f.metadata["defaults"], **values})
        elif "option" in f.metadata:
            opt = f.metadata["option"]
            key = opt.keyword or f.name
            if key in values:
                kwargs[f.name] = opt.parse(values[key]) if opt.parse is not None else values[key]
        elif top is not None and f.name == GIVEN:
            kwargs[f.name] = frozenset(values)
        elif top is not None and f.name == FILED:
            kwargs[f.name] = top
    return cls(**kwargs)


def config_values(path: Path, section: str, known: dict[str, Entry], read_toml) -> dict:
    """--config FILE.toml (or the API's ``config=``) as keyword values: its keys (option names, '-' or '_', or an
    alias) at the top level or under a table named ``section`` (the command); a key not ``known`` is a usage
    error."""
    data = read_toml(Path(path), "config file")
    table = data.get(section, {k: v for k, v in data.items() if not isinstance(v, dict)})
    aliases = {a: k for k, e in known.items() for a in e.opt.aliases}
    values = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        name = aliases.get(name, name)
        if name not in known:
            raise UsageError(
                f"config file '{path}': unknown key '{key}' for {section}; allowed: {', '.join(sorted(known))}"
            )
        values[name] = value
    return values


# ---- types: what a keyword takes, and its name in a message ----------------------------------------------
_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "True or False",
    Path: "a path",
    type(None): "None",
    dict: "a dict",
}


def fits(value, hint) -> bool:
    """Whether ``value`` is of the annotated type (unions, sequences of a type, paths; other classes by isinstance)."""
    origin = typing.get_origin(hint)
    if hint in (typing.Any, object):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, arg) for arg in typing.get_args(hint))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, (str, os.PathLike))
    if origin in (collections.abc.Sequence, list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return isinstance(value, (list, tuple)) and (not args or all(fits(v, args[0]) for v in value))
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    return isinstance(value, hint) if isinstance(hint, type) else True


def describe(hint) -> str:
    """A type in words: 'an integer or None', 'a sequence of strings'."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(arg) for arg in typing.get_args(hint)))
    if typing.get_origin(hint) in (collections.abc.Sequence, list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return "a sequence" + (f" of {describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "")
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


# ---- checks a field may name as its ``parse`` ----------------------------------------------------------------
def one_of(keyword: str, allowed: tuple[str, ...] | Callable[[], tuple[str, ...]]):
    """A parse that takes only the ``allowed`` values (or a function giving them)."""

    def parse(value):
        names = allowed() if callable(allowed) else allowed
        if value not in names:
            raise UsageError(f"{spell(keyword)} '{value}' is not allowed; give one of {', '.join(names)}")
        return value

    return parse


def non_negative(keyword: str):
    """A parse that takes an integer ≥ 0 (a seed)."""
    return at_least(keyword, 0)


def at_least(keyword: str, least: int):
    """A parse that takes an integer ≥ ``least``."""

    def parse(value):
        if int(value) < least:
            raise UsageError(f"{spell(keyword)} {value} is not allowed; give an integer ≥ {least}")
        return value

    parse.least = least  # the front ends show the bound (--help: INTEGER (≥ 1))
    return parse


def comma_text(value) -> str:
    """A list keyword as the command line's comma-separated text: text as it is, one number, or a sequence joined.

    >>> comma_text((0.5, 1)), comma_text(2), comma_text("1,2")
    ('0.5,1', '2', '1,2')
    """
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, (int, float)) else ",".join(map(str, value))


def optional_path(value) -> Path | None:
    """A path option's value: a Path, or None where none was given."""
    return None if value is None else Path(value)


def names(value) -> tuple[str, ...]:
    """A list keyword as a tuple of names: comma-separated text (as typed) or a sequence; blanks dropped."""
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return tuple(s.strip() for s in items if str(s).strip())
