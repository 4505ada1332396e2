"""Variants made one decoder layer at a time, for a pass that loads the model one layer at a time
(``engine/streaming.py``): a scheme's, a recipe's and the noise floor's.

The whole plan is made first, from the layers' names and shapes alone (``selection.plan_layers``: the same --include /
--exclude, the same reasons; a recipe's ``assign``). When a pass has loaded some modules, ``part(model, names)``
quantizes those of them the plan selects, exactly as ``apply.quantize_plan`` does for a whole model with
``lazy=True`` (the same codes, so the same dequantized weights, SQNR and stored bytes), and returns the variant of those
modules alone for ``apply.swapped``; the floor's part is its ``NoisyWeight``s with their ordinals in the whole plan.
``finished()`` is the variant a whole-model run would have reported, its layers in the plan's order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infoeval.quant.apply import quantize_plan, recipe_plan
from infoeval.quant.floor import DEFINITION, FLOOR, FloorVariant, NoisyWeight
from infoeval.quant.recipe import Recipe
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import plan_layers
from infoeval.quant.variant import LayerReport, QuantizedVariant


class LayerwiseVariant:
    """A scheme's or a recipe's variant, quantized as its layers are loaded."""

    def __init__(self, model: torch.nn.Module, spec: Scheme | Recipe, include=(), exclude=(), signals=None):
        if isinstance(spec, Recipe):
            (self.plan, self.scheme), self.label = recipe_plan(model, spec, include, exclude), spec.name
        else:
            selection = plan_layers(model, list(include), list(exclude))
            self.plan = [(name, spec if selected else None, reason) for name, selected, reason in selection]
            self.scheme, self.label = spec, None
        self.signals = {} if signals is None else signals
        self.reports: dict[str, LayerReport] = {}
        self.stored = 0

    @property
    def name(self) -> str:
        return self.label or self.scheme.name

    def selected(self) -> list[str]:
        return [name for name, scheme, _ in self.plan if scheme is not None]

    def part(self, model: torch.nn.Module, names: Sequence[str]) -> QuantizedVariant | None:
        """The variant of the loaded modules ``names`` (None: the plan quantizes none of them); their reports kept."""
        wanted = set(names)
        plan = [entry for entry in self.plan if entry[0] in wanted and entry[1] is not None]
        if not plan:
            return None
        part = quantize_plan(model, plan, self.scheme, self.label, self.signals, lazy=True)
        self.reports.update({r.name: r for r in part.layers})
        self.stored += part.nbytes
        return part

    def finished(self, model: torch.nn.Module) -> QuantizedVariant:
        """The variant over the whole model: every layer's report in the plan's order (the layers not quantized
        reported from their shapes), its stored bytes; no weights (a streamed variant keeps none)."""
        skipped = [entry for entry in self.plan if entry[1] is None]
        rest = {r.name: r for r in quantize_plan(model, skipped, self.scheme, self.label, lazy=True).layers}
        missing = [name for name in self.selected() if name not in self.reports]
        if missing:
            raise RuntimeError(f"internal error: {self.name}'s layers {missing[:3]} were never loaded")
        layers = tuple(self.reports.get(name) or rest[name] for name, _, _ in self.plan)
        chosen = {name: s for name, s, _ in self.plan if s is not None} if self.label else None
        return QuantizedVariant(self.scheme, {}, layers, self.label, chosen, self.stored)


class LayerwiseFloor:
    """The noise floor, its weights made as their layers are loaded (the ordinals of the whole plan)."""

    name = FLOOR

    def __init__(self, model: torch.nn.Module, include=(), exclude=(), seed: int = 0):
        chosen = [name for name, selected, _ in plan_layers(model, list(include), list(exclude)) if selected]
        self.ordinal = {name: k for k, name in enumerate(chosen)}
        self.seed = seed
        self.shapes = {name: tuple(dict(model.named_modules())[name].weight.shape) for name in chosen}

    def selected(self) -> list[str]:
        return list(self.ordinal)

    def part(self, model: torch.nn.Module, names: Sequence[str]) -> FloorVariant | None:
        modules = dict(model.named_modules())
        weights = {
            n: NoisyWeight(modules[n].weight.data, self.seed, self.ordinal[n]) for n in names if n in self.ordinal
        }
        return FloorVariant(weights, self.seed) if weights else None

    def summary(self) -> dict:
        """The floor's summary, as ``FloorVariant.summary`` gives it for the whole model."""
        params = sum(int(torch.Size(s).numel()) for s in self.shapes.values())
        return {"definition": DEFINITION, "seed": self.seed, "layers": len(self.ordinal), "params": params}
