"""A result JSON back into its typed record: the inverse of ``Result.to_json`` for the fields a result class
declares, read by their type hints (a tuple of records, a record, a mapping, an optional value). Keys a class does
not declare (the schema tag, the metric definitions and the SE method, which ``to_json`` writes again from the
code) are left out; a field an older schema lacked is None. Pure: no files (``infoeval.api.load`` reads them)."""

from __future__ import annotations

import dataclasses
import types
import typing

from infoeval.input.provenance import Provenance

_SKIP = ("provenance", "timings")


def _convert(value, hint):
    """``value`` (plain JSON) as ``hint`` says: records rebuilt, lists made tuples where a tuple is declared."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0]) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return record(hint, value)
    if (origin is tuple or hint is tuple) and isinstance(value, list):
        item = args[0] if args else None
        return tuple(_convert(v, item) for v in value) if item is not None else tuple(value)
    return value


def record(cls: type, data: dict):
    """An instance of the dataclass ``cls`` from its JSON ``data`` (unknown keys ignored, missing fields None)."""
    hints = typing.get_type_hints(cls)
    values = {f.name: _convert(data.get(f.name), hints[f.name]) for f in dataclasses.fields(cls) if f.name not in _SKIP}
    return cls(**values)


def provenance_of(data: dict) -> Provenance:
    """The ``Provenance`` of a result's ``provenance`` block: its fields, and every other key in ``extra``."""
    names = [f.name for f in dataclasses.fields(Provenance) if f.name != "extra"]
    own = {k: data.get(k) for k in names}
    own["argv"] = tuple(own["argv"] or ())
    own["world_size"] = own["world_size"] or 1
    return Provenance(**own, extra={k: v for k, v in data.items() if k not in names})


def result_of(cls: type, data: dict):
    """A ``Result`` subclass ``cls`` from a whole result JSON ``data``."""
    hints = typing.get_type_hints(cls)
    own = {f.name: _convert(data.get(f.name), hints[f.name]) for f in dataclasses.fields(cls) if f.name not in _SKIP}
    return cls(provenance_of(data.get("provenance") or {}), dict(data.get("timings") or {}), **own)
