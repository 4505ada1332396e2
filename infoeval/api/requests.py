"""The API's door to a request: a function called with keywords (or a request, or a --config file) gets one request
of its command's class, checked before anything loads; its signature lists the request's keywords, so that
``help(infoeval.compare)`` shows them with their defaults."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

from infoeval.errors import UsageError
from infoeval.input.fields import build, config_values, entries


def request_of(cls, first, config, keywords: dict, section: str):
    """The request of class ``cls`` a call gave: ``first`` a request (then no keywords), a model (the ``model``
    keyword) or None; ``config``: a TOML file of keywords (its ``section`` table, or its top level), which the
    keywords given override."""
    from infoeval.input.settings import read_toml

    if isinstance(first, cls):
        if keywords or config is not None:
            raise UsageError(f"give a {cls.__name__} or keywords, not both")
        return first
    if first is not None:
        if "model" in keywords:
            raise UsageError("the model is given twice (as the first argument and as model=); give one")
        keywords = {"model": first, **keywords}
    known = {k: e for k, e in entries(cls).items() if e.opt.command_line}
    values = config_values(Path(config), section, known, read_toml) if config is not None else {}
    return build(cls, {**values, **keywords}, also=("config",))


def takes(cls, section: str):
    """An API function over requests of class ``cls``: ``function(request)`` gets the request built from the call
    (``request_of``); its signature shows every keyword of the request with its default."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(first=None, /, *, config: str | Path | None = None, **keywords):
            return function(request_of(cls, first, config, keywords, section))

        model = entries(cls)["model"].default
        first = inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=model)
        params = [first] + [
            inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=_shown(entry), annotation=entry.hint)
            for key, entry in entries(cls).items()
            if entry.opt.api and key != "model"
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
