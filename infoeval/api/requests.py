"""The API's door to a request: a function called with keywords (or a request, or a --config file) gets one request
of its command's class, checked before anything loads; its signature lists the request's keywords, so that
``help(infoeval.compare)`` shows them with their defaults."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

from infoeval.errors import UsageError
from infoeval.input.fields import build, config_values, entries


def request_of(cls, first, config, keywords: dict, section: str, keyword: str = "model"):
    """The request of class ``cls`` a call gave: ``first`` a request (then no keywords), the value of ``keyword``
    (the model) or None; ``config``: a TOML file of keywords (its ``section`` table, or its top level), which the
    keywords given override."""
    from infoeval.input.settings import read_toml

    if isinstance(first, cls):
        if keywords or config is not None:
            raise UsageError(f"give a {cls.__name__} or keywords, not both")
        return first
    if first is not None:
        if keyword in keywords:
            raise UsageError(f"{keyword} is given twice (as the first argument and as {keyword}=); give one")
        keywords = {keyword: first, **keywords}
    known = {k: e for k, e in entries(cls).items() if e.opt.command_line}
    values = config_values(Path(config), section, known, read_toml) if config is not None else {}
    return build(cls, {**values, **keywords}, also=("config",))


def takes(cls, section: str, first: str = "model"):
    """An API function over requests of class ``cls``: ``function(request)`` gets the request built from the call
    (``request_of``); its signature shows every keyword of the request with its default, ``first`` first (a keyword
    of the request, or another name for its model: the gate's candidate)."""

    def decorate(function):
        keyword = first if first in entries(cls) else "model"  # the keyword the first argument fills

        @functools.wraps(function)
        def wrapper(value=None, /, *, config: str | Path | None = None, **keywords):
            if first != keyword and first in keywords:
                value = keywords.pop(first)
            return function(request_of(cls, value, config, keywords, section, keyword))

        model = _shown(entries(cls)[keyword])
        first_param = inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=model)
        params = [first_param] + [
            inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=_shown(entry), annotation=entry.hint)
            for key, entry in entries(cls).items()
            if entry.opt.api and key != keyword
        ]
        params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None))
        wrapper.__signature__ = inspect.Signature(params)
        del wrapper.__wrapped__
        return wrapper

    return decorate


def _shown(entry):
    """A keyword's default as the signature shows it: the value, or its text where the value is parsed objects."""
    value = entry.default
    simple = value is None or isinstance(value, (bool, int, float, str)) or value == ()
    return value if simple or not entry.opt.default_text else entry.opt.default_text
