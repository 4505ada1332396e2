"""One table of handlers: how each kind of variant spec is built on the loaded reference. A spec is parsed once, at
the edge (``quant/variant_settings.py``); building it looks its type up here, as torchao's ``quantize_`` finds a
handler by its config's type, so a new kind of variant is one more handler, not one more branch in each command.

Every spec type's handler is registered at the end of this module, so that building never depends on which modules
a command happened to import: infoeval's weight formats and recipes (``quant/apply.py``), the libraries' methods
(``quant/methods/variant.py``), the caller's modules and saved checkpoints (``models``).

>>> sorted(t.__name__ for t in HANDLERS)
['Checkpoint', 'Format', 'MethodScheme', 'ModuleVariant', 'Recipe', 'Scheme']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infoeval.models.objects import ModuleVariant, check_variants
from infoeval.quant.apply import WithVariant, quantize_variant, recipe_variant
from infoeval.quant.formats.presets import Format
from infoeval.quant.methods import MethodScheme
from infoeval.quant.methods.variant import build_method_variant
from infoeval.quant.recipe import Recipe
from infoeval.quant.schemes import Scheme
from infoeval.quant.variant_settings import Checkpoint


@dataclass
class BuildContext:
    """What building a spec may need: the loaded reference (``loaded.model``, ``loaded.tokenizer``), the layers
    selected (``include``, ``exclude``), a calibrated method's text, the device map checkpoints load with, and Σw² per
    layer, shared by the variants of one model (their SQNR)."""

    loaded: object
    include: tuple = ()
    exclude: tuple = ()
    calibration: object | None = None
    device_map: object | None = None
    lazy: bool = False
    signals: dict = field(default_factory=dict)

    @property
    def model(self):
        return self.loaded.model


@dataclass(frozen=True)
class Handler:
    """How one spec type is built (``build(spec, ctx)`` → a variant), and which of a run's clocks its time goes to."""

    build: Callable
    clock: str = "quantize_s"


HANDLERS: dict[type, Handler] = {}


def register(spec_type: type, build: Callable, clock: str = "quantize_s") -> None:
    """``build(spec, ctx)`` makes the variants of ``spec_type``; its seconds are counted in ``clock``."""
    HANDLERS[spec_type] = Handler(build, clock)


def handler(spec) -> Handler:
    """The handler of a spec's type (or of the first of its base classes that has one)."""
    for kind in type(spec).__mro__:
        if kind in HANDLERS:
            return HANDLERS[kind]
    raise TypeError(f"no handler builds a {type(spec).__name__} variant; known: {sorted(t.__name__ for t in HANDLERS)}")


def build(spec, ctx: BuildContext):
    """The variant ``spec`` describes, built on ``ctx``'s model."""
    return handler(spec).build(spec, ctx)


def runnable(model, variant):
    """What computes a built variant's logits: its own module where it has one (a library's copy, the caller's
    module, a loaded checkpoint), else ``model`` with the variant's weights swapped in for each call."""
    return variant.model if hasattr(variant, "model") else WithVariant(model, variant)


def _module(spec: ModuleVariant, ctx: BuildContext) -> ModuleVariant:
    """A caller's module is its own variant, checked against the reference before any forward pass."""
    check_variants(ctx.loaded, [spec])
    return spec


def _checkpoint(spec: Checkpoint, ctx: BuildContext):
    """A saved checkpoint, loaded on the reference's device and dtype, its tokenizer checked."""
    from infoeval.models.checkpoints import load_checkpoints

    return load_checkpoints([spec], ctx.loaded, ctx.device_map)[0]


register(Scheme, lambda spec, ctx: quantize_variant(ctx.model, spec, ctx.include, ctx.exclude, ctx.signals, ctx.lazy))
register(Format, lambda spec, ctx: quantize_variant(ctx.model, spec, ctx.include, ctx.exclude, ctx.signals, ctx.lazy))
register(Recipe, lambda spec, ctx: recipe_variant(ctx.model, spec, ctx.include, ctx.exclude, ctx.signals, ctx.lazy))
register(
    MethodScheme,
    lambda spec, ctx: build_method_variant(
        ctx.model, spec, ctx.include, ctx.exclude, ctx.loaded.tokenizer, ctx.calibration
    ),
)
register(ModuleVariant, _module, clock="")
register(Checkpoint, _checkpoint, clock="checkpoints_load_s")
