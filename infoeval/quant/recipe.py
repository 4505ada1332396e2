"""Recipes: a scheme per layer (or per group of layers), as a TOML file that `mix` writes and `quantize-compare
--recipe`, `quantize --recipe` and `gate --recipe` read.

```toml
[recipe]
default = "int4-g128"                        # optional: every layer quantized by default and named below by no unit

[units]                                      # fnmatch glob on module names → scheme
"model.layers.*.mlp.down_proj" = "int8-channel"
"model.layers.0.*" = "int5-g128"
"model.layers.3.self_attn.k_proj" = "int3-g128"

[metadata]                                   # free-form record (what wrote it, the budget, the predicted KL)
```

A unit is any glob on the model's module names; it must match at least one Linear layer, and a layer matched
by units that name different schemes is an error (the same scheme twice is fine). A unit may name a Linear
outside the decoder blocks (e.g. ``lm_head``), which is then quantized. Layers matched by no unit get
``default`` when they are quantized by default (the Linear layers of the decoder blocks, after ``--include`` /
``--exclude``) and are skipped otherwise. ``--exclude`` wins over a unit.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from infoeval.errors import InfoevalError, UsageError
from infoeval.quant.schemes import Scheme, parse_scheme

TABLES = ("recipe", "units", "metadata")


@dataclass(frozen=True)
class Recipe:
    """Units (glob → scheme) in file order, an optional default scheme, free-form metadata, the recipe's name
    (the file's stem: the variant's name in quantize-compare) and where it came from (``source``: the file, for
    messages; not part of the recipe's identity)."""

    units: tuple[tuple[str, Scheme], ...]
    default: Scheme | None = None
    metadata: dict = field(default_factory=dict)
    name: str = "recipe"
    source: str = field(default="", compare=False)

    def schemes(self) -> list[Scheme]:
        """Every scheme the recipe names, once, in order of first appearance."""
        seen = {}
        for s in ([self.default] if self.default else []) + [s for _, s in self.units]:
            seen.setdefault(s.name, s)
        return list(seen.values())


def _scheme(value, where: str) -> Scheme:
    if not isinstance(value, str):
        raise UsageError(f'{where}: the scheme must be a string such as "int4-g128", not {value!r}')
    try:
        return parse_scheme(value)
    except InfoevalError as e:
        raise UsageError(f"{where}: {e}") from None


def parse_recipe(data: dict, source: str = "recipe", name: str = "recipe") -> Recipe:
    """A recipe from its TOML tables; a usage error (one line, naming ``source``) for anything else."""
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise UsageError(
            f"recipe '{source}': unknown table or key '{unknown[0]}'; allowed: [recipe], [units], [metadata]"
        )
    head, units, meta = data.get("recipe", {}), data.get("units", {}), data.get("metadata", {})
    for key, table in (("recipe", head), ("units", units), ("metadata", meta)):
        if not isinstance(table, dict):
            raise UsageError(f"recipe '{source}': [{key}] must be a table")
    extra = sorted(set(head) - {"default", "format"})
    if extra:
        raise UsageError(f"recipe '{source}': unknown key '{extra[0]}' in [recipe]; allowed: default, format")
    default = _scheme(head["default"], f"recipe '{source}': default") if "default" in head else None
    parsed = tuple((str(k), _scheme(v, f"recipe '{source}': unit '{k}'")) for k, v in units.items())
    if not parsed and default is None:
        raise UsageError(f"recipe '{source}' names no unit and no default scheme; add [units] or [recipe] default")
    if any(not k.strip() for k, _ in parsed):
        raise UsageError(f"recipe '{source}': a unit name is empty; units are globs on module names")
    return Recipe(parsed, default, dict(meta), name, source)


def read_recipe(path: Path) -> Recipe:
    """Read and check a recipe file (a missing or invalid file is a usage error)."""
    from infoeval.input.settings import read_toml

    path = Path(path)
    return parse_recipe(read_toml(path, "recipe file"), str(path), path.stem)


def assign(
    recipe: Recipe, linears: list[str], planned: list[tuple[str, bool, str]]
) -> list[tuple[str, Scheme | None, str]]:
    """(name, scheme or None, reason) for every entry of ``planned`` (``selection.plan_layers``: every Linear layer,
    then the embeddings), given the names of the model's Linear layers ``linears``."""
    hits = {}
    for pattern, scheme in recipe.units:
        matched = [n for n in linears if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            example = linears[0] if linears else "model.layers.0.mlp.down_proj"
            raise UsageError(
                f"recipe '{recipe.source or recipe.name}': unit '{pattern}' matches no Linear layer; names look like "
                f"{example}"
            )
        for n in matched:
            prev = hits.setdefault(n, (pattern, scheme))
            if prev[1] != scheme:
                raise UsageError(
                    f"recipe '{recipe.source or recipe.name}': units '{prev[0]}' ({prev[1].name}) and '{pattern}' "
                    f"({scheme.name}) "
                    f"overlap on {n}; give each layer one scheme"
                )
    plan = []
    for name, selected, reason in planned:
        excluded = reason.startswith("excluded")
        if name in hits and not excluded:
            plan.append((name, hits[name][1], f"recipe unit '{hits[name][0]}'"))
        elif selected and recipe.default is not None:
            plan.append((name, recipe.default, f"recipe default; {reason}"))
        else:
            plan.append((name, None, reason if not selected else "not in the recipe (no unit and no default)"))
    return plan


def _toml_value(v) -> str:
    """A TOML value for a string, number, bool or list of them (JSON's string escapes are TOML's)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            return json.dumps(str(v))
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)


def recipe_toml(recipe: Recipe, comment: str = "") -> str:
    """The recipe as TOML text (read back by ``read_recipe`` to the same recipe)."""
    lines = [f"# {line}" for line in comment.splitlines()] + ["[recipe]", "format = 1"]
    if recipe.default is not None:
        lines.append(f"default = {_toml_value(recipe.default.name)}")
    lines += ["", "[units]"] + [f"{_toml_value(p)} = {_toml_value(s.name)}" for p, s in recipe.units]
    if recipe.metadata:
        lines += ["", "[metadata]"] + [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in recipe.metadata.items()]
    return "\n".join(lines) + "\n"


def write_recipe(path: Path, recipe: Recipe, comment: str = "") -> None:
    """Write the recipe atomically (a temporary file beside ``path``, renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(recipe_toml(recipe, comment))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
