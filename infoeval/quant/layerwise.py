"""Variants made one decoder layer at a time, for a pass that loads the model one layer at a time
(``engine/streaming.py``): a scheme's, a recipe's, the noise floor's, and a library method's that quantizes one
Linear at a time (its modules swapped into the loaded layer).

The whole plan is made first, from the layers' names and shapes alone (``selection.plan_layers``: the same --include /
--exclude, the same reasons; a recipe's ``assign``). When a pass has loaded some modules, ``part(model, names)``
quantizes those of them the plan selects, exactly as ``apply.quantize_plan`` does for a whole model with
``lazy=True`` (the same codes, so the same dequantized weights, SQNR and stored bytes), and returns the variant of those
modules alone for ``apply.swapped``, holding each one's ŵ as encoded (each layer quantized once); the floor's part is
its ``NoisyWeight``s with their ordinals in the whole plan.
``finished()`` is the variant a whole-model run would have reported, its layers in the plan's order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from infoeval.errors import UsageError, spell
from infoeval.quant.apply import quantize_plan, recipe_plan, tied_weights
from infoeval.quant.floor import FLOOR, FloorVariant, NoisyWeight, floor_summary
from infoeval.quant.methods import MethodScheme, quiet_libraries
from infoeval.quant.methods.variant import MethodVariant, per_layer, quantize_layer
from infoeval.quant.recipe import Recipe
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import decoder_prefix, plan_layers
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
        self.stored = 0
        # the tied weights and the layers left as they are, from the skeleton before any part is loaded (loading
        # replaces a tied head's and embeddings' Parameters)
        self.tied = tied_weights(model)
        skipped = [entry for entry in self.plan if entry[1] is None]
        self.reports: dict[str, LayerReport] = {
            r.name: r for r in quantize_plan(model, skipped, self.scheme, self.label, lazy=True, ties=self.tied).layers
        }

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
        part = quantize_plan(
            model, plan, self.scheme, self.label, self.signals, lazy=True, ties=self.tied, dequantized=True
        )
        self.reports.update({r.name: r for r in part.layers})
        self.stored += part.nbytes
        return part

    def finished(self) -> QuantizedVariant:
        """The variant over the whole model: every layer's report in the plan's order, its stored bytes; no weights
        (a streamed variant keeps none)."""
        missing = [name for name in self.selected() if name not in self.reports]
        if missing:
            raise RuntimeError(f"internal error: {self.name}'s layers {missing[:3]} were never loaded")
        layers = tuple(self.reports[name] for name, _, _ in self.plan)
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
        return floor_summary(self.seed, list(self.shapes.values()))


class ModuleSwap:
    """A layer's Linear modules replaced by a library's while a pass runs it (``swapped``), then put back."""

    def __init__(self, made: dict[str, torch.nn.Module]):
        self.made = made

    @contextlib.contextmanager
    def swapped(self, model: torch.nn.Module):
        originals = {name: model.get_submodule(name) for name in self.made}
        try:
            for name, module in self.made.items():
                _set(model, name, module)
            yield model
        finally:
            for name, module in originals.items():
                _set(model, name, module)


def _set(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


class LayerwiseMethod:
    """A library's method (``hqq:int4-g64``, …) whose quantizer works on one Linear at a time, applied to each
    layer as it is loaded: the library's modules run in the pass in place of the layer's Linears, as in the
    whole-model variant (``methods/variant.build_method_variant``: the same modules, reports and SQNR). A method
    that calibrates over the whole model, or one that would quantize the head, is refused with one line."""

    def __init__(self, model: torch.nn.Module, scheme: MethodScheme, include=(), exclude=()):
        self.scheme, self.adapter = scheme, scheme.adapter()
        if getattr(self.adapter, "CALIBRATED", False):
            raise UsageError(
                f"{spell('stream')} layers cannot run '{scheme.name}': it calibrates over the whole model (use "
                f"{spell('plan')} reference-first)"
            )
        self.plan = plan_layers(model, list(include), list(exclude))
        inside = decoder_prefix(model) or ""
        outside = [n for n, chosen, _ in self.plan if chosen and not n.startswith(inside + ".")]
        if outside:
            raise UsageError(
                f"{spell('stream')} layers runs '{scheme.name}' inside the decoder layers only; it also selects "
                f"{outside[0]} (leave it out with --exclude)"
            )
        self.layers = {}
        for name, chosen, reason in self.plan:
            if not chosen:
                self.layers[name] = quantize_layer(self.adapter, name, model.get_submodule(name), False, reason, None)[
                    1
                ]

    @property
    def name(self) -> str:
        return self.scheme.name

    def selected(self) -> list[str]:
        return [name for name, chosen, _ in self.plan if chosen]

    def part(self, model: torch.nn.Module, names: Sequence[str]) -> ModuleSwap | None:
        """The library's modules for the loaded layers ``names`` the plan selects (their reports kept)."""
        wanted, made = set(names), {}
        make = per_layer(self.adapter, self.scheme.settings)
        with quiet_libraries():
            for name, chosen, reason in self.plan:
                if chosen and name in wanted:
                    module, self.layers[name] = quantize_layer(
                        self.adapter, name, model.get_submodule(name), True, reason, make
                    )
                    if module is not None:
                        made[name] = module
        return ModuleSwap(made) if made else None

    def finished(self) -> MethodVariant:
        """The variant's report over the whole model (no model: a streamed variant keeps none)."""
        layers = tuple(self.layers[name] for name, _, _ in self.plan)
        return MethodVariant(self.scheme, None, layers, sum(x.seconds for x in layers))
