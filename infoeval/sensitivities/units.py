"""The units a sensitivity sweep quantizes one at a time, from the layers a scheme would quantize by default
(``quant.selection.plan_layers``: every Linear inside the decoder blocks).

    --by linear   one Linear layer             model.layers.3.mlp.down_proj   starts at block 3
    --by block    every Linear of one block    model.layers.3                 starts at block 3
    --by type     one layer type, all blocks   mlp.down_proj                  starts at its first block

``--units`` globs (fnmatch on the unit's name) keep some units; a glob that matches none is a usage error.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from infoeval.errors import UsageError, spell
from infoeval.input.fields import one_of, option
from infoeval.quant.selection import decoder_prefix, plan_layers

KINDS = ("linear", "block", "type")


@dataclass(frozen=True)
class Unit:
    """Layers quantized together; ``start`` is the first decoder block any of them sits in."""

    name: str
    kind: str
    layers: tuple[str, ...]
    start: int
    depth: float  # mean block index of the layers (where the unit sits along the depth)


def _block_and_type(name: str, prefix: str) -> tuple[int, str]:
    """'model.layers.3.mlp.down_proj' → (3, 'mlp.down_proj')."""
    index, _, rest = name[len(prefix) + 1 :].partition(".")
    return int(index), rest


def candidate_layers(model) -> list[tuple[str, int, str]]:
    """(name, block, type) of every Linear layer a scheme quantizes by default, in the model's order."""
    prefix = decoder_prefix(model)
    out = []
    for name, selected, _ in plan_layers(model):
        if selected and prefix is not None and name.startswith(prefix + "."):
            block, kind = _block_and_type(name, prefix)
            out.append((name, block, kind))
    return out


def _group(layers: list[tuple[str, int, str]], kind: str, prefix: str) -> list[Unit]:
    key = {"linear": lambda n, b, t: n, "block": lambda n, b, t: f"{prefix}.{b}", "type": lambda n, b, t: t}[kind]
    groups: dict[str, list[tuple[str, int]]] = {}
    for n, b, t in layers:
        groups.setdefault(key(n, b, t), []).append((n, b))
    return [
        Unit(
            name,
            kind,
            tuple(n for n, _ in members),
            min(b for _, b in members),
            sum(b for _, b in members) / len(members),
        )
        for name, members in groups.items()
    ]


def enumerate_units(model, by: str, globs: Sequence[str] = ()) -> list[Unit]:
    """The units of ``model`` by linear, block or type (in depth order, then the model's order), filtered by
    ``globs`` (each must match at least one unit)."""
    if by not in KINDS:
        raise UsageError(f"{spell('by')} '{by}' is not allowed; use one of {', '.join(KINDS)}")
    layers = candidate_layers(model)
    if not layers:
        raise UsageError("the model has no Linear layers inside decoder blocks to quantize")
    units = _group(layers, by, decoder_prefix(model))
    for glob in globs:
        if not any(fnmatch.fnmatchcase(u.name, glob) for u in units):
            examples = ", ".join(u.name for u in units[:3])
            raise UsageError(
                f"{spell('units')} '{glob}' matches no unit of {spell('by')} {by}; units look like {examples}"
            )
    if globs:
        units = [u for u in units if any(fnmatch.fnmatchcase(u.name, g) for g in globs)]
    return sorted(units, key=lambda u: u.start) if by != "type" else units


def split_globs(values: Sequence[str] | None) -> tuple[str, ...]:
    """--units given repeatedly or comma-separated: 'a,b' → ('a', 'b')."""
    return tuple(g.strip() for v in values or () for g in v.split(",") if g.strip())


def by_option(**kw):
    """--by linear|block|type: what one unit is (sensitivity's and mix's, declared once)."""
    return option(
        "type",
        help="Units: linear (one Linear layer), block (one decoder block), type (one layer type in every block, e.g. "
        "mlp.down_proj).",
        parse=one_of("by", KINDS),
        **kw,
    )


def block_cache_option(**kw):
    """--block-cache/--no-block-cache: each unit's pass from its first block's cached input (sensitivity's and mix's
    sweep, declared once)."""
    return option(
        True,
        flags=("--block-cache/--no-block-cache",),
        help="Start each unit's forward from the reference's cached input of its first block (--no-block-cache: from "
        "the embeddings, to time the plain path).",
        **kw,
    )
