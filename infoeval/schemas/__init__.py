"""The JSON Schemas (draft 2020-12) of every command's result JSON, shipped with the package as
``<command>.schema.json`` and generated from the result dataclasses by ``scripts/gen_docs.py`` (do not edit them
by hand). ``load(command)`` reads one; ``validate(data)`` checks a result against its command's schema (it needs
the optional ``jsonschema`` package).

    >>> sorted(commands())[:3]
    ['compress', 'compress-bits', 'decompress']
    >>> load("gate")["properties"]["schema"]["const"]
    'infoeval/gate/3'
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

SUFFIX = ".schema.json"


def commands() -> list[str]:
    """The commands that have a shipped schema (the commands that write a result JSON)."""
    return sorted(p.name[: -len(SUFFIX)] for p in resources.files(__name__).iterdir() if p.name.endswith(SUFFIX))


@cache
def _text(command: str) -> str:
    path = resources.files(__name__) / f"{command}{SUFFIX}"
    if not path.is_file():
        raise KeyError(f"no result schema for '{command}'; commands with one: {', '.join(commands())}")
    return path.read_text(encoding="utf-8")


def load(command: str) -> dict:
    """The schema of ``command``'s result JSON (a fresh dict each call)."""
    return json.loads(_text(command))


def command_of(data: dict) -> str:
    """The command a result JSON comes from, read from its ``schema`` key ('infoeval/<command>/<version>')."""
    name = data.get("schema") if isinstance(data, dict) else None
    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) != 3 or parts[0] != "infoeval":
        raise ValueError(f"not an infoeval result: its 'schema' is {name!r}, not 'infoeval/<command>/<version>'")
    return parts[1]


def validate(data: dict, command: str | None = None) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` matches the schema of ``command`` (default: the command
    named in its ``schema`` key). Needs ``jsonschema`` (``pip install infoeval[test]``)."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError("validating a result needs the jsonschema package: pip install jsonschema") from None
    schema = load(command or command_of(data))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(
        data
    )
